// Lexer of the Jinja2 chat-template engine (see lexer.h).
// Source: jinja2 3.1 lexer.py (tokeniter: OptionalLStrip, trim_blocks via the
// block-suffix newline, bracket balancing of end tags).
#include "jinja/lexer.h"

#include <cstring>

#include "base/utf8.h"

namespace kvad::jinja {

const char* describe(Tok t) {
  switch (t) {
    case Tok::Data: return "template data";
    case Tok::VarBegin: return "begin of print statement";
    case Tok::VarEnd: return "end of print statement";
    case Tok::BlockBegin: return "begin of statement block";
    case Tok::BlockEnd: return "end of statement block";
    case Tok::Name: return "name";
    case Tok::String: return "string";
    case Tok::Int: return "integer";
    case Tok::Float: return "float";
    case Tok::Op: return "operator";
    case Tok::Eof: return "end of template";
  }
  return "token";
}

[[noreturn]] void fail_at(const Positions& p, size_t pos, std::string msg) {
  throw TemplateFailure{std::move(msg), p.line(pos), p.column(pos), false};
}

namespace {

// Python's `\s` (str.isspace) at s[i]; returns the sequence length or 0.
size_t ws_len(std::string_view s, size_t i) {
  unsigned char b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) return is_space(b) ? 1 : 0;
  size_t j = i;
  uint32_t c = utf8::decode(s, j);
  return is_space(c) ? j - i : 0;
}

size_t skip_ws(std::string_view s, size_t i) {
  while (i < s.size()) {
    size_t n = ws_len(s, i);
    if (!n) break;
    i += n;
  }
  return i;
}

bool all_ws(std::string_view s) {
  size_t i = skip_ws(s, 0);
  return i == s.size();
}

bool starts(std::string_view s, size_t i, std::string_view what) {
  return s.size() >= i + what.size() && s.compare(i, what.size(), what) == 0;
}

bool is_name_start(unsigned char c) { return std::isalpha(c) || c == '_' || c >= 0x80; }
bool is_name_char(unsigned char c) { return std::isalnum(c) || c == '_' || c >= 0x80; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

class Lexer {
 public:
  Lexer(std::string src, const Positions& pos) : src_(std::move(src)), p_(pos) {}

  std::vector<Token> run() {
    size_t pos = 0;
    const size_t n = src_.size();
    while (pos < n) {
      size_t open = std::string::npos;
      for (size_t i = src_.find('{', pos); i != std::string::npos && i + 1 < n; i = src_.find('{', i + 1)) {
        char k = src_[i + 1];
        if (k == '{' || k == '%' || k == '#') {
          open = i;
          break;
        }
      }
      if (open == std::string::npos) {
        data(src_.substr(pos), pos);
        break;
      }
      char kind = src_[open + 1];
      char sign = (open + 2 < n && (src_[open + 2] == '-' || src_[open + 2] == '+')) ? src_[open + 2] : 0;
      size_t p = open + 2 + (sign ? 1 : 0);
      std::string text = lstrip_text(src_.substr(pos, open - pos), sign, kind != '{');
      data(std::move(text), pos);

      if (kind == '%') {
        size_t body = raw_begin(p);
        if (body != std::string::npos) {
          pos = raw_block(open, body);
          continue;
        }
      }
      if (kind == '#') {
        pos = comment(open, p);
        continue;
      }
      toks_.push_back(Token{kind == '{' ? Tok::VarBegin : Tok::BlockBegin, {}, 0, 0, open});
      pos = tag(p, kind == '{');
    }
    toks_.push_back(Token{Tok::Eof, {}, 0, 0, n});
    return std::move(toks_);
  }

 private:
  void data(std::string text, size_t pos) {
    if (!text.empty()) toks_.push_back(Token{Tok::Data, std::move(text), 0, 0, pos});
  }

  // jinja2's OptionalLStrip: `-` strips all whitespace before the tag; else,
  // for blocks and comments (lstrip_blocks), spaces and tabs between the
  // line start and the tag are removed.
  std::string lstrip_text(std::string text, char sign, bool lstrip_ok) {
    if (sign == '-') {
      size_t e = text.size();
      while (e > 0) {
        size_t start = e - 1;
        while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80 && e - start < 4) --start;
        if (ws_len(text, start) != e - start) break;
        e = start;
      }
      text.resize(e);
    } else if (sign != '+' && lstrip_ok) {
      size_t nl = text.rfind('\n');
      size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if ((l_pos > 0 || line_starting_) && l_pos < text.size() && all_ws(std::string_view(text).substr(l_pos)))
        text.resize(l_pos);
    }
    return text;
  }

  // `{% raw %}` (with -/+ markers): returns the offset of the raw body, or npos.
  size_t raw_begin(size_t p) const {
    size_t q = skip_ws(src_, p);
    if (!starts(src_, q, "raw")) return std::string::npos;
    q = skip_ws(src_, q + 3);
    if (starts(src_, q, "-%}")) return skip_ws(src_, q + 3);
    if (starts(src_, q, "%}")) return q + 2;
    return std::string::npos;
  }

  size_t raw_block(size_t open, size_t body) {
    line_starting_ = src_[body - 1] == '\n';
    for (size_t i = src_.find("{%", body); i != std::string::npos; i = src_.find("{%", i + 1)) {
      char sign = (i + 2 < src_.size() && (src_[i + 2] == '-' || src_[i + 2] == '+')) ? src_[i + 2] : 0;
      size_t q = skip_ws(src_, i + 2 + (sign ? 1 : 0));
      if (!starts(src_, q, "endraw")) continue;
      q = skip_ws(src_, q + 6);
      size_t end;
      if (starts(src_, q, "+%}")) end = q + 3;
      else if (starts(src_, q, "-%}")) end = skip_ws(src_, q + 3);
      else if (starts(src_, q, "%}")) end = q + 2 + (q + 2 < src_.size() && src_[q + 2] == '\n');
      else continue;
      data(lstrip_text(src_.substr(body, i - body), sign, true), body);
      line_starting_ = src_[end - 1] == '\n';
      return end;
    }
    fail_at(p_, open, "Missing end of raw directive");
  }

  size_t comment(size_t open, size_t p) {
    size_t q = src_.find("#}", p);
    if (q == std::string::npos) fail_at(p_, open, "Missing end of comment tag");
    size_t end;
    if (q > p && src_[q - 1] == '-') end = skip_ws(src_, q + 2);
    else if (q > p && src_[q - 1] == '+') end = q + 2;
    else end = q + 2 + (q + 2 < src_.size() && src_[q + 2] == '\n');
    line_starting_ = src_[end - 1] == '\n';
    return end;
  }

  // Tokens of one {{ ... }} or {% ... %}; returns the offset after its end.
  size_t tag(size_t p, bool var) {
    std::string stack;  // expected closing brackets
    const size_t n = src_.size();
    while (true) {
      if (stack.empty()) {
        size_t end = 0;
        if (var) {
          if (starts(src_, p, "-}}")) end = skip_ws(src_, p + 3);
          else if (starts(src_, p, "}}")) end = p + 2;
        } else {
          if (starts(src_, p, "+%}")) end = p + 3;
          else if (starts(src_, p, "-%}")) end = skip_ws(src_, p + 3);
          else if (starts(src_, p, "%}")) end = p + 2 + (p + 2 < n && src_[p + 2] == '\n');
        }
        if (end) {
          toks_.push_back(Token{var ? Tok::VarEnd : Tok::BlockEnd, {}, 0, 0, p});
          line_starting_ = src_[end - 1] == '\n';
          return end;
        }
      }
      if (p >= n)
        fail_at(p_, p, std::string("unexpected end of template, expected '") +
                           (var ? "end of print statement" : "end of statement block") + "'");
      if (size_t w = ws_len(src_, p)) {
        p += w;
        continue;
      }
      unsigned char c = static_cast<unsigned char>(src_[p]);
      if (is_digit(c)) {
        p = number(p);
      } else if (is_name_start(c)) {
        size_t q = p;
        while (q < n && is_name_char(static_cast<unsigned char>(src_[q]))) ++q;
        toks_.push_back(Token{Tok::Name, src_.substr(p, q - p), 0, 0, p});
        p = q;
      } else if (c == '\'' || c == '"') {
        p = string(p);
      } else {
        p = op(p, stack);
      }
    }
  }

  // Digits with single underscores between them ((\d+_)*\d+).
  size_t digits(size_t p) const {
    while (p < src_.size()) {
      if (is_digit(src_[p])) ++p;
      else if (src_[p] == '_' && p + 1 < src_.size() && is_digit(src_[p + 1]) && p > 0 && is_digit(src_[p - 1])) ++p;
      else break;
    }
    return p;
  }

  size_t number(size_t p) {
    const size_t n = src_.size();
    auto clean = [&](size_t a, size_t b) {
      std::string s;
      for (size_t i = a; i < b; ++i)
        if (src_[i] != '_') s += src_[i];
      return s;
    };
    // Hex, octal, binary.
    if (src_[p] == '0' && p + 2 < n && std::strchr("xXoObB", src_[p + 1]) && src_[p + 1] != 0) {
      int base = (src_[p + 1] == 'x' || src_[p + 1] == 'X') ? 16 : (src_[p + 1] == 'o' || src_[p + 1] == 'O') ? 8 : 2;
      size_t q = p + 2;
      std::string ds;
      while (q < n) {
        char ch = src_[q];
        int dv = is_digit(ch) ? ch - '0' : (ch >= 'a' && ch <= 'f') ? ch - 'a' + 10 : (ch >= 'A' && ch <= 'F') ? ch - 'A' + 10 : 99;
        if (ch == '_' ) { ++q; continue; }
        if (dv >= base) break;
        ds += ch;
        ++q;
      }
      if (!ds.empty()) {
        errno = 0;
        unsigned long long v = std::strtoull(ds.c_str(), nullptr, base);
        if (errno || v > static_cast<unsigned long long>(INT64_MAX)) fail_at(p_, p, "integer literal too large");
        toks_.push_back(Token{Tok::Int, {}, static_cast<int64_t>(v), 0, p});
        return q;
      }
    }
    size_t q = digits(p);
    bool is_float = false;
    if (p == 0 || src_[p - 1] != '.') {  // jinja2's float_re: (?<!\.)
      size_t r = q;
      if (r + 1 < n && src_[r] == '.' && is_digit(src_[r + 1])) {
        r = digits(r + 1);
        is_float = true;
      }
      if (r < n && (src_[r] == 'e' || src_[r] == 'E')) {
        size_t e = r + 1;
        if (e < n && (src_[e] == '+' || src_[e] == '-')) ++e;
        if (e < n && is_digit(src_[e])) {
          r = digits(e);
          is_float = true;
        }
      }
      if (is_float) {
        std::string s = clean(p, r);
        toks_.push_back(Token{Tok::Float, {}, 0, std::strtod(s.c_str(), nullptr), p});
        return r;
      }
    }
    std::string s = clean(p, q);
    errno = 0;
    unsigned long long v = std::strtoull(s.c_str(), nullptr, 10);
    if (errno || v > static_cast<unsigned long long>(INT64_MAX)) fail_at(p_, p, "integer literal too large");
    toks_.push_back(Token{Tok::Int, {}, static_cast<int64_t>(v), 0, p});
    return q;
  }

  size_t string(size_t p) {
    char quote = src_[p];
    size_t q = p + 1;
    while (q < src_.size() && src_[q] != quote) q += src_[q] == '\\' ? 2 : 1;
    if (q >= src_.size()) fail_at(p_, p, std::string("unexpected char '") + quote + "' (unterminated string)");
    try {
      toks_.push_back(Token{Tok::String, decode_escapes(std::string_view(src_).substr(p + 1, q - p - 1)), 0, 0, p});
    } catch (TemplateFailure& f) {
      fail_at(p_, p, f.message);
    }
    return q + 1;
  }

  size_t op(size_t p, std::string& stack) {
    static const char* const kOps[] = {"**", "//", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]",
                                       "(", ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", ";"};
    for (const char* o : kOps) {
      if (!starts(src_, p, o)) continue;
      char c = o[0];
      if (!o[1] && (c == '(' || c == '[' || c == '{')) {
        stack += c == '(' ? ')' : c == '[' ? ']' : '}';
      } else if (!o[1] && (c == ')' || c == ']' || c == '}')) {
        if (stack.empty()) fail_at(p_, p, std::string("unexpected '") + c + "'");
        if (stack.back() != c) fail_at(p_, p, std::string("unexpected '") + c + "', expected '" + stack.back() + "'");
        stack.pop_back();
      }
      toks_.push_back(Token{Tok::Op, o, 0, 0, p});
      return p + std::strlen(o);
    }
    size_t j = p;
    utf8::decode(src_, j);
    fail_at(p_, p, "unexpected char '" + src_.substr(p, j - p) + "'");
  }

  std::string src_;
  const Positions& p_;
  std::vector<Token> toks_;
  bool line_starting_ = true;
};

}  // namespace

