#!/usr/bin/env python3
"""llama.cpp side of bench/compare: pp and tg timings through llama-cpp-python.

Usage (bench/compare starts it; one process per model):
    python3 bench/llama_worker.py --model PATH [--threads 2] [--n-prompt 512]
                                  [--n-gen 128] [--flash-attn auto|on|off]
    python3 bench/llama_worker.py --info     (versions, one JSON line)

It loads the model once, prints one JSON line {"ready": ...} with the model's
description, then answers commands read from stdin, one per line, with one
JSON line each on stdout:
    pp    {"test": "pp", "ns": ...}   time of one prompt-processing run
    tg    {"test": "tg", "ns": ...}   time of one token-generation run
    quit  exits
llama.cpp's own log goes to stderr.

The method is llama-bench's (tools/llama-bench/llama-bench.cpp, test_prompt
and test_gen), through llama.cpp's C API (llama_cpp's ctypes bindings):
  - one context per test, as llama-bench makes one per test: pp with
    n_ctx = n_batch = n_ubatch = n_prompt, tg with n_ctx = n_gen
    (llama.cpp rounds n_ctx up to 256); KV cache f16 (type_k = type_v = F16);
    flash attention as llama-bench's default, auto (llama.cpp enables it
    where the backend supports it: on the CPU it does), or as --flash-attn;
  - before each run the KV cache is cleared (llama_memory_clear), so every
    run starts from an empty cache;
  - pp: one llama_decode of n_prompt random tokens in one batch
    (llama_batch_get_one: logits for the last token only), then
    llama_synchronize;
  - tg: n_gen llama_decode calls of one random token each (logits for it),
    each followed by llama_synchronize;
  - random token ids uniform in [0, n_vocab), BOS first if the vocabulary
    adds one; the time is time.perf_counter_ns around the decode calls;
  - one warm-up of each test right after loading (llama-bench: a full pp run
    and a 1-token tg run), not timed.
"""
import argparse
import json
import random
import sys
import time

import llama_cpp as L


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model")
    ap.add_argument("--info", action="store_true", help="print versions as one JSON line and exit")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n-prompt", type=int, default=512)
    ap.add_argument("--n-gen", type=int, default=128)
    ap.add_argument("--flash-attn", choices=["auto", "on", "off"], default="auto")
    ap.add_argument("--seed", type=int, default=42)
    a = ap.parse_args()
    fa = {"auto": L.LLAMA_FLASH_ATTN_TYPE_AUTO, "on": L.LLAMA_FLASH_ATTN_TYPE_ENABLED,
          "off": L.LLAMA_FLASH_ATTN_TYPE_DISABLED}[a.flash_attn]

    def out(obj):
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    if a.info:
        import glob
        import os
        libs = glob.glob(os.path.join(os.path.dirname(L.__file__), "lib", "libggml.so.*.*.*"))
        out({"llama_cpp_python": L.__version__,
             "llama_version": L.llama_version().decode(),
             "ggml_lib": os.path.basename(libs[0]) if libs else "",
             "system_info": L.llama_print_system_info().decode().strip()})
        return 0
    if not a.model:
        ap.error("--model is required")

    L.llama_backend_init()
    mp = L.llama_model_default_params()
    mp.n_gpu_layers = 0
    mp.use_mmap = True
    model = L.llama_model_load_from_file(a.model.encode(), mp)
    if not model:
        out({"error": f"llama_model_load_from_file failed on {a.model}"})
        return 1
    vocab = L.llama_model_get_vocab(model)
    n_vocab = L.llama_vocab_n_tokens(vocab)
    add_bos = L.llama_vocab_get_add_bos(vocab)
    bos = L.llama_vocab_bos(vocab)

    def make_ctx(n_ctx, n_batch):
        cp = L.llama_context_default_params()
        cp.n_ctx = n_ctx
        cp.n_batch = n_batch
        cp.n_ubatch = n_batch
        cp.n_seq_max = 1
        cp.n_threads = a.threads
        cp.n_threads_batch = a.threads
        cp.type_k = L.GGML_TYPE_F16
        cp.type_v = L.GGML_TYPE_F16
        cp.flash_attn_type = fa
        cp.embeddings = False
        ctx = L.llama_init_from_model(model, cp)
        if not ctx:
            raise RuntimeError(f"llama_init_from_model failed (n_ctx {n_ctx})")
        return ctx

    try:
        ctx_pp = make_ctx(max(a.n_prompt, 1), max(a.n_prompt, 1)) if a.n_prompt > 0 else None
        ctx_tg = make_ctx(max(a.n_gen, 1), max(a.n_prompt, 1)) if a.n_gen > 0 else None
    except RuntimeError as e:
        out({"error": str(e)})
        return 1

    rng = random.Random(a.seed)
    toks = (L.llama_token * max(a.n_prompt, 1))()
    one = (L.llama_token * 1)()

    def run_pp():
        L.llama_memory_clear(L.llama_get_memory(ctx_pp), False)
        for i in range(a.n_prompt):
            toks[i] = rng.randrange(n_vocab)
        if add_bos:
            toks[0] = bos
        batch = L.llama_batch_get_one(toks, a.n_prompt)
        t0 = time.perf_counter_ns()
        rc = L.llama_decode(ctx_pp, batch)
        L.llama_synchronize(ctx_pp)
        t = time.perf_counter_ns() - t0
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc} (pp)")
        return t

    def run_tg(n):
        L.llama_memory_clear(L.llama_get_memory(ctx_tg), False)
        one[0] = bos if add_bos else rng.randrange(n_vocab)
        t = 0
        for _ in range(n):
            batch = L.llama_batch_get_one(one, 1)
            t0 = time.perf_counter_ns()
            rc = L.llama_decode(ctx_tg, batch)
            L.llama_synchronize(ctx_tg)
            t += time.perf_counter_ns() - t0
            if rc != 0:
                raise RuntimeError(f"llama_decode returned {rc} (tg)")
            one[0] = rng.randrange(n_vocab)
        return t

    try:
        if ctx_pp:
            run_pp()  # warm-up
        if ctx_tg:
            run_tg(1)  # warm-up, as llama-bench: one token
    except RuntimeError as e:
        out({"error": str(e)})
        return 1

    desc = ctypes_str(lambda buf, n: L.llama_model_desc(model, buf, n))
    out({"ready": True, "desc": desc, "size": L.llama_model_size(model),
         "n_params": L.llama_model_n_params(model), "n_vocab": n_vocab})
    for line in sys.stdin:
        cmd = line.strip()
        try:
            if cmd == "pp":
                out({"test": "pp", "ns": run_pp()})
            elif cmd == "tg":
                out({"test": "tg", "ns": run_tg(a.n_gen)})
            elif cmd == "quit":
                break
            else:
                out({"error": f"unknown command {cmd!r}"})
        except RuntimeError as e:
            out({"error": str(e)})
    if ctx_pp:
        L.llama_free(ctx_pp)
    if ctx_tg:
        L.llama_free(ctx_tg)
    L.llama_model_free(model)
    return 0


def ctypes_str(fill):
    import ctypes
    buf = ctypes.create_string_buffer(256)
    fill(buf, 256)
    return buf.value.decode("utf-8", "replace")


if __name__ == "__main__":
    sys.exit(main())
