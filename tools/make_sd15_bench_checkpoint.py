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
    ap.add_argument("--out", default=str(Path.home() / ".cache/kvad/bench-models/sd15-rand-f16"))
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    from diffusers import AutoencoderKL, PNDMScheduler, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel

    base = json.loads((ROOT / "src/model/image/base/sd15.json").read_text())
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(a.seed)
    drop = lambda c: {k: v for k, v in c.items() if not k.startswith("_")}  # noqa: E731
    unet = UNet2DConditionModel(**drop(base["unet"])).half()
    unet.save_pretrained(out / "unet", safe_serialization=True)
    del unet
    vae = AutoencoderKL(**drop(base["vae"])).half()
    vae.save_pretrained(out / "vae", safe_serialization=True)
    del vae
    te_cfg = {k: v for k, v in base["text_encoder"].items() if k not in ("architectures", "model_type")}
    te = CLIPTextModel(CLIPTextConfig(**te_cfg)).half()
    te.save_pretrained(out / "text_encoder", safe_serialization=True)
    f = out / "text_encoder" / "model.safetensors"
    t = load_file(f)
    if not any(k.startswith("text_model.") for k in t):
        save_file({"text_model." + k: v for k, v in t.items()}, f, metadata={"format": "pt"})
    sched = PNDMScheduler(**{k: v for k, v in drop(base["scheduler"]).items() if k != "clip_sample"})
    sched.save_pretrained(out / "scheduler")
    (out / "model_index.json").write_text(json.dumps(
        {k: v for k, v in base["model_index"].items() if k not in ("safety_checker", "feature_extractor")}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
