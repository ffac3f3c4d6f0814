#!/usr/bin/env python3
"""Adds the o200k-harmony family to tests/fixtures/hf_tokenizer/ (the format
of tools/make_hf_tokenizer_fixtures.py, whose strings and case writer this
reuses), and the same vocabulary as a vocab-only GGUF:

  o200k-harmony   a byte-level BPE trained here with HF `tokenizers` (PyPI)
                  in the shape of gpt-oss's tokenizer.json (o200k_harmony,
                  which is not downloadable here): pre-tokenizer Sequence of
                  Split(o200k's regex, Isolated) and ByteLevel(add_prefix_space
                  false, use_regex false), ByteLevel decoder, no normalizer,
                  BPE without ignore_merges, and Harmony's special tokens
                  (<|start|>, <|channel|>, <|message|>, <|end|>, ...) as added
                  tokens
  tests/fixtures/tokenizer/o200k-harmony.gguf
                  the same vocabulary and merges under llama.cpp's GGUF keys
                  (tokenizer.ggml.model "gpt2", tokenizer.ggml.pre "gpt-4o", as
                  llama.cpp's converter names o200k), for kvad's GGUF path

o200k's regex is tiktoken's o200k_base pattern, as gpt-oss's tokenizer.json
and llama.cpp (llama-vocab.cpp, LLAMA_VOCAB_PRE_TYPE_GPT4O, "original regex
from tokenizer.json") spell it.

    ~/.cache/kvad/tools-venv/bin/python tools/make_harmony_tokenizer_fixtures.py [--n 1500]

The trained vocabulary is stored (training again, --retrain, may give another
one); the cases are always made from the stored one.
"""
import argparse
import gzip
import json
import os
import random
import sys

import tokenizers
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_hf_tokenizer_fixtures as base  # noqa: E402

O200K = ("[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
         "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
         "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
# o200k_harmony's special tokens (the gpt-oss model card's Harmony tokens).
SPECIALS = ["<|startoftext|>", "<|endoftext|>", "<|return|>", "<|constrain|>", "<|channel|>", "<|start|>",
            "<|end|>", "<|message|>", "<|call|>"]
GGUF = os.path.join(base.ROOT, "tests", "fixtures", "tokenizer", "o200k-harmony.gguf")


def train(texts):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(O200K), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=6000, special_tokens=[], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer)
    tok.add_special_tokens(SPECIALS)
    return tok


def write_gguf(tj):
    import gguf
    vocab = tj["model"]["vocab"]
    n = max(vocab.values()) + 1
    added = {t["id"]: t["content"] for t in tj["added_tokens"]}
    n = max(n, max(added) + 1)
    tokens, types = [""] * n, [gguf.TokenType.NORMAL] * n
    for t, i in vocab.items():
        tokens[i] = t
    for i, t in added.items():
        tokens[i] = t
        types[i] = gguf.TokenType.CONTROL
    merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]
    w = gguf.GGUFWriter(GGUF, "gpt-oss")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-4o")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(tokens.index("<|startoftext|>"))
    w.add_eos_token_id(tokens.index("<|return|>"))
    w.add_add_bos_token(False)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return os.path.getsize(GGUF)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--peer", default="/work/shared/peer-data/tokenizer")
    ap.add_argument("--n", type=int, default=1500, help="generated strings")
    ap.add_argument("--retrain", action="store_true")
    a = ap.parse_args()
    out = base.FIXTURES
    texts = base.peer_strings(a.peer)
    path = os.path.join(out, "o200k-harmony.tokenizer.json.gz")
    if a.retrain or not os.path.exists(path):
        rng = random.Random("kvad-o200k-train")
        j = json.loads(train(texts + base.generate(rng, [], 6000)).to_str())
        base.write_gz(path, j)
    j = json.loads(gzip.decompress(open(path, "rb").read()))
    tok = Tokenizer.from_str(json.dumps(j))
    rng = random.Random("kvad-o200k-harmony")
    # Harmony-shaped text too: the special tokens between messages.
    harmony = ["<|start|>assistant<|channel|>analysis<|message|>Let me think.<|end|>",
               "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
               "{\"city\": \"Oslo\"}<|call|>"]
    rows = base.cases(tok, texts + harmony + base.generate(rng, SPECIALS, a.n))
    fx = {"family": "o200k-harmony", "tokenizer": {"file": "o200k-harmony.tokenizer.json.gz"},
          "tokenizers": tokenizers.__version__, "cases": rows}
    size = base.write_gz(os.path.join(out, "o200k-harmony.cases.json.gz"), fx)
    print(f"o200k-harmony: {len(rows)} strings, {size} bytes; gguf {write_gguf(j)} bytes", file=sys.stderr)
    fam_path = os.path.join(out, "families.txt")
    names = open(fam_path).read().split()
    if "o200k-harmony" not in names:
        names.append("o200k-harmony")
    with open(fam_path, "w") as f:
        f.write("\n".join(names) + "\n")


if __name__ == "__main__":
    main()
