// Small UTF-8 helpers (RFC 3629).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kvad::utf8 {

/// Length in bytes of the sequence a lead byte starts: 1..4, or 0 for a
/// continuation byte or a byte that never starts a sequence (0x80..0xBF, 0xF8..0xFF).
inline int seq_len(uint8_t lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 0;
}

/// Number of bytes at the end of `s` that form an incomplete (but so far
/// valid-looking) UTF-8 sequence; 0 when `s` ends on a sequence boundary.
/// Streaming output holds these bytes back until the sequence completes.
inline size_t incomplete_tail(std::string_view s) {
  size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    uint8_t c = static_cast<uint8_t>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte, keep looking
    int len = seq_len(c);
    if (len > static_cast<int>(back)) return back;
    return 0;
  }
  return 0;
}

/// Appends the UTF-8 encoding of code point `cp` to `out`.
inline void append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

/// Decodes one code point starting at s[i]; advances i. Invalid bytes decode
/// as U+FFFD and advance by one byte, so the loop always terminates.
inline uint32_t decode(std::string_view s, size_t& i) {
  uint8_t c = static_cast<uint8_t>(s[i]);
  int len = seq_len(c);
  if (len == 1) { ++i; return c; }
  if (len == 0 || i + len > s.size()) { ++i; return 0xFFFD; }
  uint32_t cp = c & (0xFF >> (len + 1));
  for (int k = 1; k < len; ++k) {
    uint8_t cc = static_cast<uint8_t>(s[i + k]);
    if ((cc & 0xC0) != 0x80) { ++i; return 0xFFFD; }
    cp = (cp << 6) | (cc & 0x3F);
  }
  i += len;
  return cp;
}

}  // namespace kvad::utf8
