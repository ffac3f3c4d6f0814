#!/usr/bin/env python3
"""Make llama.cpp's quantization reference for `kvad quantize` (SmolLM2-135M).

Usage:
    python3 tools/make_quantize_reference.py [--kvad BUILD/kvad] [--types T,...]
                                             [--work DIR] [--out PATH] [--reuse]

Needs the PyPI packages gguf (gguf-py) and llama-cpp-python, and the store
model $KVAD_HOME/models/smollm2-135m.gguf (KVAD_HOME defaults to
~/.cache/kvad; scripts/setup puts it there). The tests read only the JSON it
writes (tests/fixtures/quantize/smollm2-rmse.json); they never need Python.

1. Sources. The store file is Q4_1 (token_embd Q8_0). Every tensor is
   dequantized with gguf.quants.dequantize (float32, exactly what kvad's
   cpu_kernels(t).to_float gives) and written with gguf.GGUFWriter, every
   metadata key copied, as WORK/smollm2-135m-f32.gguf (all tensors F32,
   general.file_type 0) and WORK/smollm2-135m-f16.gguf (2-D tensors F16,
   1-D F32 as convert_hf_to_gguf writes them, general.file_type 1). WORK
   defaults to $KVAD_HOME/work; nothing here is written into the repository
   except the fixture.

2. llama.cpp. For each kvad --type, llama.cpp (llama_model_quantize, the
   library behind llama-quantize) quantizes the F32 source, 2 threads, no
   imatrix. The mixtures (q3_k_m, q4_k_s, q4_k_m, q5_k_m) use llama.cpp's
   default rules; the single types use params.pure = true (llama-quantize
   --pure: every quantizable tensor gets the type, before llama.cpp's
   fallback for rows that are not a whole number of blocks), which is what
   `kvad quantize --type q4_0` means. Each output is read back with gguf-py,
   every tensor dequantized, and its RMSE against the F32 source recorded
   with the type llama.cpp chose:
       sqrt(mean((dequantized - source)^2)), in float64.

3. kvad (with --kvad BIN). For each type, BIN quantizes the F16 source (and,
   for the RMSE table, the F32 source) with `kvad quantize`; the F32 output is
   dequantized with gguf-py and compared with llama.cpp's per tensor (RMSE,
   and whether the bytes are identical); the F16 output is loaded in
   llama.cpp (llama_cpp.Llama) and asked for 8 greedy tokens after "The
   capital of France is" (so is the F32 output: greedy_8_tokens_from_f32,
   to set beside llama.cpp's own). Results go under "kvad" in each type's entry. A
   type kvad refuses for this model (a single K-quant on rows of 576) is
   recorded as refused with kvad's message; its RMSE is then measured on a
   file holding only the tensors whose rows fit (the ffn_down ones).

Fixture layout (one tensor per line):
  {"source": {...}, "types": {"q4_k_m": {"ftype": 15, "pure": false,
     "tensors": {"blk.0.attn_q.weight": ["q5_0", 1.2345e-03], ...},
     "kvad": {...}}}}
Only tensors llama.cpp quantizes (2-D weights) are listed; 1-D tensors are
copied unchanged by both programs.
"""
import argparse
import ctypes
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import gguf

from fixture_util import kvad_home, sha256_file as sha256

ROOT = Path(__file__).resolve().parent.parent
MODEL = "smollm2-135m"
PROMPT = "The capital of France is"

# kvad --type -> (llama_ftype, pure). Values from llama.h's enum llama_ftype.
TYPES = {
    "q8_0": (7, True),
    "q4_0": (2, True),
    "q4_1": (3, True),
    "q5_0": (8, True),
    "q5_1": (9, True),
    "q2_k": (10, True),
    "q3_k_m": (12, False),
    "q4_k_s": (14, False),
    "q4_k_m": (15, False),
    "q5_k_m": (17, False),
    "q6_k": (18, True),
    "iq4_nl": (25, True),
    "tq2_0": (37, True),
}






def tensor_f32(t):
    """A ReaderTensor as float32 [rows, ne0]."""
    ne0 = int(t.shape[0])
    a = gguf.quants.dequantize(t.data, t.tensor_type)
    return np.asarray(a, dtype=np.float32).reshape(-1, ne0)


def copy_metadata(r, w, file_type):
    for key, f in r.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        if key == "general.file_type":
            w.add_key_value(key, file_type, gguf.GGUFValueType.UINT32)
            continue
        vtype = f.types[0]
        if vtype == gguf.GGUFValueType.ARRAY:
            w.add_key_value(key, f.contents(), vtype, sub_type=f.types[1])
        else:
            w.add_key_value(key, f.contents(), vtype)


