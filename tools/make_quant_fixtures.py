#!/usr/bin/env python3
"""Make the quantization fixtures for kvad's format tests (tests/kernels/cpu/).

Usage:
    python3 tools/make_quant_fixtures.py [--out tests/fixtures/quants]

Needs the PyPI packages gguf (llama.cpp's gguf-py, whose quants.py reproduces
ggml's quantize_row_*_ref bit for bit where it implements them), numpy, and,
for the formats gguf-py cannot quantize, llama_cpp_python, whose bundled
libggml-base.so exports ggml's own quantize_row_*_ref and dequantize_row_*
(called through ctypes). Deterministic (fixed seed): rerunning with the same
package versions writes the same bytes. The tests read only the files this
writes; they never need Python.

Writes, under --out:
  input.f32          ROWS x COLS float32 source values (little endian)
  <fmt>.quant        the rows in the format's bytes (ggml block layout):
                     gguf.quants.quantize(input, <FMT>) where gguf-py
                     implements it, else ggml's quantize_row_<fmt>_ref
  <fmt>.dequant.f32  gguf.quants.dequantize(<fmt>.quant, <FMT>) as float32
                     (ggml's dequantize_row_q8_K for q8_K, which gguf-py lacks)
  manifest.txt       one line per format: "<fmt> <type id> <rows> <cols>
                     <quant bytes> <source of the quant bytes>", plus the
                     gguf-py, numpy and ggml versions

Formats: f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0 (gguf-py); q2_K, q3_K,
q4_K, q5_K, q6_K, q8_K, iq4_nl, mxfp4 (ggml); tq1_0, tq2_0 (gguf-py, checked
equal to ggml). Where both implement a step, the script asserts that they agree.
"""
import argparse
import ctypes
import importlib.metadata
import importlib.util
import os

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

ROWS, COLS = 16, 256
SEED = 20240613
# (name, type, source of the quantized bytes)
FORMATS = [("f16", T.F16, "gguf-py"), ("bf16", T.BF16, "gguf-py"), ("q4_0", T.Q4_0, "gguf-py"),
           ("q4_1", T.Q4_1, "gguf-py"), ("q5_0", T.Q5_0, "gguf-py"), ("q5_1", T.Q5_1, "gguf-py"),
           ("q8_0", T.Q8_0, "gguf-py"),
           ("q2_K", T.Q2_K, "ggml"), ("q3_K", T.Q3_K, "ggml"), ("q4_K", T.Q4_K, "ggml"),
           ("q5_K", T.Q5_K, "ggml"), ("q6_K", T.Q6_K, "ggml"), ("q8_K", T.Q8_K, "ggml"),
           ("iq4_nl", T.IQ4_NL, "ggml"), ("tq1_0", T.TQ1_0, "gguf-py"), ("tq2_0", T.TQ2_0, "gguf-py"),
           ("mxfp4", T.MXFP4, "ggml")]


def ggml_lib() -> ctypes.CDLL:
    """ggml's reference quantizers, from llama_cpp_python's bundled libggml-base
    (or $KVAD_GGML_LIB_DIR/libggml-base.so: a llama.cpp build of the same version)."""
    if os.environ.get("KVAD_GGML_LIB_DIR"):
        return ctypes.CDLL(os.path.join(os.environ["KVAD_GGML_LIB_DIR"], "libggml-base.so"))
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("needs the PyPI package llama_cpp_python (for ggml's quantize_row_*_ref)")
    path = os.path.join(list(spec.submodule_search_locations)[0], "lib", "libggml-base.so")
    return ctypes.CDLL(path)


def ggml_version() -> str:
    try:
        return importlib.metadata.version("llama_cpp_python")
    except importlib.metadata.PackageNotFoundError:  # a source checkout on PYTHONPATH
        import llama_cpp
        return llama_cpp.__version__


def ggml_quantize(lib: ctypes.CDLL, name: str, x: np.ndarray, row_bytes: int) -> np.ndarray:
    fn = getattr(lib, f"quantize_row_{name}_ref")
    fn.argtypes, fn.restype = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64], None
    x = np.ascontiguousarray(x, dtype=np.float32)
    out = np.zeros((x.shape[0], row_bytes), dtype=np.uint8)  # zeroed: q8_K leaves an all-zero block's bsums unwritten
    for r in range(x.shape[0]):
        fn(x[r].ctypes.data, out[r].ctypes.data, x.shape[1])
    return out


