#!/usr/bin/env python3
"""Throughput of `kvad serve` under concurrent streams (not a test).

Starts `kvad serve` (or uses --url), then for each concurrency level C in
--concurrency (default 1,4,8) sends C streamed /v1/completions requests at
once, --rounds times, and prints one table row per level:

  streams      C
  gen tok      completion tokens generated in all rounds
  agg tok/s    completion tokens / wall seconds from the first request sent
               to the last stream finished (what the server delivers)
  stream tok/s mean over requests of (tokens - 1) / (last token - first token)
  TTFT mean/max seconds from sending a request to its first content chunk

  accepted     speculation (--serve-args "--spec-ngram 3"): accepted / proposed
               tokens over the level, from /metrics (kvad_spec_*); "-" without

Every request greedily continues a different prompt, so no two share a
prefix: --prompt count ("k, k+1, ...,"; each generates exactly --max-tokens
tokens) or --prompt code (a small function to rewrite with snake_case names,
whose reply repeats most of the prompt: where n-gram lookup hits).
Only the Python standard library is used.

  bench/serve_bench.py --binary build/kvad --model smollm2-135m
  bench/serve_bench.py --url http://127.0.0.1:8080 --model smollm2-135m
  bench/serve_bench.py --prompt code --serve-args "--spec-ngram 3" --concurrency 1,4
"""
import argparse
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request


def start_server(args):
    cmd = [args.binary, "serve", "--model", args.model, "--port", "0", "--parallel", str(max(args.concurrency)),
           "--ctx-size", str(args.ctx_size), "--threads", str(args.threads), "--quiet"] + args.serve_args.split()
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        sys.stderr.write(line)
        m = re.search(r"listening on (http://\S+:\d+)", line)
        if m:
            threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
            return proc, m.group(1)
    proc.wait()
    sys.exit("serve_bench: kvad serve did not start")


def model_id(url):
    with urllib.request.urlopen(url + "/v1/models") as r:
        return json.load(r)["data"][0]["id"]


def one_stream(url, model, prompt, max_tokens, out):
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                       "stream": True, "stream_options": {"include_usage": True}})
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError("HTTP %d: %s" % (resp.status, resp.read()[:200]))
    first = last = None
    tokens = 0
    for raw in resp:
        line = raw.decode().strip()
        if not line.startswith("data: "):
            continue
        data = line[6:]
        if data == "[DONE]":
            break
        chunk = json.loads(data)
        if chunk.get("usage"):
            tokens = chunk["usage"]["completion_tokens"]
        if chunk["choices"] and chunk["choices"][0].get("text"):
            now = time.perf_counter()
            first = first or now
            last = now
    conn.close()
    out.append({"t0": t0, "first": first, "last": last, "tokens": tokens})


def spec_counters(url):
    """(proposed, accepted) tokens so far from /metrics, or None without speculation."""
    with urllib.request.urlopen(url + "/metrics") as r:
        text = r.read().decode()
    vals = dict(line.rsplit(" ", 1) for line in text.splitlines() if line.startswith("kvad_spec_"))
    if "kvad_spec_draft_tokens_total" not in vals:
        return None
    return float(vals["kvad_spec_draft_tokens_total"]), float(vals["kvad_spec_accepted_tokens_total"])


def code_prompt(k):
    names = ["total", "price", "count", "weight", "score", "amount"]
    a, b = names[k % len(names)], names[(k // len(names)) % len(names)]
    return ("Rename the variables to snake_case.\n\n```python\n"
            "def compute%s%d(itemList, %sRate):\n"
            "    %sValue = 0\n"
            "    for itemValue in itemList:\n"
            "        %sValue += itemValue * (1 + %sRate)\n"
            "        print(itemValue, %sValue)\n"
            "    return %sValue\n```\n\n```python\n"
            "def compute_%s_%d(item_list, %s_rate):\n") % (
                a.title(), k, b, a, a, b, a, a, a, k, b)


def run_level(url, model, c, rounds, max_tokens, seq, kind="count"):
    results = []
    before = spec_counters(url)
    t_start = time.perf_counter()
    for _ in range(rounds):
        threads = []
        for _ in range(c):
            k = next(seq)
            if kind == "code":
                prompt = code_prompt(k)
            else:
                prompt = ", ".join(str(k + i) for i in range(8)) + ","
            threads.append(threading.Thread(target=one_stream, args=(url, model, prompt, max_tokens, results)))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    wall = time.perf_counter() - t_start
    toks = sum(r["tokens"] for r in results)
    ttft = [r["first"] - r["t0"] for r in results if r["first"]]
    per = [(r["tokens"] - 1) / (r["last"] - r["first"]) for r in results
           if r["first"] and r["last"] > r["first"] and r["tokens"] > 1]
    after = spec_counters(url)
    acc = "-"
    if before is not None and after is not None and after[0] > before[0]:
        acc = "%.0f/%.0f" % (after[1] - before[1], after[0] - before[0])
    return {"streams": c, "requests": len(results), "tokens": toks, "wall": wall, "agg": toks / wall,
            "per": statistics.mean(per) if per else 0.0, "ttft_mean": statistics.mean(ttft), "ttft_max": max(ttft),
            "acc": acc}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=os.path.join(os.path.dirname(__file__), "..", "build", "kvad"))
    ap.add_argument("--model", default="smollm2-135m", help="store name or GGUF path (and the API model id)")
    ap.add_argument("--url", help="use a running server instead of starting one")
    ap.add_argument("--concurrency", default="1,4,8", help="comma-separated stream counts")
    ap.add_argument("--rounds", type=int, default=2, help="batches of requests per level")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--ctx-size", type=int, default=512)
    ap.add_argument("--threads", type=int, default=0, help="server CPU threads (0: all cores)")
    ap.add_argument("--prompt", choices=["count", "code"], default="count", help="what each request continues")
    ap.add_argument("--serve-args", default="", help="more kvad serve flags, e.g. \"--spec-ngram 3\"")
    args = ap.parse_args()
    args.concurrency = [int(x) for x in args.concurrency.split(",")]

    proc = None
    url = args.url
    if not url:
        proc, url = start_server(args)
    try:
        model = model_id(url)
        seq = iter(range(1, 10**9, 37))
        one_stream(url, model, "1, 2, 3,", 4, [])  # warm-up
        rows = [run_level(url, model, c, args.rounds, args.max_tokens, seq, args.prompt) for c in args.concurrency]
    finally:
        if proc:
            proc.terminate()
            proc.wait()
    print("| streams | requests | gen tok | wall s | agg tok/s | stream tok/s | TTFT mean s | TTFT max s | accepted |")
    print("| ------: | -------: | ------: | -----: | --------: | -----------: | ----------: | ---------: | -------: |")
    for r in rows:
        print("| %7d | %8d | %7d | %6.1f | %9.1f | %12.1f | %11.2f | %10.2f | %8s |" % (
            r["streams"], r["requests"], r["tokens"], r["wall"], r["agg"], r["per"], r["ttft_mean"], r["ttft_max"],
            r["acc"]))
    print("model %s, %s prompts, %d tokens per request, %d round(s) per level, server %s %s" % (
        model, args.prompt, args.max_tokens, args.rounds, url, args.serve_args))


if __name__ == "__main__":
    main()