def make_sources(store, work):
    f32 = work / f"{MODEL}-f32.gguf"
    f16 = work / f"{MODEL}-f16.gguf"
    if f32.exists() and f16.exists():
        print(f"sources: {f32}, {f16} (kept)", flush=True)
        return f32, f16
    r = gguf.GGUFReader(str(store))
    arch = r.fields["general.architecture"].contents()
    for path, ft in ((f32, 0), (f16, 1)):
        tmp = path.with_name(path.name + ".tmp")
        w = gguf.GGUFWriter(str(tmp), arch)
        copy_metadata(r, w, ft)
        for t in r.tensors:
            a = tensor_f32(t)
            if len(t.shape) == 1:
                a = a.reshape(-1)
            elif ft == 1:
                a = a.astype(np.float16)
            w.add_tensor(t.name, a)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        os.replace(tmp, path)
        print(f"sources: wrote {path} ({path.stat().st_size / 2**20:.1f} MiB)", flush=True)
    return f32, f16


def rmse(a, b):
    d = a.astype(np.float64) - b.astype(np.float64)
    return float(np.sqrt(np.mean(d * d)))


def llama_quantize(src, dst, ftype, pure, threads):
    import llama_cpp
    p = llama_cpp.llama_model_quantize_default_params()
    p.nthread = threads
    p.ftype = ftype
    p.pure = pure
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(p))
    if rc != 0:
        sys.exit(f"llama_model_quantize failed ({rc}) for ftype {ftype}")


def per_tensor(path, source):
    """{name: (ggml type name, rmse, raw bytes)} for the 2-D tensors of a file."""
    r = gguf.GGUFReader(str(path))
    out = {}
    for t in r.tensors:
        if len(t.shape) < 2:
            continue
        out[t.name] = (t.tensor_type.name.lower().replace("_k", "_K"), rmse(tensor_f32(t), source[t.name]),
                       bytes(np.asarray(t.data).tobytes()))
    return out, r


def load_source(path):
    r = gguf.GGUFReader(str(path))
    return {t.name: tensor_f32(t) for t in r.tensors}


def greedy(path, threads):
    from llama_cpp import Llama
    llm = Llama(model_path=str(path), n_ctx=128, n_threads=threads, verbose=False, seed=0)
    out = llm.create_completion(PROMPT, max_tokens=8, temperature=0.0, top_k=1, top_p=1.0, min_p=0.0,
                                repeat_penalty=1.0)
    del llm
    return out["choices"][0]["text"]


def write_fixture(path, data):
    # One tensor per line: small diffs when it is remade.
    lines = ["{", '  "source": ' + json.dumps(data["source"], sort_keys=True) + ",", '  "types": {']
    names = list(data["types"])
    for i, name in enumerate(names):
        e = data["types"][name]
        lines.append(f'    "{name}": {{')
        head = {k: v for k, v in e.items() if k not in ("tensors", "kvad")}
        for k, v in head.items():
            lines.append(f'      "{k}": {json.dumps(v)},')
        if "kvad" in e:
            lines.append('      "kvad": ' + json.dumps(e["kvad"], sort_keys=True) + ",")
        lines.append('      "tensors": {')
        tn = list(e["tensors"])
        for j, t in enumerate(tn):
            ty, r = e["tensors"][t]
            lines.append(f'        "{t}": ["{ty}", {r:.6e}]' + ("," if j + 1 < len(tn) else ""))
        lines.append("      }")
        lines.append("    }" + ("," if i + 1 < len(names) else ""))
    lines.append("  }")
    lines.append("}")
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    os.replace(tmp, path)


def run_kvad(kvad, src, dst, typ, threads):
    t0 = time.time()
    p = subprocess.run([str(kvad), "quantize", str(src), str(dst), "--type", typ, "--threads", str(threads)],
                       capture_output=True, text=True)
    return p.returncode, p.stderr, time.time() - t0


