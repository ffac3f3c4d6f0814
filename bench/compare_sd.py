#!/usr/bin/env python3
"""kvad's Stable Diffusion UNet step and VAE decode against stable-diffusion.cpp's, side by side in one run.

    python3 bench/compare_sd.py --sd-cli ~/src/sdcpp/build/bin/sd-cli \\
        --model ~/.cache/kvad/bench-models/sd15-rand-f16 [--size 512] [--threads 2] [--rounds 2]
    python3 bench/compare_sd.py --sd-cli ... --kvad build/kvad --model FOLDER [--quant q8_0] [--size 768]

With --kvad both engines run the whole pipeline on the same diffusers folder (SD 1.5's or SDXL's
shapes: tools/make_sd15_bench_checkpoint.py [--shape sdxl]): `kvad images make` and sd-cli with
1 and with 1 + --sd-steps Euler steps each, CFG 7 (kvad: one UNet call of batch 2 a step; sd.cpp:
two of batch 1), the same size and thread count. A step's wall time is the longer run's
sampling time over its steps, its CPU time the two runs' CPU difference over the extra steps (for
both engines alike); the VAE decode time is each engine's own report (kvad: "decode X s"; sd.cpp:
decode_first_stage); peak RSS is the process's (wait4), and kvad's as it stood after its first
UNet step. --quant q8_0: kvad's --quant q8_0 (its quantize-once cache, written by a warm-up run
before any timing) against sd-cli --type q8_0 (which keeps its convolutions in f16: ggml's conv
weights are F16, and it does not convert 4-D kernels whose rows are 3 wide).

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


def proc_cpu(pid):
    """CPU seconds so far of process pid, all its threads (/proc/PID/stat utime + stime)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


def run_marked(cmd, markers):
    """As run(), reading the output as it comes: {marker: the process's CPU seconds when a line
    matching the regex first appeared} as a fifth value."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    seen, lines = {}, []
    for raw in p.stdout:
        line = raw.decode("utf-8", "replace")
        lines.append(line)
        for m in markers:
            if m not in seen and re.search(m, line):
                seen[m] = proc_cpu(p.pid)
    _, status, ru = os.wait4(p.pid, 0)
    text = "".join(lines)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"compare_sd: {cmd[0]} exited {os.waitstatus_to_exitcode(status)}:\n{text[-2000:]}")
    return text, ru.ru_maxrss / 1024.0, time.monotonic() - t0, ru.ru_utime + ru.ru_stime, seen


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


PROMPT = "a photograph of an astronaut riding a horse"


def kvad_run(kvad, model, threads, steps, size, quant, out_png):
    cmd = [str(kvad), "images", "make", PROMPT, "--model", str(model), "--width", str(size), "--height", str(size),
           "--steps", str(steps), "--cfg", "7", "-t", str(threads), "--scheduler", "euler", "--seed", "42",
           "--negative-prompt", "", "-o", str(out_png)] + (["--quant", quant] if quant != "f16" else [])
    text, rss, wall, cpu = run(cmd)
    m = re.search(r"denoise ([0-9.]+) s .*?decode ([0-9.]+) s.*?\(([0-9.]+) MiB through the first UNet step\)"
                  r".*?CPU s: ([0-9.]+) a step after the first, ([0-9.]+) decode", text)
    if not m:
        sys.exit(f"compare_sd: no stage times in kvad's output:\n{text[-3000:]}")
    return {"denoise": float(m.group(1)), "cpu": cpu, "rss": rss, "wall": wall, "decode": float(m.group(2)),
            "rss_unet": float(m.group(3)), "step_cpu": float(m.group(4)), "decode_cpu": float(m.group(5))}


def kvad_pipeline_step(kvad, model, threads, steps, size, quant, tmp):
    """kvad images make with 1 and with 1 + steps steps, as sd_step: a step's wall time is the
    runs' denoising time difference over `steps`; its CPU time kvad's own count over the steps
    after the first (process CPU time between the progress callbacks), the decode's likewise."""
    a = kvad_run(kvad, model, threads, 1, size, quant, tmp / f"k{time.monotonic_ns()}.png")
    b = kvad_run(kvad, model, threads, 1 + steps, size, quant, tmp / f"k{time.monotonic_ns()}.png")
    return {"step": (b["denoise"] - a["denoise"]) / steps, "cpu": b["step_cpu"], "rss": max(a["rss"], b["rss"]),
            "wall": a["wall"] + b["wall"], "decode": b["decode"], "decode_cpu": b["decode_cpu"],
            "rss_unet": b["rss_unet"]}


