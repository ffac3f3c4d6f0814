#!/usr/bin/env python3
"""Makes tests/fixtures/flux/: tiny random FLUX.1 transformers as diffusers saves them, what
diffusers' FluxTransformer2DModel gives for them in f32, and the sigmas and timesteps of
FlowMatchEulerDiscreteScheduler for FLUX.1-schnell's and FLUX.1-dev's scheduler configs, which
tests/model/image/test_flux.cpp and tests/engine/diffusion/test_flow_match.cpp compare kvad against.

    /work/wt/venv-pictures/bin/python tools/make_flux_fixtures.py   # any venv with torch + diffusers

pipeline_schnell/transformer/, pipeline_dev/transformer/
        FluxTransformer2DModel(num_layers=2, num_single_layers=2, attention_head_dim=16,
        num_attention_heads=2, axes_dims_rope=(4, 6, 6), in_channels=64, joint_attention_dim=32,
        pooled_projection_dim=32), guidance_embeds false (schnell) / true (dev); random weights
        (seeded), config.json + diffusion_pytorch_model.safetensors.
transformer.safetensors
        per model M (schnell, dev): M.hidden_states [2, n_img, 64], M.encoder_hidden_states
        [2, n_txt, 32], M.pooled [2, 32], M.timestep [1] (t / 1000, as FluxPipeline passes it),
        M.guidance [1] (dev), M.img_ids [n_img, 3] (FluxPipeline._prepare_latent_image_ids of a
        6 x 4 packed grid), M.txt_ids [n_txt, 3] (zeros), M.out [2, n_img, 64].
scheduler.json
        {"configs": {"schnell": ..., "dev": ...} (the two repos' scheduler_config.json as
        published), "cases": [{"config", "steps", "image_seq_len", "mu", "sigmas",
        "timesteps"}], "step": {...}}: set_timesteps(sigmas=linspace(1, 1/n, n), mu=calculate_shift(
        image_seq_len, ...)) as FluxPipeline.__call__ calls it, for schnell 4 steps and dev 28 steps
        at 512^2 (image_seq_len 1024) and 1024^2 (4096); "step": one Euler step's sample,
        model_output and prev_sample.
pipeline_schnell/, pipeline_dev/
        FluxPipeline folders (save_pretrained): the transformers above; text_encoder and tokenizer
        the tiny CLIP of tests/fixtures/image_pipelines/sd15; text_encoder_2 a tiny random
        T5EncoderModel (T5 v1.1's gated-gelu, d_model 32 = joint_attention_dim) with the T5-shaped
        Unigram tokenizer of tests/fixtures/hf_tokenizer/unigram.tokenizer.json.gz as
        T5TokenizerFast; vae an AutoencoderKL with FLUX's layout (16 latent channels, no
        quant_conv / post_quant_conv, shift_factor 0.1159, scaling_factor 0.3611, 4 levels);
        the schnell and dev scheduler configs. pipeline_schnell/'s encoders, tokenizers and VAE are
        symbolic links to pipeline_dev/'s.
pipeline.safetensors, pipeline.json
        FluxPipeline(prompt, height, width, num_inference_steps 4, guidance_scale,
        num_images_per_prompt, generator=torch.Generator("cpu").manual_seed(seed)) in f32 for the
        cases in pipeline.json: CASE.image [n, H, W, 3] u8 (output_type "np", then round(x * 255)
        as numpy_to_pil), CASE.latents [n, L, 64] (output_type "latent": the packed latents
        after the last step), CASE.t5_ids [512] i32.
"""
import json
import sys
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fixture_util import ROOT  # noqa: E402

OUT = ROOT / "tests" / "fixtures" / "flux"

TINY = dict(patch_size=1, in_channels=64, num_layers=2, num_single_layers=2, attention_head_dim=16,
            num_attention_heads=2, joint_attention_dim=32, pooled_projection_dim=32, axes_dims_rope=(4, 6, 6))

# black-forest-labs/FLUX.1-schnell and FLUX.1-dev scheduler/scheduler_config.json
SCHEDULERS = {
    "schnell": {"_class_name": "FlowMatchEulerDiscreteScheduler", "_diffusers_version": "0.29.0.dev0",
                "base_image_seq_len": 256, "base_shift": 0.5, "max_image_seq_len": 4096, "max_shift": 1.15,
                "num_train_timesteps": 1000, "shift": 1.0, "use_dynamic_shifting": False},
    "dev": {"_class_name": "FlowMatchEulerDiscreteScheduler", "_diffusers_version": "0.30.0.dev0",
            "base_image_seq_len": 256, "base_shift": 0.5, "max_image_seq_len": 4096, "max_shift": 1.15,
            "num_train_timesteps": 1000, "shift": 3.0, "use_dynamic_shifting": True},
}


