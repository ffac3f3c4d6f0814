// Lexer of the Jinja2 chat-template engine: template source to tokens
// (template data, tag delimiters, names, literals, operators).
// Source: jinja2 3.1 lexer.py (tokeniter: OptionalLStrip, trim_blocks via the
// block-suffix newline, bracket balancing of end tags).
//
// Internal to src/jinja; the public API is chat_template.h.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "jinja/value.h"

namespace kvad::jinja {

enum class Tok { Data, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, Eof };

struct Token {
  Tok type;
  std::string text;  // Data, Name, String (decoded), Op
  int64_t ival = 0;
  double fval = 0;
  size_t pos = 0;
};

const char* describe(Tok t);

// Line and column (1-based) of byte offsets in the normalized source.
class Positions {
 public:
  explicit Positions(const std::string& src) {
    starts_.push_back(0);
    for (size_t i = 0; i < src.size(); ++i)
      if (src[i] == '\n') starts_.push_back(i + 1);
  }
  int line(size_t pos) const {
    return static_cast<int>(std::upper_bound(starts_.begin(), starts_.end(), pos) - starts_.begin());
  }
  int column(size_t pos) const { return static_cast<int>(pos - starts_[line(pos) - 1]) + 1; }

 private:
  std::vector<size_t> starts_;
};

/// Throws TemplateFailure at the line and column of byte offset `pos`.
[[noreturn]] void fail_at(const Positions& p, size_t pos, std::string msg);

/// The tokens of `src` (newlines already normalized), ending with Eof.
/// Throws TemplateFailure on a lexical error.
std::vector<Token> lex(std::string src, const Positions& pos);

/// Decodes Python `unicode-escape` escapes in a string literal's body, as
/// jinja2's lexer does (\n \t \\ \' \" \xhh \uXXXX \UXXXXXXXX \ooo; unknown
/// escapes are kept). Throws TemplateFailure on a truncated escape.
std::string decode_escapes(std::string_view raw);

}  // namespace kvad::jinja
