#!/usr/bin/env python3
"""Writes a random-weight Stable Diffusion 1.5 pipeline for benchmarks: a diffusers folder
(model_index.json, unet/, vae/, text_encoder/, scheduler/) with diffusers' UNet2DConditionModel
and AutoencoderKL and transformers' CLIPTextModel built from kvad's SD 1.5 configs
(src/model/image/base/sd15.json, the stable-diffusion-v1-5 files) with torch's default random
initialization, saved in f16. Both kvad (model/image/pipeline.h) and stable-diffusion.cpp
(`sd-cli -m FOLDER`, which maps diffusers' names to the ldm ones itself) open such a folder, so
bench/compare_sd.py runs both on the very same weights. The weights are random: the pictures are
noise, the timings are a real SD 1.5's (the work does not depend on the values).

    /work/wt/venv-pictures/bin/python tools/make_sd15_bench_checkpoint.py \
        [--out ~/.cache/kvad/bench-models/sd15-rand-f16]
    ... tools/make_sd15_bench_checkpoint.py --shape sdxl   # SDXL base's shapes: sdxl-rand-f16, ~7 GB

With --shape sdxl the folder is SDXL base's (src/model/image/base/sdxl.json: text_encoder_2 a
CLIPTextModelWithProjection, EulerDiscreteScheduler), the modules made in f16 directly (torch's
default dtype) so that the 2.6 B UNet never exists in f32.

About 2 GB on disk (860 M UNet + 84 M VAE + 123 M text encoder parameters at 2 bytes); a few
minutes on two cores. The text encoder is written with transformers 4's `text_model.` prefix,
as the checkpoints on the Hub have it (stable-diffusion.cpp's name map expects it).
"""
import argparse
import json
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fixture_util import ROOT  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", choices=("sd15", "sdxl"), default="sd15")
    ap.add_argument("--out", default=None, help="default ~/.cache/kvad/bench-models/SHAPE-rand-f16")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    from diffusers import AutoencoderKL, EulerDiscreteScheduler, PNDMScheduler, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

    base = json.loads((ROOT / f"src/model/image/base/{a.shape}.json").read_text())
    out = Path(a.out or Path.home() / f".cache/kvad/bench-models/{a.shape}-rand-f16")
    torch.set_default_dtype(torch.float16)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(a.seed)
    drop = lambda c: {k: v for k, v in c.items() if not k.startswith("_")}  # noqa: E731
    unet = UNet2DConditionModel(**drop(base["unet"])).half()
    unet.save_pretrained(out / "unet", safe_serialization=True)
    del unet
    vae = AutoencoderKL(**drop(base["vae"])).half()
    vae.save_pretrained(out / "vae", safe_serialization=True)
    del vae
    for comp in ("text_encoder", "text_encoder_2"):
        if comp not in base:
            continue
        te_cfg = {k: v for k, v in base[comp].items() if k not in ("architectures", "model_type")}
        cls = CLIPTextModelWithProjection if base[comp]["architectures"] == ["CLIPTextModelWithProjection"] else CLIPTextModel
        te = cls(CLIPTextConfig(**te_cfg)).half()
        te.save_pretrained(out / comp, safe_serialization=True)
        del te
        f = out / comp / "model.safetensors"
        t = load_file(f)
        if not any(k.startswith("text_model.") for k in t):
            save_file({(k if k.startswith("text_projection") else "text_model." + k): v for k, v in t.items()}, f,
                      metadata={"format": "pt"})
    sc = drop(base["scheduler"])
    sched = (EulerDiscreteScheduler.from_config(sc) if a.shape == "sdxl"
             else PNDMScheduler(**{k: v for k, v in sc.items() if k != "clip_sample"}))
    sched.save_pretrained(out / "scheduler")
    (out / "model_index.json").write_text(json.dumps(
        {k: v for k, v in base["model_index"].items() if k not in ("safety_checker", "feature_extractor")}, indent=1))
    # kvad reads a folder's tokenizer/: the tiny test pipelines' CLIP tokenizers (a small vocabulary:
    # the prompt's token ids differ from the real vocabulary's, the work does not). sd.cpp has its own.
    import shutil
    for tok in ("tokenizer", "tokenizer_2"):
        src = ROOT / "tests/fixtures/image_pipelines" / a.shape / tok
        if src.is_dir():
            shutil.copytree(src, out / tok, dirs_exist_ok=True)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