def sd_run(cli, model, threads, steps, size, out_png, quant="f16"):
    cmd = [str(cli), "-m", str(model), "-p", PROMPT, "-n", "",
           "-W", str(size), "-H", str(size), "--steps", str(steps), "--cfg-scale", "7", "-t", str(threads),
           "--rng", "cpu", "--sampling-method", "euler", "--type", quant, "-s", "42", "-o", str(out_png), "-v"]
    marks = (r"generating image: 1/", r"sampling completed", r"decoding \d+ latents", r"decode_first_stage completed")
    text, rss, wall, cpu, seen = run_marked(cmd, marks)
    sd_run.sampling_cpu = seen.get(marks[1], float("nan")) - seen.get(marks[0], float("nan"))
    sd_run.decode_cpu = seen.get(marks[3], float("nan")) - seen.get(marks[2], float("nan"))
    bufs = re.findall(r"(\S+) compute buffer size: ([0-9.]+) ?MB", text)
    if bufs:
        sd_run.buffers = {k: float(v) for k, v in bufs}
    m = re.search(r"sampling completed, taking ([0-9.]+)s", text)
    d = re.search(r"decode_first_stage completed, taking ([0-9.]+)s", text)
    if not m:
        sys.exit(f"compare_sd: no 'sampling completed' in sd-cli's output:\n{text[-3000:]}")
    return float(m.group(1)), cpu, rss, wall, float(d.group(1)) if d else None