def ggml_dequantize(lib: ctypes.CDLL, name: str, q: np.ndarray, cols: int) -> np.ndarray:
    fn = getattr(lib, f"dequantize_row_{name}")
    fn.argtypes, fn.restype = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64], None
    q = np.ascontiguousarray(q)
    out = np.zeros((q.shape[0], cols), dtype=np.float32)
    for r in range(q.shape[0]):
        fn(q[r].ctypes.data, out[r].ctypes.data, cols)
    return out


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
    # Rows 8-15: one 256-element super-block each, for the K-quants, IQ4_NL,
    # the ternary formats and Q8_K (rows 0-7 were made first, so their values
    # do not depend on these).
    # Row 8: a different scale per 16 elements, 1e-3..10: some sub-block
    # scales round to 0 in 4 or 6 bits.
    x[8] = rng.standard_normal(COLS) * np.repeat(10.0 ** rng.uniform(-3.0, 1.0, COLS // 16), 16)
    # Row 9: all positive (min = 0 for the K-quants), one zero sub-block.
    r = rng.uniform(1.0, 2.0, COLS)
    r[64:96] = 0.0
    x[9] = r
    # Row 10: all negative.
    x[10] = -np.abs(rng.standard_normal(COLS)) - 0.5
    # Row 11: mostly zeros; a few nonzero sub-blocks, one 10^4 times smaller.
    r = np.zeros(COLS)
    r[48:64] = rng.standard_normal(16) * 0.1
    r[96:128] = rng.standard_normal(32)
    r[200:232] = rng.standard_normal(32) * 1e-4
    r[255] = 3.0
    x[11] = r
    # Row 12: ternary values, with exact lroundf ties (x / amax = +-0.5).
    r = rng.integers(-1, 2, COLS).astype(np.float64) * 0.7
    r[0] = 1.4
    r[1:33:2] = 0.7
    r[2:34:2] = -0.7
    x[12] = r
    # Row 13: Q8_K ties: max = -127 gives iscale = 1, then k + 0.5 rounds to
    # even; +127 after -127 (the first of equal |x| sets the sign).
    r = rng.integers(-126, 126, COLS).astype(np.float64) + 0.5
    r[5] = -127.0
    r[77] = 127.0
    x[13] = r
    # Row 14: IQ4_NL ties: blocks whose max is -127 (d0 = 1) or 127 (d0 = -1),
    # the rest at the midpoints between levels (and the levels themselves).
    kv = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], dtype=np.float64)
    mids = np.concatenate([(kv[:-1] + kv[1:]) / 2, kv[1:]])  # 15 + 15 values
    r = np.zeros(COLS)
    for b in range(COLS // 32):
        sign = 1.0 if b % 2 == 0 else -1.0
        blk = rng.permutation(np.concatenate([mids, [0.5, -0.5]]))[:31]
        r[32 * b] = -127.0 * sign
        r[32 * b + 1:32 * b + 32] = blk * sign
    x[14] = r
    # Row 15: half tiny (1e-7) and half unit scale: tiny sub-block scales
    # underflow in the 6-bit scales and in f16.
    r = rng.standard_normal(COLS)
    r[:128] *= 1e-7
    x[15] = r
    return x.astype(np.float32)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "fixtures", "quants"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    x = make_input()
    x.astype("<f4").tofile(os.path.join(args.out, "input.f32"))
    lib = ggml_lib()
    lines = [f"# gguf-py {importlib.metadata.version('gguf')} numpy {np.__version__} "
             f"ggml from llama_cpp_python {ggml_version()} seed {SEED}"]
    for name, qtype, source in FORMATS:
        row_bytes = COLS // quants.GGML_QUANT_SIZES[qtype][0] * quants.GGML_QUANT_SIZES[qtype][1]
        if source == "gguf-py":
            q = quants.quantize(x, qtype)
            qb = np.ascontiguousarray(q).view(np.uint8).reshape(ROWS, -1)
            if qtype in (T.TQ1_0, T.TQ2_0):
                assert np.array_equal(qb, ggml_quantize(lib, name, x, row_bytes)), name
        else:
            qb = ggml_quantize(lib, name, x, row_bytes)
        assert qb.shape[1] == row_bytes, name
        if qtype == T.Q8_K:
            deq = ggml_dequantize(lib, name, qb, COLS)
        else:
            deq = quants.dequantize(qb, qtype).astype(np.float32).reshape(ROWS, COLS)
            if source == "ggml" or qtype in (T.TQ1_0, T.TQ2_0):
                # gguf-py's and ggml's dequantization agree bit for bit.
                assert np.array_equal(deq.view(np.uint32), ggml_dequantize(lib, name, qb, COLS).view(np.uint32)), name
        qb.tofile(os.path.join(args.out, f"{name}.quant"))
        deq.astype("<f4").tofile(os.path.join(args.out, f"{name}.dequant.f32"))
        lines.append(f"{name} {int(qtype)} {ROWS} {COLS} {qb.shape[1]} {source}")
    with open(os.path.join(args.out, "manifest.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
