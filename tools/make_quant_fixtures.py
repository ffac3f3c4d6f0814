#!/usr/bin/env python3
"""Make the quantization fixtures for kvad's format tests (tests/tensor/).

Usage:
    python3 tools/make_quant_fixtures.py [--out tests/fixtures/quants]

Needs the PyPI packages gguf (llama.cpp's gguf-py, whose quants.py reproduces
ggml's quantize_row_*_ref bit for bit) and numpy. Deterministic (fixed seed):
rerunning writes the same bytes. The tests read only the files this writes;
they never need Python.

Writes, under --out:
  input.f32          ROWS x COLS float32 source values (little endian)
  <fmt>.quant        gguf.quants.quantize(input, <FMT>): the rows in the
                     format's bytes (ggml block layout)
  <fmt>.dequant.f32  gguf.quants.dequantize(<fmt>.quant, <FMT>) as float32
  manifest.txt       one line per format: "<fmt> <type id> <rows> <cols>
                     <quant bytes>", plus the gguf-py and numpy versions

Formats: f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0.
"""
import argparse
import importlib.metadata
import os

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

ROWS, COLS = 8, 256
SEED = 20240613
FORMATS = [("f16", T.F16), ("bf16", T.BF16), ("q4_0", T.Q4_0), ("q4_1", T.Q4_1),
           ("q5_0", T.Q5_0), ("q5_1", T.Q5_1), ("q8_0", T.Q8_0)]


def make_input() -> np.ndarray:
    rng = np.random.default_rng(SEED)
    x = np.zeros((ROWS, COLS), dtype=np.float32)
    x[0] = rng.standard_normal(COLS)                       # unit scale
    x[1] = rng.standard_normal(COLS) * 0.02                # weight-like
    x[2] = rng.uniform(-100.0, 100.0, COLS)                # wide uniform
    # Row 3: one edge case per 32-element block.
    r = np.zeros(COLS, dtype=np.float32)
    r[0:32] = 0.0                                          # all zero: d = 0
    r[32:64] = 0.5                                         # constant: d = 0 for q4_1/q5_1
    r[64:96] = -np.abs(rng.standard_normal(32)) - 1.0      # all negative
    r[96:128] = np.abs(rng.standard_normal(32)) + 1.0      # all positive
    r[128:160] = rng.standard_normal(32) * 0.1
    r[128 + 7] = -50.0                                     # one outlier
    r[160:192] = np.arange(32) - 15.5                      # halves
    r[160] = 127.0                                         # d = 1 for q8_0: ties at .5
    r[192:224] = np.tile(np.array([3.0, -3.0], dtype=np.float32), 16)  # +-max: first wins
    r[224:256] = rng.standard_normal(32)
    x[3] = r
    x[4] = rng.standard_normal(COLS) * 1e-6                # f16-subnormal scales
    x[5] = rng.standard_normal(COLS) * 1000.0              # large
    x[6] = rng.standard_normal(COLS) * np.exp(2.0 * rng.standard_normal(COLS))  # heavy tails
    # Row 7: exact rounding ties for f16 (1 + odd * 2^-11) and bf16 (1 + odd * 2^-8),
    # and values near the f16 limits.
    k = np.arange(64, dtype=np.float32)
    t = np.concatenate([
        1.0 + (2 * k + 1) * np.float32(2.0 ** -11),
        -(1.0 + (2 * k + 1) * np.float32(2.0 ** -8)),
        (2 * k + 1) * np.float32(2.0 ** -25),              # f16 subnormal ties
        rng.uniform(-65000.0, 65000.0, 64),
    ]).astype(np.float32)
    x[7] = t
    return x.astype(np.float32)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "fixtures", "quants"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    x = make_input()
    x.astype("<f4").tofile(os.path.join(args.out, "input.f32"))
    lines = [f"# gguf-py {importlib.metadata.version('gguf')} numpy {np.__version__} seed {SEED}"]
    for name, qtype in FORMATS:
        q = quants.quantize(x, qtype)
        qb = np.ascontiguousarray(q).view(np.uint8).reshape(ROWS, -1)
        deq = quants.dequantize(qb, qtype).astype(np.float32).reshape(ROWS, COLS)
        qb.tofile(os.path.join(args.out, f"{name}.quant"))
        deq.astype("<f4").tofile(os.path.join(args.out, f"{name}.dequant.f32"))
        lines.append(f"{name} {int(qtype)} {ROWS} {COLS} {qb.shape[1]}")
    with open(os.path.join(args.out, "manifest.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
