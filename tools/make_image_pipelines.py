#!/usr/bin/env python3
"""Makes tests/fixtures/image_pipelines/: tiny random Stable Diffusion 1.5 and SDXL pipelines
as diffusers saves them, the same weights as single files in Stability's original (ldm)
layout as diffusers' own conversion scripts write them, and what transformers' CLIP text
encoders and diffusers' encode_prompt give for them, which tests/model/image/ compare
kvad against.

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install torch diffusers transformers
    # diffusers' conversion scripts live in its GitHub repository, not in the pip package:
    git clone https://github.com/huggingface/diffusers /tmp/diffusers
    /tmp/venv/bin/python tools/make_image_pipelines.py --scripts /tmp/diffusers/scripts

sd15/            StableDiffusionPipeline: UNet2DConditionModel with SD 1.5's blocks (3
                 CrossAttnDownBlock2D + DownBlock2D, UpBlock2D + 3 CrossAttnUpBlock2D,
                 UNetMidBlock2DCrossAttn, 2 resnets a block (the block counts diffusers' conversion
                 scripts are written for), conv projections (use_linear_projection false),
                 attention_head_dim 4, which SD 1.5's config uses as the number of heads); AutoencoderKL with 4 levels of 2 resnets and the
                 attention mid block; CLIPTextModel (quick_gelu, eos_token_id 2: the pooled
                 position is the argmax of the ids, as openai's CLIP); PNDM scheduler config.
sdxl/            StableDiffusionXLPipeline: SDXL's blocks (DownBlock2D + 2 CrossAttnDownBlock2D,
                 2 CrossAttnUpBlock2D + UpBlock2D), use_linear_projection true,
                 transformer_layers_per_block [1, 1, 2], the text_time add-embedding
                 (addition_time_embed_dim, projection_class_embeddings_input_dim = 6 x it +
                 text_encoder_2's projection_dim); CLIPTextModel and CLIPTextModelWithProjection
                 (gelu as OpenCLIP bigG, its real eos_token_id so the pooled position is the
                 first EOS); force_zeros_for_empty_prompt true; Euler scheduler config.
sd15.safetensors, sdxl.safetensors
                 the same weights in the ldm layout (model.diffusion_model.*, first_stage_model.*,
                 cond_stage_model.transformer.* / conditioner.embedders.{0,1}.*), written by
                 scripts/convert_diffusers_to_original_stable_diffusion.py and
                 convert_diffusers_to_original_sdxl.py; checked here to load back through
                 diffusers' from_single_file (config= the folder) with every tensor equal; their
                 tensor lists are also the seeds tests/fixtures/ldm_names_seeds/{sd15,sdxl}.txt of
                 fuzz_ldm_names.
text_encoders.safetensors
                 transformers' and diffusers' outputs in f32 for PROMPTS: per prompt i,
                 sd15.ids.i [77] (i32), sd15.hidden.i [77, 32] (CLIPTextModel's last_hidden_state,
                 after final_layer_norm), sdxl.ids.i / sdxl.ids_2.i, sdxl.hidden.i (hidden_states[-2]
                 of each encoder, concatenated), sdxl.pooled.i (text_embeds), and
                 sdxl.neg_hidden / sdxl.neg_pooled: encode_prompt's negative embeddings for an
                 absent negative prompt (zeros under force_zeros_for_empty_prompt), and
                 sdxl.neg_empty_hidden / sdxl.neg_empty_pooled for negative_prompt="" (encoded).

The tokenizers are the CLIP BPE fixtures of tests/fixtures/diffusion/clip_tokenizer{,_2} (cut
from the real CLIP vocabulary) with their ids renumbered densely, so that the token embedding
has 1339 rows rather than 49408. Every weight is random: matrices as torch initializes them,
norm weights 1 + 0.1·N(0, 1) and biases 0.05·N(0, 1), so that no parameter is a constant, each
rounded to a value f16 holds exactly (an fp16 variant of them is the same model, and git
compresses them). Both pipelines have the same VAE weights and the same first text encoder
(the SDXL VAE has SD's architecture; only scaling_factor and force_upcast differ), which git
stores once. The block structure is SD 1.5's and SDXL's own (2 resnets a block, 4 and 3 blocks,
the VAE's 4 levels): diffusers' conversion scripts hard-code it. At 32 channels (GroupNorm32's
least) that makes each pipeline about 7 MB.
"""
import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fixture_util import ROOT  # noqa: E402

OUT = ROOT / "tests" / "fixtures" / "image_pipelines"
TOK = ROOT / "tests" / "fixtures" / "diffusion"
SEEDS = ROOT / "tests" / "fixtures" / "ldm_names_seeds"
PROMPTS = ["a photo of a cat", "", "A Red FOX in fresh snow, 8k, (masterpiece:1.2)"]