def subset_file(src_path, dst, keep):
    """A copy of src_path with only the 2-D tensors in `keep` (and every 1-D one)."""
    r = gguf.GGUFReader(str(src_path))
    w = gguf.GGUFWriter(str(dst), r.fields["general.architecture"].contents())
    copy_metadata(r, w, int(r.fields["general.file_type"].contents()))
    for t in r.tensors:
        if len(t.shape) >= 2 and t.name not in keep:
            continue
        a = tensor_f32(t)
        w.add_tensor(t.name, a.reshape(-1) if len(t.shape) == 1 else a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kvad", type=Path, default=None, help="kvad binary: also check kvad's outputs")
    ap.add_argument("--types", default=",".join(TYPES), help="comma-separated kvad --type names (default: all)")
    ap.add_argument("--work", type=Path, default=None, help="scratch folder (default: $KVAD_HOME/work)")
    ap.add_argument("--out", type=Path, default=ROOT / "tests" / "fixtures" / "quantize" / "smollm2-rmse.json")
    ap.add_argument("--reuse", action="store_true", help="keep llama.cpp's results from the existing fixture")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()

    store = kvad_home() / "models" / f"{MODEL}.gguf"
    if not store.exists():
        sys.exit(f"make_quantize_reference: {store} not found (run scripts/setup)")
    work = a.work or kvad_home() / "work"
    work.mkdir(parents=True, exist_ok=True)
    f32, f16 = make_sources(store, work)
    source = load_source(f32)

    import llama_cpp
    data = {"source": {}, "types": {}}
    if a.reuse and a.out.exists():
        data = json.loads(a.out.read_text())
        data["types"] = {k: {kk: (vv if kk != "tensors" else {t: tuple(x) for t, x in vv.items()})
                             for kk, vv in v.items()} for k, v in data["types"].items()}
    data["source"] = {
        "model": MODEL,
        "store_sha256": sha256(store),
        "source": "store Q4_1 file dequantized to F32 with gguf-py (tools/make_quantize_reference.py)",
        "llama_cpp_python": llama_cpp.__version__,
        "gguf_py": getattr(gguf, "__version__", None) or "0.19.0",
        "rmse": "sqrt(mean((dequantized - source)^2)) per tensor, float64",
        "prompt": PROMPT,
    }
    types = [t for t in a.types.split(",") if t]
    for typ in types:
        ftype, pure = TYPES[typ]
        if not (a.reuse and typ in data["types"]):
            dst = work / f"llama-{typ}.gguf"
            t0 = time.time()
            llama_quantize(f32, dst, ftype, pure, a.threads)
            res, r = per_tensor(dst, source)
            got_ft = int(r.fields["general.file_type"].contents())
            text = greedy(dst, a.threads)
            data["types"][typ] = {"ftype": ftype, "pure": pure, "file_type_written": got_ft,
                                  "llama_cpp_greedy_8_tokens": text,
                                  "tensors": {n: (v[0], v[1]) for n, v in res.items()}}
            counts = {}
            for v in res.values():
                counts[v[0]] = counts.get(v[0], 0) + 1
            print(f"llama.cpp {typ:7s} ftype {ftype:2d} pure {pure!s:5s} {time.time() - t0:5.1f} s  {counts}  "
                  f"greedy: {text!r}", flush=True)
            llama_bytes = {n: v[2] for n, v in res.items()}
            dst.unlink()
        else:
            llama_bytes = None

        if a.kvad is None:
            continue
        entry = data["types"][typ]
        kv = {}
        # F16 source: the file a user would quantize; load it in llama.cpp.
        out16 = work / f"kvad-{typ}-from-f16.gguf"
        rc, err, secs = run_kvad(a.kvad, f16, out16, typ, a.threads)
        kv["exit_status_from_f16"] = rc
        kv["seconds_from_f16"] = round(secs, 2)
        if rc != 0:
            kv["refused"] = err.strip().splitlines()[-1] if err.strip() else ""
            kv["loads_in_llama_cpp"] = None
        else:
            try:
                kv["greedy_8_tokens"] = greedy(out16, a.threads)
                kv["loads_in_llama_cpp"] = True
            except Exception as e:  # noqa: BLE001 - any failure to load is the result
                kv["loads_in_llama_cpp"] = False
                kv["load_error"] = str(e)
            out16.unlink()
        # F32 source: the RMSE comparison with llama.cpp's per tensor.
        src32 = f32
        if rc != 0:
            keep = {n for n, v in source.items() if v.ndim == 2 and v.shape[1] % 256 == 0}
            src32 = work / f"subset-{typ}.gguf"
            subset_file(f32, src32, keep)
        out32 = work / f"kvad-{typ}.gguf"
        rc32, err32, _ = run_kvad(a.kvad, src32, out32, typ, a.threads)
        if rc32 != 0:
            kv["error_from_f32"] = err32.strip()
            entry["kvad"] = kv
            print(f"kvad      {typ:7s} FAILED on F32: {err32.strip()}", flush=True)
            continue
        res, r = per_tensor(out32, source)
        if rc == 0:
            # The same source as llama.cpp's file: the same text is expected.
            kv["greedy_8_tokens_from_f32"] = greedy(out32, a.threads)
        out32.unlink()
        if src32 != f32:
            src32.unlink()
        diffs, same_type, identical = [], 0, 0
        worst = ("", 0.0)
        for n, (ty, rm, raw) in res.items():
            ref = entry["tensors"].get(n)
            if ref is None or ref[0] != ty:
                continue
            same_type += 1
            d = (rm - ref[1]) / ref[1] if ref[1] > 0 else 0.0
            diffs.append(d)
            if abs(d) >= abs(worst[1]):
                worst = (n, d)
            if llama_bytes is not None and llama_bytes.get(n) == raw:
                identical += 1
        kv["tensors_compared"] = same_type
        kv["tensors_type_differs"] = len(res) - same_type
        kv["mean_rel_rmse_diff"] = float(np.mean(diffs)) if diffs else None
        kv["worst_tensor"] = worst[0]
        kv["worst_rel_rmse_diff"] = worst[1]
        if llama_bytes is not None:
            kv["byte_identical_tensors"] = identical
        entry["kvad"] = kv
        print(f"kvad      {typ:7s} {secs:5.1f} s from F16 (rc {rc})  compared {same_type} tensors, mean rel diff "
              f"{kv['mean_rel_rmse_diff']}, worst {worst[0]} {worst[1]:+.2e}, identical bytes "
              f"{kv.get('byte_identical_tensors')}  greedy: {kv.get('greedy_8_tokens')!r} {kv.get('refused', '')}",
              flush=True)

    a.out.parent.mkdir(parents=True, exist_ok=True)
    write_fixture(a.out, data)
    print(f"wrote {a.out}", flush=True)


if __name__ == "__main__":
    main()
