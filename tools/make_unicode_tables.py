#!/usr/bin/env python3
"""Writes src/tokenizer/unicode_data.cpp: the Unicode tables kvad's
tokenizer.json normalizers and pre-tokenizers need, taken from HF `tokenizers`
(PyPI) itself by asking it about every code point.

Why probe instead of reading UnicodeData.txt: `tokenizers` answers from
several Rust crates, each with its own Unicode version (the standard library's
`char::is_whitespace` / `to_lowercase`, `unicode-normalization-alignments` for
NFD/NFC and combining marks, `unicode_categories` for the BERT punctuation,
"other" and nonspacing-mark classes). Asking it gives exactly its answers,
unassigned code points included.

    ~/.cache/kvad/tools-venv/bin/python tools/make_unicode_tables.py

The venv needs `tokenizers` (pip install tokenizers). Run it again after
updating the package; the test fixtures (make_hf_tokenizer_fixtures.py) show
whether kvad still agrees.
"""
import os
import sys
import unicodedata

import tokenizers
from tokenizers import normalizers as N
from tokenizers import pre_tokenizers as P

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src", "tokenizer", "unicode_data.cpp")
MAX_CP = 0x110000
HANGUL = range(0xAC00, 0xD7A4)

# Property bits (keep in step with src/tokenizer/unicode.h).
WHITESPACE, PUNCT, MN, MARK, OTHER, NUMERIC, WORD = 1, 2, 4, 8, 16, 32, 64


def code_points():
    for cp in range(MAX_CP):
        if 0xD800 <= cp < 0xE000:
            continue
        yield cp


def probe():
    ws = P.WhitespaceSplit()
    bert_pre = P.BertPreTokenizer()
    digits = P.Digits(individual_digits=True)
    white = P.Whitespace()
    strip_mn = N.BertNormalizer(clean_text=False, handle_chinese_chars=False, strip_accents=True, lowercase=False)
    strip_m = N.StripAccents()
    clean = N.BertNormalizer(clean_text=True, handle_chinese_chars=False, strip_accents=False, lowercase=False)
    lower, nfd, nfkd, nfc = N.Lowercase(), N.NFD(), N.NFKD(), N.NFC()

    props = [0] * MAX_CP
    lower_map, nfd_map, nfkd_map = {}, {}, {}
    for cp in code_points():
        c = chr(cp)
        p = 0
        if len(ws.pre_tokenize_str("a" + c + "b")) == 2:
            p |= WHITESPACE
        if len(bert_pre.pre_tokenize_str("a" + c + "b")) == 3:
            p |= PUNCT
        d = nfd.normalize_str(c)
        if d == c and strip_mn.normalize_str(c) == "":
            p |= MN
        if strip_m.normalize_str(c) == "":
            p |= MARK
        if clean.normalize_str(c) == "":
            p |= OTHER
        if len(digits.pre_tokenize_str("a" + c + "b")) == 3:
            p |= NUMERIC
        if len(white.pre_tokenize_str("a" + c)) == 1 and white.pre_tokenize_str("a" + c)[0][0] == "a" + c:
            p |= WORD
        props[cp] = p
        lo = lower.normalize_str(c)
        if lo != c:
            lower_map[cp] = lo
        if cp in HANGUL:
            continue  # algorithmic (unicode.cpp)
        if d != c:
            nfd_map[cp] = d
        kd = nfkd.normalize_str(c)
        if kd != d:
            nfkd_map[cp] = kd

    # Canonical combining classes: Python's table, dropping the marks that
    # tokenizers' (older) tables do not know: such a mark is not reordered
    # after U+0334 (class 1).
    ccc = {}
    for cp in code_points():
        k = unicodedata.combining(chr(cp))
        if k == 0:
            continue
        if k > 1 and nfd.normalize_str("a" + chr(cp) + "\u0334") != "a\u0334" + chr(cp):
            continue
        ccc[cp] = k

    # Primary composites: pairs (a, b) whose NFC in tokenizers is one code point.
    compose = []
    for cp in code_points():
        if cp in HANGUL:
            continue
        dec = unicodedata.decomposition(chr(cp))
        if not dec or dec.startswith("<"):
            continue
        parts = [int(x, 16) for x in dec.split()]
        if len(parts) != 2:
            continue
        if nfc.normalize_str(chr(parts[0]) + chr(parts[1])) == chr(cp):
            compose.append((parts[0], parts[1], cp))
    compose.sort()
    return props, lower_map, nfd_map, nfkd_map, ccc, compose


# Oniguruma's classes as tokenizers' regexes see them (Split, Replace): kvad
# compiles those regexes with PCRE2, whose Unicode tables are of another
# version, so unicode_regex.cpp writes these classes out as code point ranges.
REGEX_CLASSES = ["L", "Lu", "Ll", "Lt", "Lm", "Lo", "M", "Mn", "N", "Nd", "P", "S", "Z"]
REGEX_ESCAPES = ["s", "w", "d"]


