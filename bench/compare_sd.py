#!/usr/bin/env python3
"""kvad's Stable Diffusion 1.5 UNet step against stable-diffusion.cpp's, side by side in one run.

    python3 bench/compare_sd.py --sd-cli ~/src/sdcpp/build/bin/sd-cli \\
        --model ~/.cache/kvad/bench-models/sd15-rand-f16 [--size 512] [--threads 2] [--rounds 2]

sd-cli as measured here (stable-diffusion.cpp 97d2990, Aug 2026, its ggml submodule at
8e800cef from ggml-org/ggml): `cmake -B build -DCMAKE_BUILD_TYPE=Release -DSD_WEBP=OFF
-DSD_WEBM=OFF -DGGML_NATIVE=ON && cmake --build build --target sd-cli -j2` (-march=native:
AVX-512 on this machine; ggml's OpenMP threads). A snapshot without the large tokenizer
vocabularies SD 1.5 does not use needs those src/tokenizers/vocab/*.hpp as one-byte arrays,
and examples/CMakeLists.txt without the server (its web UI is a submodule).

Builds nothing: it runs kvad's build/bench/bench_unet (the SD 1.5 UNet at the base config's
shapes, random f16 weights) and sd-cli (its CPU build, on the random f16 SD 1.5 folder that
tools/make_sd15_bench_checkpoint.py writes; sd-cli opens a diffusers folder itself), one after
the other, `--rounds` times, so both see the same machine load. Like with like:

- one kvad UNet call is batch 2 (cond + uncond of classifier-free guidance, as diffusers'
  StableDiffusionPipeline batches them); sd.cpp runs the cond and the uncond UNet as two
  batch-1 calls in each sampling step (cfg-scale > 1), so one sd.cpp step is the same work as
  one kvad call. sd.cpp's step time is its "sampling completed" time over its steps (its own
  schedule and sampler; the UNet dominates a step, the sampler's arithmetic is per-pixel).
- the machine may be shared: CPU seconds a step (kvad: the step's process CPU time; sd.cpp:
  the CPU time of a run with 1 + --sd-steps steps minus that of a 1-step run, over
  --sd-steps) count the work whatever share of the cores the processes got; threads that
  spin while they wait count as working in both.
- same latent (size / 8 square), same 77 text tokens of 768, same thread count, f16 weights
  (sd-cli --type f16 keeps the file's f16 matrices; it keeps a few small tensors as f32).
- sd-cli's first step also builds its compute graph and allocates its buffers: the CPU
  difference leaves that out.

Prints, per run: seconds per step (wall and CPU), the VAE decode time sd-cli reports, the process's peak
RSS (wait4's ru_maxrss), and the 1-minute load average before and after; then the medians and
the ratio sd.cpp / kvad (above 1: kvad faster). No timing is asserted.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(cmd):
    """(stdout+stderr text, peak RSS in MiB, wall seconds, CPU seconds) of cmd."""
    t0 = time.monotonic()
    with tempfile.TemporaryFile() as log:
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        log.seek(0)
        text = log.read().decode("utf-8", "replace")
    if p.returncode != 0:
        sys.exit(f"compare_sd: {cmd[0]} exited {p.returncode}:\n{text[-2000:]}")
    return text, ru.ru_maxrss / 1024.0, time.monotonic() - t0, ru.ru_utime + ru.ru_stime


def kvad_step(bench, threads, steps, side):
    text, rss, wall, _ = run([str(bench), str(threads), str(steps), str(side)])
    found = re.findall(r"^step \d+: ([0-9.]+) s.*?([0-9.]+) CPU s", text, re.M)
    if len(found) != steps:
        sys.exit(f"compare_sd: no step times in bench_unet's output:\n{text[-2000:]}")
    return {"step": statistics.median(float(w) for w, _ in found), "cpu": statistics.median(float(c) for _, c in found),
            "rss": rss, "wall": wall, "decode": None}


def sd_run(cli, model, threads, steps, size, out_png):
    cmd = [str(cli), "-m", str(model), "-p", "a photograph of an astronaut riding a horse", "-n", "",
           "-W", str(size), "-H", str(size), "--steps", str(steps), "--cfg-scale", "7", "-t", str(threads),
           "--rng", "cpu", "--sampling-method", "euler", "--type", "f16", "-s", "42", "-o", str(out_png)]
    text, rss, wall, cpu = run(cmd)
    m = re.search(r"sampling completed, taking ([0-9.]+)s", text)
    d = re.search(r"decode_first_stage completed, taking ([0-9.]+)s", text)
    if not m:
        sys.exit(f"compare_sd: no 'sampling completed' in sd-cli's output:\n{text[-3000:]}")
    return float(m.group(1)), cpu, rss, wall, float(d.group(1)) if d else None


def sd_step(cli, model, threads, steps, size, out_png):
    """sd-cli with 1 and with 1 + steps sampling steps: the wall time a step is the longer run's
    sampling time over its steps; the CPU time a step is the runs' CPU difference over `steps`
    (loading, text encoding and decoding cancel out)."""
    _, cpu1, rss1, wall1, _ = sd_run(cli, model, threads, 1, size, out_png)
    samp, cpu2, rss2, wall2, dec = sd_run(cli, model, threads, 1 + steps, size, out_png)
    return {"step": samp / (1 + steps), "cpu": (cpu2 - cpu1) / steps, "rss": max(rss1, rss2), "wall": wall1 + wall2,
            "decode": dec}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sd-cli", required=True, help="stable-diffusion.cpp's sd-cli binary")
    ap.add_argument("--model", default=str(Path.home() / ".cache/kvad/bench-models/sd15-rand-f16"),
                    help="the SD 1.5 diffusers folder sd-cli reads (tools/make_sd15_bench_checkpoint.py)")
    ap.add_argument("--bench-unet", default=str(ROOT / "build/bench/bench_unet"), help="kvad's bench_unet")
    ap.add_argument("--size", type=int, default=512, help="picture side in pixels (latent: size / 8)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2, help="kvad, sd.cpp, kvad, sd.cpp, ...")
    ap.add_argument("--kvad-steps", type=int, default=1, help="UNet calls per bench_unet run")
    ap.add_argument("--sd-steps", type=int, default=2,
                    help="sd-cli runs with 1 and with 1 + this many sampling steps")
    a = ap.parse_args()
    if a.size % 64 != 0 or a.size < 64:
        sys.exit("compare_sd: --size must be a multiple of 64")
    for f in (a.sd_cli, a.bench_unet):
        if not os.access(f, os.X_OK):
            sys.exit(f"compare_sd: {f} is not an executable (build it first)")
    if not (Path(a.model) / "unet").is_dir():
        sys.exit(f"compare_sd: {a.model} has no unet/ (run tools/make_sd15_bench_checkpoint.py)")
    rows = {"kvad": [], "sd.cpp": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            for name in ("kvad", "sd.cpp"):
                la0 = os.getloadavg()[0]
                if name == "kvad":
                    res = kvad_step(a.bench_unet, a.threads, a.kvad_steps, a.size // 8)
                else:
                    res = sd_step(a.sd_cli, a.model, a.threads, a.sd_steps, a.size, Path(tmp) / "out.png")
                res["load"] = (la0, os.getloadavg()[0])
                rows[name].append(res)
                dec = f", VAE decode {res['decode']:.2f} s" if res["decode"] is not None else ""
                print(f"round {r} {name:7s}: {res['step']:.2f} s/step, {res['cpu']:.2f} CPU s/step{dec}, peak RSS {res['rss']:.0f} MiB, "
                      f"wall {res['wall']:.0f} s, load {res['load'][0]:.1f} -> {res['load'][1]:.1f}", flush=True)
    k = statistics.median(x["step"] for x in rows["kvad"])
    s = statistics.median(x["step"] for x in rows["sd.cpp"])
    loads = [v for n in rows.values() for x in n for v in x["load"]]
    print(f"\nSD 1.5 UNet step at {a.size}x{a.size} (latent {a.size // 8}^2, CFG: 2 images), f16 weights, "
          f"{a.threads} threads, {a.rounds} rounds, load average {min(loads):.1f}..{max(loads):.1f}")
    kc = statistics.median(x["cpu"] for x in rows["kvad"])
    sc = statistics.median(x["cpu"] for x in rows["sd.cpp"])
    print("| engine | s/step (median) | CPU s/step (median) | peak RSS MiB | VAE decode s |")
    print("|---|---|---|---|---|")
    for name, t, c in (("kvad", k, kc), ("sd.cpp", s, sc)):
        rss = max(x["rss"] for x in rows[name])
        decs = [x["decode"] for x in rows[name] if x["decode"] is not None]
        dec = f"{statistics.median(decs):.2f}" if decs else "n/a"
        print(f"| {name} | {t:.2f} | {c:.2f} | {rss:.0f} | {dec} |")
    print(f"sd.cpp / kvad: step time {s / k:.2f}, CPU time a step {sc / kc:.2f} (above 1: kvad faster)")


if __name__ == "__main__":
    main()
