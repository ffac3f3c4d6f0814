// Parser of the Jinja2 chat-template engine, statements, and parse() (see
// parse.h, parser.h). Source: jinja2 3.1 parser.py (the grammar, one
// function per precedence level, named as there).
#include "jinja/parse.h"

#include "jinja/lexer.h"
#include "jinja/parser.h"

namespace kvad::jinja {

// Parses until a block whose first name is in `ends`; leaves that name as
// the current token and stores it in *found.
Body Parser::subparse(std::initializer_list<std::string_view> ends, std::string* found) {
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
void Parser::end_tag() {
  next();
  expect(Tok::BlockEnd);
}

std::unique_ptr<Stmt> Parser::parse_statement() {
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

std::unique_ptr<Stmt> Parser::parse_if() {
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

std::unique_ptr<Stmt> Parser::parse_for() {
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

std::unique_ptr<Stmt> Parser::parse_set() {
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

void Parser::parse_signature(std::vector<MacroParam>& params) {
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

std::unique_ptr<Stmt> Parser::parse_macro() {
  auto s = stmt(StmtKind::Macro, cur());
  next();
  s->name = expect_name();
  parse_signature(s->params);
  expect(Tok::BlockEnd);
  macro_body(*s, "endmacro");
  return s;
}

void Parser::macro_body(Stmt& s, std::string_view end_name) {
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

std::unique_ptr<Stmt> Parser::parse_call_block() {
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

std::unique_ptr<Stmt> Parser::parse_filter_block() {
  auto s = stmt(StmtKind::FilterBlock, cur());
  next();
  parse_filter_chain(s->filters, true);
  expect(Tok::BlockEnd);
  std::string end;
  s->body = subparse({"endfilter"}, &end);
  end_tag();
  return s;
}

std::unique_ptr<Stmt> Parser::parse_with() {
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

Target Parser::expr_to_target(const Expr& e, const Token& at) const {
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

Target Parser::parse_assign_target(bool with_tuple, bool name_only, std::initializer_list<std::string_view> extra_end,
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
  std::vector<Token> toks = lex(src, pos);
  Parser parser(std::move(toks), pos, limits);
  auto prog = std::make_shared<Program>();
  prog->body = parser.parse_template();
  return prog;
}

}  // namespace kvad::jinja
