#!/usr/bin/env python3
"""Make the llama.cpp logprobs fixture for kvad serve's logprobs test.

Usage:
    python3 tools/make_logprobs_reference.py [--model PATH] [--out PATH]

Needs the PyPI package llama-cpp-python (llama.cpp's Python binding; a
source checkout works with PYTHONPATH=SDIST and LLAMA_CPP_LIB_PATH=the
directory of its built libllama.so) and numpy. The model defaults to the
kvad store's smollm2-135m ($KVAD_HOME/models or ~/.cache/kvad/models).
Writes tests/fixtures/logprobs/smollm2-135m.json; the tests read only it.

For each prompt, llama-cpp-python's create_completion(prompt,
max_tokens=12, temperature=0, logprobs=5, repeat_penalty=1.0) (greedy,
no penalties; BOS as the file says) gives, per generated token: its text,
its logprob (log_softmax of llama.cpp's raw logits) and the top 5
alternatives' texts and logprobs. The "margin" of each step is the gap
between the two best logprobs, so the test can tell a near-tie.
"""
import argparse
import json
import os
from pathlib import Path

import llama_cpp

ROOT = Path(__file__).resolve().parent.parent
PROMPTS = [
    "The capital of France is",
    "1, 2, 3, 4,",
    "def fibonacci(n):",
    "Once upon a time, there was a",
    "The chemical symbol for gold is",
    "Water boils at a temperature of",
]


def main():
    home = os.environ.get("KVAD_HOME") or os.path.expanduser("~/.cache/kvad")
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(home, "models", "smollm2-135m.gguf"))
    ap.add_argument("--out", default=str(ROOT / "tests/fixtures/logprobs/smollm2-135m.json"))
    a = ap.parse_args()
    m = llama_cpp.Llama(model_path=a.model, n_ctx=512, logits_all=True, verbose=False, n_threads=2, seed=0)
    cases = []
    for p in PROMPTS:
        r = m.create_completion(p, max_tokens=12, temperature=0, logprobs=5, repeat_penalty=1.0)
        lp = r["choices"][0]["logprobs"]
        steps = []
        for tok, tlp, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
            alts = sorted(((t, float(v)) for t, v in top.items()), key=lambda kv: -kv[1])
            margin = alts[0][1] - alts[1][1] if len(alts) > 1 else 99.0
            steps.append({"token": tok, "logprob": float(tlp), "top": alts, "margin": margin})
        cases.append({"prompt": p, "text": r["choices"][0]["text"], "steps": steps})
    out = {
        "source": "llama-cpp-python %s create_completion(max_tokens=12, temperature=0, logprobs=5, repeat_penalty=1.0)"
                  % llama_cpp.__version__,
        "model": os.path.basename(a.model),
        "cases": cases,
    }
    Path(a.out).write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    print("wrote", a.out)


if __name__ == "__main__":
    main()