def latent_ids(h, w):
    ids = torch.zeros(h, w, 3)
    ids[..., 1] += torch.arange(h)[:, None]
    ids[..., 2] += torch.arange(w)[None, :]
    return ids.reshape(h * w, 3)


def transformers():
    from diffusers import FluxTransformer2DModel
    out, models = {}, {}
    for name, guidance, seed in (("schnell", False, 1), ("dev", True, 2)):
        torch.manual_seed(seed)
        m = FluxTransformer2DModel(**TINY, guidance_embeds=guidance).eval()
        with torch.no_grad():  # diffusers zero-initializes nothing here, but make every weight count
            for p in m.parameters():
                p.copy_(torch.randn_like(p) * 0.3)
        models[name] = m
        g = torch.Generator().manual_seed(seed + 10)
        n_txt, (gh, gw) = 5, (6, 4)
        x = torch.randn(2, gh * gw, 64, generator=g)
        ctx = torch.randn(2, n_txt, 32, generator=g)
        pooled = torch.randn(2, 32, generator=g)
        t = torch.tensor([0.75])
        gd = torch.tensor([3.5]) if guidance else None
        img_ids, txt_ids = latent_ids(gh, gw), torch.zeros(n_txt, 3)
        with torch.no_grad():
            y = m(hidden_states=x, encoder_hidden_states=ctx, pooled_projections=pooled, timestep=t.expand(2),
                  img_ids=img_ids, txt_ids=txt_ids, guidance=None if gd is None else gd.expand(2),
                  return_dict=False)[0]
        k = name + "."
        out.update({k + "hidden_states": x, k + "encoder_hidden_states": ctx, k + "pooled": pooled,
                    k + "timestep": t, k + "img_ids": img_ids, k + "txt_ids": txt_ids, k + "out": y})
        if gd is not None:
            out[k + "guidance"] = gd
        print(f"{name}: out {tuple(y.shape)}, max |y| {y.abs().max():.3f}")
    save_file({k: v.contiguous() for k, v in out.items()}, OUT / "transformer.safetensors")
    return models


def calculate_shift(n, base_seq_len=256, max_seq_len=4096, base_shift=0.5, max_shift=1.15):
    m = (max_shift - base_shift) / (max_seq_len - base_seq_len)
    return n * m + (base_shift - m * base_seq_len)