def regex_ranges():
    out = []
    for name in REGEX_CLASSES + REGEX_ESCAPES:
        pat = "\\p{" + name + "}" if name in REGEX_CLASSES else "\\" + name
        rep = N.Replace(tokenizers.Regex(pat), "")
        rs = []
        for cp in code_points():
            if rep.normalize_str(chr(cp)) == "":
                if rs and rs[-1][1] == cp - 1:
                    rs[-1][1] = cp
                elif rs and rs[-1][1] == 0xD7FF and cp == 0xE000:
                    rs[-1][1] = cp  # surrogates never occur: bridge them
                else:
                    rs.append([cp, cp])
        out.append((name, rs))
    return out


def ranges(props):
    out, prev = [], None
    for cp in range(MAX_CP):
        v = props[cp] if not (0xD800 <= cp < 0xE000) else 0
        if v != prev:
            out.append((cp, v))
            prev = v
    return out


def emit_numbers(f, name, ctype, nums, per_line=64):
    f.write(f"const {ctype} {name}[] = {{\n")
    for i in range(0, len(nums), per_line):
        f.write("    " + ",".join(str(n) for n in nums[i:i + per_line]) + ",\n")
    f.write("};\n")


def emit_map(f, name, m):
    """cp -> sequence: kNAME_keys (cp), kNAME_off (offset into kNAME_data, n+1 entries)."""
    keys = sorted(m)
    data, offs = [], [0]
    for k in keys:
        data.extend(ord(ch) for ch in m[k])
        offs.append(len(data))
    emit_numbers(f, f"k{name}Keys", "uint32_t", keys)
    emit_numbers(f, f"k{name}Off", "uint32_t", offs)
    emit_numbers(f, f"k{name}Data", "uint32_t", data)
    f.write(f"const size_t k{name}Count = {len(keys)};\n\n")


def main():
    props, lower_map, nfd_map, nfkd_map, ccc, compose = probe()
    rs = ranges(props)
    ccc_ranges = []
    for cp in sorted(ccc):
        if ccc_ranges and ccc_ranges[-1][1] == cp - 1 and ccc_ranges[-1][2] == ccc[cp]:
            ccc_ranges[-1][1] = cp
        else:
            ccc_ranges.append([cp, cp, ccc[cp]])
    with open(OUT, "w", encoding="utf-8") as f:
        f.write("// Generated by tools/make_unicode_tables.py from HF tokenizers "
                f"{tokenizers.__version__} (Python unicodedata {unicodedata.unidata_version} for\n"
                "// combining classes and composition pairs). Do not edit; rerun the tool.\n"
                "// Layout: see unicode.h and unicode.cpp.\n")
        f.write('#include "tokenizer/unicode_tables.h"\n\nnamespace kvad::tok::uni::data {\n\n')
        emit_numbers(f, "kPropStart", "uint32_t", [r[0] for r in rs])
        emit_numbers(f, "kPropBits", "uint8_t", [r[1] for r in rs], 128)
        f.write(f"const size_t kPropCount = {len(rs)};\n\n")
        emit_map(f, "Lower", lower_map)
        emit_map(f, "Nfd", nfd_map)
        emit_map(f, "Nfkd", nfkd_map)
        emit_numbers(f, "kCcc", "uint32_t", [x for r in ccc_ranges for x in r])
        f.write(f"const size_t kCccCount = {len(ccc_ranges)};\n\n")
        emit_numbers(f, "kCompose", "uint32_t", [x for t in compose for x in t])
        f.write(f"const size_t kComposeCount = {len(compose)};\n\n")
        rx = regex_ranges()
        names = ",".join('"' + n + '"' for n, _ in rx)
        f.write(f"const char* const kRegexClassNames[] = {{{names}}};\n")
        offs, flat = [0], []
        for _, cls in rx:
            flat.extend(x for r in cls for x in r)
            offs.append(len(flat) // 2)
        emit_numbers(f, "kRegexClassOff", "uint32_t", offs)
        emit_numbers(f, "kRegexClassRanges", "uint32_t", flat)
        f.write(f"const size_t kRegexClassCount = {len(rx)};\n\n")
        f.write("}  // namespace kvad::tok::uni::data\n")
    print(f"wrote {OUT}: {len(rs)} property ranges, {len(lower_map)} lowercase, {len(nfd_map)} NFD, "
          f"{len(nfkd_map)} NFKD, {len(ccc_ranges)} ccc ranges, {len(compose)} compositions", file=sys.stderr)


if __name__ == "__main__":
    main()
