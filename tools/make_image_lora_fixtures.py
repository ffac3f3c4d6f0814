#!/usr/bin/env python3
"""Makes tests/fixtures/image_loras/: tiny random LoRAs for the tiny SD 1.5 and SDXL pipelines of
tests/fixtures/image_pipelines (tools/make_image_pipelines.py) in the spellings people publish, and
the pictures diffusers paints with them, which tests/engine/test_painter_lora.cpp compares kvad's
Painter against; plus tests/fixtures/image_lora_seeds/: broken LoRA files (fuzz_image_lora's corpus),
each with the words its one-line refusal must contain.

    /work/wt/venv-pictures/bin/pip install --target /tmp/lyco --no-deps lycoris-lora==4.1.3 einops toml
    PYTHONPATH=/tmp/lyco /work/wt/venv-pictures/bin/python tools/make_image_lora_fixtures.py

LoRAs (random factors, seeded; the kohya and LyCORIS files in f16, as they usually ship):
  sd15_peft          peft LoRA (r 4, lora_alpha 8) on the UNet's attention and feed-forward and the text
                     encoder's attention, saved by StableDiffusionPipeline.save_lora_weights with its
                     adapter metadata (keys unet.<module>.lora_A.weight / lora_B.weight)
  sd15_peft_old      the same LoRA in diffusers' older spelling (.lora.down/.lora.up, attention
                     processors' to_q_lora.down, the text encoder's lora_linear_layer.down; no alpha, so lora_up carries alpha / r = 2)
  sd15_kohya         diffusers' convert_state_dict_to_kohya of a peft LoRA + LoCon (the resnets' 3×3
                     conv1/conv2, proj_in/proj_out 1×1 convs, time_emb_proj; lora_te_ text encoder),
                     r 4, alpha 2 (lora_unet_down_blocks_0_..., .lora_down/.lora_up/.alpha)
  sdxl_kohya_ldm     an SDXL LoRA + LoCon under ldm names, as kohya's sd-scripts writes SDXL
                     (lora_unet_input_blocks_4_1_..., lora_unet_middle_block_..., lora_te1_/lora_te2_)
  sd15_loha          LyCORIS LoHa (hada_w1_a/b, hada_w2_a/b, alpha) on attention and conv layers
  sdxl_lokr          LyCORIS LoKr (lokr_w1 whole, lokr_w2_a/_b factored; conv w2_b 4-d), alpha
The reference pictures: diffusers' pipe.load_lora_weights + set_adapters(names, weights) for the LoRA
and LoCon files (kohya ones through diffusers' own kohya conversion), and for LoHa/LoKr (which diffusers
does not load) the pipeline with its weights replaced by W + strength · ΔW, ΔW from LyCORIS' own
lycoris.functional.loha.diff_weight / lokr.diff_weight. Each case runs StableDiffusion(XL)Pipeline
(float32, CPU, euler, 64×64, 3 steps) with torch.Generator("cpu").manual_seed(seed).

images.safetensors  per case KEY: uint8 [1, 64, 64, 3]
cases.json          [{key, pipeline, loras: [{file, strength}], prompt, steps, cfg, seed, width, height,
                      base_db (the PSNR of this picture against the base pipeline's: the LoRA's effect)}]
"""
import json
import math
import sys
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fixture_util import ROOT  # noqa: E402

PIPES = ROOT / "tests" / "fixtures" / "image_pipelines"
OUT = ROOT / "tests" / "fixtures" / "image_loras"
SEEDS = ROOT / "tests" / "fixtures" / "image_lora_seeds"

ATTN = ["to_q", "to_k", "to_v", "to_out.0"]
FF = ["ff.net.0.proj", "ff.net.2"]
CONV = ["conv1", "conv2", "proj_in", "proj_out", "time_emb_proj"]
TE = ["q_proj", "k_proj", "v_proj", "out_proj"]


def psnr8(a, b):
    mse = ((a.astype("float64") - b.astype("float64")) ** 2).mean()
    return 999.0 if mse == 0 else 10 * math.log10(255 ** 2 / mse)


