#!/usr/bin/env python3
"""Makes tests/fixtures/image_pipelines/vae.safetensors (and the vae_wide/ folder): what diffusers'
AutoencoderKL gives, in f32, for the tiny random VAEs of tests/fixtures/image_pipelines, which
tests/model/image/test_vae.cpp compares kvad's model/image/vae.h against.

    /work/wt/venv-pictures/bin/python tools/make_vae_fixtures.py   # any venv with torch + diffusers
    ... tools/make_vae_fixtures.py --tiled-encode-only   # only vae_tiled_encode.safetensors

For P in sd15, sdxl (the committed pipeline folders, P/vae) and wide (vae_wide/, made here: 3
levels of 8, 16, 16 channels, so every resnet that changes width has its 1x1 conv_shortcut;
GroupNorm of 4 groups; 16 latent channels and no quant_conv / post_quant_conv, as the SD3 and
Flux VAEs have; 1 resnet a level), every image tensor stored channels-last ([N, H, W, C],
kvad's ne {C, W, H, N}):

  P.z            a fixed random latent, batch 2 (already divided by scaling_factor)
  P.decode       vae.decode(P.z).sample, not clamped
  P.x            a fixed random image in [-1, 1], batch 2
  P.mean         vae.encode(P.x).latent_dist.mean (quant_conv applied; not scaled)
  P.tiled_z      a latent larger than the tile (sd15, sdxl only)
  P.tiled        vae.decode(P.tiled_z) with enable_tiling() and tile_latent_min_size = T,
                 tile_sample_min_size = 8 T, tile_overlap_factor = O / T: kvad's VaeTiling{T, O};
                 P.tiling holds [T, O] (i32)
  wide.x_odd / wide.mean_odd   an image whose sides are no multiple of 4 (Downsample2D's
                 asymmetric pad on odd sizes)

and tests/fixtures/image_pipelines/vae_tiled_encode.safetensors (its own generator, so that
vae.safetensors stays as it was), diffusers' _tiled_encode for P in sd15, sdxl, wide:

  P.tiled_x      an image larger than one tile, [N, H, W, C]
  P.tiled_mean   vae.encode(P.tiled_x).latent_dist.mean with enable_tiling() and
                 tile_latent_min_size = T, tile_sample_min_size = f T, tile_overlap_factor = O / T
  P.tiling       [T, O] (i32)
  P.untiled_mean the same image encoded whole (the test reports how far the tiles are from it)
"""
import json
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fixture_util import ROOT  # noqa: E402
from make_image_pipelines import randomize  # noqa: E402

OUT = ROOT / "tests" / "fixtures" / "image_pipelines"


def nhwc(t):
    return t.permute(0, 2, 3, 1).contiguous()


def wide_vae():
    """The vae_wide/ folder, written once with fixed seeds."""
    from diffusers import AutoencoderKL
    m = AutoencoderKL(in_channels=3, out_channels=3, latent_channels=16, block_out_channels=(8, 16, 16),
                      down_block_types=("DownEncoderBlock2D",) * 3, up_block_types=("UpDecoderBlock2D",) * 3,
                      layers_per_block=1, norm_num_groups=4, sample_size=32, scaling_factor=0.3611,
                      use_quant_conv=False, use_post_quant_conv=False)
    randomize(m, 7)
    m.save_pretrained(OUT / "vae_wide")
    return AutoencoderKL.from_pretrained(OUT / "vae_wide")


