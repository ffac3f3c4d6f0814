// Lookups in the generated tables (unicode_data.cpp) and the normalization
// algorithms of UAX #15: full decomposition from the tables, canonical
// reordering by combining class, canonical composition of unblocked pairs.
#include "tokenizer/unicode.h"

#include <algorithm>

#include "base/utf8.h"
#include "tokenizer/unicode_tables.h"

namespace kvad::tok::uni {

namespace {

// Hangul syllables (Unicode 15.0 section 3.12).
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

// Index of `cp` in a sorted key array, or -1.
long find_key(const uint32_t* keys, size_t n, uint32_t cp) {
  const uint32_t* it = std::lower_bound(keys, keys + n, cp);
  return (it != keys + n && *it == cp) ? static_cast<long>(it - keys) : -1;
}

// Appends the mapping of `cp` in a (keys, off, data) table; false when absent.
bool append_mapped(const uint32_t* keys, const uint32_t* off, const uint32_t* data, size_t n, uint32_t cp,
                   std::u32string& out) {
  long i = find_key(keys, n, cp);
  if (i < 0) return false;
  out.append(data + off[i], data + off[i + 1]);
  return true;
}

uint8_t ccc(uint32_t cp) {
  using namespace data;
  size_t lo = 0, hi = kCccCount;
  while (lo < hi) {  // the last triple whose first <= cp
    size_t mid = (lo + hi) / 2;
    if (kCcc[3 * mid] <= cp) lo = mid + 1;
    else hi = mid;
  }
  if (lo == 0) return 0;
  const uint32_t* t = kCcc + 3 * (lo - 1);
  return cp <= t[1] ? static_cast<uint8_t>(t[2]) : 0;
}

uint32_t compose_pair(uint32_t a, uint32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount)
    return a + (b - kTBase);
  using namespace data;
  size_t lo = 0, hi = kComposeCount;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    const uint32_t* t = kCompose + 3 * mid;
    if (t[0] < a || (t[0] == a && t[1] < b)) lo = mid + 1;
    else hi = mid;
  }
  if (lo < kComposeCount && kCompose[3 * lo] == a && kCompose[3 * lo + 1] == b) return kCompose[3 * lo + 2];
  return 0;
}

std::u32string decompose(std::u32string_view s, bool compat) {
  using namespace data;
  std::u32string out;
  out.reserve(s.size());
  for (char32_t c : s) {
    const uint32_t cp = c;
    if (cp >= kSBase && cp < kSBase + kSCount) {
      const uint32_t i = cp - kSBase;
      out += static_cast<char32_t>(kLBase + i / kNCount);
      out += static_cast<char32_t>(kVBase + (i % kNCount) / kTCount);
      if (i % kTCount) out += static_cast<char32_t>(kTBase + i % kTCount);
      continue;
    }
    if (compat && append_mapped(kNfkdKeys, kNfkdOff, kNfkdData, kNfkdCount, cp, out)) continue;
    if (append_mapped(kNfdKeys, kNfdOff, kNfdData, kNfdCount, cp, out)) continue;
    out += c;
  }
  // Canonical ordering: each run of non-starters sorted (stably) by class.
  for (size_t i = 0; i < out.size();) {
    if (ccc(out[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < out.size() && ccc(out[j]) != 0) ++j;
    if (j - i > 1)
      std::stable_sort(out.begin() + i, out.begin() + j, [](char32_t a, char32_t b) { return ccc(a) < ccc(b); });
    i = j;
  }
  return out;
}

std::u32string compose(std::u32string d) {
  std::u32string out;
  out.reserve(d.size());
  long starter = -1;
  uint8_t last_cc = 0;
  for (char32_t c : d) {
    const uint8_t cc = ccc(c);
    if (starter >= 0) {
      const bool adjacent = out.size() == static_cast<size_t>(starter) + 1;
      if (adjacent || (last_cc != 0 && last_cc < cc)) {
        if (uint32_t p = compose_pair(out[starter], c)) {
          out[starter] = static_cast<char32_t>(p);
          continue;
        }
      }
    }
    if (cc == 0) starter = static_cast<long>(out.size());
    last_cc = cc;
    out += c;
  }
  return out;
}

}  // namespace

uint8_t props(uint32_t cp) {
  using namespace data;
  const uint32_t* it = std::upper_bound(kPropStart, kPropStart + kPropCount, cp);
  return it == kPropStart ? 0 : kPropBits[it - kPropStart - 1];
}

bool regex_class(std::string_view name, std::vector<std::pair<uint32_t, uint32_t>>& out) {
  using namespace data;
  for (size_t i = 0; i < kRegexClassCount; ++i) {
    if (name != kRegexClassNames[i]) continue;
    out.clear();
    for (uint32_t k = kRegexClassOff[i]; k < kRegexClassOff[i + 1]; ++k)
      out.emplace_back(kRegexClassRanges[2 * k], kRegexClassRanges[2 * k + 1]);
    return true;
  }
  return false;
}

bool is_chinese_char(uint32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

std::u32string decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) out += static_cast<char32_t>(utf8::decode(s, i));
  return out;
}

std::string encode(std::u32string_view cps) {
  std::string out;
  out.reserve(cps.size());
  for (char32_t c : cps) utf8::append(out, c);
  return out;
}

bool sanitize(std::string_view text, std::string& out) {
  size_t i = 0;
  auto valid_at = [&](size_t k) -> size_t {  // length of a valid sequence at k, 0 if none
    const auto c = static_cast<uint8_t>(text[k]);
    if (c < 0x80) return 1;
    int len = utf8::seq_len(c);
    if (len < 2 || k + len > text.size()) return 0;
    uint32_t cp = c & (0xFF >> (len + 1));
    for (int j = 1; j < len; ++j) {
      const auto cc = static_cast<uint8_t>(text[k + j]);
      if ((cc & 0xC0) != 0x80) return 0;
      cp = (cp << 6) | (cc & 0x3F);
    }
    static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000)) return 0;
    return static_cast<size_t>(len);
  };
  while (i < text.size()) {
    size_t n = valid_at(i);
    if (n == 0) break;
    i += n;
  }
  if (i == text.size()) return false;
  out.assign(text.substr(0, i));
  while (i < text.size()) {
    size_t n = valid_at(i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else {
      out.append(text, i, n);
      i += n;
    }
  }
  return true;
}

std::u32string lowercase(std::u32string_view s) {
  using namespace data;
  std::u32string out;
  out.reserve(s.size());
  for (char32_t c : s) {
    if (c < 0x80) {
      out += (c >= 'A' && c <= 'Z') ? c + 32 : c;
      continue;
    }
    if (!append_mapped(kLowerKeys, kLowerOff, kLowerData, kLowerCount, c, out)) out += c;
  }
  return out;
}

std::u32string nfd(std::u32string_view s) { return decompose(s, false); }
std::u32string nfkd(std::u32string_view s) { return decompose(s, true); }
std::u32string nfc(std::u32string_view s) { return compose(decompose(s, false)); }
std::u32string nfkc(std::u32string_view s) { return compose(decompose(s, true)); }

}  // namespace kvad::tok::uni
