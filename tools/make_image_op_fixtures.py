#!/usr/bin/env python3
"""Makes tests/fixtures/image_ops/: what PyTorch and diffusers (PyPI) give for
the image ops of kvad's op layer (tensor/ops.h "images"), which
tests/tensor/test_image_ops.cpp compares kvad against. The tests never need
torch; this script is only needed to remake the fixtures.

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install torch diffusers
    /tmp/venv/bin/python tools/make_image_op_fixtures.py

Each file is JSON (a few KB): a list of cases, every tensor as {"shape":
kvad's ne (ggml order, innermost first), "f32": its float32 values in kvad's
layout, little-endian bytes in base64}. Images are converted from torch's NCHW to
kvad's {C, W, H, N} (channels innermost: x.permute(0, 2, 3, 1)); conv
weights are kept as torch stores them ([OC, C, KH, KW], ne {KW, KH, C, OC}),
so the test also checks ops::conv2d_weight.

conv2d.json      F.conv2d in float64 (stored as float32) for 3x3/pad 1 with bias,
                 3x3/stride 2/pad 1 (a Downsample2D), 1x1 without bias, and a 4x3
                 kernel with stride (1, 2) and padding (2, 0); odd sizes.
group_norm.json  torch.nn.GroupNorm in float64: GroupNorm32 over 64 channels (affine,
                 eps 1e-5), 3 groups of 12 channels without affine (eps 1e-6).
upsample.json    F.interpolate(x, scale_factor=2 and 3, mode="nearest").
geglu.json       diffusers.models.activations.GEGLU(dim_in, dim_out) (its proj Linear
                 and the exact GELU) in float64: x, proj.weight, proj.bias and the output.
attention.json   F.scaled_dot_product_attention in float64 per head: self-attention over
                 6 tokens (a head of 40) and cross-attention of 5 queries over 3 tokens
                 (2 heads of 16, batch 2); q, k, v as [N, n, H, D]. (The test checks larger
                 and odd shapes against the definition itself.)
"""
import base64
import json
import os
import struct
import sys

import torch
import torch.nn.functional as F

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "image_ops")


def f32(t):
    t = t.detach().to(torch.float32).contiguous().reshape(-1)
    return base64.b64encode(struct.pack(f"<{t.numel()}f", *t.tolist())).decode()


def tensor(t, ne):
    assert t.numel() == ne[0] * ne[1] * ne[2] * ne[3], (tuple(t.shape), ne)
    return {"shape": list(ne), "f32": f32(t)}


def image(t):  # NCHW -> kvad's {C, W, H, N}
    n, c, h, w = t.shape
    return tensor(t.permute(0, 2, 3, 1), [c, w, h, n])


def rand(g, *shape):
    # float32 values (the test's inputs), the reference computed in float64 from them.
    return torch.randn(*shape, generator=g, dtype=torch.float32)


def conv2d_cases(g):
    cases = []
    for name, (n, c, h, w, oc, kh, kw, stride, pad, bias) in {
        "3x3 pad 1 bias": (1, 4, 5, 6, 3, 3, 3, (1, 1), (1, 1), True),
        "3x3 stride 2 pad 1": (1, 3, 7, 6, 2, 3, 3, (2, 2), (1, 1), True),
        "1x1": (2, 5, 3, 2, 3, 1, 1, (1, 1), (0, 0), False),
        "4x3 stride (1, 2) pad (2, 0)": (1, 2, 6, 9, 2, 4, 3, (1, 2), (2, 0), True),
    }.items():
        x = rand(g, n, c, h, w)
        wt = rand(g, oc, c, kh, kw) * 0.3
        b = rand(g, oc) if bias else None
        y = F.conv2d(x.double(), wt.double(), b.double() if bias else None, stride=stride, padding=pad)
        case = {"name": name, "stride_w": stride[1], "stride_h": stride[0], "pad_w": pad[1], "pad_h": pad[0],
                "x": image(x), "weight": tensor(wt, [kw, kh, c, oc]), "out": image(y)}
        if bias:
            case["bias"] = tensor(b, [oc, 1, 1, 1])
        cases.append(case)
    return cases


