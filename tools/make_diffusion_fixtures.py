#!/usr/bin/env python3
"""Makes tests/fixtures/diffusion/: what torch and diffusers (PyPI) give for
kvad's picture pipeline parts that need no weights, which
tests/engine/diffusion/ compare kvad against.

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install torch diffusers transformers
    pip download --no-deps open-clip-torch==3.3.0 -d /tmp/oc    # CLIP's BPE vocabulary, see clip_tokenizer
    /tmp/venv/bin/python tools/make_diffusion_fixtures.py [noise] [schedulers] [clip_tokenizer --open-clip WHEEL]

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

clip_tokenizer/, clip_tokenizer_2/ (SDXL's second, padding with "!")
                 CLIP's tokenizer as SD pipelines ship it (vocab.json, merges.txt, tokenizer_config.json,
                 special_tokens_map.json), built from the real CLIP BPE vocabulary that open-clip-torch
                 ships (open_clip/bpe_simple_vocab_16e6.txt.gz: the 49408-token vocabulary of
                 openai/clip-vit-large-patch14, rebuilt as CLIP's SimpleTokenizer builds it), cut down to
                 the entries the test strings use (same ids, merges in their rank order; checked to
                 tokenize every string as the whole vocabulary does), and clip_cases.json.gz: the
                 77-token ids diffusers gets from transformers' CLIPTokenizer
                 (tokenizer(text, padding="max_length", max_length=77, truncation=True)) for the
                 peer-data suites' strings and generated ones, padded with SD 1.5's pad (EOS) and with
                 SDXL's second tokenizer's ("!", id 0), and the ids without padding or truncation.

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


def clip_vocab(wheel):
    """CLIP's vocab (token -> id) and merges from open_clip's bpe_simple_vocab_16e6.txt.gz, as
    CLIP's simple_tokenizer.py builds them (the files of openai/clip-vit-large-patch14)."""
    import gzip
    import zipfile

    def bytes_to_unicode():  # GPT-2's / CLIP's byte -> printable character map
        bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
        cs = bs[:]
        n = 0
        for b in range(256):
            if b not in bs:
                bs.append(b)
                cs.append(256 + n)
                n += 1
        return dict(zip(bs, [chr(c) for c in cs]))
    with zipfile.ZipFile(wheel) as z:
        lines = gzip.decompress(z.read("open_clip/bpe_simple_vocab_16e6.txt.gz")).decode("utf-8").split("\n")
    merges = [tuple(m.split()) for m in lines[1:49152 - 256 - 2 + 1]]
    vocab = list(bytes_to_unicode().values())
    vocab = vocab + [v + "</w>" for v in vocab]
    vocab += ["".join(m) for m in merges]
    vocab += ["<|startoftext|>", "<|endoftext|>"]
    assert len(vocab) == 49408 and len(set(vocab)) == 49408
    return {t: i for i, t in enumerate(vocab)}, merges