std::vector<Token> lex(std::string src, const Positions& pos) { return Lexer(std::move(src), pos).run(); }

std::string decode_escapes(std::string_view raw) {
  std::string out;
  out.reserve(raw.size());
  auto hex = [&](size_t at, int n) -> uint32_t {
    if (at + n > raw.size()) fail("truncated \\" + std::string(1, raw[at - 1]) + " escape");
    uint32_t v = 0;
    for (int k = 0; k < n; ++k) {
      char c = raw[at + k];
      int d = is_digit(c) ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
      if (d < 0) fail("truncated \\" + std::string(1, raw[at - 1]) + " escape");
      v = v * 16 + d;
    }
    return v;
  };
  for (size_t i = 0; i < raw.size();) {
    char c = raw[i];
    if (c != '\\' || i + 1 >= raw.size()) {
      out += c;
      ++i;
      continue;
    }
    char e = raw[i + 1];
    switch (e) {
      case '\n': i += 2; continue;  // line continuation
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'v': out += '\v'; break;
      case 'x': utf8::append(out, hex(i + 2, 2)); i += 4; continue;
      case 'u': utf8::append(out, hex(i + 2, 4)); i += 6; continue;
      case 'U': {
        uint32_t v = hex(i + 2, 8);
        if (v > 0x10FFFF) fail("illegal Unicode character");
        utf8::append(out, v);
        i += 10;
        continue;
      }
      case 'N': fail("\\N{...} escapes are not supported");
      default:
        if (e >= '0' && e <= '7') {
          uint32_t v = 0;
          size_t j = i + 1;
          for (int k = 0; k < 3 && j < raw.size() && raw[j] >= '0' && raw[j] <= '7'; ++k, ++j) v = v * 8 + (raw[j] - '0');
          utf8::append(out, v);
          i = j;
          continue;
        }
        if (static_cast<unsigned char>(e) >= 0x80) {
          // jinja2 encodes the literal with backslashreplace before decoding
          // escapes, so "\é" becomes the text "\xe9".
          size_t j = i + 1;
          uint32_t cp = utf8::decode(raw, j);
          char buf[16];
          if (cp <= 0xFF) std::snprintf(buf, sizeof(buf), "\\x%02x", cp);
          else if (cp <= 0xFFFF) std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
          else std::snprintf(buf, sizeof(buf), "\\U%08x", cp);
          out += buf;
          i = j;
          continue;
        }
        out += '\\';
        out += e;
    }
    i += 2;
  }
  return out;
}

}  // namespace kvad::jinja
