#!/usr/bin/env python3
"""Makes tests/fixtures/painter/: what diffusers' StableDiffusionPipeline and
StableDiffusionXLPipeline paint on the tiny random pipelines of tests/fixtures/image_pipelines
(tools/make_image_pipelines.py), which tests/engine/test_painter.cpp compares kvad's Painter
against.

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install torch diffusers transformers
    /tmp/venv/bin/python tools/make_pipeline_fixtures.py

Each case runs the pipeline's own __call__ (float32, CPU) with
generator=torch.Generator("cpu").manual_seed(seed) and output_type="np", its scheduler swapped in
as a user does it (CLASS.from_config(pipe.scheduler.config, **overrides), use_karras_sigmas=True
for "DPM++ 2M Karras"), and keeps the picture as diffusers' numpy_to_pil turns it into bytes:
(image * 255).round().astype("uint8"). The SDXL pipeline is opened with add_watermarker=False
(diffusers adds an invisible watermark when the invisible-watermark package is installed).

DDIM runs with clip_sample false, as the real SD 1.5 and SDXL scheduler configs set it (the tiny
configs leave it out, so DDIMScheduler's default true would apply), except in one case that keeps
the clipping. Clipping x0 to [-1, 1] under guidance makes these random models chaotic: diffusers'
own picture moves to ~61 dB when its UNet output is perturbed by one part in a million. Each case
records that figure as floor_db (the PSNR of the picture painted with the UNet's output times
1 + 1e-6 * N(0, 1) against the unperturbed one), so the test can tell a kvad fault from the
case's own sensitivity to float rounding.

images.safetensors  per case KEY: "KEY" uint8 [n, height, width, 3] (RGB, rows top to bottom),
                    and "KEY.latents" float32 [n, 4, height/8, width/8]: the final latents before
                    the VAE (a second run with output_type="latent"), for diagnosis.
cases.json          [{key, pipeline ("sd15"/"sdxl"), scheduler (kvad's name), overrides (the scheduler
                    config keys from_config was given), prompt, negative_prompt (null: none), width,
                    height, steps, cfg, seed, n, floor_db}].
"""
import json
import math
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fixture_util import ROOT  # noqa: E402

PIPES = ROOT / "tests" / "fixtures" / "image_pipelines"
OUT = ROOT / "tests" / "fixtures" / "painter"

# kvad's scheduler name -> (diffusers class, extra from_config arguments)
SCHEDULERS = {
    "euler": ("EulerDiscreteScheduler", {}),
    "euler_a": ("EulerAncestralDiscreteScheduler", {}),
    "ddim": ("DDIMScheduler", {}),
    "dpm++2m": ("DPMSolverMultistepScheduler", {}),
    "dpm++2m_karras": ("DPMSolverMultistepScheduler", {"use_karras_sigmas": True}),
}


def cases():
    out = []
    for pipe, cfg in (("sd15", 7.5), ("sdxl", 5.0)):
        for s in SCHEDULERS:
            out.append(dict(pipeline=pipe, scheduler=s, prompt="a photo of a cat", negative_prompt=None, width=64,
                            height=64, steps=4, cfg=cfg, seed=42, n=1))
    # a batch of two with a negative prompt, a wide picture, and no guidance (batch 1 through the UNet)
    out.append(dict(pipeline="sd15", scheduler="euler_a", prompt="A Red FOX in fresh snow, 8k",
                    negative_prompt="blurry, low quality", width=64, height=64, steps=4, cfg=3.0, seed=7, n=2))
    out.append(dict(pipeline="sd15", scheduler="dpm++2m", prompt="a lighthouse at dusk", negative_prompt=None,
                    width=128, height=64, steps=5, cfg=7.5, seed=123456789, n=1))
    out.append(dict(pipeline="sdxl", scheduler="euler", prompt="a bowl of fruit", negative_prompt="", width=64,
                    height=128, steps=3, cfg=5.0, seed=3, n=1))
    out.append(dict(pipeline="sdxl", scheduler="ddim", prompt="a bowl of fruit", negative_prompt=None, width=64,
                    height=64, steps=4, cfg=1.0, seed=5, n=2))
    out.append(dict(pipeline="sd15", scheduler="ddim", prompt="a photo of a cat", negative_prompt=None, width=64,
                    height=64, steps=4, cfg=7.5, seed=42, n=1, overrides={}))  # the tiny config as is: clipped
    for c in out:
        c.setdefault("overrides", {"clip_sample": False} if c["scheduler"] == "ddim" else {})
        clip = ".clip" if c["scheduler"] == "ddim" and not c["overrides"] else ""
        c["key"] = f"{c['pipeline']}.{c['scheduler']}{clip}.{c['width']}x{c['height']}.s{c['seed']}.n{c['n']}"
    return out


def psnr8(a, b):
    mse = ((a.astype("float64") - b.astype("float64")) ** 2).mean()
    return 999.0 if mse == 0 else 10 * math.log10(255 ** 2 / mse)


def main():
    import diffusers
    torch.set_num_threads(1)
    pipes = {
        "sd15": diffusers.StableDiffusionPipeline.from_pretrained(PIPES / "sd15", safety_checker=None,
                                                                  requires_safety_checker=False),
        "sdxl": diffusers.StableDiffusionXLPipeline.from_pretrained(PIPES / "sdxl", add_watermarker=False),
    }
    configs = {k: p.scheduler.config for k, p in pipes.items()}
    tensors, listed = {}, []
    for c in cases():
        pipe = pipes[c["pipeline"]]
        cls, extra = SCHEDULERS[c["scheduler"]]
        pipe.set_progress_bar_config(disable=True)

        def call(output_type, perturb=0.0):
            pipe.scheduler = getattr(diffusers, cls).from_config(configs[c["pipeline"]], **extra, **c["overrides"])
            forward = pipe.unet.forward
            g = torch.Generator().manual_seed(0)

            def perturbed(*a, **k):
                out = forward(*a, **k)
                sample = out[0] if isinstance(out, tuple) else out.sample
                sample.mul_(1 + perturb * torch.randn(sample.shape, generator=g))
                return out

            if perturb:
                pipe.unet.forward = perturbed
            try:
                return pipe(c["prompt"], negative_prompt=c["negative_prompt"], width=c["width"], height=c["height"],
                        num_inference_steps=c["steps"], guidance_scale=c["cfg"], num_images_per_prompt=c["n"],
                            generator=torch.Generator("cpu").manual_seed(c["seed"]), output_type=output_type).images
            finally:
                pipe.unet.forward = forward

        with torch.no_grad():
            image = call("np")
            latents = call("latent")
            moved = call("np", perturb=1e-6)
        u8 = (image * 255).round().astype("uint8")
        c["floor_db"] = round(psnr8(u8, (moved * 255).round().astype("uint8")), 1)
        tensors[c["key"]] = torch.from_numpy(u8).contiguous()
        tensors[c["key"] + ".latents"] = latents.float().contiguous()
        listed.append(c)
        print(c["key"], tuple(image.shape), f"mean {image.mean():.3f}, floor {c['floor_db']} dB")
    OUT.mkdir(parents=True, exist_ok=True)
    save_file(tensors, OUT / "images.safetensors")
    (OUT / "cases.json").write_text(json.dumps(listed, indent=1) + "\n")
    total = sum(f.stat().st_size for f in OUT.iterdir())
    print(f"{OUT.relative_to(ROOT)}: {len(listed)} cases, {total / 1e3:.0f} kB")


if __name__ == "__main__":
    main()
