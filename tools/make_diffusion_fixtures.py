#!/usr/bin/env python3
"""Makes tests/fixtures/diffusion/: what torch and diffusers (PyPI) give for
kvad's picture pipeline parts that need no weights, which
tests/engine/diffusion/ compare kvad against.

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install torch diffusers transformers
    /tmp/venv/bin/python tools/make_diffusion_fixtures.py [noise] [schedulers]

noise.json       torch.randn(n, generator=torch.Generator("cpu").manual_seed(seed)) for several
                 seeds and sizes (both of torch's paths: below 16 values and 16 or more, sizes not a
                 multiple of 16): small sizes in full as float32 bit patterns, the latent sizes
                 (1x4x64x64, 1x4x128x128) as the sha256 of their bytes plus the first and last
                 values; and one generator drawing twice (the ancestral samplers' per-step noise).
schedulers.json  for scheduler configs as pipelines ship them (SD 1.5's PNDM config, SDXL base's
                 Euler config) and variants (v-prediction with trailing spacing and zero terminal
                 SNR, linear betas, squaredcos_cap_v2, Karras sigmas, log-linear interpolation), each
                 scheduler built the way a diffusers user swaps it in
                 (Cls.from_config(pipe.scheduler.config)): timesteps, sigmas and init_noise_sigma at
                 20/25/30/50 steps, and a short denoising run on a 64-value latent with a fake
                 model (model_output = 0.3 * scale_model_input(x) + randn(seed 100 + step)), with
                 the ancestral noise drawn from a generator seeded 7: the latent after the first,
                 the second and the last step.

torch's float randn differs by CPU capability: this must run on an x86-64 machine whose
torch reports AVX2 or AVX512 (torch.backends.cpu.get_cpu_capability()); the script checks.
"""
import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import torch
import diffusers

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fixture_util import ROOT, dumps  # noqa: E402

OUT = ROOT / "tests" / "fixtures" / "diffusion"


def bits(t):
    return [int(x) for x in np.asarray(t, dtype=np.float32).view(np.uint32)]


def f32(x):
    """A float32 value as the exact Python float."""
    return float(np.float32(x))


def make_noise():
    cases = []
    for seed in (0, 1, 42, 1234567890, 2**32 + 5):
        for n in (1, 2, 7, 15, 16, 17, 31, 100, 4 * 64 * 64, 4 * 128 * 128):
            t = torch.randn(n, generator=torch.Generator("cpu").manual_seed(seed)).numpy()
            c = {"seed": seed, "n": n}
            if n <= 100:
                c["bits"] = bits(t)
            else:
                c["sha256"] = hashlib.sha256(t.astype("<f4").tobytes()).hexdigest()
                c["first_bits"] = bits(t[:8])
                c["last_bits"] = bits(t[-8:])
            cases.append(c)
    g = torch.Generator("cpu").manual_seed(7)
    a = torch.randn(64, generator=g).numpy()
    b = torch.randn(64, generator=g).numpy()
    c = torch.randn(5, generator=g).numpy()
    d = torch.randn(5, generator=g).numpy()
    return {"capability": torch.backends.cpu.get_cpu_capability(), "torch": torch.__version__,
            "cases": cases, "stream": {"seed": 7, "draws": [bits(a), bits(b), bits(c), bits(d)]}}


SD15 = {  # stable-diffusion-v1-5/stable-diffusion-v1-5 scheduler/scheduler_config.json
    "_class_name": "PNDMScheduler", "_diffusers_version": "0.6.0", "beta_end": 0.012,
    "beta_schedule": "scaled_linear", "beta_start": 0.00085, "num_train_timesteps": 1000,
    "set_alpha_to_one": False, "skip_prk_steps": True, "steps_offset": 1, "trained_betas": None,
    "clip_sample": False}
SDXL = {  # stabilityai/stable-diffusion-xl-base-1.0 scheduler/scheduler_config.json
    "_class_name": "EulerDiscreteScheduler", "_diffusers_version": "0.19.0.dev0", "beta_end": 0.012,
    "beta_schedule": "scaled_linear", "beta_start": 0.00085, "clip_sample": False,
    "interpolation_type": "linear", "num_train_timesteps": 1000, "prediction_type": "epsilon",
    "sample_max_value": 1.0, "set_alpha_to_one": False, "skip_prk_steps": True, "steps_offset": 1,
    "timestep_spacing": "leading", "trained_betas": None, "use_karras_sigmas": False}