def group_norm_cases(g):
    cases = []
    for name, (n, c, h, w, groups, eps, affine) in {
        "GroupNorm32 C=64": (1, 64, 2, 3, 32, 1e-5, True),
        "3 groups C=12 no affine": (1, 12, 3, 2, 3, 1e-6, False),
    }.items():
        x = rand(g, n, c, h, w) * 2 + 0.5
        gn = torch.nn.GroupNorm(groups, c, eps=eps, affine=affine).double()
        case = {"name": name, "groups": groups, "eps": eps, "x": image(x)}
        if affine:
            with torch.no_grad():
                gn.weight.copy_(rand(g, c) * 0.2 + 1)
                gn.bias.copy_(rand(g, c) * 0.2)
            case["weight"] = tensor(gn.weight, [c, 1, 1, 1])
            case["bias"] = tensor(gn.bias, [c, 1, 1, 1])
        with torch.no_grad():
            case["out"] = image(gn(x.double()))
        cases.append(case)
    return cases


def upsample_cases(g):
    cases = []
    for f in (2, 3):
        x = rand(g, 1, 3, 2, 3)
        cases.append({"name": f"nearest x{f}", "factor": f, "x": image(x),
                      "out": image(F.interpolate(x, scale_factor=f, mode="nearest"))})
    return cases


def geglu_cases(g):
    from diffusers.models.activations import GEGLU
    cases = []
    for dim_in, dim_out, n_tok in ((16, 6, 3), (8, 5, 2)):
        m = GEGLU(dim_in, dim_out).double()
        x = rand(g, 1, n_tok, dim_in)
        with torch.no_grad():
            m.proj.weight.copy_(rand(g, 2 * dim_out, dim_in) * 0.3)
            m.proj.bias.copy_(rand(g, 2 * dim_out) * 0.3)
            y = m(x.double())
        cases.append({"name": f"GEGLU({dim_in}, {dim_out})", "x": tensor(x, [dim_in, n_tok, 1, 1]),
                      "proj_weight": tensor(m.proj.weight, [dim_in, 2 * dim_out, 1, 1]),
                      "proj_bias": tensor(m.proj.bias, [2 * dim_out, 1, 1, 1]),
                      "out": tensor(y, [dim_out, n_tok, 1, 1])})
    return cases


def attention_cases(g):
    cases = []
    for name, (n, n_q, n_kv, heads, d) in {
        "self 6 tokens, a head of 40": (1, 6, 6, 1, 40),
        "cross 5 over 3 tokens, 2 heads of 16, batch 2": (2, 5, 3, 2, 16),
    }.items():
        q, k, v = rand(g, n, n_q, heads, d), rand(g, n, n_kv, heads, d), rand(g, n, n_kv, heads, d)
        scale = d ** -0.5
        # torch's layout [N, H, n, D] for the op; kvad's [N, n, H, D] (ne {D, H, n, N}) in the file.
        y = F.scaled_dot_product_attention(q.double().transpose(1, 2), k.double().transpose(1, 2),
                                           v.double().transpose(1, 2), scale=scale).transpose(1, 2)
        cases.append({"name": name, "scale": scale, "q": tensor(q, [d, heads, n_q, n]),
                      "k": tensor(k, [d, heads, n_kv, n]), "v": tensor(v, [d, heads, n_kv, n]),
                      "out": tensor(y, [d, heads, n_q, n])})
    return cases


def main():
    os.makedirs(OUT, exist_ok=True)
    g = torch.Generator("cpu").manual_seed(26)
    for name, make in (("conv2d", conv2d_cases), ("group_norm", group_norm_cases), ("upsample", upsample_cases),
                       ("geglu", geglu_cases), ("attention", attention_cases)):
        doc = {"torch": torch.__version__, "cases": make(g)}
        if name == "geglu":
            import diffusers
            doc["diffusers"] = diffusers.__version__
        path = os.path.join(OUT, name + ".json")
        with open(path, "w") as f:
            json.dump(doc, f, separators=(",", ":"))
            f.write("\n")
        print(path, os.path.getsize(path), "bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
