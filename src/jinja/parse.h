// Syntax tree of the Jinja2 chat-template engine, and parse(): source to
// tree through the lexer (lexer.h) and the parser (parser.h).
//
// Source: jinja2 3.1 (lexer.py, parser.py) with the settings HuggingFace
// transformers uses for chat templates: trim_blocks=True, lstrip_blocks=True,
// keep_trailing_newline=False, default delimiters, plus the `loopcontrols`
// extension ({% break %}, {% continue %}) and transformers' `{% generation %}`
// tag. The grammar and operator precedence are jinja2's:
//   condexpr:  or ('if' or ('else' condexpr)?)*
//   or / and / not / compare (== != < <= > >= in, not in; chained)
//   math1 (+ -) > concat (~) > math2 (* / // %) > pow (**, left-assoc)
//   unary (- +) binds tighter than **; filters (|f) and tests (is t) apply to
//   the unary expression: -x|abs is abs(-x), a + b is defined is a + (b is defined).
//
// Internal to src/jinja; the public API is chat_template.h.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jinja/value.h"

namespace kvad::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using Body = std::vector<std::unique_ptr<Stmt>>;

enum class ExprKind {
  Const,      ///< value
  Name,       ///< name
  List,       ///< items
  Tuple,      ///< items
  Dict,       ///< items: key, value, key, value, ...
  GetAttr,    ///< a.name
  GetItem,    ///< a[b]
  Slice,      ///< a[b:c:d] (b, c, d may be null)
  Call,       ///< a(items..., kwargs..., *dyn_args, **dyn_kwargs)
  Filter,     ///< a|name(items..., kwargs...); a is null inside {% filter %} / {% set x | f %}
  Test,       ///< a is [not] name(items..., kwargs...)
  Neg,        ///< -a
  Pos,        ///< +a
  Not,        ///< not a
  Binary,     ///< a op b: + - * / // % **
  And,        ///< a and b
  Or,         ///< a or b
  Concat,     ///< items joined with ~
  Compare,    ///< items[0] ops[0] items[1] ops[1] items[2] ...
  CondExpr,   ///< a if b else c (c may be null)
};

enum class BinOp { Add, Sub, Mul, Div, FloorDiv, Mod, Pow };
enum class CmpOp { Eq, Ne, Lt, Le, Gt, Ge, In, NotIn };

struct Expr {
  ExprKind kind;
  int line = 0, column = 0;
  Value value;                 ///< Const
  std::string name;            ///< Name, GetAttr attribute, Filter/Test name
  ExprPtr a, b, c, d;          ///< operands (see ExprKind)
  std::vector<ExprPtr> items;  ///< elements, positional arguments, Concat/Compare operands
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  ExprPtr dyn_args, dyn_kwargs;
  BinOp op = BinOp::Add;
  std::vector<CmpOp> cmp;
  bool negated = false;        ///< Test: `is not`
};

/// An assignment target: a name, `ns.attr` (set only), or a tuple of targets.
struct Target {
  enum class Kind { Name, NsAttr, Tuple } kind = Kind::Name;
  std::string name, attr;
  std::vector<Target> items;
  int line = 0;
};

struct MacroParam {
  std::string name;
  ExprPtr default_value;  ///< null: required
};

enum class StmtKind {
  Text,         ///< text
  Print,        ///< {{ expr }}
  If,           ///< branches (cond, body), else_body
  For,          ///< for target in expr [if filter] body [else else_body]
  Set,          ///< set target = expr
  SetBlock,     ///< set target [| filters] body endset
  Macro,        ///< macro name(params) body
  CallBlock,    ///< call[(params)] expr body
  FilterBlock,  ///< filter filters body endfilter
  With,         ///< with assigns body
  Break,
  Continue,
  Scope,        ///< {% generation %}: body rendered in place
};

struct Stmt {
  StmtKind kind;
  int line = 0, column = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr filter;  ///< For: `if` condition
  Target target;
  Body body, else_body;
  std::vector<std::pair<ExprPtr, Body>> branches;
  std::vector<MacroParam> params;
  std::string name;                 ///< Macro name
  std::vector<ExprPtr> filters;     ///< SetBlock/FilterBlock: Filter exprs with a == null
  std::vector<std::pair<Target, ExprPtr>> assigns;  ///< With
  bool uses_varargs = false, uses_kwargs = false, uses_caller = false;  ///< Macro/CallBlock
};

/// A parsed template.
struct Program {
  Body body;
};

/// Limits on what the parser accepts (chat_template.h's Limits).
struct ParseLimits {
  size_t max_source_bytes = 4 << 20;
  int max_nesting = 128;  ///< expressions and blocks inside each other
};

/// Parses template source. Throws TemplateFailure with the line and column of
/// a syntax error or an unsupported tag (extends, include, import, block, ...).
std::shared_ptr<const Program> parse(std::string_view source, const ParseLimits& limits);

}  // namespace kvad::jinja
