#!/usr/bin/env python3
"""Makes tests/fixtures/perplexity/: a small deterministic English text
(text.txt, written here from a fixed grammar and a seeded PRNG, so it is
nobody's copyrighted prose) and reference-MODEL.json, llama.cpp's
llama-perplexity numbers on it at -c 128 --chunks 8 for the store's
smollm2-135m.gguf (add_bos_token false) and gemma3-270m.gguf (add_bos_token
true: every chunk's first token becomes BOS).

  python3 tools/make_perplexity_reference.py --text-only
  python3 tools/make_perplexity_reference.py --llama-perplexity /path/to/llama-perplexity \
      [--models-dir ~/.cache/kvad/models]

--kl also writes reference-kl-smollm2-135m.json: llama-perplexity's
--kl-divergence numbers with the unquantized SmolLM2 as the base (the HF
checkpoint scripts/setup makes from the store's GGUF, converted to an f32
GGUF with llama.cpp's convert_hf_to_gguf.py; --torch-python names a Python
with torch, numpy, transformers) and the store's Q4_1 smollm2-135m.gguf as
the quantized model.

llama-perplexity is built from llama-cpp-python's sdist (vendor/llama.cpp,
cmake -DLLAMA_CURL=OFF -DGGML_NATIVE=ON, target llama-perplexity). Only the
text and the numbers are committed; the test (tests/cli/test_perplexity.cpp)
runs kvad perplexity on text.txt and compares within 0.5% (with llama-perplexity
-fa off: its default flash attention on the CPU rounds Q and the V sums to
f16; both numbers are recorded).
"""
import argparse
import json
import os
import re
import subprocess
import sys

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "perplexity")

SUBJECTS = ["the old miller", "a young sailor", "the village teacher", "my grandmother", "the baker's son",
            "a tired traveller", "the river keeper", "our neighbour", "the quiet student", "a clever fox"]
VERBS = ["walked to", "looked at", "wrote about", "remembered", "painted", "talked about", "returned to",
         "dreamed of", "cleaned", "visited"]
OBJECTS = ["the stone bridge", "the market square", "a small garden", "the harbour", "the long road north",
           "an empty church", "the wheat fields", "the winter forest", "a broken clock", "the lighthouse"]
TIMES = ["in the morning", "after the rain", "every Sunday", "before dinner", "late at night",
         "during the storm", "in early spring", "when the bells rang", "at sunset", "once a year"]
CODAS = ["and nobody said a word.", "because it was the custom.", "while the children played nearby.",
         "and the dogs followed.", "as the wind grew colder.", "and then went home again.",
         "though it was far away.", "without telling anyone.", "and smiled at the memory.",
         "as people had done for a hundred years."]


