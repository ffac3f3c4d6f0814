#!/usr/bin/env python3
"""Do kvad's quantized outputs load and run in llama.cpp?

For every tiny checkpoint in tests/fixtures/hf_tiny/ (made by make_tiny_hf.py):
  - the quantize-once cache GGUF kvad writes from the HF checkpoint
    (`kvad run --model DIR --quant q8_0`, in a scratch KVAD_HOME), and
  - `kvad quantize --type q8_0` of llama.cpp's own f32 conversion
    (llama.cpp-f32.gguf, made by convert_tiny_gguf.py), where there is one,
are loaded with llama-cpp-python and evaluated on the fixture's prompt.
llama.cpp's logits on kvad's q8_0 file are compared, as max |diff| / max
|logit|, with llama.cpp's on its own q8_0 of the same f32 file
(llama_model_quantize, as llama-quantize): kvad's q8_0 bytes equal ggml's, so
that is ~0; and with transformers' (logits.json), which the random fixtures
amplify under q8_0 rounding. The fixtures carry no tokenizer: a byte-level
BPE of n_vocab single-byte tokens is written beside a copy of the
checkpoint for `kvad run`. A file llama.cpp refuses is reported with its
error (llama.cpp's own "error loading model" line). A markdown table of
every file ends the output. Nothing is written to the repository.

Run (llama-cpp-python from an sdist built elsewhere):
  LLAMA_CPP_LIB_PATH=<build>/bin PYTHONPATH=<sdist> python tools/check_quantized_in_llama_cpp.py \
      --kvad build/kvad [NAME ...]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
HF_TINY = ROOT / "tests" / "fixtures" / "hf_tiny"


def rel_err(got, ref):
    got, ref = np.asarray(got, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    return float(np.abs(got - ref).max() / np.abs(ref).max())


def llama_cpp_logits(path, tokens):
    import llama_cpp
    n_ctx = 64 if len(tokens) <= 64 else 128
    m = llama_cpp.Llama(str(path), logits_all=True, n_ctx=n_ctx, n_batch=n_ctx, verbose=False)
    m.eval(tokens)
    return [list(m.scores[i]) for i in range(len(tokens))]


def byte_level_tokenizer(n_vocab):
    """tokenizer.json: ByteLevel BPE whose ids 0..n-1 are single bytes (GPT-2's byte-to-unicode map)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
        list(range(ord("\xae"), ord("\xff") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    char = dict(zip(bs, (chr(c) for c in cs)))
    vocab = {char[b]: b for b in range(min(256, n_vocab))}
    bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return {"version": "1.0", "added_tokens": [], "normalizer": None, "pre_tokenizer": bl,
            "post_processor": None, "decoder": bl,
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "byte_fallback": False,
                      "ignore_merges": False, "vocab": vocab, "merges": []}}


def llama_quantize_q8_0(src, dst):
    import llama_cpp
    p = llama_cpp.llama_model_quantize_default_params()
    p.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0
    p.nthread = 2
    if llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), p) != 0:
        raise RuntimeError(f"llama_model_quantize failed on {src}")


def refusal(path):
    """llama.cpp's own reason for refusing `path` (its "error loading model"
    log line, which llama-cpp-python's exception leaves out)."""
    code = "import llama_cpp, sys; llama_cpp.Llama(sys.argv[1], n_ctx=64, verbose=True)"
    r = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True)
    for line in r.stderr.splitlines():
        if "error loading model" in line:
            return line.split("error loading model", 1)[1].lstrip(": ")
    return "(no reason logged)"


ROWS = []  # (name, file kind, result) for the summary


def check(name, label, path, ref, peer=None):
    try:
        got = llama_cpp_logits(path, ref["tokens"])
    except Exception as e:  # llama.cpp refuses the file
        why = refusal(path)
        print(f"  {label:36s} llama.cpp REFUSES: {e}: {why}")
        ROWS.append((name, label, "refused: " + why, "", ""))
        return False
    err = max(rel_err(g, r) for g, r in zip(got, ref["logits"]))
    vs, peer_err = "", ""
    if peer is not None:
        peer_err = f"{max(rel_err(g, r) for g, r in zip(got, peer)):.2e}"
        vs = f"; vs llama.cpp's own q8_0 {peer_err}"
    print(f"  {label:36s} loads; vs transformers {err:.2e}{vs}")
    ROWS.append((name, label, "loads", peer_err or "(no llama.cpp conversion)", f"{err:.2e}"))
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kvad", type=Path, default=ROOT / "build" / "kvad")
    ap.add_argument("names", nargs="*")
    a = ap.parse_args()
    names = a.names or sorted(p.name for p in HF_TINY.iterdir() if (p / "config.json").exists()
                              and (p / "model.safetensors").exists())  # qwen2moe_swa, mixtral_swa: configs beside others' weights
    home = Path(tempfile.mkdtemp(prefix="kvad-qchk-"))
    env = dict(os.environ, KVAD_HOME=str(home))
    refused = 0
    for name in names:
        d = HF_TINY / name
        ref = json.loads((d / "logits.json").read_text())
        print(name)
        f32 = d / "llama.cpp-f32.gguf"
        peer = None
        if f32.exists():
            try:
                llama_quantize_q8_0(f32, home / f"{name}-llama-q8_0.gguf")
                peer = llama_cpp_logits(home / f"{name}-llama-q8_0.gguf", ref["tokens"])
            except Exception as e:
                print(f"  (llama.cpp's own q8_0: {e})")
        ckpt = home / "ckpt" / name
        ckpt.mkdir(parents=True)
        for f in d.iterdir():
            if f.suffix in (".json", ".safetensors"):
                (ckpt / f.name).symlink_to(f)
        n_vocab = json.loads((d / "config.json").read_text()).get("vocab_size", 128)
        (ckpt / "tokenizer.json").write_text(json.dumps(byte_level_tokenizer(n_vocab)))
        before = set((home / "cache").rglob("*.gguf")) if (home / "cache").exists() else set()
        r = subprocess.run([str(a.kvad), "run", "--model", str(ckpt), "--quant", "q8_0", "-p", "a", "-n", "1",
                            "--temp", "0"], env=env, capture_output=True, text=True)
        if r.returncode != 0:
            print(f"  quantize-once: kvad failed: {r.stderr.strip().splitlines()[-1:]}")
        else:
            new = sorted(set((home / "cache").rglob("*.gguf")) - before)
            if new:
                refused += not check(name, "quantize-once q8_0 (from HF)", new[-1], ref, peer)
        if f32.exists():
            out = home / f"{name}-q8_0.gguf"
            r = subprocess.run([str(a.kvad), "quantize", "--type", "q8_0", str(f32), str(out)], capture_output=True,
                               text=True)
            if r.returncode != 0:
                print(f"  kvad quantize: failed: {r.stderr.strip().splitlines()[-1:]}")
            else:
                refused += not check(name, "kvad quantize q8_0 (llama.cpp f32)", out, ref, peer)
    print("\n| checkpoint | file | in llama.cpp | max diff vs llama.cpp's own q8_0 | vs transformers |")
    print("|---|---|---|---|---|")
    for row in ROWS:
        print("| " + " | ".join(row) + " |")
    print(f"{refused} file(s) refused by llama.cpp")
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main())
