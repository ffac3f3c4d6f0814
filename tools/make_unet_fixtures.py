#!/usr/bin/env python3
"""Makes tests/fixtures/image_pipelines/unet.safetensors: what diffusers' UNet2DConditionModel
gives, in f32, for the tiny random SD 1.5 and SDXL pipelines of tools/make_image_pipelines.py,
which tests/model/image/test_unet.cpp compares kvad's UNet2DCondition against.

    /work/wt/venv-pictures/bin/python tools/make_unet_fixtures.py   # any venv with torch + diffusers

Per pipeline P (sd15, sdxl) and case S (one tensor set per case, batch 2, one timestep for both):
  P.S.sample                  [2, H, W, 4]  the latent input, channels-last (kvad's {C, W, H, N})
  P.S.timestep                [1]           the timestep (fractional, as Euler's are)
  P.S.encoder_hidden_states   [2, 77, cross_attention_dim]
  P.S.text_embeds, P.S.time_ids  [2, 40], [2, 6]   SDXL's added conditions
  P.S.out                     [2, H, W, 4]  UNet2DConditionModel(...).sample, channels-last
Case "a" is 16 x 8 (H x W: every level halves evenly); case "b" is 10 x 7, which the
down-samplers round up (10 -> 5 -> 3 -> 2), so diffusers forwards upsample_size to the
up-samplers and they interpolate to each skip's size rather than doubling.

It also writes bench/unet_sd15_tensors.txt: the name and torch shape of every tensor of SD 1.5's
UNet (kvad's base config, src/model/image/base/sd15.json), one "NAME D0 D1 ..." a line after a "# flops N" line (the FLOPs of one call at 512 x 512,
batch 2, as torch's FlopCounterMode counts them), from which
bench/bench_unet.cpp makes a random UNet of SD 1.5's real size.
"""
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fixture_util import ROOT  # noqa: E402

OUT = ROOT / "tests" / "fixtures" / "image_pipelines"
CASES = {"a": (16, 8, 537.25), "b": (10, 7, 11.0)}


def bench_shapes():
    import json
    from diffusers import UNet2DConditionModel
    cfg = json.loads((ROOT / "src" / "model" / "image" / "base" / "sd15.json").read_text())["unet"]
    from torch.utils.flop_counter import FlopCounterMode
    with torch.device("meta"):
        unet = UNet2DConditionModel.from_config(cfg)
        with FlopCounterMode(display=False) as fc:  # matmuls, convolutions, attention: 2 a multiply-add
            unet(torch.randn(2, 4, 64, 64), 500.0, encoder_hidden_states=torch.randn(2, 77, 768))
    f = ROOT / "bench" / "unet_sd15_tensors.txt"
    head = f"# flops {fc.get_total_flops()} (one call: batch 2, 64 x 64 latent, 77 text tokens; torch FlopCounterMode)\n"
    f.write_text(head + "".join(f"{k} {' '.join(str(d) for d in v.shape)}\n" for k, v in unet.state_dict().items()))
    n = sum(v.numel() for v in unet.state_dict().values())
    print(f"{f.relative_to(ROOT)}: {len(unet.state_dict())} tensors, {n / 1e6:.1f} M parameters")


def main():
    from diffusers import UNet2DConditionModel
    torch.set_num_threads(1)
    out = {}
    for name, seed in (("sd15", 100), ("sdxl", 200)):
        unet = UNet2DConditionModel.from_pretrained(OUT / name / "unet", torch_dtype=torch.float32).eval()
        c = unet.config
        g = torch.Generator().manual_seed(seed)
        for case, (h, w, t) in CASES.items():
            x = torch.randn(2, c.in_channels, h, w, generator=g)
            ctx = torch.randn(2, 77, c.cross_attention_dim, generator=g)
            added = None
            k = f"{name}.{case}."
            if c.addition_embed_type == "text_time":
                n_text = c.projection_class_embeddings_input_dim - 6 * c.addition_time_embed_dim
                added = {"text_embeds": torch.randn(2, n_text, generator=g),
                         # original size, crop top-left, target size, as SDXL's pipeline makes them
                         "time_ids": torch.tensor([[1024.0, 768.0, 0.0, 0.0, 1024.0, 768.0],
                                                   [512.0, 640.0, 16.0, 32.0, 896.0, 1152.0]])}
                out[k + "text_embeds"], out[k + "time_ids"] = added["text_embeds"], added["time_ids"]
            with torch.no_grad():
                y = unet(x, t, encoder_hidden_states=ctx, added_cond_kwargs=added).sample
            out[k + "sample"] = x.permute(0, 2, 3, 1)
            out[k + "timestep"] = torch.tensor([t])
            out[k + "encoder_hidden_states"] = ctx
            out[k + "out"] = y.permute(0, 2, 3, 1)
            print(f"{k}out: {tuple(y.shape)}, max |y| {y.abs().max():.3f}")
    f = OUT / "unet.safetensors"
    save_file({k: v.contiguous() for k, v in out.items()}, f)
    print(f"{f.relative_to(ROOT)}: {f.stat().st_size / 1e6:.2f} MB")
    bench_shapes()


if __name__ == "__main__":
    main()
