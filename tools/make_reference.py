#!/usr/bin/env python3
"""Make llama.cpp reference fixtures for kvad's tests (SmolLM2-135M, Gemma 3 270M).

Usage:
    python3 tools/make_reference.py [--model NAME] [--file PATH] [--out PATH] [--cache-of ORG/NAME]

NAME is a model of scripts/models.tsv that this script knows (MODELS below;
default smollm2-135m). Needs the PyPI package llama-cpp-python (llama.cpp's
Python binding) and the model file (default: the kvad store,
$KVAD_HOME/models/NAME.gguf, put there by scripts/setup or
scripts/fetch_model NAME). Writes tests/fixtures/reference/NAME.json. With
--cache-of, --file is kvad's quantize-once cache GGUF of an HF checkpoint
(llama.cpp then reads kvad's tokenizer.ggml.* keys and tensors). The
tests read only the JSON; they never need Python.

For each raw prompt (no chat template; a BOS token exactly when the file's
tokenizer.ggml.add_bos_token says so: false for SmolLM2, true for Gemma;
settings.add_bos records which), it records:
  prompt_ids   llama.tokenize(prompt, add_bos=ADD_BOS, special=False)
  greedy_ids   32 tokens, each the argmax of the raw logits (no temperature,
               no repetition penalty, no sampler), computed step by step: the
               prompt is evaluated as one batch, then one token per eval
  steps        steps[k] = top-10 [id, logit] of the logits that chose
               greedy_ids[k]; steps[0] is therefore the last prompt position
  text         detokenized greedy_ids (special tokens not rendered)
For the first prompt it also records prefill_top10: the top-10 at EVERY prompt
position of the batched prompt evaluation (to test batched prefill).

Top-10 lists are sorted by logit descending, ties by id ascending. Logits are
llama.cpp's float32 values, written exactly. The output is deterministic:
rerunning gives the same file on the same llama.cpp build and CPU.
"""
import argparse
import os
import sys
from pathlib import Path

import numpy as np

from fixture_util import dumps, expected_sha256, sha256_file, top_k

ROOT = Path(__file__).resolve().parent.parent
N_GEN = 32
TOP_K = 10

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time",
    "The three primary colors are",
    "1, 2, 3, 4,",
    ("The water cycle describes how water moves between the oceans, the air "
     "and the land. Heat from the sun makes water evaporate from lakes and "
     "seas; the vapour rises, cools and condenses into clouds, and later falls "
     "back to the ground as rain or snow. Rivers then carry"),
    "Q: What is the boiling point of water in Celsius?\nA:",
    "Héllo wörld!  Ça va? 東京 is big.\n\tcafé 2024",
    "The quick brown fox jumps over the lazy dog. The quick brown fox",
    "import numpy as np\nimport matplotlib.pyplot as plt\n\nx = np.linspace(0, 10, 100)\n",
    "<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n<|im_start|>assistant\n",
    "Monday, Tuesday, Wednesday,",
    "The theory of relativity was developed by",
    "In computer science, a linked list is",
    "Water is made of hydrogen and",
    "SELECT name, age FROM users WHERE",
]

# Gemma 3 has no ChatML: prompt 10 uses its own turn markers (as plain text,
# like the ChatML prompt above, since special=False). The last prompt is
# longer than Gemma's 512-token sliding window, so its continuation checks
# the local (windowed) layers; it needs n_ctx 1024.
# More prompts (both models): a small model meets near-ties early in many
# continuations, so more prompts keep the "equal over 32 tokens" count
# well above the test's bar.
SMOLLM_EXTRA = [
    "The largest planet in our solar system is",
    "To make a cup of tea, first",
    "Python is a programming language that",
    "The first president of the United States was",
    "A, B, C, D, E,",
    "Photosynthesis is the process by which",
    "for i in range(10):\n    print(",
    "The sun rises in the",
]

LONG_TEXT = " ".join(
    f"Item {i}: the {['red', 'green', 'blue', 'yellow'][i % 4]} box holds {i * 7 % 13} "
    f"{['apples', 'stones', 'keys', 'coins', 'books'][i % 5]}." for i in range(60))
GEMMA_PROMPTS = [
    p if not p.startswith("<|im_start|>") else
    "<start_of_turn>user\nWhat is 2 + 2?<end_of_turn>\n<start_of_turn>model\n"
    for p in PROMPTS
] + [LONG_TEXT + " Item 60: the red box holds"]

# name -> how to make its fixture. add_bos must agree with the file's
# tokenizer.ggml.add_bos_token (checked).
MODELS = {
    "smollm2-135m": {"model_file": "SmolLM2-135M-Instruct.Q4_1.gguf", "prompts": PROMPTS + SMOLLM_EXTRA,
                     "add_bos": False, "n_ctx": 512},
    "gemma3-270m": {"model_file": "gemma-3-270m-q4_k_m.gguf", "prompts": GEMMA_PROMPTS + SMOLLM_EXTRA,
                    "add_bos": True, "n_ctx": 1024},
}


