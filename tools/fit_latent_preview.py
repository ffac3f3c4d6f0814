#!/usr/bin/env python3
"""Fits the latent preview of src/model/image/latent_preview.cpp: per VAE, a fixed linear map
from a latent pixel (C channels, as the UNet sees it: the VAE's latent_dist.mean times
scaling_factor) to the RGB of the decoded image over that pixel's f x f block,

    rgb = A z + b      A [3, C], b [3]   (least squares over (latent, image) pixel pairs)

and writes the C++ table to paste into latent_preview.cpp, plus
tests/fixtures/image_pipelines/latent_preview.safetensors for test_latent_preview.

    /work/wt/venv-pictures/bin/python tools/fit_latent_preview.py   # any venv with torch + diffusers

The pairs: N smooth random images in [-1, 1] (noise at 1/8 resolution, bicubic-upsampled),
encoded (latent_dist.mean), the latent decoded again, and the decoded image average-pooled over
each latent pixel's f x f block. With a real VAE this is the whole procedure (real photographs
in place of the random images); the VAEs at hand are the tiny random ones of
tests/fixtures/image_pipelines (no real SD/SDXL VAE weights can be fetched here), so the matrices
are theirs, and the variance explained (printed) says how much a linear map captures of them.

Fixture: K.z (a latent [1, h, w, C] channels-last as scaled) and K.rgb8 ([h, w, 3] uint8,
round((A z + b + 1) * 127.5) clamped to 0..255) for K in sd (4 channels) and wide (16), and
K.A, K.b.
"""
import sys
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fixture_util import ROOT  # noqa: E402

FIX = ROOT / "tests" / "fixtures" / "image_pipelines"


def pairs(vae, n_img, side, g):
    f = 2 ** (len(vae.config.block_out_channels) - 1)
    low = torch.rand(n_img, 3, side // 8, side // 8, generator=g) * 2 - 1
    x = torch.nn.functional.interpolate(low, size=(side, side), mode="bicubic", align_corners=False).clamp(-1, 1)
    with torch.no_grad():
        mean = vae.encode(x).latent_dist.mean
        img = vae.decode(mean).sample
    z = mean * vae.config.scaling_factor
    rgb = torch.nn.functional.avg_pool2d(img, f)
    C = z.shape[1]
    return z.permute(0, 2, 3, 1).reshape(-1, C).double().numpy(), rgb.permute(0, 2, 3, 1).reshape(-1, 3).double().numpy()


def fit(z, rgb):
    X = np.concatenate([z, np.ones((z.shape[0], 1))], axis=1)
    W, *_ = np.linalg.lstsq(X, rgb, rcond=None)  # [C + 1, 3]
    pred = X @ W
    r2 = 1 - ((rgb - pred) ** 2).sum(0) / ((rgb - rgb.mean(0)) ** 2).sum(0)
    return W[:-1].T.astype(np.float32), W[-1].astype(np.float32), r2


def rgb8(z, A, b):
    v = z.astype(np.float32) @ A.T + b
    return np.clip(np.round((v + np.float32(1)) * np.float32(127.5)), 0, 255).astype(np.uint8)


def main():
    from diffusers import AutoencoderKL
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(5)
    out = {}
    for key, folder, what in (("sd", FIX / "sd15" / "vae", "4-channel (SD 1.5 / SDXL layout; tiny random sd15/vae)"),
                              ("wide", FIX / "vae_wide", "16-channel (tiny random vae_wide)")):
        vae = AutoencoderKL.from_pretrained(folder).float().eval()
        z, rgb = pairs(vae, 64, 64, g)
        A, b, r2 = fit(z, rgb)
        zt, rt = pairs(vae, 16, 64, g)  # held out
        pred = np.concatenate([zt, np.ones((zt.shape[0], 1))], 1) @ np.concatenate([A.T, b[None]], 0)
        r2t = 1 - ((rt - pred) ** 2).sum(0) / ((rt - rt.mean(0)) ** 2).sum(0)
        print(f"{what}: {z.shape[0]} pairs; variance explained R^2 (r, g, b) fit {np.round(r2, 3)}, "
              f"held out {np.round(r2t, 3)}")
        C = A.shape[1]
        rows = ",\n".join("    {" + ", ".join(f"{v:.6g}f" for v in row) + "}" for row in A)
        print(f"// {key}: A [3][{C}]\n{{\n{rows}\n}}\n// b\n{{" + ", ".join(f"{v:.6g}f" for v in b) + "}")
        # The table as printed (6 significant digits) is what the C++ computes with.
        A = np.array([[float(f"{v:.6g}") for v in row] for row in A], np.float32)
        b = np.array([float(f"{v:.6g}") for v in b], np.float32)
        zs = torch.randn(1, 6, 5, C, generator=g) * 1.5
        out[f"{key}.z"] = zs.contiguous()
        out[f"{key}.rgb8"] = torch.from_numpy(rgb8(zs[0].numpy().reshape(-1, C), A, b).reshape(6, 5, 3))
        out[f"{key}.A"], out[f"{key}.b"] = torch.from_numpy(A), torch.from_numpy(b)
    save_file(out, FIX / "latent_preview.safetensors", metadata={"source": "tools/fit_latent_preview.py"})


if __name__ == "__main__":
    main()
