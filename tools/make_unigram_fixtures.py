#!/usr/bin/env python3
"""Adds two Unigram families to tests/fixtures/hf_tokenizer/ (the format of
tools/make_hf_tokenizer_fixtures.py, whose string generator and case writer
this reuses):

  unigram         a Unigram model trained here with HF `tokenizers` (PyPI) in
                  the shape of T5/ALBERT files: NFKC normalizer, Metaspace
                  pre-tokenizer and decoder, unk_id, </s> appended by the post
                  processor
  unigram-bytefb  the same vocabulary plus <0x00>..<0xFF> pieces and
                  byte_fallback (an overlay on unigram)

    ~/.cache/kvad/tools-venv/bin/python tools/make_unigram_fixtures.py [--n 1500]

The trained vocabulary is stored, so the tests never need Python; training
again (--retrain) may give another vocabulary (tokenizers' trainer is
parallel), and the cases are always made from the stored one.
"""
import argparse
import json
import os
import random
import sys

import tokenizers
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_hf_tokenizer_fixtures as base  # noqa: E402


def train(texts):
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
    trainer = trainers.UnigramTrainer(vocab_size=8000, special_tokens=["<pad>", "</s>", "<unk>"], unk_token="<unk>",
                                      show_progress=False)
    tok.train_from_iterator(texts, trainer)
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", pair="$A </s> $B </s>",
                                                       special_tokens=[("</s>", 1)])
    return tok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--peer", default="/work/shared/peer-data/tokenizer")
    ap.add_argument("--n", type=int, default=1500, help="generated strings per family")
    ap.add_argument("--retrain", action="store_true")
    a = ap.parse_args()
    out = base.FIXTURES
    texts = base.peer_strings(a.peer)
    path = os.path.join(out, "unigram.tokenizer.json.gz")
    if a.retrain or not os.path.exists(path):
        rng = random.Random("kvad-unigram-train")
        corpus = texts + base.generate(rng, [], 4000)
        j = json.loads(train(corpus).to_str())
        base.write_gz(path, j)
    import gzip
    j = json.loads(gzip.decompress(open(path, "rb").read()))
    fams = {"unigram": j}
    fb = json.loads(json.dumps(j))
    have = {p for p, _ in fb["model"]["vocab"]}
    fb["model"]["vocab"] += [[f"<0x{b:02X}>", -30.0] for b in range(256) if f"<0x{b:02X}>" not in have]
    fb["model"]["byte_fallback"] = True
    fams["unigram-bytefb"] = fb
    for name, tj in fams.items():
        tok = Tokenizer.from_str(json.dumps(tj))
        specials = [t.content for t in tok.get_added_tokens_decoder().values()]
        rng = random.Random(f"kvad-{name}")
        rows = base.cases(tok, texts + base.generate(rng, specials, a.n))
        ref = {"file": "unigram.tokenizer.json.gz"} if name == "unigram" else {
            "base": "unigram.tokenizer.json.gz", "overlay": base.overlay(j, tj)}
        fx = {"family": name, "tokenizer": ref, "tokenizers": tokenizers.__version__, "cases": rows}
        size = base.write_gz(os.path.join(out, f"{name}.cases.json.gz"), fx)
        print(f"{name}: {len(rows)} strings, {size} bytes", file=sys.stderr)
    fam_path = os.path.join(out, "families.txt")
    names = open(fam_path).read().split()
    for name in fams:
        if name not in names:
            names.append(name)
    with open(fam_path, "w") as f:
        f.write("\n".join(names) + "\n")


if __name__ == "__main__":
    main()