def default_model(name):
    home = os.environ.get("KVAD_HOME") or os.path.join(Path.home(), ".cache", "kvad")
    return Path(home) / "models" / f"{name}.gguf"












def run_prompt(llm, text, with_prefill, add_bos):
    prompt_ids = llm.tokenize(text.encode("utf-8"), add_bos=add_bos, special=False)
    if add_bos and prompt_ids[:1] != [llm.token_bos()]:
        sys.exit(f"make_reference: add_bos=True but the prompt does not start with BOS: {prompt_ids[:4]}")
    llm.reset()
    llm.eval(prompt_ids)  # one batch when it fits n_batch (512); longer prompts in 512-token chunks
    out = {"text_prompt": text, "prompt_ids": list(map(int, prompt_ids))}
    if with_prefill:
        out["prefill_top10"] = [top_k(llm.scores[i], TOP_K) for i in range(len(prompt_ids))]
    greedy, steps = [], []
    for _ in range(N_GEN):
        logits = llm.scores[llm.n_tokens - 1]
        steps.append(top_k(logits, TOP_K))
        tok = int(np.argmax(logits))
        assert tok == steps[-1][0][0]
        greedy.append(tok)
        llm.eval([tok])
    out["greedy_ids"] = greedy
    out["steps"] = steps
    out["text"] = llm.detokenize(greedy).decode("utf-8", errors="replace")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m", choices=sorted(MODELS),
                    help="store name of the model (default: smollm2-135m)")
    ap.add_argument("--file", type=Path, help="the .gguf (default: $KVAD_HOME/models/NAME.gguf)")
    ap.add_argument("--out", type=Path, help="default: tests/fixtures/reference/NAME.json")
    ap.add_argument("--cache-of", metavar="ORG/NAME",
                    help="--file is kvad's quantize-once cache GGUF of this HF checkpoint (kvad run --model "
                         "ORG/NAME --quant TYPE wrote it), not the store's file: its sha256 is recorded, "
                         "not checked against scripts/models.tsv")
    args = ap.parse_args()
    name, cfg = args.model, MODELS[args.model]
    args.file = args.file or default_model(name)
    args.out = args.out or ROOT / "tests" / "fixtures" / "reference" / f"{name}.json"

    import llama_cpp
    from llama_cpp import Llama

    sha = sha256_file(args.file)
    if not args.cache_of and sha != expected_sha256(name, "make_reference"):
        sys.exit(f"make_reference: {args.file}: sha256 {sha} is not the one in scripts/models.tsv")

    llm = Llama(model_path=str(args.file), n_ctx=cfg["n_ctx"], logits_all=True, n_threads=2,
                seed=0, verbose=False)
    file_add_bos = llm.metadata.get("tokenizer.ggml.add_bos_token", "false") == "true"
    if file_add_bos != cfg["add_bos"]:
        sys.exit(f"make_reference: {name}: add_bos_token is {file_add_bos} in the file, "
                 f"{cfg['add_bos']} in MODELS")
    prompts = []
    for i, text in enumerate(cfg["prompts"]):
        p = run_prompt(llm, text, with_prefill=(i == 0), add_bos=cfg["add_bos"])
        # Put "text" (the continuation) after the prompt fields for readability.
        prompts.append({"text": text, "prompt_ids": p["prompt_ids"],
                        "greedy_ids": p["greedy_ids"], "continuation": p["text"],
                        **({"prefill_top10": p["prefill_top10"]} if "prefill_top10" in p else {}),
                        "steps": p["steps"]})
        print(f"[{i}] {len(p['prompt_ids'])} prompt tokens: {text[:40]!r} -> {p['text']!r}",
              file=sys.stderr)

    doc = {
        "model": name,
        "model_file": args.file.name if args.cache_of else cfg["model_file"],
        **({"cache_of": args.cache_of} if args.cache_of else {}),
        "model_sha256": sha,
        "llama_cpp_python_version": llama_cpp.__version__,
        "made_by": "tools/make_reference.py",
        "settings": {"n_ctx": cfg["n_ctx"], "n_threads": 2, "logits_all": True,
                     "add_bos": cfg["add_bos"],
                     "special": False, "n_gen": N_GEN, "top_k": TOP_K,
                     "sampling": "greedy argmax of raw logits"},
        "n_vocab": int(llm.n_vocab()),
        "format": ("prompts[i]: text (the raw prompt), prompt_ids, greedy_ids (n_gen), "
                   "continuation (detokenized greedy_ids), steps[k] = top_k [id, logit] "
                   "of the logits that chose greedy_ids[k] (steps[0] is the last prompt "
                   "position, from the batched prompt eval; later steps are one-token "
                   "evals); prompts[0].prefill_top10[j] = top_k [id, logit] at prompt "
                   "position j of the batched prompt eval"),
        "prompts": prompts,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".json.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(dumps(doc) + "\n")
    os.replace(tmp, args.out)
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
