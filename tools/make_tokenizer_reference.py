#!/usr/bin/env python3
"""Writes tests/fixtures/tokenizer/smollm2.json: token ids that llama.cpp
produces for varied strings with the SmolLM2-135M-Instruct vocabulary.

The reference is llama.cpp itself, through the PyPI package
llama-cpp-python (`pip install llama-cpp-python`); only the vocabulary is
loaded (vocab_only=True). kvad's tests read the JSON; this script is never
needed to build or to run them.

Usage:
  tools/make_tokenizer_reference.py [MODEL.gguf] [-o OUT.json]

MODEL defaults to $KVAD_MODEL_SMOLLM2, then $KVAD_HOME/models/smollm2-135m.gguf,
then ~/.cache/kvad/models/smollm2-135m.gguf.
"""
import argparse
import json
import os
import sys
from pathlib import Path

# (text, add_special, parse_special)
CASES = [
    ("Hello world", False, False),
    (" Hello, world! How are you doing today?", False, False),
    ("def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n", False, False),
    ("12345678", False, False),
    ("3.14159 and 1,000,000 and 2024-01-01T12:30:00Z", False, False),
    ("naïve café — Ünïcödé, Привет мир, 你好，世界！ こんにちは 안녕하세요 Cửa Việt", False, False),
    ("I love 🦙 and 🚀😶‍🌫️ ✅👍🏽!", False, False),
    ("   leading and trailing   \n\n\n\t\t  mixed \r\n whitespace    ", False, False),
    ("\n\n", False, False),
    ("", False, False),
    ("I'm sure they'll say it's what we've done, isn't it? DON'T YOU'RE", False, False),
    ("https://example.com/path?q=1&x=%20 -- mail: a.b@c.org!!!", False, False),
    ('{"key": [1, 2, 3], "nested": {"a": null, "b": "x\\ny"}}', False, False),
    ("x^2 + y^2 = z^2; ∑_{i=1}^{n} i = n(n+1)/2 ≤ ∞", False, False),
    ("supercalifragilisticexpialidocious antidisestablishmentarianism", False, False),
    ("<|im_start|>", False, False),
    ("<|im_start|>", False, True),
    ("<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n", False, True),
    ("<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n", False, False),
    ("text<|endoftext|>more<|im_end|>", False, True),
    ("Hello", True, False),
    ("Hello", True, True),
]


def default_model():
    env = os.environ.get("KVAD_MODEL_SMOLLM2")
    if env:
        return env
    home = os.environ.get("KVAD_HOME")
    if home and Path(home, "models", "smollm2-135m.gguf").exists():
        return str(Path(home, "models", "smollm2-135m.gguf"))
    return str(Path.home() / ".cache" / "kvad" / "models" / "smollm2-135m.gguf")


def main():
    root = Path(__file__).resolve().parent.parent
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", nargs="?", default=default_model())
    ap.add_argument("-o", "--out", default=str(root / "tests" / "fixtures" / "tokenizer" / "smollm2.json"))
    args = ap.parse_args()

    try:
        import llama_cpp
    except ImportError:
        sys.exit("make_tokenizer_reference: needs llama-cpp-python (pip install llama-cpp-python)")
    if not Path(args.model).exists():
        sys.exit(f"make_tokenizer_reference: model not found: {args.model}")

    llm = llama_cpp.Llama(model_path=args.model, vocab_only=True, verbose=False)
    cases = []
    for text, add_special, parse_special in CASES:
        ids = llm.tokenize(text.encode("utf-8"), add_bos=add_special, special=parse_special)
        case = {"text": text, "add_special": add_special, "parse_special": parse_special, "ids": ids}
        # llama.cpp's detokenization of the same ids (control tokens shown
        # when special parsing was on).
        detok = llm.detokenize(ids, special=parse_special)
        try:
            case["detok"] = detok.decode("utf-8")
        except UnicodeDecodeError:
            pass
        cases.append(case)

    out = {
        "source": f"llama.cpp via llama-cpp-python {llama_cpp.__version__}, Llama(vocab_only=True).tokenize(text, add_bos, special)",
        "model": Path(args.model).name,
        "n_vocab": llm.n_vocab(),
        "cases": cases,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {len(cases)} cases to {args.out}")


if __name__ == "__main__":
    main()