def pipes():
    import diffusers
    return {
        "sd15": lambda: diffusers.StableDiffusionPipeline.from_pretrained(PIPES / "sd15", safety_checker=None,
                                                                          requires_safety_checker=False),
        "sdxl": lambda: diffusers.StableDiffusionXLPipeline.from_pretrained(PIPES / "sdxl", add_watermarker=False),
    }


def paint(pipe, c):
    import diffusers
    pipe.set_progress_bar_config(disable=True)
    pipe.scheduler = diffusers.EulerDiscreteScheduler.from_config(pipe.scheduler.config)
    with torch.no_grad():
        im = pipe(c["prompt"], width=c["width"], height=c["height"], num_inference_steps=c["steps"],
                  guidance_scale=c["cfg"], generator=torch.Generator("cpu").manual_seed(c["seed"]),
                  output_type="np").images
    return (im * 255).round().astype("uint8")


def randomize(module, gen, std):
    """Every LoRA factor of a peft-adapted module set to N(0, std²), seeded."""
    for n, p in module.named_parameters():
        if "lora_" in n:
            with torch.no_grad():
                p.copy_(torch.randn(p.shape, generator=gen) * std)


def peft_lora(pipe, unet_targets, te_targets, r, alpha, seed, std):
    """A peft LoRA on pipe's UNet (and text encoders), random; its state dicts and configs."""
    from peft import LoraConfig, inject_adapter_in_model
    from peft.utils import get_peft_model_state_dict
    gen = torch.Generator().manual_seed(seed)
    ucfg = LoraConfig(r=r, lora_alpha=alpha, target_modules=unet_targets, init_lora_weights=False)
    pipe.unet.add_adapter(ucfg)
    randomize(pipe.unet, gen, std)
    out = {"unet": (get_peft_model_state_dict(pipe.unet), ucfg)}
    for name in ("text_encoder", "text_encoder_2"):
        te = getattr(pipe, name, None)
        if te is None or not te_targets:
            continue
        tcfg = LoraConfig(r=r, lora_alpha=alpha, target_modules=te_targets, init_lora_weights=False)
        inject_adapter_in_model(tcfg, te)  # transformers' add_adapter wants a newer peft
        randomize(te, gen, std)
        out[name] = (get_peft_model_state_dict(te), tcfg)
    return out


def unet_ldm(name, cfg):
    """diffusers UNet module name -> ldm's (diffusers' scripts/convert_diffusers_to_original_sdxl.py rule)."""
    lpb = cfg["layers_per_block"]
    n = len(cfg["block_out_channels"])
    res = [("norm1", "in_layers.0"), ("conv1", "in_layers.2"), ("time_emb_proj", "emb_layers.1"),
           ("norm2", "out_layers.0"), ("conv2", "out_layers.3"), ("conv_shortcut", "skip_connection")]
    p = name.split(".")

    def resnet(rest):
        s = ".".join(rest)
        for d, l in res:
            if s.startswith(d):
                return l + s[len(d):]
        raise KeyError(name)

    if p[0] == "down_blocks":
        i = int(p[1])
        if p[2] == "downsamplers":
            return f"input_blocks.{(lpb + 1) * (i + 1)}.0.op." + ".".join(p[5:])
        j = int(p[3])
        k = (lpb + 1) * i + j + 1
        return f"input_blocks.{k}.0." + resnet(p[4:]) if p[2] == "resnets" else f"input_blocks.{k}.1." + ".".join(p[4:])
    if p[0] == "up_blocks":
        i = int(p[1])
        if p[2] == "upsamplers":
            attn = "CrossAttn" in cfg["up_block_types"][i]
            return f"output_blocks.{(lpb + 1) * i + lpb}.{2 if attn else 1}." + ".".join(p[4:])
        j = int(p[3])
        k = (lpb + 1) * i + j
        return f"output_blocks.{k}.0." + resnet(p[4:]) if p[2] == "resnets" else f"output_blocks.{k}.1." + ".".join(p[4:])
    if p[0] == "mid_block":
        if p[1] == "attentions":
            return "middle_block.1." + ".".join(p[3:])
        return f"middle_block.{2 * int(p[2])}." + resnet(p[3:])
    raise KeyError(name)


