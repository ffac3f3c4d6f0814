#!/usr/bin/env python3
"""Soak of `kvad serve` (a benchmark, not a test).

Starts `kvad serve` on loopback (or uses --url) and runs --clients client
threads for --seconds (default 8 clients, 600 s), each looping over a mix of
requests, bounded in time and count:

  stream      a streamed /v1/chat/completions read to [DONE]
  plain       a non-streamed /v1/completions
  disconnect  a streamed request whose client closes the socket after a
              random number of chunks (0-8)
  malformed   a body that is not JSON, JSON of the wrong shape, or a wrong
              Content-Type
  oversized   a prompt far longer than the context (expects 400)
  keys        a chat body with an ignored object of 10^5 keys (1 MB)

and with --embeddings (kvad serve --embeddings: the model also serves
/v1/embeddings) a share of the loop goes to

  embed       a one-sentence /v1/embeddings request (its latency is the
              small-request latency under the large ones)
  embed_large 16-256 inputs of 64 token ids (up to 8 forward calls of 2048
              tokens), half of them closed by the client after 0-2 s (the
              server stops between forward calls)

and prints: requests by kind and outcome (HTTP status or transport error),
p50/p99 latency of the successful stream and plain requests, /health's
worst latency sampled every second, and the server's RSS (VmRSS from
/proc/PID/status) at the start, the peak and the end, against the KV cache
size the server reports in /metrics. Only loopback addresses are used; the
Python standard library only.

  bench/soak.py --binary build/kvad --model smollm2-135m --seconds 600
  bench/soak.py --binary build/kvad --model smollm2-135m --seconds 600 --embeddings
"""
import argparse
import collections
import http.client
import json
import random
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse


def start_server(a):
    cmd = [a.binary, "serve", "--model", a.model, "--port", "0", "--parallel", str(a.parallel), "--queue",
           str(a.queue), "--ctx-size", str(a.ctx_size), "--threads", str(a.threads), "--quiet"]
    if a.embeddings:
        cmd.append("--embeddings")
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        m = re.search(r"listening on (http://\S+:\d+)", line)
        if m:
            threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
            return proc, m.group(1)
    proc.wait()
    sys.exit("soak: kvad serve did not start")


def rss_mb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return float("nan")
    return float("nan")


