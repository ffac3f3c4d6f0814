#!/usr/bin/env python3
"""Sentence-embedding throughput: kvad serve's /v1/embeddings vs
sentence-transformers, on the same machine in one run.

Both embed the fixture's sentences (tests/fixtures/embeddings/minilm: 286
varied sentences, 29 of them truncated at 256 tokens) in batches of --batch
(default 32) with all-MiniLM-L6-v2 from kvad's store, --runs times each
(alternating kvad and sentence-transformers), and print the median
sentences/s and tokens/s per side, the machine's load average before and
after, and the threads used. kvad is timed from the client (HTTP and JSON
included, base64 answers), sentence-transformers as model.encode() in this
process (tokenization included); both check their first run's vectors
against each other (min cosine printed). The CPU seconds each side used per
run (kvad serve's process, from /proc; this process for
sentence-transformers) are printed too: on a shared machine the wall time
depends on the other load, the CPU time much less.

Run with the tools venv that has torch and sentence-transformers:
  ~/.cache/kvad/torch-venv/bin/python bench/embed_bench.py --kvad build/kvad
"""
import argparse
import base64
import json
import os
import re
import statistics
import struct
import subprocess
import time
import urllib.request
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "embeddings" / "minilm"
MODEL = "sentence-transformers/all-MiniLM-L6-v2"


def load_sentences():
    out = []
    for line in (FIXTURE / "sentences.jsonl").read_text(encoding="utf-8").splitlines():
        j = json.loads(line)
        out.append((j["text"] or " ", len(j["ids"])))  # OpenAI's API refuses "", embed " " instead
    return out


def start_kvad(binary, threads):
    p = subprocess.Popen([binary, "serve", "-m", MODEL, "--port", "0", "-t", str(threads), "-q"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline:
        line = p.stderr.readline()
        if not line:
            break
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if m:
            return p, "http://127.0.0.1:%s" % m.group(1)
    p.kill()
    raise SystemExit("kvad serve did not start")


def kvad_embed(url, texts):
    body = json.dumps({"model": MODEL, "input": texts, "encoding_format": "base64"}).encode()
    req = urllib.request.Request(url + "/v1/embeddings", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        data = json.loads(r.read())["data"]
    return np.array([struct.unpack("<%df" % (len(base64.b64decode(d["embedding"])) // 4),
                                   base64.b64decode(d["embedding"])) for d in data], dtype=np.float32)


def cpu_seconds(pid=None):
    """User + system CPU seconds of a process (this one when pid is None)."""
    if pid is None:
        return time.process_time()
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def timed(fn, sentences, batch, pid=None):
    """Wall seconds, CPU seconds (of `pid`, else this process) and the vectors."""
    vecs = []
    t0, c0 = time.perf_counter(), cpu_seconds(pid)
    for i in range(0, len(sentences), batch):
        vecs.append(fn([s for s, _ in sentences[i:i + batch]]))
    return time.perf_counter() - t0, cpu_seconds(pid) - c0, np.concatenate(vecs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvad", default=str(ROOT / "build" / "kvad"))
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    a = ap.parse_args()

    import torch
    import sentence_transformers
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(a.threads)
    home = os.environ.get("KVAD_HOME") or str(Path.home() / ".cache" / "kvad")
    st = SentenceTransformer(f"{home}/models/{MODEL}", device="cpu")
    sentences = load_sentences()
    n_tok = sum(n for _, n in sentences)
    load0 = os.getloadavg()
    proc, url = start_kvad(a.kvad, a.threads)
    try:
        kvad_embed(url, ["warm up"])
        st.encode(["warm up"])
        k_times, s_times, k_cpu, s_cpu = [], [], [], []
        for r in range(a.runs):
            tk, ck, vk = timed(lambda b: kvad_embed(url, b), sentences, a.batch, proc.pid)
            with torch.inference_mode():
                ts, cs, vs = timed(lambda b: st.encode(b, batch_size=a.batch, convert_to_numpy=True), sentences,
                                   a.batch)
            k_times.append(tk)
            s_times.append(ts)
            k_cpu.append(ck)
            s_cpu.append(cs)
            if r == 0:
                cos = (vk * vs).sum(1) / np.linalg.norm(vk, axis=1) / np.linalg.norm(vs, axis=1)
                min_cos = float(cos.min())
    finally:
        proc.terminate()
        proc.wait()
    load1 = os.getloadavg()
    n = len(sentences)
    print(f"{n} sentences ({n_tok} tokens), batch {a.batch}, {a.runs} runs each, {a.threads} threads, "
          f"{os.cpu_count()} cores")
    print(f"load average before: {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}; "
          f"after: {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}")
    for name, ts, cs in (("kvad serve /v1/embeddings", k_times, k_cpu),
                         (f"sentence-transformers {sentence_transformers.__version__} (torch {torch.__version__})",
                          s_times, s_cpu)):
        med = statistics.median(ts)
        print(f"{name}: median {n / med:.1f} sentences/s, {n_tok / med:.0f} tokens/s "
              f"(runs: {', '.join('%.2f s' % t for t in ts)}); median CPU {statistics.median(cs):.2f} s per run")
    print(f"kvad / sentence-transformers: {statistics.median(s_times) / statistics.median(k_times):.2f}x; "
          f"min cosine between them: {min_cos:.7f}")


if __name__ == "__main__":
    main()
