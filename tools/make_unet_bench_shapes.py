#!/usr/bin/env python3
"""Writes bench/unet_<shape>_tensors.txt for bench/bench_unet.cpp: the name and torch shape of every
tensor of the UNet of kvad's base config (src/model/image/base/<shape>.json: SD 1.5's or SDXL base's
unet/config.json), and the FLOPs of one call (batch 2: classifier-free guidance; 77 text tokens)
at the latent sides given, as torch's FlopCounterMode counts them (matmuls, convolutions and
attention, 2 a multiply-add), from diffusers' UNet2DConditionModel on torch's meta device (no
weights are made).

    /work/wt/venv-pictures/bin/python tools/make_unet_bench_shapes.py sdxl 96 128

Lines: "# flops_at SIDE N" per side, then "NAME D0 D1 ..." per tensor. (bench/unet_sd15_tensors.txt
is written by tools/make_unet_fixtures.py with one "# flops N" line for side 64.)
"""
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fixture_util import ROOT  # noqa: E402


def main():
    shape, sides = sys.argv[1], [int(s) for s in sys.argv[2:]] or [64]
    from diffusers import UNet2DConditionModel
    from torch.utils.flop_counter import FlopCounterMode
    cfg = json.loads((ROOT / "src" / "model" / "image" / "base" / f"{shape}.json").read_text())["unet"]
    head = ""
    with torch.device("meta"):
        unet = UNet2DConditionModel.from_config(cfg)
        for side in sides:
            kw = {}
            if cfg.get("addition_embed_type") == "text_time":
                kw["added_cond_kwargs"] = {"text_embeds": torch.randn(2, 1280), "time_ids": torch.randn(2, 6)}
            with FlopCounterMode(display=False) as fc:
                unet(torch.randn(2, 4, side, side), 500.0,
                     encoder_hidden_states=torch.randn(2, 77, cfg["cross_attention_dim"]), **kw)
            head += f"# flops_at {side} {fc.get_total_flops()}\n"
    f = ROOT / "bench" / f"unet_{shape}_tensors.txt"
    head = (f"# {shape} UNet, one call: batch 2, SIDE x SIDE latent, 77 text tokens; torch FlopCounterMode "
            "(tools/make_unet_bench_shapes.py)\n" + head)
    f.write_text(head + "".join(f"{k} {' '.join(str(d) for d in v.shape)}\n" for k, v in unet.state_dict().items()))
    n = sum(v.numel() for v in unet.state_dict().values())
    print(f"{f.relative_to(ROOT)}: {len(unet.state_dict())} tensors, {n / 1e6:.1f} M parameters; {head.strip()}")


if __name__ == "__main__":
    main()