CONFIGS = {
    "sd15": SD15,
    "sdxl": SDXL,
    "vpred_trailing_zsnr": {
        "_class_name": "DDIMScheduler", "beta_end": 0.012, "beta_schedule": "scaled_linear",
        "beta_start": 0.00085, "clip_sample": False, "num_train_timesteps": 1000,
        "prediction_type": "v_prediction", "rescale_betas_zero_snr": True, "set_alpha_to_one": False,
        "steps_offset": 1, "timestep_spacing": "trailing"},
    "linear_linspace": {
        "_class_name": "DDIMScheduler", "beta_schedule": "linear", "num_train_timesteps": 1000,
        "timestep_spacing": "linspace", "clip_sample": True, "set_alpha_to_one": True},
    "cosine_leading": {
        "_class_name": "DDPMScheduler", "beta_schedule": "squaredcos_cap_v2", "num_train_timesteps": 1000,
        "timestep_spacing": "leading", "steps_offset": 1, "prediction_type": "v_prediction"},
    "karras_loglinear": {
        "_class_name": "EulerDiscreteScheduler", "beta_end": 0.012, "beta_schedule": "scaled_linear",
        "beta_start": 0.00085, "num_train_timesteps": 1000, "use_karras_sigmas": True,
        "timestep_spacing": "trailing", "final_sigmas_type": "sigma_min",
        "euler_at_final": True, "lower_order_final": False},
    "loglinear": {
        "_class_name": "EulerDiscreteScheduler", "beta_end": 0.012, "beta_schedule": "scaled_linear",
        "beta_start": 0.00085, "num_train_timesteps": 1000, "interpolation_type": "log_linear",
        "timestep_spacing": "leading", "steps_offset": 1},
}
KINDS = {
    "euler": (diffusers.EulerDiscreteScheduler, {}),
    "euler_a": (diffusers.EulerAncestralDiscreteScheduler, {}),
    "ddim": (diffusers.DDIMScheduler, {}),
    "dpm++2m": (diffusers.DPMSolverMultistepScheduler, {}),
    "dpm++2m_karras": (diffusers.DPMSolverMultistepScheduler, {"use_karras_sigmas": True}),
}


def build(config, kind):
    orig = getattr(diffusers, config["_class_name"]).from_config(config)
    cls, extra = KINDS[kind]
    return cls.from_config(orig.config, **extra)


def run(config, kind, steps, n=64):
    s = build(config, kind)
    s.set_timesteps(steps)
    x = torch.randn(n, generator=torch.Generator("cpu").manual_seed(1)) * s.init_noise_sigma
    g = torch.Generator("cpu").manual_seed(7)
    kept = {}
    for i, t in enumerate(s.timesteps):
        xin = s.scale_model_input(x, t)
        out = 0.3 * xin + torch.randn(n, generator=torch.Generator("cpu").manual_seed(100 + i))
        x = s.step(out, t, x, generator=g).prev_sample
        if i in (0, 1, len(s.timesteps) - 1):
            kept[str(i)] = bits(x.numpy())
    return kept


def make_schedulers():
    out = {"diffusers": diffusers.__version__, "configs": CONFIGS, "schedules": [], "runs": []}
    for name, config in CONFIGS.items():
        for kind in KINDS:
            for steps in (1, 2, 20, 25, 30, 50):
                s = build(config, kind)
                s.set_timesteps(steps)
                sigmas = getattr(s, "sigmas", None)
                if kind == "ddim":
                    sigmas = None
                out["schedules"].append({
                    "config": name, "kind": kind, "steps": steps,
                    "timesteps": [f32(v) for v in s.timesteps.numpy().astype(np.float64)],
                    "sigmas": None if sigmas is None else [f32(v) for v in sigmas.numpy()],
                    "init_noise_sigma": f32(s.init_noise_sigma),
                })
            if name == "cosine_leading" and kind == "dpm++2m_karras":
                continue  # its Karras timesteps repeat 998, and diffusers' step() finds the second one first
            for steps in ((20, 4) if name in ("sd15", "sdxl") else (6,)):
                out["runs"].append({"config": name, "kind": kind, "steps": steps, "after": run(config, kind, steps)})
    return out


def main():
    what = set(sys.argv[1:]) or {"noise", "schedulers"}
    cap = torch.backends.cpu.get_cpu_capability()
    if cap not in ("AVX2", "AVX512"):
        sys.exit(f"make_diffusion_fixtures: torch's CPU capability is {cap}; AVX2 or AVX512 needed")
    OUT.mkdir(parents=True, exist_ok=True)
    if "noise" in what:
        (OUT / "noise.json").write_text(dumps(make_noise()) + "\n")
    if "schedulers" in what:
        (OUT / "schedulers.json").write_text(dumps(make_schedulers()) + "\n")
    for p in sorted(OUT.iterdir()):
        print(f"{p.relative_to(ROOT)}: {p.stat().st_size} bytes")


if __name__ == "__main__":
    main()