class Lcg:
    """A fixed 64-bit LCG (Knuth's MMIX constants), independent of Python's random."""

    def __init__(self, seed):
        self.s = seed

    def below(self, n):
        self.s = (self.s * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        return (self.s >> 33) % n


def make_text(n_paragraphs=24, seed=20261201):
    r = Lcg(seed)
    paras = []
    for _ in range(n_paragraphs):
        sents = []
        for _ in range(4 + r.below(3)):
            s = f"{SUBJECTS[r.below(10)]} {VERBS[r.below(10)]} {OBJECTS[r.below(10)]} {TIMES[r.below(10)]}, {CODAS[r.below(10)]}"
            sents.append(s[0].upper() + s[1:])
        paras.append(" ".join(sents))
    return "\n\n".join(paras) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--text-only", action="store_true")
    ap.add_argument("--llama-perplexity")
    ap.add_argument("--models-dir", default=os.path.expanduser("~/.cache/kvad/models"))
    ap.add_argument("--models", nargs="+", default=["smollm2-135m", "gemma3-270m"])
    ap.add_argument("--sdist-version", default="0.3.36", help="llama-cpp-python version llama-perplexity came from")
    ap.add_argument("--kl", action="store_true")
    ap.add_argument("--llama-cpp-dir", help="vendor/llama.cpp of the sdist (for convert_hf_to_gguf.py)")
    ap.add_argument("--torch-python", default=os.path.expanduser("~/.cache/kvad/torch-venv/bin/python"))
    ap.add_argument("--hf-snapshot", default=os.path.expanduser(
        "~/.cache/kvad/hf-cache/models--HuggingFaceTB--SmolLM2-135M-Instruct/snapshots/"
        "445506d8557cf6aae3c041117e8d4135ec426989"))
    ap.add_argument("--ctx", type=int, default=128)
    ap.add_argument("--chunks", type=int, default=8)
    a = ap.parse_args()
    os.makedirs(HERE, exist_ok=True)
    text_path = os.path.join(HERE, "text.txt")
    with open(text_path, "w") as f:
        f.write(make_text())
    if a.text_only:
        return
    if not a.llama_perplexity:
        sys.exit("--llama-perplexity PATH is needed (or --text-only)")
    for name in a.models:
        reference(a, name, text_path)
    if a.kl:
        kl_reference(a, text_path)


def kl_reference(a, text_path):
    import tempfile
    tmp = tempfile.mkdtemp()
    f32 = os.path.join(tmp, "smollm2-f32.gguf")
    env = dict(os.environ, PYTHONPATH=os.path.join(a.llama_cpp_dir, "gguf-py"))
    subprocess.run([a.torch_python, os.path.join(a.llama_cpp_dir, "convert_hf_to_gguf.py"), a.hf_snapshot,
                    "--outtype", "f32", "--outfile", f32], check=True, env=env, capture_output=True)
    base = os.path.join(tmp, "base.dat")
    common = ["-c", str(a.ctx), "--chunks", str(a.chunks), "-t", "2", "--kl-divergence-base", base]
    p = subprocess.run([a.llama_perplexity, "-m", f32, "-f", text_path] + common, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(p.stdout + p.stderr)
    q = os.path.join(a.models_dir, "smollm2-135m.gguf")
    p = subprocess.run([a.llama_perplexity, "-m", q, "--kl-divergence"] + common, capture_output=True, text=True)
    log = p.stdout + p.stderr
    if p.returncode != 0:
        sys.exit(log)

    def num(pattern):
        return float(re.search(pattern, log).group(1))

    ref = {
        "source": "llama-perplexity --kl-divergence from llama-cpp-python %s's sdist" % a.sdist_version,
        "base": "HuggingFaceTB/SmolLM2-135M-Instruct@%s as f32 GGUF (convert_hf_to_gguf.py)"
                % os.path.basename(a.hf_snapshot.rstrip("/")),
        "repo": "HuggingFaceTB/SmolLM2-135M-Instruct",
        "commit": os.path.basename(a.hf_snapshot.rstrip("/")),
        "quantized": "smollm2-135m.gguf",
        "ctx": a.ctx,
        "chunks": a.chunks,
        "ppl": num(r"Mean PPL\(Q\)\s*:\s*([0-9.]+)"),
        "ppl_base": num(r"Mean PPL\(base\)\s*:\s*([0-9.]+)"),
        "delta_ppl": num(r"Mean PPL\(Q\)-PPL\(base\)\s*:\s*([-0-9.]+)"),
        "mean_kld": num(r"Mean\s+KLD:\s*([0-9.]+)"),
        "same_top": num(r"Same top p:\s*([0-9.]+)"),
    }
    with open(os.path.join(HERE, "reference-kl-smollm2-135m.json"), "w") as f:
        json.dump(ref, f, indent=2)
        f.write("\n")
    print(json.dumps(ref, indent=2))


def run_ppl(a, model, text_path, extra):
    cmd = [a.llama_perplexity, "-m", model, "-f", text_path, "-c", str(a.ctx), "--chunks", str(a.chunks),
           "-t", "2"] + extra
    p = subprocess.run(cmd, capture_output=True, text=True)
    log = p.stdout + p.stderr
    if p.returncode != 0:
        sys.exit(log)
    final = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", log)
    running = [float(x) for x in re.findall(r"\[\d+\]([0-9.]+),", log)]
    return float(final.group(1)), float(final.group(2)), running


def reference(a, name, text_path):
    # llama-perplexity's default is -fa auto, which on the CPU is flash
    # attention: ggml's CPU kernel rounds Q to f16 for the K dot and sums V
    # in f16, so its numbers differ from the f32 attention path (-fa off,
    # what llama-cpp-python runs by default and what kvad computes) by
    # ~0.6% on Gemma 3 here (tools/compare_perplexity_logprobs.py). "ppl" is
    # the -fa off run; "ppl_flash_attn" the default one.
    model = os.path.join(a.models_dir, name + ".gguf")
    ppl, err, running = run_ppl(a, model, text_path, ["-fa", "off"])
    ppl_fa, err_fa, running_fa = run_ppl(a, model, text_path, [])
    ref = {
        "source": "llama-perplexity from llama-cpp-python %s's sdist (vendor/llama.cpp)" % a.sdist_version,
        "model": name + ".gguf",
        "command": "llama-perplexity -m %s.gguf -f text.txt -c %d --chunks %d -fa off" % (name, a.ctx, a.chunks),
        "ctx": a.ctx,
        "chunks": a.chunks,
        "ppl": ppl,
        "ppl_error": err,
        "running": running,
        "ppl_flash_attn": ppl_fa,
        "running_flash_attn": running_fa,
        "note": "ppl: -fa off (f32 attention, as kvad); ppl_flash_attn: the default -fa auto (flash attention "
                "on the CPU: Q rounded to f16, V summed in f16)",
    }
    with open(os.path.join(HERE, "reference-%s.json" % name), "w") as f:
        json.dump(ref, f, indent=2)
        f.write("\n")
    print(json.dumps(ref, indent=2))

if __name__ == "__main__":
    main()
