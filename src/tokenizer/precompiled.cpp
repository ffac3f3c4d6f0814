// SentencePiece's precompiled charsmap (precompiled.h). Sources:
// sentencepiece src/normalizer.cc (the blob's layout), darts-clone's
// DoubleArrayUnit and commonPrefixSearch (the trie), the spm_precompiled
// crate and tokenizers src/normalizers/precompiled.rs (how tokenizers
// applies it: grapheme by grapheme, the shortest key first).
#include "tokenizer/precompiled.h"

#include <unicode/ubrk.h>
#include <unicode/utext.h>

#include <cstring>
#include <memory>

#include "base/error.h"
#include "base/utf8.h"

namespace kvad::tok {

PrecompiledCharsmap::PrecompiledCharsmap(std::string_view blob, const std::string& name) {
  const std::string where = (name.empty() ? "" : name + ": ") + "precompiled_charsmap: ";
  if (blob.size() < 4) throw Error(where + "shorter than its 4-byte header");
  uint32_t trie_size = 0;
  for (int i = 3; i >= 0; --i) trie_size = trie_size << 8 | static_cast<uint8_t>(blob[static_cast<size_t>(i)]);
  if (trie_size > blob.size() - 4)
    throw Error(where + "its trie of " + std::to_string(trie_size) + " bytes passes the end of the " +
                std::to_string(blob.size()) + " bytes");
  if (trie_size % 4 != 0 || trie_size == 0)
    throw Error(where + "a trie of " + std::to_string(trie_size) + " bytes is not whole 4-byte units");
  units_.resize(trie_size / 4);
  for (size_t i = 0; i < units_.size(); ++i) {
    const auto* p = reinterpret_cast<const uint8_t*>(blob.data() + 4 + 4 * i);
    units_[i] = uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
  }
  normalized_.assign(blob.substr(4 + trie_size));
}

std::optional<std::string_view> PrecompiledCharsmap::transform(std::string_view chunk) const {
  // darts-clone unit: label (bits 0-7 and 31), has_leaf (bit 8), offset
  // (bits 10-31, shifted left by 8 when bit 9 is set), value (bits 0-30).
  auto offset = [](uint32_t u) { return (u >> 10) << ((u & (1u << 9)) >> 6); };
  const size_t n = units_.size();
  size_t pos = offset(units_[0]);
  for (size_t i = 0; i < chunk.size(); ++i) {
    const uint8_t c = static_cast<uint8_t>(chunk[i]);
    pos ^= c;
    if (pos >= n) return std::nullopt;
    const uint32_t u = units_[pos];
    if ((u & ((1u << 31) | 0xFF)) != c) return std::nullopt;
    pos ^= offset(u);
    if (pos >= n) return std::nullopt;
    if ((u >> 8) & 1) {  // the first (shortest) key found is the one used
      const size_t v = units_[pos] & ((1u << 31) - 1);
      if (v >= normalized_.size()) return std::nullopt;
      const size_t end = normalized_.find('\0', v);
      return std::string_view(normalized_).substr(v, (end == std::string::npos ? normalized_.size() : end) - v);
    }
  }
  return std::nullopt;
}

namespace {

struct BreakIteratorClose {
  void operator()(UBreakIterator* b) const { ubrk_close(b); }
};

// Extended grapheme cluster boundaries of valid UTF-8 `s`, as byte offsets
// (0 and s.size() included).
std::vector<size_t> grapheme_bounds(std::string_view s) {
  thread_local std::unique_ptr<UBreakIterator, BreakIteratorClose> bi;
  UErrorCode st = U_ZERO_ERROR;
  if (!bi) {
    bi.reset(ubrk_open(UBRK_CHARACTER, "", nullptr, 0, &st));
    if (U_FAILURE(st) || !bi) throw Error(std::string("ICU: cannot open a character break iterator: ") + u_errorName(st));
  }
  UText* ut = utext_openUTF8(nullptr, s.data(), static_cast<int64_t>(s.size()), &st);
  ubrk_setUText(bi.get(), ut, &st);
  std::vector<size_t> out;
  if (U_SUCCESS(st))
    for (int32_t p = ubrk_first(bi.get()); p != UBRK_DONE; p = ubrk_next(bi.get())) out.push_back(static_cast<size_t>(p));
  utext_close(ut);
  if (U_FAILURE(st)) throw Error(std::string("ICU: grapheme segmentation failed: ") + u_errorName(st));
  return out;
}

}  // namespace

bool PrecompiledCharsmap::normalize(std::string& s) const {
  if (s.empty()) return false;
  const std::vector<size_t> b = grapheme_bounds(s);
  std::string out;
  out.reserve(s.size());
  bool first_removed = false;
  for (size_t gi = 0; gi + 1 < b.size(); ++gi) {
    const std::string_view g = std::string_view(s).substr(b[gi], b[gi + 1] - b[gi]);
    if (g.size() < 6) {
      if (const auto t = transform(g)) {
        if (gi == 0 && t->empty()) first_removed = true;
        out += *t;
        continue;
      }
    }
    for (size_t i = 0; i < g.size();) {
      const size_t len = std::min<size_t>(std::max(utf8::seq_len(static_cast<uint8_t>(g[i])), 1), g.size() - i);
      const std::string_view ch = g.substr(i, len);
      const auto t = transform(ch);
      if (gi == 0 && i == 0 && t && t->empty()) first_removed = true;
      out += t ? *t : ch;
      i += len;
    }
  }
  s.swap(out);
  return first_removed;
}

std::optional<std::string> base64_decode(std::string_view text) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  while (!text.empty() && text.back() == '=') text.remove_suffix(1);
  if (text.size() % 4 == 1) return std::nullopt;
  std::string out;
  out.reserve(text.size() / 4 * 3 + 2);
  uint32_t acc = 0;
  int bits = 0;
  for (char c : text) {
    const int v = val(c);
    if (v < 0) return std::nullopt;
    acc = (acc << 6 | static_cast<uint32_t>(v)) & 0xFFFFFF;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xFF);
    }
  }
  return out;
}

std::string base64_encode(std::string_view bytes) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t v = uint32_t{static_cast<uint8_t>(bytes[i])} << 16 |
                       uint32_t{static_cast<uint8_t>(bytes[i + 1])} << 8 | static_cast<uint8_t>(bytes[i + 2]);
    out += k[v >> 18], out += k[(v >> 12) & 63], out += k[(v >> 6) & 63], out += k[v & 63];
  }
  if (i < bytes.size()) {
    uint32_t v = uint32_t{static_cast<uint8_t>(bytes[i])} << 16;
    if (i + 1 < bytes.size()) v |= uint32_t{static_cast<uint8_t>(bytes[i + 1])} << 8;
    out += k[v >> 18], out += k[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? k[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

}  // namespace kvad::tok
