// Parser of the Jinja2 chat-template engine, expressions (parser.h).
// Source: jinja2 3.1 parser.py (one function per precedence level, named
// as there).
#include "jinja/parser.h"

namespace kvad::jinja {

bool Parser::is_tuple_end(std::initializer_list<std::string_view> extra_end) const {
  const Token& t = cur();
  if (t.type == Tok::VarEnd || t.type == Tok::BlockEnd || t.type == Tok::Eof) return true;
  if (t.type == Tok::Op && t.text == ")") return true;
  if (t.type == Tok::Name)
    for (auto e : extra_end)
      if (t.text == e) return true;
  return false;
}

ExprPtr Parser::parse_tuple(bool simplified, bool with_condexpr, std::initializer_list<std::string_view> extra_end,
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

ExprPtr Parser::parse_expression(bool with_condexpr) { return with_condexpr ? parse_condexpr() : parse_or(); }

ExprPtr Parser::parse_condexpr() {
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

ExprPtr Parser::parse_or() {
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

ExprPtr Parser::parse_and() {
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

ExprPtr Parser::parse_not() {
  DepthGuard g(*this);
  if (is_name("not")) {
    auto e = node(ExprKind::Not, cur());
    next();
    e->a = parse_not();
    return e;
  }
  return parse_compare();
}

ExprPtr Parser::parse_compare() {
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

ExprPtr Parser::binary(BinOp op, ExprPtr l, ExprPtr r, const Token& at) const {
  auto e = node(ExprKind::Binary, at);
  e->op = op;
  e->a = std::move(l);
  e->b = std::move(r);
  return e;
}

ExprPtr Parser::parse_math1() {
  ExprPtr left = parse_concat();
  while (is_op("+") || is_op("-")) {
    const Token& at = cur();
    BinOp op = cur().text == "+" ? BinOp::Add : BinOp::Sub;
    next();
    left = binary(op, std::move(left), parse_concat(), at);
  }
  return left;
}

ExprPtr Parser::parse_concat() {
  const Token& at = cur();
  ExprPtr first = parse_math2();
  if (!is_op("~")) return first;
  auto e = node(ExprKind::Concat, at);
  e->items.push_back(std::move(first));
  while (skip_op("~")) e->items.push_back(parse_math2());
  return e;
}

ExprPtr Parser::parse_math2() {
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

ExprPtr Parser::parse_pow() {
  ExprPtr left = parse_unary(true);
  while (is_op("**")) {
    const Token& at = cur();
    next();
    left = binary(BinOp::Pow, std::move(left), parse_unary(true), at);
  }
  return left;
}

ExprPtr Parser::parse_unary(bool with_filter) {
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

ExprPtr Parser::parse_primary() {
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

ExprPtr Parser::parse_postfix(ExprPtr n) {
  while (true) {
    if (is_op(".") || is_op("[")) n = parse_subscript(std::move(n));
    else if (is_op("(")) n = parse_call(std::move(n));
    else return n;
  }
}

ExprPtr Parser::parse_filter_expr(ExprPtr n) {
  while (true) {
    if (is_op("|")) n = parse_filter(std::move(n), false);
    else if (is_name("is")) n = parse_test(std::move(n));
    else if (is_op("(")) n = parse_call(std::move(n));
    else return n;
  }
}

ExprPtr Parser::parse_subscript(ExprPtr n) {
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

ExprPtr Parser::parse_subscribed() {
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

void Parser::parse_call_args(Expr& e) {
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

ExprPtr Parser::parse_call(ExprPtr n) {
  auto e = node(ExprKind::Call, cur());
  e->a = std::move(n);
  parse_call_args(*e);
  return e;
}

std::string Parser::dotted_name() {
  std::string name = expect_name();
  while (is_op(".")) {
    next();
    name += '.';
    name += expect_name();
  }
  return name;
}

ExprPtr Parser::parse_filter(ExprPtr n, bool start_inline) {
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
void Parser::parse_filter_chain(std::vector<ExprPtr>& out, bool start_inline) {
  while (is_op("|") || start_inline) {
    if (!start_inline) next();
    auto e = node(ExprKind::Filter, cur());
    e->name = dotted_name();
    if (is_op("(")) parse_call_args(*e);
    out.push_back(std::move(e));
    start_inline = false;
  }
}

ExprPtr Parser::parse_test(ExprPtr n) {
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

}  // namespace kvad::jinja