def sd_step(cli, model, threads, steps, size, out_png, quant="f16"):
    """sd-cli with 1 and with 1 + steps sampling steps: the wall time a step is the longer run's
    sampling time over its steps; the CPU time a step is the runs' CPU difference over `steps`
    (loading, text encoding and decoding cancel out)."""
    samp1, cpu1, rss1, wall1, _ = sd_run(cli, model, threads, 1, size, out_png, quant)
    s_cpu1 = sd_run.sampling_cpu
    samp2, cpu2, rss2, wall2, dec = sd_run(cli, model, threads, 1 + steps, size, out_png, quant)
    # sd.cpp loads the UNet's weights inside its sampling time: the difference leaves that out.
    return {"step": (samp2 - samp1) / steps, "cpu": (sd_run.sampling_cpu - s_cpu1) / steps,
            "cpu_total_diff": (cpu2 - cpu1) / steps, "rss": max(rss1, rss2), "wall": wall1 + wall2, "decode": dec,
            "decode_cpu": sd_run.decode_cpu}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sd-cli", required=True, help="stable-diffusion.cpp's sd-cli binary")
    ap.add_argument("--model", default=str(Path.home() / ".cache/kvad/bench-models/sd15-rand-f16"),
                    help="the SD 1.5 diffusers folder sd-cli reads (tools/make_sd15_bench_checkpoint.py)")
    ap.add_argument("--bench-unet", default=str(ROOT / "build/bench/bench_unet"), help="kvad's bench_unet")
    ap.add_argument("--kvad", default=None, help="kvad's binary: run `kvad images make` on --model (see above)")
    ap.add_argument("--quant", choices=("f16", "q8_0"), default="f16", help="with --kvad: the weights' form")
    ap.add_argument("--engines", default="kvad,sd.cpp", help="which to run, in this order each round")
    ap.add_argument("--size", type=int, default=512, help="picture side in pixels (latent: size / 8)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2, help="kvad, sd.cpp, kvad, sd.cpp, ...")
    ap.add_argument("--kvad-steps", type=int, default=1, help="UNet calls per bench_unet run")
    ap.add_argument("--sd-steps", type=int, default=2,
                    help="sd-cli runs with 1 and with 1 + this many sampling steps")
    a = ap.parse_args()
    if a.size % 64 != 0 or a.size < 64:
        sys.exit("compare_sd: --size must be a multiple of 64")
    for f in ([a.sd_cli] if "sd.cpp" in a.engines else []) + ([a.kvad or a.bench_unet] if "kvad" in a.engines else []):
        if not os.access(f, os.X_OK):
            sys.exit(f"compare_sd: {f} is not an executable (build it first)")
    if not (Path(a.model) / "unet").is_dir():
        sys.exit(f"compare_sd: {a.model} has no unet/ (run tools/make_sd15_bench_checkpoint.py)")
    rows = {"kvad": [], "sd.cpp": []}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if a.kvad and a.quant != "f16" and "kvad" in a.engines:  # the quantize-once cache entry, written before any timing
            kvad_run(a.kvad, a.model, a.threads, 1, 64, a.quant, tmp / "warm.png")
        for r in range(a.rounds):
            for name in a.engines.split(","):
                la0 = os.getloadavg()[0]
                if name == "kvad" and a.kvad:
                    res = kvad_pipeline_step(a.kvad, a.model, a.threads, a.sd_steps, a.size, a.quant, tmp)
                elif name == "kvad":
                    res = kvad_step(a.bench_unet, a.threads, a.kvad_steps, a.size // 8)
                else:
                    res = sd_step(a.sd_cli, a.model, a.threads, a.sd_steps, a.size, tmp / "out.png", a.quant)
                res["load"] = (la0, os.getloadavg()[0])
                rows[name].append(res)
                dec = f", VAE decode {res['decode']:.2f} s" if res["decode"] is not None else ""
                if res.get("decode_cpu") is not None:
                    dec += f" ({res['decode_cpu']:.2f} CPU s)"
                if res.get("rss_unet"):
                    dec += f", RSS after the first UNet step {res['rss_unet']:.0f} MiB"
                if name == "sd.cpp" and getattr(sd_run, "buffers", None):
                    dec += ", compute buffers MB " + " ".join(f"{k} {v:.0f}" for k, v in sd_run.buffers.items())
                print(f"round {r} {name:7s}: {res['step']:.2f} s/step, {res['cpu']:.2f} CPU s/step{dec}, peak RSS {res['rss']:.0f} MiB, "
                      f"wall {res['wall']:.0f} s, load {res['load'][0]:.1f} -> {res['load'][1]:.1f}", flush=True)
    if not rows["kvad"] or not rows["sd.cpp"]:
        return
    k = statistics.median(x["step"] for x in rows["kvad"])
    s = statistics.median(x["step"] for x in rows["sd.cpp"])
    loads = [v for n in rows.values() for x in n for v in x["load"]]
    print(f"\n{Path(a.model).name} UNet step at {a.size}x{a.size} (latent {a.size // 8}^2, CFG: 2 images), {a.quant} weights, "
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
    kd = [x["decode"] for x in rows["kvad"] if x["decode"] is not None]
    sdd = [x["decode"] for x in rows["sd.cpp"] if x["decode"] is not None]
    if kd and sdd:
        print(f"sd.cpp / kvad: VAE decode time {statistics.median(sdd) / statistics.median(kd):.2f}")
    kdc = [x["decode_cpu"] for x in rows["kvad"] if x.get("decode_cpu") is not None]
    sdc = [x["decode_cpu"] for x in rows["sd.cpp"] if x.get("decode_cpu") is not None]
    if kdc and sdc:
        print(f"VAE decode CPU s: kvad {statistics.median(kdc):.2f}, sd.cpp {statistics.median(sdc):.2f}, "
              f"sd.cpp / kvad {statistics.median(sdc) / statistics.median(kdc):.2f}")


if __name__ == "__main__":
    main()