def schedulers():
    from diffusers import FlowMatchEulerDiscreteScheduler
    cases = []
    for cfg, steps, side in (("schnell", 4, 1024), ("schnell", 1, 512), ("dev", 28, 512), ("dev", 28, 1024),
                             ("dev", 4, 1024), ("dev", 50, 768)):
        s = FlowMatchEulerDiscreteScheduler.from_config(SCHEDULERS[cfg])
        seq = (side // 16) ** 2
        c = s.config
        mu = calculate_shift(seq, c.get("base_image_seq_len", 256), c.get("max_image_seq_len", 4096),
                             c.get("base_shift", 0.5), c.get("max_shift", 1.15))
        s.set_timesteps(steps, sigmas=np.linspace(1.0, 1 / steps, steps), mu=mu)
        cases.append({"config": cfg, "steps": steps, "image_seq_len": seq, "mu": mu,
                      "sigmas": s.sigmas.tolist(), "timesteps": s.timesteps.tolist()})
    s = FlowMatchEulerDiscreteScheduler.from_config(SCHEDULERS["dev"])
    s.set_timesteps(4, sigmas=np.linspace(1.0, 0.25, 4), mu=calculate_shift(1024))
    g = torch.Generator().manual_seed(5)
    sample, model_output = torch.randn(12, generator=g), torch.randn(12, generator=g)
    prev = sample.clone()
    for t in s.timesteps[:2]:
        prev = s.step(model_output, t, prev, return_dict=False)[0]
    step = {"config": "dev", "steps": 4, "image_seq_len": 1024, "sample": sample.tolist(),
            "model_output": model_output.tolist(), "after_two_steps": prev.tolist()}
    (OUT / "scheduler.json").write_text(json.dumps({"configs": SCHEDULERS, "cases": cases, "step": step}, indent=1))
    print(f"scheduler.json: {len(cases)} cases; schnell 4: {cases[0]['timesteps']}")


CASES = [
    {"name": "dev", "pipeline": "pipeline_dev", "prompt": "a red fox in fresh snow", "width": 80, "height": 64,
     "steps": 4, "guidance": 3.5, "n": 1, "seed": 42},
    {"name": "schnell", "pipeline": "pipeline_schnell", "prompt": "an owl at dusk, oil painting", "width": 64,
     "height": 96, "steps": 4, "guidance": 0.0, "n": 2, "seed": 7},
]


def pipelines(models):
    import gzip
    import shutil
    import tempfile
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel  # noqa: F401
    from transformers import CLIPTextModel, CLIPTokenizer, T5Config, T5EncoderModel, T5TokenizerFast
    sd15 = ROOT / "tests" / "fixtures" / "image_pipelines" / "sd15"
    with tempfile.TemporaryDirectory() as tmp:
        tj = Path(tmp) / "tokenizer.json"
        tj.write_bytes(gzip.decompress((ROOT / "tests" / "fixtures" / "hf_tokenizer" /
                                        "unigram.tokenizer.json.gz").read_bytes()))
        tok2 = T5TokenizerFast(tokenizer_file=str(tj), eos_token="</s>", unk_token="<unk>", pad_token="<pad>",
                               extra_ids=0)
    torch.manual_seed(30)
    t5 = T5EncoderModel(T5Config(vocab_size=len(tok2), d_model=32, d_kv=8, num_heads=4, d_ff=48, num_layers=2,
                                 feed_forward_proj="gated-gelu", relative_attention_num_buckets=32,
                                 relative_attention_max_distance=128)).eval()
    torch.manual_seed(31)
    vae = AutoencoderKL(in_channels=3, out_channels=3, latent_channels=16, block_out_channels=(8, 8, 16, 16),
                        down_block_types=("DownEncoderBlock2D",) * 4, up_block_types=("UpDecoderBlock2D",) * 4,
                        layers_per_block=1, norm_num_groups=8, sample_size=64, scaling_factor=0.3611,
                        shift_factor=0.1159, use_quant_conv=False, use_post_quant_conv=False).eval()
    clip = CLIPTextModel.from_pretrained(sd15 / "text_encoder", torch_dtype=torch.float32).eval()
    tok = CLIPTokenizer.from_pretrained(sd15 / "tokenizer")
    assert clip.config.hidden_size == TINY["pooled_projection_dim"], clip.config.hidden_size
    for name in ("schnell", "dev"):
        pipe = FluxPipeline(scheduler=FlowMatchEulerDiscreteScheduler.from_config(SCHEDULERS[name]), vae=vae,
                            text_encoder=clip, tokenizer=tok, text_encoder_2=t5, tokenizer_2=tok2,
                            transformer=models[name])
        d = OUT / f"pipeline_{name}"
        if d.exists():
            shutil.rmtree(d)
        pipe.save_pretrained(d, safe_serialization=True)
    # the CLIP tokenizer folder as the FLUX repos ship it (transformers 5 saves only tokenizer.json)
    shutil.rmtree(OUT / "pipeline_dev" / "tokenizer")
    shutil.copytree(sd15 / "tokenizer", OUT / "pipeline_dev" / "tokenizer")
    # schnell shares dev's encoders, tokenizers and VAE: links, not copies
    for comp in ("text_encoder", "text_encoder_2", "tokenizer", "tokenizer_2", "vae"):
        shutil.rmtree(OUT / "pipeline_schnell" / comp)
        (OUT / "pipeline_schnell" / comp).symlink_to(Path("..") / "pipeline_dev" / comp)
    out = {}
    for c in CASES:
        pipe = FluxPipeline.from_pretrained(OUT / c["pipeline"], torch_dtype=torch.float32)
        args = dict(prompt=c["prompt"], height=c["height"], width=c["width"], num_inference_steps=c["steps"],
                    guidance_scale=c["guidance"], num_images_per_prompt=c["n"])
        with torch.no_grad():
            lat = pipe(**args, generator=torch.Generator("cpu").manual_seed(c["seed"]), output_type="latent").images
            img = pipe(**args, generator=torch.Generator("cpu").manual_seed(c["seed"]), output_type="np").images
        k = c["name"] + "."
        out[k + "latents"] = lat.float()
        out[k + "image"] = torch.from_numpy((img * 255).round().astype("uint8"))
        ids = pipe.tokenizer_2(c["prompt"], padding="max_length", max_length=512, truncation=True).input_ids
        out[k + "t5_ids"] = torch.tensor(ids, dtype=torch.int32)
        print(f"{c['name']}: image {img.shape}, latents {tuple(lat.shape)}, t5 ids {ids[:12]}")
    save_file({k: v.contiguous() for k, v in out.items()}, OUT / "pipeline.safetensors")
    (OUT / "pipeline.json").write_text(json.dumps(CASES, indent=1))


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    models = transformers()
    schedulers()
    pipelines(models)


if __name__ == "__main__":
    main()
