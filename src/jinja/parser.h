// Parser of the Jinja2 chat-template engine: tokens (lexer.h) to the syntax
// tree of parse.h. Source: jinja2 3.1 parser.py (the grammar, one function
// per precedence level, named as there). Statements are in parse.cpp,
// expressions in parse_expr.cpp.
//
// Internal to src/jinja; the public API is chat_template.h.
#pragma once
#include <algorithm>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "jinja/lexer.h"
#include "jinja/parse.h"

namespace kvad::jinja {

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
  Body subparse(std::initializer_list<std::string_view> ends, std::string* found);
  void end_tag();
  std::unique_ptr<Stmt> parse_statement();
  std::unique_ptr<Stmt> parse_if();
  std::unique_ptr<Stmt> parse_for();
  std::unique_ptr<Stmt> parse_set();
  void parse_signature(std::vector<MacroParam>& params);
  std::unique_ptr<Stmt> parse_macro();
  void macro_body(Stmt& s, std::string_view end_name);
  std::unique_ptr<Stmt> parse_call_block();
  std::unique_ptr<Stmt> parse_filter_block();
  std::unique_ptr<Stmt> parse_with();
  Target expr_to_target(const Expr& e, const Token& at) const;
  Target parse_assign_target(bool with_tuple, bool name_only, std::initializer_list<std::string_view> extra_end,
                             bool with_namespace);

  // --- expressions ---
  bool is_tuple_end(std::initializer_list<std::string_view> extra_end) const;
  ExprPtr parse_tuple(bool simplified, bool with_condexpr, std::initializer_list<std::string_view> extra_end,
                      bool explicit_parentheses);
  ExprPtr parse_expression(bool with_condexpr);
  ExprPtr parse_condexpr();
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr binary(BinOp op, ExprPtr l, ExprPtr r, const Token& at) const;
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_primary();
  ExprPtr parse_postfix(ExprPtr n);
  ExprPtr parse_filter_expr(ExprPtr n);
  ExprPtr parse_subscript(ExprPtr n);
  ExprPtr parse_subscribed();
  void parse_call_args(Expr& e);
  ExprPtr parse_call(ExprPtr n);
  std::string dotted_name();
  ExprPtr parse_filter(ExprPtr n, bool start_inline);
  void parse_filter_chain(std::vector<ExprPtr>& out, bool start_inline);
  ExprPtr parse_test(ExprPtr n);

  std::vector<Token> t_;
  size_t i_ = 0;
  const Positions& p_;
  const ParseLimits& lim_;
  int depth_ = 0;
  int loop_depth_ = 0;
  std::vector<UsageFlags> usage_;
};

}  // namespace kvad::jinja
