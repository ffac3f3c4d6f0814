// Lexer and parser of the Jinja2 chat-template engine (see parse.h).
// Source: jinja2 3.1 lexer.py (tokeniter: OptionalLStrip, trim_blocks via the
// block-suffix newline, bracket balancing of end tags) and parser.py (the
// grammar, one function per precedence level, named as there).
#include "jinja/parse.h"

#include <algorithm>
#include <cstring>
#include <initializer_list>

#include "base/utf8.h"

namespace kvad::jinja {

namespace {

enum class Tok { Data, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, Eof };

struct Token {
  Tok type;
  std::string text;  // Data, Name, String (decoded), Op
  int64_t ival = 0;
  double fval = 0;
  size_t pos = 0;
};

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

[[noreturn]] void fail_at(const Positions& p, size_t pos, std::string msg) {
  throw TemplateFailure{std::move(msg), p.line(pos), p.column(pos), false};
}

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

// --- parser ------------------------------------------------------------------

class Parser {
 public:
  Parser(std::vector<Token> toks, const Positions& pos, const ParseLimits& lim)
      : t_(std::move(toks)), p_(pos), lim_(lim) {}

  Body parse_template() {
    std::string end;
    Body b = subparse({}, &end);
    return b;
  }

 private:
  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& pp) : p(pp) {
      if (++p.depth_ > p.lim_.max_nesting * 4) p.fail("template nested too deeply (more than " +
                                                      std::to_string(p.lim_.max_nesting) + " levels)");
    }
    ~DepthGuard() { --p.depth_; }
  };
  struct UsageFlags {
    bool varargs = false, kwargs = false, caller = false;
  };