def compact_tokenizer(src, dst):
    """src's CLIP tokenizer folder with the vocabulary's ids renumbered 0..n-1 in id order."""
    dst.mkdir(parents=True, exist_ok=True)
    vocab = json.loads((src / "vocab.json").read_text())
    order = sorted(vocab, key=lambda t: vocab[t])
    (dst / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(order)}, ensure_ascii=False))
    for f in ("merges.txt", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(src / f, dst / f)
    return len(order)


def randomize(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1 and name.endswith("bias"):
                p.copy_(0.05 * torch.randn(p.shape, generator=g))
            elif p.ndim == 1 and ("norm" in name or name.endswith(".weight")):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
            else:
                # torch's init, redrawn from the seeded generator
                bound = 1 / max(1, p[0].numel()) ** 0.5
                p.copy_((torch.rand(p.shape, generator=g) * 2 - 1) * bound * 1.7)
            p.copy_(p.half().float())  # values f16 holds exactly: an fp16 variant is the same model
    return model


def clip_config(n_vocab, hidden, act, eos, projection):
    from transformers import CLIPTextConfig
    return CLIPTextConfig(vocab_size=n_vocab, hidden_size=hidden, intermediate_size=hidden + 5,
                          num_hidden_layers=3, num_attention_heads=4, max_position_embeddings=77,
                          hidden_act=act, layer_norm_eps=1e-5, projection_dim=projection,
                          bos_token_id=n_vocab - 2, eos_token_id=eos, pad_token_id=1)


def vae(scaling, seed):
    from diffusers import AutoencoderKL
    m = AutoencoderKL(in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(32, 32, 32, 32),
                      down_block_types=("DownEncoderBlock2D",) * 4, up_block_types=("UpDecoderBlock2D",) * 4,
                      layers_per_block=2, norm_num_groups=32, sample_size=64, scaling_factor=scaling)
    return randomize(m, seed)


def sd15(dst, n_vocab):
    from diffusers import PNDMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextModel, CLIPTokenizer
    torch.manual_seed(0)
    unet = randomize(UNet2DConditionModel(
        sample_size=8, in_channels=4, out_channels=4, layers_per_block=2, block_out_channels=(32, 32, 32, 32),
        down_block_types=("CrossAttnDownBlock2D",) * 3 + ("DownBlock2D",),
        up_block_types=("UpBlock2D",) + ("CrossAttnUpBlock2D",) * 3,
        cross_attention_dim=32, attention_head_dim=4, norm_num_groups=32, use_linear_projection=False), 1)
    te = randomize(CLIPTextModel(clip_config(n_vocab, 32, "quick_gelu", 2, 32)), 2)
    tok = CLIPTokenizer.from_pretrained(dst / "tokenizer")
    sched = PNDMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear", set_alpha_to_one=False,
                          skip_prk_steps=True, steps_offset=1, num_train_timesteps=1000)
    pipe = StableDiffusionPipeline(vae=vae(0.18215, 3), text_encoder=te, tokenizer=tok, unet=unet, scheduler=sched,
                                   safety_checker=None, feature_extractor=None, requires_safety_checker=False)
    pipe.save_pretrained(dst, safe_serialization=True)
    legacy_clip_names(dst / "text_encoder")
    return pipe


def legacy_clip_names(folder):
    """transformers 5 saves CLIPTextModel without its text_model. level; the pipelines on the Hub
    (saved by transformers 4) and diffusers' conversion scripts have it. Rewritten so, and checked
    to load back."""
    from transformers import CLIPTextModel
    f = folder / "model.safetensors"
    t = load_file(f)
    if not any(k.startswith("text_model.") for k in t):
        save_file({"text_model." + k: v for k, v in t.items()}, f, metadata={"format": "pt"})
    a, b = CLIPTextModel.from_pretrained(folder).state_dict(), {k.removeprefix("text_model."): v for k, v in t.items()}
    assert set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a), folder


def sdxl(dst, n_vocab):
    from diffusers import EulerDiscreteScheduler, StableDiffusionXLPipeline, UNet2DConditionModel
    from transformers import CLIPTextModel, CLIPTextModelWithProjection, CLIPTokenizer
    torch.manual_seed(0)
    proj, time_dim = 40, 8
    unet = randomize(UNet2DConditionModel(
        sample_size=8, in_channels=4, out_channels=4, layers_per_block=2, block_out_channels=(32, 32, 32),
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"),
        transformer_layers_per_block=(1, 1, 2), attention_head_dim=(2, 2, 4), cross_attention_dim=32 + 48,
        norm_num_groups=32, use_linear_projection=True, addition_embed_type="text_time",
        addition_time_embed_dim=time_dim, projection_class_embeddings_input_dim=proj + 6 * time_dim), 11)
    te = randomize(CLIPTextModel(clip_config(n_vocab, 32, "quick_gelu", 2, 32)), 2)  # SD 1.5's: one blob in git
    te2 = randomize(CLIPTextModelWithProjection(clip_config(n_vocab, 48, "gelu", n_vocab - 1, proj)), 13)
    sched = EulerDiscreteScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                                   steps_offset=1, timestep_spacing="leading", interpolation_type="linear",
                                   num_train_timesteps=1000)
    pipe = StableDiffusionXLPipeline(
        vae=vae(0.13025, 3), text_encoder=te, text_encoder_2=te2, tokenizer=CLIPTokenizer.from_pretrained(dst / "tokenizer"),
        tokenizer_2=CLIPTokenizer.from_pretrained(dst / "tokenizer_2"), unet=unet, scheduler=sched,
        force_zeros_for_empty_prompt=True)
    pipe.save_pretrained(dst, safe_serialization=True)
    legacy_clip_names(dst / "text_encoder")
    return pipe


