// Unicode character classes, case mapping and normalization forms as HF
// `tokenizers` (PyPI) applies them: its Rust crates' tables, probed from the
// package by tools/make_unicode_tables.py (unicode_data.cpp), so that kvad
// agrees with it on every code point, unassigned ones included. The Hangul
// syllables are algorithmic (Unicode 15.0, section 3.12). Internal header.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvad::tok::uni {

enum Prop : uint8_t {
  kWhitespace = 1,  ///< Rust char::is_whitespace (White_Space)
  kPunct = 2,       ///< BERT punctuation: ASCII punctuation or a P* category
  kMn = 4,          ///< general category Mn (BertNormalizer's accent stripping)
  kMark = 8,        ///< a combining mark, M* (the StripAccents normalizer)
  kOther = 16,      ///< removed by BertNormalizer clean_text: C* (Cc Cf Cn Co), U+0000, U+FFFD; not \t \n \r
  kNumeric = 32,    ///< Rust char::is_numeric (N*; the Digits pre-tokenizer)
  kWord = 64,       ///< Rust regex \w (the Whitespace pre-tokenizer, single_word added tokens)
};

uint8_t props(uint32_t cp);
inline bool is_whitespace(uint32_t cp) { return props(cp) & kWhitespace; }
/// BertNormalizer's CJK ideograph ranges (tokenizers normalizers/bert.rs).
bool is_chinese_char(uint32_t cp);

/// Valid UTF-8 -> code points, and back.
std::u32string decode(std::string_view utf8);
std::string encode(std::u32string_view cps);
/// `text` with every byte that starts no valid UTF-8 sequence (RFC 3629: no
/// overlong forms, surrogates or code points past U+10FFFF) replaced by
/// U+FFFD; returns false (and leaves `out` alone) when `text` was valid.
bool sanitize(std::string_view text, std::string& out);

/// The code points of a regex class as Oniguruma (tokenizers' regex engine)
/// has it: "L", "Lu", "Ll", "Lt", "Lm", "Lo", "M", "Mn", "N", "Nd", "P", "S",
/// "Z" (\p{..}) and "s", "w", "d" (the escapes), as sorted inclusive
/// (first, last) ranges; false for another name.
bool regex_class(std::string_view name, std::vector<std::pair<uint32_t, uint32_t>>& out);

/// Full lowercase mapping (Rust char::to_lowercase, one char at a time).
std::u32string lowercase(std::u32string_view s);
/// The four normalization forms (UAX #15).
std::u32string nfd(std::u32string_view s);
std::u32string nfkd(std::u32string_view s);
std::u32string nfc(std::u32string_view s);
std::u32string nfkc(std::u32string_view s);

}  // namespace kvad::tok::uni