def main():
    from diffusers import AutoencoderKL
    torch.set_num_threads(1)
    if "--tiled-encode-only" in sys.argv[1:]:  # the committed VAEs, vae.safetensors untouched
        tiled_encode({"sd15": AutoencoderKL.from_pretrained(OUT / "sd15" / "vae"),
                      "sdxl": AutoencoderKL.from_pretrained(OUT / "sdxl" / "vae"),
                      "wide": AutoencoderKL.from_pretrained(OUT / "vae_wide")})
        return
    g = torch.Generator().manual_seed(11)
    out = {}
    vaes = {"sd15": AutoencoderKL.from_pretrained(OUT / "sd15" / "vae"),
            "sdxl": AutoencoderKL.from_pretrained(OUT / "sdxl" / "vae"), "wide": wide_vae()}
    # Latent sizes (h, w), the image size for encode, and the tiling (T, O, latent h, w, batch).
    shapes = {"sd15": ((6, 5), (48, 40), (4, 1, 11, 9, 2)), "sdxl": ((5, 7), (40, 56), (8, 2, 13, 10, 1)),
              "wide": ((5, 4), (20, 16), None)}
    with torch.no_grad():
        for name, vae in vaes.items():
            vae = vae.float().eval()
            (h, w), (ih, iw), tiling = shapes[name]
            c = vae.config.latent_channels
            z = torch.randn(2, c, h, w, generator=g)
            out[f"{name}.z"], out[f"{name}.decode"] = nhwc(z), nhwc(vae.decode(z).sample)
            x = torch.rand(2, 3, ih, iw, generator=g) * 2 - 1
            out[f"{name}.x"], out[f"{name}.mean"] = nhwc(x), nhwc(vae.encode(x).latent_dist.mean)
            if name == "wide":
                x = torch.rand(1, 3, 21, 18, generator=g) * 2 - 1
                out["wide.x_odd"], out["wide.mean_odd"] = nhwc(x), nhwc(vae.encode(x).latent_dist.mean)
            if tiling:
                t, o, th, tw, n = tiling
                z = torch.randn(n, c, th, tw, generator=g)
                f = 2 ** (len(vae.config.block_out_channels) - 1)
                vae.enable_tiling()
                vae.tile_latent_min_size, vae.tile_sample_min_size, vae.tile_overlap_factor = t, t * f, o / t
                assert int(t * (1 - o / t)) == t - o and int(t * f * o / t) == o * f
                out[f"{name}.tiled_z"], out[f"{name}.tiled"] = nhwc(z), nhwc(vae.decode(z).sample)
                out[f"{name}.tiling"] = torch.tensor([t, o], dtype=torch.int32)
                vae.disable_tiling()
                # The tiles differ from one pass (each tile's GroupNorm sees only itself).
                whole = vae.decode(z).sample
                print(f"{name}: tiled decode differs from the whole by up to "
                      f"{(whole - vae.tiled_decode(z).sample).abs().max():.3g}")
    save_file(out, OUT / "vae.safetensors", metadata={"source": "tools/make_vae_fixtures.py, diffusers AutoencoderKL f32"})
    tiled_encode(vaes)
    total = (OUT / "vae.safetensors").stat().st_size + sum(f.stat().st_size for f in (OUT / "vae_wide").iterdir())
    print(f"vae.safetensors + vae_wide/: {total / 1e6:.2f} MB; {json.dumps({k: list(v.shape) for k, v in out.items()})}")


def tiled_encode(vaes):
    """vae_tiled_encode.safetensors: diffusers' _tiled_encode against kvad's encode(x, VaeTiling)."""
    g = torch.Generator().manual_seed(12)
    # (T, O, image h, w, batch): tiles cut short at the right and bottom edges; wide's sides
    # are no multiple of its f = 4 (each tile's strided convolutions floor its size).
    cases = {"sd15": (4, 1, 88, 72, 2), "sdxl": (8, 2, 136, 104, 1), "wide": (4, 1, 45, 44, 1)}
    out = {}
    with torch.no_grad():
        for name, (t, o, h, w, n) in cases.items():
            vae = vaes[name].float().eval()
            f = 2 ** (len(vae.config.block_out_channels) - 1)
            x = torch.rand(n, 3, h, w, generator=g) * 2 - 1
            vae.disable_tiling()
            whole = vae.encode(x).latent_dist.mean
            vae.enable_tiling()
            vae.tile_latent_min_size, vae.tile_sample_min_size, vae.tile_overlap_factor = t, t * f, o / t
            assert int(t * f * (1 - o / t)) == (t - o) * f and int(t * o / t) == o
            tiled = vae.encode(x).latent_dist.mean
            vae.disable_tiling()
            out[f"{name}.tiled_x"], out[f"{name}.tiled_mean"] = nhwc(x), nhwc(tiled)
            out[f"{name}.untiled_mean"] = nhwc(whole)
            out[f"{name}.tiling"] = torch.tensor([t, o], dtype=torch.int32)
            d = (whole - tiled).abs().max() if whole.shape == tiled.shape else float("nan")
            print(f"{name}: tiled encode {list(tiled.shape)}, differs from the whole by up to {d:.3g}")
    save_file(out, OUT / "vae_tiled_encode.safetensors",
              metadata={"source": "tools/make_vae_fixtures.py, diffusers AutoencoderKL._tiled_encode f32"})


if __name__ == "__main__":
    main()