  const Token& cur() const { return t_[i_]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  void next() {
    if (i_ + 1 < t_.size()) ++i_;
  }
  [[noreturn]] void fail(std::string msg) const { fail_at(p_, cur().pos, std::move(msg)); }
  [[noreturn]] void fail_tok(const Token& t, std::string msg) const { fail_at(p_, t.pos, std::move(msg)); }

  bool is_op(std::string_view o) const { return cur().type == Tok::Op && cur().text == o; }
  bool is_name(std::string_view n) const { return cur().type == Tok::Name && cur().text == n; }
  bool skip_op(std::string_view o) {
    if (!is_op(o)) return false;
    next();
    return true;
  }
  bool skip_name(std::string_view n) {
    if (!is_name(n)) return false;
    next();
    return true;
  }
  std::string tok_desc(const Token& t) const {
    if (t.type == Tok::Op || t.type == Tok::Name) return t.text;
    return describe(t.type);
  }
  void expect_op(std::string_view o) {
    if (!skip_op(o)) fail("expected token '" + std::string(o) + "', got '" + tok_desc(cur()) + "'");
  }
  std::string expect_name() {
    if (cur().type != Tok::Name) fail("expected name, got '" + tok_desc(cur()) + "'");
    std::string n = cur().text;
    next();
    return n;
  }
  void expect(Tok t) {
    if (cur().type != t)
      fail(std::string("expected token '") + describe(t) + "', got '" + tok_desc(cur()) + "'");
    next();
  }

  ExprPtr node(ExprKind k, const Token& at) const {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = p_.line(at.pos);
    e->column = p_.column(at.pos);
    return e;
  }
  std::unique_ptr<Stmt> stmt(StmtKind k, const Token& at) const {
    auto s = std::make_unique<Stmt>();
    s->kind = k;
    s->line = p_.line(at.pos);
    s->column = p_.column(at.pos);
    return s;
  }

  // --- statements ---

  // Parses until a block whose first name is in `ends`; leaves that name as
  // the current token and stores it in *found.
  Body subparse(std::initializer_list<std::string_view> ends, std::string* found) {
    DepthGuard g(*this);
    Body body;
    while (true) {
      const Token& t = cur();
      switch (t.type) {
        case Tok::Data: {
          auto s = stmt(StmtKind::Text, t);
          s->text = t.text;
          body.push_back(std::move(s));
          next();
          break;
        }
        case Tok::VarBegin: {
          auto s = stmt(StmtKind::Print, t);
          next();
          s->expr = parse_tuple(false, true, {}, false);
          expect(Tok::VarEnd);
          body.push_back(std::move(s));
          break;
        }
        case Tok::BlockBegin: {
          next();
          if (cur().type == Tok::Name &&
              std::find(ends.begin(), ends.end(), std::string_view(cur().text)) != ends.end()) {
            *found = cur().text;
            return body;
          }
          body.push_back(parse_statement());
          break;
        }
        case Tok::Eof: {
          if (ends.size() == 0) return body;
          std::string want;
          for (auto e : ends) want += (want.empty() ? "'" : " or '") + std::string(e) + "'";
          fail("Unexpected end of template. Jinja was looking for the following tags: " + want + ".");
        }
        default: fail("unexpected '" + tok_desc(t) + "'");
      }
    }
  }

  // Consumes `{% end... %}` whose name is current.
  void end_tag() {
    next();
    expect(Tok::BlockEnd);
  }

  std::unique_ptr<Stmt> parse_statement() {
    const Token& t = cur();
    if (t.type != Tok::Name) fail("tag name expected");
    const std::string& n = t.text;
    if (n == "if") return parse_if();
    if (n == "for") return parse_for();
    if (n == "set") return parse_set();
    if (n == "macro") return parse_macro();
    if (n == "call") return parse_call_block();
    if (n == "filter") return parse_filter_block();
    if (n == "with") return parse_with();
    if (n == "print") {
      auto s = stmt(StmtKind::Print, t);
      next();
      s->expr = parse_tuple(false, true, {}, false);
      expect(Tok::BlockEnd);
      return s;
    }
    if (n == "break" || n == "continue") {
      auto s = stmt(n == "break" ? StmtKind::Break : StmtKind::Continue, t);
      if (loop_depth_ == 0) fail("'" + n + "' outside loop");
      next();
      expect(Tok::BlockEnd);
      return s;
    }
    if (n == "generation") {
      auto s = stmt(StmtKind::Scope, t);
      next();
      expect(Tok::BlockEnd);
      std::string end;
      s->body = subparse({"endgeneration"}, &end);
      end_tag();
      return s;
    }
    if (n == "extends" || n == "include" || n == "import" || n == "from" || n == "block" || n == "autoescape" ||
        n == "do" || n == "trans" || n == "debug")
      fail("unsupported tag '" + n + "' (chat templates are rendered without loaders or extensions)");
    fail("Encountered unknown tag '" + n + "'.");
  }

  std::unique_ptr<Stmt> parse_if() {
    auto s = stmt(StmtKind::If, cur());
    next();
    ExprPtr cond = parse_tuple(false, false, {}, false);
    expect(Tok::BlockEnd);
    while (true) {
      std::string end;
      Body body = subparse({"elif", "else", "endif"}, &end);
      s->branches.emplace_back(std::move(cond), std::move(body));
      next();
      if (end == "elif") {
        cond = parse_tuple(false, false, {}, false);
        expect(Tok::BlockEnd);
        continue;
      }
      if (end == "else") {
        expect(Tok::BlockEnd);
        s->else_body = subparse({"endif"}, &end);
        end_tag();
      } else {
        expect(Tok::BlockEnd);
      }
      return s;
    }
  }

  std::unique_ptr<Stmt> parse_for() {
    auto s = stmt(StmtKind::For, cur());
    next();
    s->target = parse_assign_target(true, false, {"in"}, false);
    if (!skip_name("in")) fail("expected 'in', got '" + tok_desc(cur()) + "'");
    s->expr = parse_tuple(false, false, {"recursive"}, false);
    if (skip_name("if")) s->filter = parse_expression(true);
    if (is_name("recursive")) fail("unsupported: recursive for loops");
    expect(Tok::BlockEnd);
    ++loop_depth_;
    std::string end;
    s->body = subparse({"endfor", "else"}, &end);
    --loop_depth_;
    if (end == "else") {
      next();
      expect(Tok::BlockEnd);
      s->else_body = subparse({"endfor"}, &end);
    }
    end_tag();
    return s;
  }

  std::unique_ptr<Stmt> parse_set() {
    const Token& t = cur();
    next();
    Target target = parse_assign_target(true, false, {}, true);
    if (skip_op("=")) {
      auto s = stmt(StmtKind::Set, t);
      s->target = std::move(target);
      s->expr = parse_tuple(false, true, {}, false);
      expect(Tok::BlockEnd);
      return s;
    }
    auto s = stmt(StmtKind::SetBlock, t);
    s->target = std::move(target);
    if (is_op("|")) parse_filter_chain(s->filters, false);
    expect(Tok::BlockEnd);
    std::string end;
    s->body = subparse({"endset"}, &end);
    end_tag();
    return s;
  }

  void parse_signature(std::vector<MacroParam>& params) {
    expect_op("(");
    while (!is_op(")")) {
      if (!params.empty()) expect_op(",");
      MacroParam p;
      p.name = expect_name();
      if (skip_op("=")) p.default_value = parse_expression(true);
      else if (!params.empty() && params.back().default_value) fail("non-default argument follows default argument");
      params.push_back(std::move(p));
    }
    expect_op(")");
  }

  std::unique_ptr<Stmt> parse_macro() {
    auto s = stmt(StmtKind::Macro, cur());
    next();
    s->name = expect_name();
    parse_signature(s->params);
    expect(Tok::BlockEnd);
    macro_body(*s, "endmacro");
    return s;
  }

  void macro_body(Stmt& s, std::string_view end_name) {
    usage_.emplace_back();
    int saved_loops = loop_depth_;
    loop_depth_ = 0;
    std::string end;
    s.body = subparse({end_name}, &end);
    loop_depth_ = saved_loops;
    s.uses_varargs = usage_.back().varargs;
    s.uses_kwargs = usage_.back().kwargs;
    s.uses_caller = usage_.back().caller;
    usage_.pop_back();
    end_tag();
  }

  std::unique_ptr<Stmt> parse_call_block() {
    auto s = stmt(StmtKind::CallBlock, cur());
    next();
    if (is_op("(")) parse_signature(s->params);
    const Token& at = cur();
    s->expr = parse_expression(true);
    if (s->expr->kind != ExprKind::Call) fail_tok(at, "expected call");
    expect(Tok::BlockEnd);
    macro_body(*s, "endcall");
    return s;
  }

  std::unique_ptr<Stmt> parse_filter_block() {
    auto s = stmt(StmtKind::FilterBlock, cur());
    next();
    parse_filter_chain(s->filters, true);
    expect(Tok::BlockEnd);
    std::string end;
    s->body = subparse({"endfilter"}, &end);
    end_tag();
    return s;
  }

  std::unique_ptr<Stmt> parse_with() {
    auto s = stmt(StmtKind::With, cur());
    next();
    while (cur().type != Tok::BlockEnd) {
      if (!s->assigns.empty()) expect_op(",");
      Target t = parse_assign_target(true, false, {}, false);
      expect_op("=");
      s->assigns.emplace_back(std::move(t), parse_expression(true));
    }
    expect(Tok::BlockEnd);
    std::string end;
    s->body = subparse({"endwith"}, &end);
    end_tag();
    return s;
  }

  Target expr_to_target(const Expr& e, const Token& at) const {
    Target t;
    t.line = e.line;
    if (e.kind == ExprKind::Name) {
      t.kind = Target::Kind::Name;
      t.name = e.name;
      if (t.name == "true" || t.name == "false" || t.name == "none" || t.name == "True" || t.name == "False" ||
          t.name == "None")
        fail_tok(at, "can't assign to constant '" + t.name + "'");
      return t;
    }
    if (e.kind == ExprKind::Tuple) {
      t.kind = Target::Kind::Tuple;
      for (const auto& i : e.items) t.items.push_back(expr_to_target(*i, at));
      return t;
    }
    fail_tok(at, "can't assign to this expression");
  }

  Target parse_assign_target(bool with_tuple, bool name_only, std::initializer_list<std::string_view> extra_end,
                             bool with_namespace) {
    const Token& at = cur();
    if (with_namespace && cur().type == Tok::Name && peek().type == Tok::Op && peek().text == ".") {
      Target t;
      t.kind = Target::Kind::NsAttr;
      t.line = p_.line(at.pos);
      t.name = cur().text;
      next();
      next();
      t.attr = expect_name();
      return t;
    }
    if (name_only) {
      Target t;
      t.line = p_.line(at.pos);
      t.name = expect_name();
      return t;
    }
    ExprPtr e = with_tuple ? parse_tuple(true, true, extra_end, false) : parse_primary();
    if (e->kind == ExprKind::Const) {
      fail_tok(at, "can't assign to constant");
    }
    // Names that parse_primary turned into constants are rejected above.
    return expr_to_target(*e, at);
  }

  // --- expressions ---

  bool is_tuple_end(std::initializer_list<std::string_view> extra_end) const {
    const Token& t = cur();
    if (t.type == Tok::VarEnd || t.type == Tok::BlockEnd || t.type == Tok::Eof) return true;
    if (t.type == Tok::Op && t.text == ")") return true;
    if (t.type == Tok::Name)
      for (auto e : extra_end)
        if (t.text == e) return true;
    return false;
  }

  ExprPtr parse_tuple(bool simplified, bool with_condexpr, std::initializer_list<std::string_view> extra_end,
                      bool explicit_parentheses) {
    const Token& at = cur();
    std::vector<ExprPtr> args;
    bool is_tuple = false;
    while (true) {
      if (!args.empty()) expect_op(",");
      if (is_tuple_end(extra_end)) break;
      if (simplified) args.push_back(parse_primary());
      else args.push_back(parse_expression(with_condexpr));
      if (is_op(",")) is_tuple = true;
      else break;
    }
    if (!is_tuple) {
      if (!args.empty()) return std::move(args[0]);
      if (!explicit_parentheses) fail("Expected an expression, got '" + tok_desc(cur()) + "'");
    }
    auto e = node(ExprKind::Tuple, at);
    e->items = std::move(args);
    return e;
  }

  ExprPtr parse_expression(bool with_condexpr) { return with_condexpr ? parse_condexpr() : parse_or(); }

  ExprPtr parse_condexpr() {
    DepthGuard g(*this);
    const Token& at = cur();
    ExprPtr expr1 = parse_or();
    while (skip_name("if")) {
      ExprPtr expr2 = parse_or();
      ExprPtr expr3;
      if (skip_name("else")) expr3 = parse_condexpr();
      auto e = node(ExprKind::CondExpr, at);
      e->a = std::move(expr1);  // value when true
      e->b = std::move(expr2);  // condition
      e->c = std::move(expr3);  // value when false (may be null)
      expr1 = std::move(e);
    }
    return expr1;
  }

  ExprPtr parse_or() {
    DepthGuard g(*this);
    ExprPtr left = parse_and();
    while (is_name("or")) {
      auto e = node(ExprKind::Or, cur());
      next();
      e->a = std::move(left);
      e->b = parse_and();
      left = std::move(e);
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      auto e = node(ExprKind::And, cur());
      next();
      e->a = std::move(left);
      e->b = parse_not();
      left = std::move(e);
    }
    return left;
  }

  ExprPtr parse_not() {
    DepthGuard g(*this);
    if (is_name("not")) {
      auto e = node(ExprKind::Not, cur());
      next();
      e->a = parse_not();
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const Token& at = cur();
    ExprPtr expr = parse_math1();
    std::vector<ExprPtr> operands;
    std::vector<CmpOp> ops;
    while (true) {
      CmpOp op;
      if (cur().type == Tok::Op && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                    cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
        const std::string& o = cur().text;
        op = o == "==" ? CmpOp::Eq : o == "!=" ? CmpOp::Ne : o == "<" ? CmpOp::Lt : o == "<=" ? CmpOp::Le
             : o == ">" ? CmpOp::Gt : CmpOp::Ge;
        next();
      } else if (is_name("in")) {
        op = CmpOp::In;
        next();
      } else if (is_name("not") && peek().type == Tok::Name && peek().text == "in") {
        op = CmpOp::NotIn;
        next();
        next();
      } else {
        break;
      }
      ops.push_back(op);
      operands.push_back(parse_math1());
    }
    if (ops.empty()) return expr;
    auto e = node(ExprKind::Compare, at);
    e->items.push_back(std::move(expr));
    for (auto& o : operands) e->items.push_back(std::move(o));
    e->cmp = std::move(ops);
    return e;
  }

  ExprPtr binary(BinOp op, ExprPtr l, ExprPtr r, const Token& at) const {
    auto e = node(ExprKind::Binary, at);
    e->op = op;
    e->a = std::move(l);
    e->b = std::move(r);
    return e;
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& at = cur();
      BinOp op = cur().text == "+" ? BinOp::Add : BinOp::Sub;
      next();
      left = binary(op, std::move(left), parse_concat(), at);
    }
    return left;
  }

  ExprPtr parse_concat() {
    const Token& at = cur();
    ExprPtr first = parse_math2();
    if (!is_op("~")) return first;
    auto e = node(ExprKind::Concat, at);
    e->items.push_back(std::move(first));
    while (skip_op("~")) e->items.push_back(parse_math2());
    return e;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& at = cur();
      const std::string& o = cur().text;
      BinOp op = o == "*" ? BinOp::Mul : o == "/" ? BinOp::Div : o == "//" ? BinOp::FloorDiv : BinOp::Mod;
      next();
      left = binary(op, std::move(left), parse_pow(), at);
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      const Token& at = cur();
      next();
      left = binary(BinOp::Pow, std::move(left), parse_unary(true), at);
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard g(*this);
    ExprPtr n;
    if (is_op("-") || is_op("+")) {
      auto e = node(is_op("-") ? ExprKind::Neg : ExprKind::Pos, cur());
      next();
      e->a = parse_unary(false);
      n = std::move(e);
    } else {
      n = parse_primary();
    }
    n = parse_postfix(std::move(n));
    if (with_filter) n = parse_filter_expr(std::move(n));
    return n;
  }

  ExprPtr parse_primary() {
    DepthGuard g(*this);
    const Token& t = cur();
    switch (t.type) {
      case Tok::Name: {
        auto e = node(ExprKind::Const, t);
        if (t.text == "true" || t.text == "True") e->value = Value::boolean(true);
        else if (t.text == "false" || t.text == "False") e->value = Value::boolean(false);
        else if (t.text == "none" || t.text == "None") e->value = Value::none();
        else {
          e->kind = ExprKind::Name;
          e->name = t.text;
          for (auto& u : usage_) {
            if (t.text == "varargs") u.varargs = true;
            if (t.text == "kwargs") u.kwargs = true;
            if (t.text == "caller") u.caller = true;
          }
        }
        next();
        return e;
      }
      case Tok::String: {
        auto e = node(ExprKind::Const, t);
        std::string s = t.text;
        next();
        while (cur().type == Tok::String) {  // adjacent literals concatenate
          s += cur().text;
          next();
        }
        e->value = Value::string(std::move(s));
        return e;
      }
      case Tok::Int: {
        auto e = node(ExprKind::Const, t);
        e->value = Value::integer(t.ival);
        next();
        return e;
      }
      case Tok::Float: {
        auto e = node(ExprKind::Const, t);
        e->value = Value::number(t.fval);
        next();
        return e;
      }
      case Tok::Op: {
        if (t.text == "(") {
          next();
          ExprPtr e = parse_tuple(false, true, {}, true);
          expect_op(")");
          return e;
        }
        if (t.text == "[") {
          auto e = node(ExprKind::List, t);
          next();
          while (!is_op("]")) {
            if (!e->items.empty()) expect_op(",");
            if (is_op("]")) break;
            e->items.push_back(parse_expression(true));
          }
          expect_op("]");
          return e;
        }
        if (t.text == "{") {
          auto e = node(ExprKind::Dict, t);
          next();
          while (!is_op("}")) {
            if (!e->items.empty()) expect_op(",");
            if (is_op("}")) break;
            e->items.push_back(parse_expression(true));
            expect_op(":");
            e->items.push_back(parse_expression(true));
          }
          expect_op("}");
          return e;
        }
        break;
      }
      default: break;
    }
    fail("unexpected '" + tok_desc(t) + "'");
  }

  ExprPtr parse_postfix(ExprPtr n) {
    while (true) {
      if (is_op(".") || is_op("[")) n = parse_subscript(std::move(n));
      else if (is_op("(")) n = parse_call(std::move(n));
      else return n;
    }
  }

  ExprPtr parse_filter_expr(ExprPtr n) {
    while (true) {
      if (is_op("|")) n = parse_filter(std::move(n), false);
      else if (is_name("is")) n = parse_test(std::move(n));
      else if (is_op("(")) n = parse_call(std::move(n));
      else return n;
    }
  }

  ExprPtr parse_subscript(ExprPtr n) {
    const Token& t = cur();
    next();
    if (t.text == ".") {
      const Token& a = cur();
      if (a.type == Tok::Name) {
        auto e = node(ExprKind::GetAttr, t);
        e->a = std::move(n);
        e->name = a.text;
        next();
        return e;
      }
      if (a.type != Tok::Int) fail("expected name or number");
      auto e = node(ExprKind::GetItem, t);
      e->a = std::move(n);
      e->b = node(ExprKind::Const, a);
      e->b->value = Value::integer(a.ival);
      next();
      return e;
    }
    // '['
    std::vector<ExprPtr> args;
    while (!is_op("]")) {
      if (!args.empty()) expect_op(",");
      args.push_back(parse_subscribed());
    }
    expect_op("]");
    ExprPtr arg;
    if (args.size() == 1) {
      arg = std::move(args[0]);
    } else {
      for (const auto& a : args)
        if (a->kind == ExprKind::Slice) fail_tok(t, "multi-dimensional slicing is not supported");
      arg = node(ExprKind::Tuple, t);
      arg->items = std::move(args);
    }
    if (arg->kind == ExprKind::Slice) {  // a[b:c:d]: Slice node holds the object in `a`
      arg->a = std::move(n);
      return arg;
    }
    auto e = node(ExprKind::GetItem, t);
    e->a = std::move(n);
    e->b = std::move(arg);
    return e;
  }

  ExprPtr parse_subscribed() {
    const Token& at = cur();
    ExprPtr start, stop, step;
    if (is_op(":")) {
      next();
    } else {
      ExprPtr e = parse_expression(true);
      if (!is_op(":")) return e;
      next();
      start = std::move(e);
    }
    if (!is_op(":") && !is_op("]") && !is_op(",")) stop = parse_expression(true);
    if (is_op(":")) {
      next();
      if (!is_op("]") && !is_op(",")) step = parse_expression(true);
    }
    auto s = node(ExprKind::Slice, at);
    s->b = std::move(start);
    s->c = std::move(stop);
    s->d = std::move(step);
    return s;
  }

  void parse_call_args(Expr& e) {
    const Token& open = cur();
    expect_op("(");
    bool require_comma = false;
    auto ensure = [&](bool ok) {
      if (!ok) fail_tok(open, "invalid syntax for function call expression");
    };
    while (!is_op(")")) {
      if (require_comma) {
        expect_op(",");
        if (is_op(")")) break;
      }
      if (is_op("*")) {
        ensure(!e.dyn_args && !e.dyn_kwargs);
        next();
        e.dyn_args = parse_expression(true);
      } else if (is_op("**")) {
        ensure(!e.dyn_kwargs);
        next();
        e.dyn_kwargs = parse_expression(true);
      } else if (cur().type == Tok::Name && peek().type == Tok::Op && peek().text == "=") {
        ensure(!e.dyn_kwargs);
        std::string key = cur().text;
        next();
        next();
        e.kwargs.emplace_back(std::move(key), parse_expression(true));
      } else {
        ensure(!e.dyn_args && !e.dyn_kwargs && e.kwargs.empty());
        e.items.push_back(parse_expression(true));
      }
      require_comma = true;
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr n) {
    auto e = node(ExprKind::Call, cur());
    e->a = std::move(n);
    parse_call_args(*e);
    return e;
  }

  std::string dotted_name() {
    std::string name = expect_name();
    while (is_op(".")) {
      next();
      name += '.';
      name += expect_name();
    }
    return name;
  }

  ExprPtr parse_filter(ExprPtr n, bool start_inline) {
    while (is_op("|") || start_inline) {
      if (!start_inline) next();
      const Token& at = cur();
      auto e = node(ExprKind::Filter, at);
      e->name = dotted_name();
      if (is_op("(")) parse_call_args(*e);
      e->a = std::move(n);
      n = std::move(e);
      start_inline = false;
    }
    return n;
  }

  // {% filter a|b(x) %} and {% set x | a %}: a chain with no input expression.
  void parse_filter_chain(std::vector<ExprPtr>& out, bool start_inline) {
    while (is_op("|") || start_inline) {
      if (!start_inline) next();
      auto e = node(ExprKind::Filter, cur());
      e->name = dotted_name();
      if (is_op("(")) parse_call_args(*e);
      out.push_back(std::move(e));
      start_inline = false;
    }
  }

  ExprPtr parse_test(ExprPtr n) {
    const Token& at = cur();
    next();  // 'is'
    bool negated = skip_name("not");
    auto e = node(ExprKind::Test, at);
    e->name = dotted_name();
    e->negated = negated;
    e->a = std::move(n);
    const Token& t = cur();
    if (is_op("(")) {
      parse_call_args(*e);
    } else if ((t.type == Tok::Name || t.type == Tok::String || t.type == Tok::Int || t.type == Tok::Float ||
                is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail("You cannot chain multiple tests with is");
      e->items.push_back(parse_postfix(parse_primary()));
    }
    return e;
  }

  std::vector<Token> t_;
  size_t i_ = 0;
  const Positions& p_;
  const ParseLimits& lim_;
  int depth_ = 0;
  int loop_depth_ = 0;
  std::vector<UsageFlags> usage_;
};

}  // namespace

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

std::shared_ptr<const Program> parse(std::string_view source, const ParseLimits& limits) {
  if (source.size() > limits.max_source_bytes)
    fail("template source is " + std::to_string(source.size()) + " bytes, more than the limit of " +
         std::to_string(limits.max_source_bytes));
  // Newlines normalized to \n; one trailing newline dropped (keep_trailing_newline=False).
  std::string src;
  src.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      src += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      src += source[i];
    }
  }
  if (!src.empty() && src.back() == '\n') src.pop_back();
  Positions pos(src);
  Lexer lexer(src, pos);
  std::vector<Token> toks = lexer.run();
  Parser parser(std::move(toks), pos, limits);
  auto prog = std::make_shared<Program>();
  prog->body = parser.parse_template();
  return prog;
}

}  // namespace kvad::jinja