def convert(scripts, script, folder, out):
    subprocess.run([sys.executable, str(Path(scripts) / script), "--model_path", str(folder), "--checkpoint_path",
                    str(out), "--use_safetensors"], check=True, stdout=subprocess.DEVNULL)


def check_single_file(cls, file, folder):
    """diffusers' from_single_file of `file` (config: `folder`) has the folder's tensors, all equal."""
    a = cls.from_pretrained(folder)
    b = cls.from_single_file(str(file), config=str(folder), local_files_only=True)
    for comp in ("unet", "vae", "text_encoder", "text_encoder_2"):
        if not hasattr(a, comp):
            continue
        sa, sb = getattr(a, comp).state_dict(), getattr(b, comp).state_dict()
        assert set(sa) == set(sb), (comp, set(sa) ^ set(sb))
        for k in sa:
            assert torch.equal(sa[k], sb[k]), (comp, k)
    print(f"{file.name}: from_single_file gives the folder's {len(load_file(file))} tensors")


def write_seed(file, seed):
    """The file's tensor list as fuzz/ldm_names_input.h reads it: NAME D0 D1 ... a line."""
    seed.parent.mkdir(parents=True, exist_ok=True)
    t = load_file(file)
    seed.write_text("".join(f"{k} {' '.join(str(d) for d in v.shape)}\n" for k, v in sorted(t.items())))


def encoder_outputs(p15, pxl):
    out = {}
    with torch.no_grad():
        for i, text in enumerate(PROMPTS):
            ids = p15.tokenizer(text, padding="max_length", max_length=77, truncation=True, return_tensors="pt").input_ids
            out[f"sd15.ids.{i}"] = ids[0].to(torch.int32)
            out[f"sd15.hidden.{i}"] = p15.text_encoder(ids).last_hidden_state[0]
            e, _ = p15.encode_prompt(text, "cpu", 1, False)
            assert torch.equal(e[0], out[f"sd15.hidden.{i}"])
            for k, tok in (("ids", pxl.tokenizer), ("ids_2", pxl.tokenizer_2)):
                out[f"sdxl.{k}.{i}"] = tok(text, padding="max_length", max_length=77, truncation=True,
                                           return_tensors="pt").input_ids[0].to(torch.int32)
            e, neg, pooled, neg_pooled = pxl.encode_prompt(text, device="cpu", num_images_per_prompt=1,
                                                           do_classifier_free_guidance=True, negative_prompt=None)
            out[f"sdxl.hidden.{i}"] = e[0]
            out[f"sdxl.pooled.{i}"] = pooled[0]
            out["sdxl.neg_hidden"], out["sdxl.neg_pooled"] = neg[0], neg_pooled[0]
        _, neg, _, neg_pooled = pxl.encode_prompt("x", device="cpu", num_images_per_prompt=1,
                                                  do_classifier_free_guidance=True, negative_prompt="")
        out["sdxl.neg_empty_hidden"], out["sdxl.neg_empty_pooled"] = neg[0], neg_pooled[0]
    return {k: v.contiguous() for k, v in out.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scripts", required=True, help="diffusers' scripts/ folder (its GitHub repository)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if OUT.exists():
        shutil.rmtree(OUT)
    pipes = {}
    for name, make, script, cls in (
            ("sd15", sd15, "convert_diffusers_to_original_stable_diffusion.py", "StableDiffusionPipeline"),
            ("sdxl", sdxl, "convert_diffusers_to_original_sdxl.py", "StableDiffusionXLPipeline")):
        dst = OUT / name
        n = compact_tokenizer(TOK / "clip_tokenizer", dst / "tokenizer")
        if name == "sdxl":
            compact_tokenizer(TOK / "clip_tokenizer_2", dst / "tokenizer_2")
        pipes[name] = make(dst, n)
        convert(args.scripts, script, dst, OUT / f"{name}.safetensors")
        import diffusers
        check_single_file(getattr(diffusers, cls), OUT / f"{name}.safetensors", dst)
        write_seed(OUT / f"{name}.safetensors", SEEDS / f"{name}.txt")
    save_file(encoder_outputs(pipes["sd15"], pipes["sdxl"]), OUT / "text_encoders.safetensors")
    total = sum(f.stat().st_size for f in OUT.rglob("*") if f.is_file())
    print(f"{OUT.relative_to(ROOT)}: {total / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
