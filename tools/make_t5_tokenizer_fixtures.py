#!/usr/bin/env python3
"""Makes tests/fixtures/t5_tokenizer/: a SentencePiece Unigram model in T5's
shape, and what transformers' T5Tokenizer (the class diffusers' FLUX
pipelines load tokenizer_2/ with) and sentencepiece make of strings, which
tests/tokenizer/test_t5_tokenizer.cpp compares kvad against.

    /work/wt/venv-pictures/bin/python tools/make_t5_tokenizer_fixtures.py [--retrain] [--n 800]

spiece.model.gz   trained here with sentencepiece (PyPI) as T5's was: Unigram,
                  nmt_nfkc normalization (its precompiled_charsmap is the same
                  rule set as T5's), <pad> 0, </s> 1, <unk> 2, no <s>, 2000
                  pieces, on the peer-data suites' strings and generated ones.
                  Stored, so the tests never need Python; --retrain makes it again.
tokenizer.json.gz transformers' T5Tokenizer.from_pretrained(folder with only
                  spiece.model).save_pretrained()'s tokenizer.json, with its
                  precompiled_charsmap (checked here to be base64 of the
                  model's) replaced by "@spiece.model" to keep the fixture
                  small; the test puts it back.
cases.json.gz     {"transformers", "sentencepiece", "cases": [[text, ids, sp]],
                  "flux": [[prompt, max_length, ids]]}: ids are
                  T5Tokenizer(text).input_ids (</s> appended, added tokens
                  matched); sp is sentencepiece's encode(text) + [1] when the
                  text holds no added-token text, else null; flux rows are
                  tokenizer_2(prompt, padding="max_length", max_length=L,
                  truncation=True).input_ids as FluxPipeline._get_t5_prompt_embeds.
"""
import argparse
import base64
import gzip
import io
import json
import os
import random
import shutil
import sys
import tempfile

import sentencepiece as spm
import transformers
from transformers import T5Tokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_hf_tokenizer_fixtures as base  # noqa: E402

OUT = os.path.join(base.ROOT, "tests", "fixtures", "t5_tokenizer")
SPECIALS = ["</s>", "<pad>", "<unk>", "<extra_id_0>", "<extra_id_99>", "<extra_id_7>"]
# What SentencePiece's nmt_nfkc rules and tokenizers' grapheme walk act on.
TARGETED = [
    "e\u0301 a\u0300b E\u0301\u0323 \ufb01\u0301 \ufb01", "\uff76\uff9e \uff8a\uff9f a\uff9e \uff71", "\uff21\uff42\uff43 \uff11\uff12",
    "\u2460 \u00bd \u2163 \u33a1 \u2122", "line\r\nbreak\rx\ny\tz", "nb\u00a0sp\u2003em\u3000ideo", "zw\u200bj\u200dn\u200c",
    "\u1100\u1161\u11a8 \u1100\u1161 \uac00", "\U0001f44d\U0001f3fd \U0001f1eb\U0001f1f7 \U0001f468\u200d\U0001f469",
    "ctrl\x01\x07\x7f\x1f end", "\u0915\u094d\u0937 \u0928\u093f", "  lead and trail  ", "", " ", "\u2581x \u2581",
    "A Red FOX in fresh snow, 8k, (masterpiece:1.2)", "\u00c5ngstr\u00f6m \u212b \u0041\u030a",
]
FLUX = [("a red fox in fresh snow", 16), ("", 8), ("word " * 40, 16), ("x", 1), ("</s> <extra_id_0> done", 12),
        ("A photo of a cat wearing a tiny hat, studio light", 256)]


def train(texts):
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter([t for t in texts if t.strip()]), model_writer=buf, vocab_size=2000,
        model_type="unigram", pad_id=0, eos_id=1, unk_id=2, bos_id=-1, character_coverage=0.99, num_threads=1,
        normalization_rule_name="nmt_nfkc", minloglevel=2)
    return buf.getvalue()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--peer", default="/work/shared/peer-data/tokenizer")
    ap.add_argument("--n", type=int, default=800, help="generated strings")
    ap.add_argument("--retrain", action="store_true")
    a = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    texts = base.peer_strings(a.peer)
    model_path = os.path.join(OUT, "spiece.model.gz")
    if a.retrain or not os.path.exists(model_path):
        rng = random.Random("kvad-t5-train")
        with open(model_path, "wb") as f:
            f.write(gzip.compress(train(texts + base.generate(rng, [], 3000)), 9, mtime=0))
    model = gzip.decompress(open(model_path, "rb").read())
    tmp = tempfile.mkdtemp()
    try:
        open(os.path.join(tmp, "spiece.model"), "wb").write(model)
        tok = T5Tokenizer.from_pretrained(tmp)
        tok.save_pretrained(os.path.join(tmp, "saved"))
        tj = json.load(open(os.path.join(tmp, "saved", "tokenizer.json"), encoding="utf-8"))
    finally:
        shutil.rmtree(tmp)
    sp = spm.SentencePieceProcessor(model_proto=model)
    from sentencepiece import sentencepiece_model_pb2 as pb2
    proto = pb2.ModelProto()
    proto.ParseFromString(model)
    assert tj["normalizer"]["type"] == "Precompiled"
    assert base64.b64decode(tj["normalizer"]["precompiled_charsmap"]) == proto.normalizer_spec.precompiled_charsmap
    tj["normalizer"]["precompiled_charsmap"] = "@spiece.model"
    base.write_gz(os.path.join(OUT, "tokenizer.json.gz"), tj)

    rng = random.Random("kvad-t5-cases")
    strings = TARGETED + texts + base.generate(rng, SPECIALS, a.n)
    rows, differ = [], 0
    for t in strings:
        ids = tok(t).input_ids
        plain = not any(s in t for s in SPECIALS)
        sp_ids = sp.encode(t) + [1] if plain else None
        differ += plain and sp_ids != ids
        rows.append([t, ids, sp_ids])
    flux = [[p, n, tok(p, padding="max_length", max_length=n, truncation=True).input_ids] for p, n in FLUX]
    fx = {"transformers": transformers.__version__, "sentencepiece": spm.__version__, "cases": rows, "flux": flux}
    size = base.write_gz(os.path.join(OUT, "cases.json.gz"), fx)
    print(f"{len(rows)} strings ({differ} where sentencepiece differs from T5Tokenizer), {size} bytes",
          file=sys.stderr)
    write_broken(model)