def write_clip_folder(folder, vocab, merges, pad):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False) + "\n")
    (folder / "merges.txt").write_text("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
    tok = lambda c: {"__type": "AddedToken", "content": c, "lstrip": False, "normalized": True,  # noqa: E731
                     "rstrip": False, "single_word": False}
    config = {"add_prefix_space": False, "bos_token": tok("<|startoftext|>"), "do_lower_case": True,
              "eos_token": tok("<|endoftext|>"), "errors": "replace", "model_max_length": 77,
              "pad_token": pad, "tokenizer_class": "CLIPTokenizer", "unk_token": tok("<|endoftext|>")}
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    special = {"bos_token": tok("<|startoftext|>"), "eos_token": tok("<|endoftext|>"), "pad_token": pad,
               "unk_token": tok("<|endoftext|>")}
    (folder / "special_tokens_map.json").write_text(json.dumps(special, indent=2) + "\n")


def clip_strings():
    import random
    import make_hf_tokenizer_fixtures as hf
    peer = Path("/work/shared/peer-data/tokenizer")
    strings = hf.peer_strings(str(peer)) if peer.exists() else []
    rng = random.Random("kvad-clip")
    strings += hf.generate(rng, ["<|startoftext|>", "<|endoftext|>"], 600)
    strings += ["a photo of a cat", "", "   ", "A Red FOX in fresh snow, 8k, (masterpiece:1.2)",
                "it's you're we've I'm they'll he'd", "ÀÉÎõü ﬁ Ⅻ ① ｆｕｌｌ",
                " ".join(["word"] * 100), "x" * 300, "<|endoftext|> inside <|startoftext|> text",
                "tab\tnew\nline\r\n  spaces\u00a0nbsp\u3000ideographic", "中文 日本語 한국어 ไทย",
                "emoji 🦊🏔️ 👩‍👩‍👧 flags 🇯🇵", "numbers 1234567890 3.14 1,000"]
    return strings


def make_clip_tokenizer(wheel):
    from transformers import CLIPTokenizer
    vocab, merges = clip_vocab(wheel)
    full = Path("/tmp/kvad-clip-full")
    write_clip_folder(full, vocab, merges, "<|endoftext|>")
    tok = CLIPTokenizer.from_pretrained(full)
    assert tok("a photo of a cat").input_ids == [49406, 320, 1125, 539, 320, 2368, 49407]
    strings = clip_strings()
    # The entries the strings use: each word's BPE run (merge all of the best pair, as CLIP's
    # own bpe() does) records its starting symbols and the merges it applies.
    ranks = {m: i for i, m in enumerate(merges)}
    backend = tok.backend_tokenizer
    used_tokens, used_merges = {"<|startoftext|>", "<|endoftext|>", "!"}, set()
    for s in strings:
        for word, _ in backend.pre_tokenizer.pre_tokenize_str(backend.normalizer.normalize_str(s)):
            if word in ("<|startoftext|>", "<|endoftext|>"):
                continue
            sym = list(word[:-1]) + [word[-1] + "</w>"]
            used_tokens.update(sym)
            while len(sym) > 1:
                pairs = {(sym[i], sym[i + 1]) for i in range(len(sym) - 1)}
                best = min(pairs, key=lambda p: ranks.get(p, 1 << 30))
                if best not in ranks:
                    break
                used_merges.add(best)
                out, i = [], 0
                while i < len(sym):
                    if i + 1 < len(sym) and (sym[i], sym[i + 1]) == best:
                        out.append(sym[i] + sym[i + 1])
                        i += 2
                    else:
                        out.append(sym[i])
                        i += 1
                sym = out
                used_tokens.update(sym)
    sub_vocab = {t: i for t, i in vocab.items() if t in used_tokens}
    sub_merges = [m for m in merges if m in used_merges]
    folder = OUT / "clip_tokenizer"
    write_clip_folder(folder, sub_vocab, sub_merges, "<|endoftext|>")
    write_clip_folder(OUT / "clip_tokenizer_2", sub_vocab, sub_merges, "!")
    write_clip_folder(Path("/tmp/kvad-clip-full-2"), vocab, merges, "!")
    small = CLIPTokenizer.from_pretrained(folder)
    small2 = CLIPTokenizer.from_pretrained(OUT / "clip_tokenizer_2")
    full2 = CLIPTokenizer.from_pretrained("/tmp/kvad-clip-full-2")
    cases = []
    for s in strings:
        ids = tok(s).input_ids
        assert small(s).input_ids == ids, s
        padded = tok(s, padding="max_length", max_length=77, truncation=True).input_ids
        padded2 = full2(s, padding="max_length", max_length=77, truncation=True).input_ids
        assert small2(s, padding="max_length", max_length=77, truncation=True).input_ids == padded2, s
        assert len(padded) == 77 and len(padded2) == 77
        cases.append({"text": s, "ids": ids, "sd15": padded, "sdxl_2": padded2})
    import gzip
    with gzip.GzipFile(OUT / "clip_cases.json.gz", "wb", mtime=0) as f:
        f.write(json.dumps({"transformers": __import__("transformers").__version__,
                            "source": "open-clip-torch 3.3.0 open_clip/bpe_simple_vocab_16e6.txt.gz",
                            "cases": cases}, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
    print(f"clip_tokenizer: {len(sub_vocab)} of {len(vocab)} tokens, {len(sub_merges)} of {len(merges)} merges, "
          f"{len(cases)} strings")


def main():
    args = sys.argv[1:]
    wheel = None
    if "--open-clip" in args:
        k = args.index("--open-clip")
        wheel = args[k + 1]
        del args[k:k + 2]
    what = set(args) or {"noise", "schedulers"}
    cap = torch.backends.cpu.get_cpu_capability()
    if cap not in ("AVX2", "AVX512"):
        sys.exit(f"make_diffusion_fixtures: torch's CPU capability is {cap}; AVX2 or AVX512 needed")
    OUT.mkdir(parents=True, exist_ok=True)
    if "noise" in what:
        (OUT / "noise.json").write_text(dumps(make_noise()) + "\n")
    if "schedulers" in what:
        (OUT / "schedulers.json").write_text(dumps(make_schedulers()) + "\n")
    if "clip_tokenizer" in what:
        if not wheel:
            sys.exit("make_diffusion_fixtures: clip_tokenizer needs --open-clip open_clip_torch-3.3.0-*.whl")
        make_clip_tokenizer(wheel)
    for p in sorted(OUT.iterdir()):
        print(f"{p.relative_to(ROOT)}: {p.stat().st_size} bytes")


if __name__ == "__main__":
    main()