def to_kohya(sds, ldm_cfg=None):
    """peft state dicts + configs -> kohya keys (lora_unet_/lora_te*_ + module with _, lora_down/up, alpha)."""
    out = {}
    heads = {"unet": "lora_unet_", "text_encoder": "lora_te1_" if "text_encoder_2" in sds else "lora_te_",
             "text_encoder_2": "lora_te2_"}
    for comp, (sd, cfg) in sds.items():
        for k, v in sd.items():
            module, part = k.rsplit(".lora_", 1)
            if comp == "unet" and ldm_cfg is not None:
                module = unet_ldm(module, ldm_cfg)
            if comp != "unet" and module.startswith("encoder."):
                module = "text_model." + module  # kohya's text encoder names (transformers 4's module tree)
            kk = heads[comp] + module.replace(".", "_")
            out[kk + (".lora_down.weight" if part.startswith("A") else ".lora_up.weight")] = v.half().contiguous()
            out[kk + ".alpha"] = torch.tensor(float(cfg.lora_alpha), dtype=torch.float16)
    return out


def lycoris_file(pipe, kind, targets, seed, alpha, r=4):
    """LoHa or LoKr factors (LyCORIS' key names) for the UNet modules named by `targets` (suffixes)."""
    gen = torch.Generator().manual_seed(seed)
    sd, deltas = {}, {}
    from lycoris.functional import loha, lokr
    for name, mod in pipe.unet.named_modules():
        if not isinstance(mod, (torch.nn.Linear, torch.nn.Conv2d)) or not any(name.endswith(t) for t in targets):
            continue
        if "attentions" not in name and "resnets" not in name:
            continue
        w = mod.weight
        out_dim, in_dim, *k = w.shape
        kk = int(np.prod(k)) if k else 1
        key = "lora_unet_" + name.replace(".", "_")
        rnd = lambda *s, std=0.3: (torch.randn(s, generator=gen) * std).half().float()  # noqa: E731 (stored as f16)
        if kind == "loha":
            w1a, w1b, w2a, w2b = rnd(out_dim, r), rnd(r, in_dim * kk), rnd(out_dim, r), rnd(r, in_dim * kk)
            sd.update({key + ".hada_w1_a": w1a, key + ".hada_w1_b": w1b, key + ".hada_w2_a": w2a,
                       key + ".hada_w2_b": w2b, key + ".alpha": torch.tensor(float(alpha))})
            d = loha.diff_weight(w1b, w1a, w2b, w2a, None, None, gamma=alpha / r).reshape(w.shape)
        else:
            o1, i1 = 2, 2  # w1 [2, 2] whole; w2 [out/2, in/2(, k, k)] from w2_a [out/2, r] · w2_b [r, in/2(, k, k)]
            w1 = rnd(o1, i1, std=1.0)
            w2a = rnd(out_dim // o1, r)
            w2b = rnd(r, in_dim // i1, *k)
            sd.update({key + ".lokr_w1": w1, key + ".lokr_w2_a": w2a, key + ".lokr_w2_b": w2b,
                       key + ".alpha": torch.tensor(float(alpha))})
            d = lokr.diff_weight(w1, None, None, None, w2a, w2b, None, gamma=alpha).reshape(w.shape)
        deltas[name] = d
    return {k: v.half() for k, v in sd.items()}, deltas


def broken(sd15):
    """Broken files for the sd15 pipeline, each with a substring its refusal must contain."""
    up = torch.randn(32, 4)
    down = torch.randn(4, 32)
    k = "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q"
    seeds = {
        "bad_shape": ({k + ".lora_up.weight": torch.randn(16, 4), k + ".lora_down.weight": down}, "the base weight"),
        "rank_mismatch": ({k + ".lora_up.weight": torch.randn(32, 3), k + ".lora_down.weight": down}, "rank"),
        "nan_alpha": ({k + ".lora_up.weight": up, k + ".lora_down.weight": down,
                       k + ".alpha": torch.tensor(float("nan"))}, "alpha is not a finite number"),
        "alpha_vector": ({k + ".lora_up.weight": up, k + ".lora_down.weight": down, k + ".alpha": torch.ones(2)},
                         "alpha has 2 values"),
        "missing_down": ({k + ".lora_up.weight": up}, "lora_up without its lora_down"),
        "missing_up": ({k + ".lora_down.weight": down, k + ".alpha": torch.tensor(4.0)},
                       "lora_down without its lora_up"),
        "misspelled": ({k + ".lora_up.weight": up, k + ".lora_down.weight": down,
                        k.replace("attn1", "atn1") + ".lora_up.weight": up}, "atn1"),
        "other_model": ({"lora_unet_input_blocks_99_1_proj_in.lora_up.weight": up}, "fit no weight"),
        "nan_values": ({k + ".lora_up.weight": torch.full((32, 4), float("nan")), k + ".lora_down.weight": down},
                       "not finite"),
        "dora": ({k + ".lora_up.weight": up, k + ".lora_down.weight": down, k + ".dora_scale": torch.ones(1, 32)},
                 "DoRA"),
        "loha_half": ({k + ".hada_w1_a": up, k + ".hada_w1_b": down, k + ".hada_w2_a": up}, "hada_w2_b"),
        "lokr_misfit": ({k + ".lokr_w1": torch.randn(3, 2), k + ".lokr_w2": torch.randn(8, 16)}, "kron"),
        "int_factors": ({k + ".lora_up.weight": torch.ones(32, 4, dtype=torch.int32), k + ".lora_down.weight": down},
                        "I32"),
        "two_kinds": ({k + ".lora_up.weight": up, k + ".lora_down.weight": down, k + ".hada_w1_a": up},
                      "several kinds"),
        "alpha_only": ({k + ".alpha": torch.tensor(1.0)}, "alpha without"),
        "empty": ({}, "no LoRA weights"),
    }
    SEEDS.mkdir(parents=True, exist_ok=True)
    expect = {}
    for name, (sd, want) in seeds.items():
        save_file({kk: v.clone().contiguous() for kk, v in sd.items()}, SEEDS / f"{name}.safetensors")
        expect[f"{name}.safetensors"] = want
    (SEEDS / "not_safetensors.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{\"a\": [1, 2, 3]}")
    expect["not_safetensors.safetensors"] = "safetensors"
    (SEEDS / "expect.json").write_text(json.dumps(expect, indent=1, sort_keys=True) + "\n")


def main():
    import diffusers
    from diffusers.utils import convert_state_dict_to_kohya  # noqa: F401 (the kohya spelling's source)
    torch.set_num_threads(1)
    OUT.mkdir(parents=True, exist_ok=True)
    make = pipes()
    base_cfg = {"sd15": json.loads((PIPES / "sd15" / "unet" / "config.json").read_text()),
                "sdxl": json.loads((PIPES / "sdxl" / "unet" / "config.json").read_text())}

    # --- the files
    p = make["sd15"]()
    sds = peft_lora(p, ATTN + FF, TE, 4, 8, 1, 0.2)
    diffusers.StableDiffusionPipeline.save_lora_weights(
        OUT, unet_lora_layers=sds["unet"][0], text_encoder_lora_layers=sds["text_encoder"][0],
        unet_lora_adapter_metadata=sds["unet"][1].to_dict(), text_encoder_lora_adapter_metadata=sds["text_encoder"][1].to_dict(),
        weight_name="sd15_peft.safetensors")
    old = {}
    for comp, (sd, cfg) in sds.items():
        for k, v in sd.items():
            module, part = k.rsplit(".lora_", 1)
            kind = "down" if part.startswith("A") else "up"
            if comp == "unet" and module.rsplit(".", 1)[-1] in ("to_q", "to_k", "to_v") or module.endswith("to_out.0"):
                attn, proj = (module[:-9], "to_out") if module.endswith("to_out.0") else module.rsplit(".", 1)
                old[f"{comp}.{attn}.processor.{proj}_lora.{kind}.weight"] = v * (2.0 if kind == "up" else 1.0)
            elif comp == "unet":
                old[f"{comp}.{module}.lora.{kind}.weight"] = v * (2.0 if kind == "up" else 1.0)
            else:
                old[f"{comp}.{module}.lora_linear_layer.{kind}.weight"] = v * (2.0 if kind == "up" else 1.0)
    save_file({k: v.contiguous() for k, v in old.items()}, OUT / "sd15_peft_old.safetensors")

    p = make["sd15"]()
    sds = peft_lora(p, ATTN + CONV, TE, 4, 2, 2, 0.2)
    save_file(to_kohya(sds), OUT / "sd15_kohya.safetensors")

    p = make["sdxl"]()
    sds = peft_lora(p, ATTN + FF + CONV, TE, 4, 2, 3, 0.2)
    save_file(to_kohya(sds, base_cfg["sdxl"]), OUT / "sdxl_kohya_ldm.safetensors")

    loha_sd, loha_d = lycoris_file(make["sd15"](), "loha", ATTN + ["conv1", "conv2"], 4, 2.0)
    save_file(loha_sd, OUT / "sd15_loha.safetensors")
    lokr_sd, lokr_d = lycoris_file(make["sdxl"](), "lokr", ATTN + ["conv1", "conv2"], 5, 2.0)
    save_file(lokr_sd, OUT / "sdxl_lokr.safetensors")
    broken(make["sd15"]())

    # --- the pictures
    cases = []
    for pipe, cfg in (("sd15", 7.5), ("sdxl", 5.0)):
        def case(loras, key):
            cases.append(dict(key=key, pipeline=pipe, loras=[dict(file=f, strength=s) for f, s in loras],
                              prompt="a photo of a cat", steps=3, cfg=cfg, seed=1, width=64, height=64))
        if pipe == "sd15":
            case([("sd15_peft.safetensors", 0.8)], "sd15.peft@0.8")
            case([("sd15_peft_old.safetensors", 0.8)], "sd15.peft_old@0.8")
            case([("sd15_kohya.safetensors", 1.0)], "sd15.kohya@1")
            case([("sd15_peft.safetensors", 0.5), ("sd15_kohya.safetensors", 1.0)], "sd15.peft@0.5+kohya@1")
            case([("sd15_loha.safetensors", 0.7)], "sd15.loha@0.7")
        else:
            case([("sdxl_kohya_ldm.safetensors", 0.9)], "sdxl.kohya_ldm@0.9")
            case([("sdxl_lokr.safetensors", 1.0)], "sdxl.lokr@1")
    images, bases = {}, {}
    for c in cases:
        pipe = make[c["pipeline"]]()
        if c["pipeline"] not in bases:
            bases[c["pipeline"]] = paint(pipe, c)
        lyco = [l for l in c["loras"] if "loha" in l["file"] or "lokr" in l["file"]]
        if lyco:
            (l,) = lyco
            deltas = loha_d if "loha" in l["file"] else lokr_d
            mods = dict(pipe.unet.named_modules())
            with torch.no_grad():
                for name, d in deltas.items():
                    mods[name].weight += l["strength"] * d
        else:
            names = []
            for i, l in enumerate(c["loras"]):
                pipe.load_lora_weights(str(OUT / l["file"]), adapter_name=f"a{i}")
                names.append(f"a{i}")
            pipe.set_adapters(names, [l["strength"] for l in c["loras"]])
        im = paint(pipe, c)
        c["base_db"] = round(psnr8(im, bases[c["pipeline"]]), 1)
        images[c["key"]] = torch.from_numpy(im).contiguous()
        print(c["key"], f"vs the base picture {c['base_db']} dB")
    save_file(images, OUT / "images.safetensors")
    (OUT / "cases.json").write_text(json.dumps(cases, indent=1) + "\n")
    total = sum(f.stat().st_size for f in OUT.iterdir())
    print(f"{OUT.relative_to(ROOT)}: {len(cases)} cases, {total / 1e3:.0f} kB")


if __name__ == "__main__":
    main()
