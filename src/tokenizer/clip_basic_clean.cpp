// transformers 4's BasicTokenizer(do_lower_case=True, strip_accents=False,
// do_split_on_punc=False).tokenize(text), joined with spaces: the clean-up
// the slow CLIPTokenizer does when ftfy is not installed
// (models/bert/tokenization_bert.py, models/clip/tokenization_clip.py).
// Written here rather than as tokenizers' BertNormalizer because Python's
// rules differ from the Rust crate's: _is_control removes every code point
// whose unicodedata category starts with C -- unassigned and private-use
// ones included, which BertNormalizer keeps -- and str.lower() gives a
// final sigma. Python's categories are those of its Unicode version (14.0
// for Python 3.11); kvad takes "assigned" from the Oniguruma classes it
// already carries (L, M, N, P, S, Z), so code points assigned in a later
// Unicode version than the user's Python are where the two can differ.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "base/utf8.h"
#include "tokenizer/unicode.h"

namespace kvad::clip_detail {

namespace {

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

Ranges merged(std::initializer_list<const char*> names) {
  Ranges all;
  for (const char* n : names) {
    Ranges one;
    tok::uni::regex_class(n, one);
    all.insert(all.end(), one.begin(), one.end());
  }
  std::sort(all.begin(), all.end());
  Ranges out;
  for (const auto& r : all) {
    if (!out.empty() && r.first <= out.back().second + 1) out.back().second = std::max(out.back().second, r.second);
    else out.push_back(r);
  }
  return out;
}

bool in(const Ranges& rs, uint32_t cp) {
  auto it = std::upper_bound(rs.begin(), rs.end(), cp, [](uint32_t c, const auto& r) { return c < r.first; });
  return it != rs.begin() && cp <= std::prev(it)->second;
}

const Ranges& assigned_non_c() {  // every category but C*
  static const Ranges r = merged({"L", "M", "N", "P", "S", "Z"});
  return r;
}
const Ranges& cased() {  // Lu, Ll, Lt: Python's Final_Sigma "cased letter"
  static const Ranges r = merged({"Lu", "Ll", "Lt"});
  return r;
}
const Ranges& case_ignorable() {  // Mn, Lm and the word-internal punctuation of Case_Ignorable
  static const Ranges r = [] {
    Ranges x = merged({"Mn", "Lm"});
    for (uint32_t c : {0x27u, 0x2Eu, 0x3Au, 0x5Eu, 0x60u, 0xA8u, 0xADu, 0xAFu, 0xB4u, 0xB7u, 0xB8u, 0x2018u, 0x2019u,
                       0x2024u, 0x2027u})
      x.push_back({c, c});
    std::sort(x.begin(), x.end());
    return x;
  }();
  return r;
}

bool is_python_control(uint32_t cp) {
  if (cp == '\t' || cp == '\n' || cp == '\r') return false;
  if (cp >= 0xD800 && cp < 0xE000) return true;
  return !in(assigned_non_c(), cp);
}

bool is_python_whitespace(uint32_t cp) {  // " \t\n\r" or category Zs
  if (cp == ' ' || cp == '\t' || cp == '\n' || cp == '\r') return true;
  if (cp == 0x2028 || cp == 0x2029) return false;  // Zl, Zp
  static const Ranges z = merged({"Z"});
  return in(z, cp);
}

// BasicTokenizer._is_chinese_char's ranges (the Rust BertNormalizer's
// start the fifth at U+2B920, Python's at U+2B820).
bool is_python_chinese(uint32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

bool is_python_space(uint32_t cp) {  // str.split()'s separators that survive _clean_text
  return cp == ' ' || cp == 0x2028 || cp == 0x2029;
}

// str.lower() of one whitespace-free token: the full lowercase mapping, and
// capital sigma to final sigma after a cased letter (case-ignorables
// skipped) when no cased letter follows (Unicode 3.13, Final_Sigma).
std::u32string python_lower(const std::u32string& t) {
  std::u32string out;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == 0x03A3) {
      auto cased_at = [&](size_t k) { return in(cased(), t[k]); };
      bool before = false, after = false;
      for (size_t k = i; k-- > 0;) {
        if (in(case_ignorable(), t[k])) continue;
        before = cased_at(k);
        break;
      }
      for (size_t k = i + 1; k < t.size(); ++k) {
        if (in(case_ignorable(), t[k])) continue;
        after = cased_at(k);
        break;
      }
      out += (before && !after) ? char32_t{0x03C2} : char32_t{0x03C3};
      continue;
    }
    out += tok::uni::lowercase(std::u32string_view(&t[i], 1));
  }
  return out;
}

}  // namespace

std::string basic_clean(std::string_view text) {
  // _clean_text and _tokenize_chinese_chars.
  std::u32string s;
  for (size_t i = 0; i < text.size();) {
    const uint32_t cp = utf8::decode(text, i);
    if (cp == 0 || cp == 0xFFFD || is_python_control(cp)) continue;
    if (is_python_whitespace(cp)) {
      s += U' ';
    } else if (is_python_chinese(cp)) {
      s += U' ';
      s += static_cast<char32_t>(cp);
      s += U' ';
    } else {
      s += static_cast<char32_t>(cp);
    }
  }
  s = tok::uni::nfc(s);
  // whitespace_tokenize, lower() per token, " ".join.
  std::string out;
  std::u32string token;
  auto flush = [&] {
    if (token.empty()) return;
    if (!out.empty()) out += ' ';
    out += tok::uni::encode(python_lower(token));
    token.clear();
  };
  for (char32_t c : s) {
    if (is_python_space(c)) flush();
    else token += c;
  }
  flush();
  return out;
}

}  // namespace kvad::clip_detail