# tests/fixtures/t5_tokenizer/broken: spiece.model bytes that must each be a clean error (fuzz_spiece_model's
# seeds); survives_*: malformed inside but readable (a charsmap whose trie points outside itself), which must
# load and tokenize without reading out of bounds.
def write_broken(model):
    d = os.path.join(OUT, "broken")
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        os.remove(os.path.join(d, f))

    def varint(v):
        out = bytearray()
        while True:
            b = v & 0x7F
            v >>= 7
            out.append(b | (0x80 if v else 0))
            if not v:
                return bytes(out)

    def field(num, wire, payload):
        return varint(num << 3 | wire) + (varint(len(payload)) + payload if wire == 2 else payload)

    piece = field(1, 2, field(1, 2, b"\xe2\x96\x81a") + field(2, 5, b"\x00\x00\x80\xbf") + field(3, 0, varint(1)))
    eos = field(1, 2, field(1, 2, b"</s>") + field(3, 0, varint(3)))
    ok = eos + piece + field(2, 2, field(42, 0, varint(0)) + field(41, 0, varint((1 << 64) - 1)))  # eos 0, no bos
    cases = {
        "empty": b"",
        "truncated_head": model[:1],
        "truncated_middle": model[: len(model) // 2],
        "truncated_last_byte": model[:-1],
        "varint_11_bytes": b"\x0a" + b"\xff" * 10 + b"\x01",
        "varint_unterminated": b"\x0a\xff\xff\xff",
        "huge_length": b"\x0a" + varint(1 << 62) + b"abc",
        "length_past_end": b"\x0a\x7f" + b"x" * 10,
        "nested_length_past_parent": field(1, 2, b"\x0a\x40abc"),
        "group_wire_type": b"\x0b\x0c",
        "wire_type_7": b"\x0f",
        "field_zero": b"\x02\x00",
        "pieces_as_varint": b"\x08\x01",
        "score_as_varint": field(1, 2, field(1, 2, b"a") + field(2, 0, varint(5))),
        "score_truncated": field(1, 2, field(1, 2, b"a") + b"\x15\x00\x00"),
        "type_out_of_range": field(1, 2, field(1, 2, b"a") + field(3, 0, varint(9))),
        "type_negative": field(1, 2, field(1, 2, b"a") + field(3, 0, varint((1 << 64) - 1))),
        "empty_piece": field(1, 2, field(1, 2, b"")),
        "piece_not_utf8": field(1, 2, field(1, 2, b"\xff\xfe")),
        "no_pieces": field(2, 2, field(3, 0, varint(1))),
        "unk_id_past_pieces": ok + field(2, 2, field(40, 0, varint(7))),
        "eos_id_below_minus_one": ok + field(2, 2, field(42, 0, varint((1 << 64) - 5))),
        "model_type_bpe": ok + field(2, 2, field(3, 0, varint(2))),
        "model_type_99": ok + field(2, 2, field(3, 0, varint(99))),
        "no_eos_piece": piece + field(2, 2, field(42, 0, varint((1 << 64) - 1)) + field(41, 0, varint((1 << 64) - 1))),
        "charsmap_short": ok + field(3, 2, field(2, 2, b"\x01\x00")),
        "charsmap_trie_past_end": ok + field(3, 2, field(2, 2, b"\xff\xff\x00\x00" + b"\x00" * 8)),
        "charsmap_trie_not_units": ok + field(3, 2, field(2, 2, b"\x06\x00\x00\x00" + b"\x00" * 8)),
        "charsmap_trie_zero": ok + field(3, 2, field(2, 2, b"\x00\x00\x00\x00abc")),
        "survives_charsmap_offsets_wild": ok + field(3, 2, field(2, 2, b"\x08\x00\x00\x00" + b"\xff" * 8 + b"x\x00")),
        "normalizer_name_as_varint": ok + field(3, 2, field(1, 0, varint(3))),
        "fixed64_truncated": ok + b"\x21\x00\x00",
    }
    for name, data in cases.items():
        with open(os.path.join(d, name + ".model"), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