class Client:
    def __init__(self, url, model, deadline, stats, lat, lock, seed, embeddings=False):
        self.embeddings = embeddings
        u = urllib.parse.urlparse(url)
        self.host, self.port, self.model = u.hostname, u.port, model
        self.deadline, self.stats, self.lat, self.lock = deadline, stats, lat, lock
        self.rng = random.Random(seed)

    def note(self, kind, outcome, seconds=None):
        with self.lock:
            self.stats[(kind, outcome)] += 1
            if seconds is not None:
                self.lat[kind].append(seconds)

    def conn(self):
        return http.client.HTTPConnection(self.host, self.port, timeout=60)

    def post(self, path, body, ctype="application/json"):
        c = self.conn()
        c.request("POST", path, body, {"Content-Type": ctype})
        return c, c.getresponse()

    def stream(self, disconnect_after=None):
        kind = "stream" if disconnect_after is None else "disconnect"
        t0 = time.perf_counter()
        body = json.dumps({"model": self.model, "stream": True, "max_tokens": self.rng.randint(8, 48),
                           "messages": [{"role": "user", "content": "Count to %d." % self.rng.randint(3, 30)}]})
        c, r = self.post("/v1/chat/completions", body)
        if r.status != 200:
            r.read()
            c.close()
            return self.note(kind, r.status)
        n = 0
        for raw in r:
            if raw.startswith(b"data: "):
                n += 1
                if disconnect_after is not None and n > disconnect_after:
                    c.sock.shutdown(socket.SHUT_RDWR)
                    c.close()
                    return self.note(kind, "closed")
                if raw.strip() == b"data: [DONE]":
                    break
        c.close()
        self.note(kind, 200, time.perf_counter() - t0)

    def plain(self):
        t0 = time.perf_counter()
        body = json.dumps({"model": self.model, "prompt": "1, 2, 3,", "max_tokens": self.rng.randint(4, 24),
                           "temperature": 0})
        c, r = self.post("/v1/completions", body)
        r.read()
        c.close()
        self.note("plain", r.status, time.perf_counter() - t0 if r.status == 200 else None)

    def malformed(self):
        choice = self.rng.randrange(3)
        if choice == 0:
            c, r = self.post("/v1/chat/completions", b"{not json")
        elif choice == 1:
            c, r = self.post("/v1/chat/completions", json.dumps({"model": self.model, "messages": 7}))
        else:
            c, r = self.post("/v1/chat/completions", b"hello", "text/plain")
        r.read()
        c.close()
        self.note("malformed", r.status)

    def oversized(self):
        body = json.dumps({"model": self.model, "messages": [{"role": "user", "content": "word " * 400000}]})
        c, r = self.post("/v1/chat/completions", body)
        r.read()
        c.close()
        self.note("oversized", r.status)

    def keys(self):
        big = "{" + ",".join('"%d":0' % i for i in range(100000)) + "}"
        body = '{"model": "%s", "max_tokens": 1, "messages": [{"role": "user", "content": "Hi"}], "x": %s}' % (
            self.model, big)
        c, r = self.post("/v1/chat/completions", body)
        r.read()
        c.close()
        self.note("keys", r.status)

    def embed(self):
        t0 = time.perf_counter()
        c, r = self.post("/v1/embeddings", json.dumps({"model": self.model, "input": "The cat sat on the mat."}))
        r.read()
        c.close()
        self.note("embed", r.status, time.perf_counter() - t0 if r.status == 200 else None)

    def embed_large(self):
        n = self.rng.randint(16, 256)
        body = json.dumps({"model": self.model, "input": [[self.rng.randrange(100, 10000) for _ in range(64)]
                                                          for _ in range(n)], "encoding_format": "base64"})
        if self.rng.random() < 0.5:
            u = socket.create_connection((self.host, self.port), timeout=60)
            u.sendall(("POST /v1/embeddings HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                       "Content-Length: %d\r\n\r\n" % (self.host, len(body))).encode() + body.encode())
            time.sleep(self.rng.uniform(0, 2))
            u.close()
            return self.note("embed_large", "closed")
        t0 = time.perf_counter()
        c, r = self.post("/v1/embeddings", body)
        r.read()
        c.close()
        self.note("embed_large", r.status, time.perf_counter() - t0 if r.status == 200 else None)

    def run(self):
        while time.time() < self.deadline:
            pick = self.rng.random()
            try:
                if self.embeddings and pick < 0.3:
                    self.embed() if pick < 0.2 else self.embed_large()
                    continue
                if self.embeddings:
                    pick = (pick - 0.3) / 0.7
                if pick < 0.33:
                    self.stream()
                elif pick < 0.55:
                    self.plain()
                elif pick < 0.80:
                    self.stream(disconnect_after=self.rng.randint(0, 8))
                elif pick < 0.92:
                    self.malformed()
                elif pick < 0.97:
                    self.oversized()
                else:
                    self.keys()
            except (OSError, http.client.HTTPException) as e:
                self.note("transport", type(e).__name__)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--binary", default="build/kvad")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--url", help="use a running server instead of starting one")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--queue", type=int, default=8)
    ap.add_argument("--ctx-size", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--embeddings", action="store_true", help="serve and mix in /v1/embeddings requests")
    a = ap.parse_args()
    if a.seconds <= 0 or a.seconds > 3600 or not 1 <= a.clients <= 64:
        sys.exit("soak: --seconds in (0, 3600], --clients in [1, 64]")
    proc, url = (None, a.url) if a.url else start_server(a)
    pid = proc.pid if proc else None
    u = urllib.parse.urlparse(url)
    if u.hostname not in ("127.0.0.1", "localhost", "::1"):
        sys.exit("soak: loopback servers only")
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    c.request("GET", "/v1/models")
    model = json.loads(c.getresponse().read())["data"][0]["id"]
    c.request("GET", "/metrics")
    metrics = c.getresponse().read().decode()
    kv = re.search(r"^kvad_kv_cache_bytes (\S+)", metrics, re.M)
    c.close()
    stats, lat, lock = collections.Counter(), collections.defaultdict(list), threading.Lock()
    rss0 = rss_mb(pid) if pid else float("nan")
    deadline = time.time() + a.seconds
    threads = [threading.Thread(target=Client(url, model, deadline, stats, lat, lock, i, a.embeddings).run)
               for i in range(a.clients)]
    for t in threads:
        t.start()
    health_worst, rss_peak, rss_warm, t_start = 0.0, rss0, float("nan"), time.time()
    while any(t.is_alive() for t in threads):
        t0 = time.perf_counter()
        try:
            h = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
            h.request("GET", "/health")
            h.getresponse().read()
            h.close()
            health_worst = max(health_worst, time.perf_counter() - t0)
        except OSError:
            health_worst = float("inf")
        if pid:
            rss_peak = max(rss_peak, rss_mb(pid))
            if rss_warm != rss_warm and time.time() - t_start > min(60, a.seconds / 4):
                rss_warm = rss_mb(pid)  # once the weights are paged in and every kind has run
        time.sleep(1)
    for t in threads:
        t.join()
    rss1 = rss_mb(pid) if pid else float("nan")
    print(f"## kvad serve soak: {a.clients} clients, {a.seconds:.0f} s, --parallel {a.parallel} --queue {a.queue}"
          f" -c {a.ctx_size}, model {a.model}{', with embeddings' if a.embeddings else ''}")
    print("\n| kind | outcome | count |\n|---|---|---:|")
    for (kind, outcome), n in sorted(stats.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
        print(f"| {kind} | {outcome} | {n} |")
    print("\n| latency (ok requests) | n | p50 s | p99 s |\n|---|---:|---:|---:|")
    for kind in ("stream", "plain", "embed", "embed_large"):
        v = sorted(lat[kind])
        if v:
            print(f"| {kind} | {len(v)} | {statistics.median(v):.3f} | {v[min(len(v) - 1, int(0.99 * len(v)))]:.3f} |")
    print(f"\n/health worst latency {health_worst:.3f} s; RSS start {rss0:.0f} MB, after "
          f"{min(60, a.seconds / 4):.0f} s {rss_warm:.0f} MB, peak {rss_peak:.0f} MB, "
          f"end {rss1:.0f} MB; KV cache {float(kv.group(1)) / 2**20 if kv else float('nan'):.0f} MiB (from /metrics)")
    if proc:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


if __name__ == "__main__":
    main()
