// Statements and expressions of the Jinja2 chat-template engine (eval.h);
// attribute and item access, arithmetic and slicing are in operators.cpp.
// Sources: jinja2 3.1 (compiler.py scoping: a for-loop iteration, macro call
// or block body is a new scope, `if` is not; runtime.py Macro/LoopContext;
// sandbox.py getattr/getitem) and CPython's operator semantics.
#include "jinja/eval.h"

#include <new>

namespace kvad::jinja {

// --- frames, objects ------------------------------------------------------------

const Value* Frame::find(std::string_view name) const {
  for (const Frame* f = this; f; f = f->parent.get())
    for (const auto& kv : f->vars)
      if (kv.first == name) return &kv.second;
  return nullptr;
}

void Frame::set(const std::string& name, Value v) {
  for (auto& kv : vars)
    if (kv.first == name) {
      kv.second = std::move(v);
      return;
    }
  vars.emplace_back(name, std::move(v));
}

std::string Namespace::repr() const {
  return "<Namespace " + jinja::repr(Value::dict(std::make_shared<Dict>(attrs))) + ">";
}

Value Namespace::getattr(const std::string& name) const {
  if (const Value* v = attrs.find(name)) return *v;
  return Value::undefined("'jinja2.utils.Namespace object' has no attribute '" + name + "'");
}

/// A {% macro %} or the `caller` of a {% call %} block.
class Macro : public Object {
 public:
  Macro(const Stmt* def, std::string name, FramePtr closure)
      : def(def), name(std::move(name)), closure(std::move(closure)) {}
  std::string type_name() const override { return "Macro"; }
  std::string repr() const override { return "<Macro '" + name + "'>"; }
  bool callable() const override { return true; }
  Value call(Interp& in, Args& args) override { return in.call_macro(*this, args); }
  Value getattr(const std::string& attr) const override {
    if (attr == "name") return Value::string(name);
    if (attr == "arguments") {
      std::vector<Value> names;
      for (const auto& p : def->params) names.push_back(Value::string(p.name));
      return Value::list(std::move(names), true);
    }
    if (attr == "catch_kwargs") return Value::boolean(def->uses_kwargs);
    if (attr == "catch_varargs") return Value::boolean(def->uses_varargs);
    if (attr == "caller") return Value::boolean(def->uses_caller);
    return Object::getattr(attr);
  }

  const Stmt* def;
  std::string name;
  FramePtr closure;
};

namespace {

/// jinja2's LoopContext (non-recursive loops: depth is always 1).
class Loop : public Object, public std::enable_shared_from_this<Loop> {
 public:
  explicit Loop(std::shared_ptr<const List> items) : items_(std::move(items)) {}
  std::string type_name() const override { return "LoopContext"; }
  std::string repr() const override {
    return "<LoopContext " + std::to_string(index + 1) + "/" + std::to_string(items_->items.size()) + ">";
  }
  Value getattr(const std::string& n) const override {
    const int64_t len = static_cast<int64_t>(items_->items.size());
    const int64_t i = static_cast<int64_t>(index);
    if (n == "index") return Value::integer(i + 1);
    if (n == "index0") return Value::integer(i);
    if (n == "revindex") return Value::integer(len - i);
    if (n == "revindex0") return Value::integer(len - i - 1);
    if (n == "first") return Value::boolean(i == 0);
    if (n == "last") return Value::boolean(i == len - 1);
    if (n == "length") return Value::integer(len);
    if (n == "depth") return Value::integer(1);
    if (n == "depth0") return Value::integer(0);
    if (n == "previtem")
      return i > 0 ? items_->items[i - 1] : Value::undefined("there is no previous item");
    if (n == "nextitem")
      return i + 1 < len ? items_->items[i + 1] : Value::undefined("there is no next item");
    if (n == "cycle") {
      size_t at = index;
      return Value::object(std::make_shared<NativeFunction>("cycle", [at](Interp&, Args& a) -> Value {
        if (a.pos.empty()) fail("no items for cycling given");
        return a.pos[at % a.pos.size()];
      }));
    }
    if (n == "changed") {
      auto self = std::const_pointer_cast<Loop>(shared_from_this());
      return Value::object(std::make_shared<NativeFunction>("changed", [self](Interp&, Args& a) -> Value {
        Value now = Value::list(a.pos, true);
        if (self->has_changed_ && equal(self->last_changed_, now)) return Value::boolean(false);
        self->has_changed_ = true;
        self->last_changed_ = now;
        return Value::boolean(true);
      }));
    }
    return Object::getattr(n);
  }
  size_t index = 0;

 private:
  std::shared_ptr<const List> items_;
  Value last_changed_;
  bool has_changed_ = false;
};

}  // namespace

[[noreturn]] void undefined_used(const Value& v) { fail(v.undefined_message()); }

struct DepthGuard {
  Interp& in;
  explicit DepthGuard(Interp& i) : in(i) {
    if (++in.depth_ > in.limits_.max_depth) {
      --in.depth_;
      fail("template evaluation nested more than " + std::to_string(in.limits_.max_depth) + " levels deep");
    }
  }
  ~DepthGuard() { --in.depth_; }
};

Interp::~Interp() {
  for (auto& m : macros_) m->closure.reset();
}

void Interp::step_limit() {
  fail("template exceeded " + std::to_string(limits_.max_steps) + " evaluation steps");
}
void Interp::size_limit(size_t bytes) {
  fail("template output or value of " + std::to_string(bytes) + " bytes exceeds the limit of " +
       std::to_string(limits_.max_output_bytes) + " bytes");
}

std::string Interp::render(const Program& prog, const FramePtr& globals) {
  std::string out;
  try {
    exec_body(prog.body, globals, out);
  } catch (TemplateFailure& f) {
    if (f.line == 0) f.line = line_;
    throw;
  } catch (const std::bad_alloc&) {
    throw TemplateFailure{"out of memory while rendering", line_, 0, false};
  }
  return out;
}

// --- statements -------------------------------------------------------------------

Interp::Flow Interp::exec_body(const Body& body, const FramePtr& f, std::string& out) {
  for (const auto& s : body) {
    Flow fl = exec(*s, f, out);
    if (fl != Flow::Normal) return fl;
  }
  return Flow::Normal;
}

void Interp::append_out(std::string& out, std::string_view s) {
  if (out.size() + s.size() > limits_.max_output_bytes) size_limit(out.size() + s.size());
  out.append(s);
}

void Interp::append_out(std::string& out, const Value& v) {
  if (v.is_string()) return append_out(out, std::string_view(v.as_string()));
  std::string s = to_str(v);
  append_out(out, std::string_view(s));
}

Interp::Flow Interp::exec(const Stmt& s, const FramePtr& f, std::string& out) {
  DepthGuard g(*this);
  step();
  line_ = s.line;
  switch (s.kind) {
    case StmtKind::Text: append_out(out, std::string_view(s.text)); return Flow::Normal;
    case StmtKind::Print: append_out(out, eval(*s.expr, f)); return Flow::Normal;
    case StmtKind::If:
      for (const auto& [cond, body] : s.branches) {
        line_ = s.line;
        if (truthy(eval(*cond, f))) return exec_body(body, f, out);
      }
      return exec_body(s.else_body, f, out);
    case StmtKind::For: exec_for(s, f, out); return Flow::Normal;
    case StmtKind::Set: assign(s.target, eval(*s.expr, f), f); return Flow::Normal;
    case StmtKind::SetBlock: {
      auto inner = std::make_shared<Frame>();
      inner->parent = f;
      std::string buf;
      exec_body(s.body, inner, buf);
      Value v = Value::string(std::move(buf));
      for (const auto& flt : s.filters) {
        Args args;
        eval_args(*flt, f, args);
        line_ = flt->line;
        v = filter(flt->name, v, args);
      }
      assign(s.target, v, f);
      return Flow::Normal;
    }
    case StmtKind::Macro: {
      auto m = std::make_shared<Macro>(&s, s.name, f);
      macros_.push_back(m);
      f->set(s.name, Value::object(m));
      return Flow::Normal;
    }
    case StmtKind::CallBlock: {
      auto m = std::make_shared<Macro>(&s, "caller", f);
      macros_.push_back(m);
      Value caller = Value::object(m);
      append_out(out, eval_call(*s.expr, f, &caller));
      return Flow::Normal;
    }
    case StmtKind::FilterBlock: {
      auto inner = std::make_shared<Frame>();
      inner->parent = f;
      std::string buf;
      exec_body(s.body, inner, buf);
      Value v = Value::string(std::move(buf));
      for (const auto& flt : s.filters) {
        Args args;
        eval_args(*flt, f, args);
        line_ = flt->line;
        v = filter(flt->name, v, args);
      }
      append_out(out, v);
      return Flow::Normal;
    }
    case StmtKind::With: {
      auto inner = std::make_shared<Frame>();
      inner->parent = f;
      for (const auto& [t, e] : s.assigns) assign(t, eval(*e, f), inner);
      return exec_body(s.body, inner, out);
    }
    case StmtKind::Scope: {
      auto inner = std::make_shared<Frame>();
      inner->parent = f;
      return exec_body(s.body, inner, out);
    }
    case StmtKind::Break: return Flow::Break;
    case StmtKind::Continue: return Flow::Continue;
  }
  return Flow::Normal;
}

void Interp::exec_for(const Stmt& s, const FramePtr& f, std::string& out) {
  std::shared_ptr<const List> seq = iterate(eval(*s.expr, f));
  if (s.filter) {
    std::vector<Value> kept;
    for (const Value& item : seq->items) {
      step();
      auto tf = std::make_shared<Frame>();
      tf->parent = f;
      assign(s.target, item, tf);
      if (truthy(eval(*s.filter, tf))) kept.push_back(item);
    }
    auto l = std::make_shared<List>();
    l->items = std::move(kept);
    seq = std::move(l);
  }
  if (seq->items.empty()) {
    exec_body(s.else_body, f, out);
    return;
  }
  auto loop = std::make_shared<Loop>(seq);
  Value loop_value = Value::object(loop);
  FramePtr it;
  for (size_t i = 0; i < seq->items.size(); ++i) {
    step();
    loop->index = i;
    // Each iteration starts with a fresh scope; the last one is reused when
    // nothing (a macro's closure) kept it.
    if (it && it.use_count() == 1) {
      it->vars.clear();
    } else {
      it = std::make_shared<Frame>();
      it->parent = f;
      it->vars.reserve(4);
    }
    assign(s.target, seq->items[i], it);
    it->set("loop", loop_value);
    if (exec_body(s.body, it, out) == Flow::Break) break;
  }
}

void Interp::assign(const Target& t, const Value& v, const FramePtr& f) {
  switch (t.kind) {
    case Target::Kind::Name: f->set(t.name, v); return;
    case Target::Kind::Tuple: {
      auto items = iterate(v);
      size_t want = t.items.size(), got = items->items.size();
      if (got > want) fail("too many values to unpack (expected " + std::to_string(want) + ")");
      if (got < want)
        fail("not enough values to unpack (expected " + std::to_string(want) + ", got " + std::to_string(got) + ")");
      for (size_t i = 0; i < want; ++i) assign(t.items[i], items->items[i], f);
      return;
    }
    case Target::Kind::NsAttr: {
      const Value* ns = f->find(t.name);
      if (!ns || !ns->is_object() || !ns->as_object().is_namespace())
        fail("cannot assign attribute on non-namespace object");
      bool nested = (v.is_object() && v.as_object().is_namespace()) || (v.is_list() && v.as_list().has_namespace) ||
                    (v.is_dict() && v.as_dict().has_namespace);
      if (nested) fail("storing a namespace inside a namespace is not supported");
      static_cast<Namespace&>(ns->as_object()).attrs.set(Value::string(t.attr), v);
      return;
    }
  }
}

// --- expressions -----------------------------------------------------------------

Value Interp::lookup(const std::string& name, const FramePtr& f) {
  if (const Value* v = f->find(name)) return *v;
  Value g = global(name);
  if (!g.is_undefined()) return g;
  return Value::undefined("'" + name + "' is undefined");
}

void Interp::eval_args(const Expr& e, const FramePtr& f, Args& args) {
  args.pos.reserve(e.items.size());
  for (const auto& a : e.items) args.pos.push_back(eval(*a, f));
  if (e.dyn_args) {
    auto extra = iterate(eval(*e.dyn_args, f));
    for (const Value& v : extra->items) args.pos.push_back(v);
  }
  for (const auto& [k, a] : e.kwargs) args.kw.emplace_back(k, eval(*a, f));
  if (e.dyn_kwargs) {
    Value d = eval(*e.dyn_kwargs, f);
    if (!d.is_dict()) fail("argument after ** must be a mapping, not " + type_name(d));
    for (const auto& [k, v] : d.as_dict().items) {
      if (!k.is_string()) fail("keywords must be strings");
      args.kw.emplace_back(k.as_string(), v);
    }
  }
}

Value Interp::eval_call(const Expr& e, const FramePtr& f, const Value* caller) {
  Value fn = eval(*e.a, f);
  Args args;
  eval_args(e, f, args);
  if (caller) args.kw.emplace_back("caller", *caller);
  line_ = e.line;
  return call(fn, args);
}

Value Interp::call(const Value& fn, Args& args) {
  if (fn.is_undefined()) undefined_used(fn);
  if (!fn.is_object() || !fn.as_object().callable()) fail("'" + type_name(fn) + "' object is not callable");
  auto keep = fn.object_ptr();  // the callee stays alive during the call
  return keep->call(*this, args);
}

Value Interp::call_macro(Macro& m, Args& args) {
  if (call_depth_ >= limits_.max_call_depth)
    fail("macro calls nested more than " + std::to_string(limits_.max_call_depth) + " deep (recursive macro?)");
  if (!m.closure) fail("macro '" + m.name + "' called after its template finished");
  struct CallGuard {
    int& d;
    explicit CallGuard(int& dd) : d(dd) { ++d; }
    ~CallGuard() { --d; }
  } cg(call_depth_);
  const Stmt& def = *m.def;
  auto frame = std::make_shared<Frame>();
  frame->parent = m.closure;
  const size_t n = def.params.size();
  std::vector<bool> bound(n, false);
  std::vector<Value> bound_values(n);
  std::vector<Value> varargs;
  auto kwargs = std::make_shared<Dict>();
  Value caller = Value::undefined("'caller' is undefined");
  for (size_t i = 0; i < args.pos.size(); ++i) {
    if (i < n) {
      bound[i] = true;
      bound_values[i] = args.pos[i];
    } else if (def.uses_varargs) {
      varargs.push_back(args.pos[i]);
    } else {
      fail("macro '" + m.name + "' takes not more than " + std::to_string(n) + " argument(s)");
    }
  }
  for (auto& [k, v] : args.kw) {
    size_t i = 0;
    while (i < n && def.params[i].name != k) ++i;
    if (i < n) {
      if (bound[i]) fail("macro '" + m.name + "' got multiple values for argument '" + k + "'");
      bound[i] = true;
      bound_values[i] = v;
    } else if (k == "caller" && def.uses_caller) {
      caller = v;
    } else if (def.uses_kwargs) {
      kwargs->set(Value::string(k), v);
    } else {
      fail("macro '" + m.name + "' takes no keyword argument '" + k + "'");
    }
  }
  for (size_t i = 0; i < n; ++i) {
    const MacroParam& p = def.params[i];
    if (bound[i]) frame->set(p.name, bound_values[i]);
    else if (p.default_value) frame->set(p.name, eval(*p.default_value, frame));
    else frame->set(p.name, Value::undefined("parameter '" + p.name + "' was not provided"));
  }
  if (def.uses_varargs) frame->set("varargs", Value::list(std::move(varargs), true));
  if (def.uses_kwargs) frame->set("kwargs", Value::dict(kwargs));
  if (def.uses_caller) frame->set("caller", caller);
  std::string buf;
  int saved_line = line_;
  exec_body(def.body, frame, buf);
  line_ = saved_line;
  return Value::string(std::move(buf));
}

Value Interp::eval_compare(const Expr& e, const FramePtr& f) {
  Value left = eval(*e.items[0], f);
  for (size_t i = 0; i < e.cmp.size(); ++i) {
    Value right = eval(*e.items[i + 1], f);
    bool ok;
    CmpOp op = e.cmp[i];
    switch (op) {
      case CmpOp::Eq: ok = equal(left, right); break;
      case CmpOp::Ne: ok = !equal(left, right); break;
      case CmpOp::In: ok = contains(right, left); break;
      case CmpOp::NotIn: ok = !contains(right, left); break;
      default: {
        if (left.is_undefined()) undefined_used(left);
        if (right.is_undefined()) undefined_used(right);
        const char* sym = op == CmpOp::Lt ? "<" : op == CmpOp::Le ? "<=" : op == CmpOp::Gt ? ">" : ">=";
        int c = compare(left, right, sym);
        if (c == 2) ok = false;  // NaN
        else if (op == CmpOp::Lt) ok = c < 0;
        else if (op == CmpOp::Le) ok = c <= 0;
        else if (op == CmpOp::Gt) ok = c > 0;
        else ok = c >= 0;
      }
    }
    if (!ok) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

Value Interp::eval(const Expr& e, const FramePtr& f) {
  DepthGuard g(*this);
  step();
  switch (e.kind) {
    case ExprKind::Const: return e.value;
    case ExprKind::Name: return lookup(e.name, f);
    case ExprKind::List:
    case ExprKind::Tuple: {
      std::vector<Value> items;
      items.reserve(e.items.size());
      for (const auto& i : e.items) items.push_back(eval(*i, f));
      return Value::list(std::move(items), e.kind == ExprKind::Tuple);
    }
    case ExprKind::Dict: {
      auto d = std::make_shared<Dict>();
      for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
        Value k = eval(*e.items[i], f);
        if (k.is_list() && !k.is_tuple()) fail("unhashable type: 'list'");
        if (k.is_dict()) fail("unhashable type: 'dict'");
        d->set(std::move(k), eval(*e.items[i + 1], f));
      }
      return Value::dict(std::move(d));
    }
    case ExprKind::GetAttr: {
      Value obj = eval(*e.a, f);
      line_ = e.line;
      return getattr(obj, e.name);
    }
    case ExprKind::GetItem: {
      Value obj = eval(*e.a, f);
      Value key = eval(*e.b, f);
      line_ = e.line;
      return getitem(obj, key);
    }
    case ExprKind::Slice: {
      Value obj = eval(*e.a, f);
      Value start = e.b ? eval(*e.b, f) : Value::none();
      Value stop = e.c ? eval(*e.c, f) : Value::none();
      Value stp = e.d ? eval(*e.d, f) : Value::none();
      line_ = e.line;
      return slice(obj, start, stop, stp);
    }
    case ExprKind::Call: return eval_call(e, f, nullptr);
    case ExprKind::Filter: {
      Value v = eval(*e.a, f);
      Args args;
      eval_args(e, f, args);
      line_ = e.line;
      return filter(e.name, v, args);
    }
    case ExprKind::Test: {
      Value v = eval(*e.a, f);
      Args args;
      eval_args(e, f, args);
      line_ = e.line;
      bool r = test(e.name, v, args);
      return Value::boolean(e.negated ? !r : r);
    }
    case ExprKind::Neg:
    case ExprKind::Pos: {
      Value v = eval(*e.a, f);
      line_ = e.line;
      const bool neg = e.kind == ExprKind::Neg;
      if (v.is_undefined()) undefined_used(v);
      if (v.is_float()) return Value::number(neg ? -v.as_double() : v.as_double());
      if (v.is_integral()) {
        int64_t i = v.as_int();
        if (neg && i == INT64_MIN) fail("integer overflow");
        return Value::integer(neg ? -i : i);
      }
      fail(std::string("bad operand type for unary ") + (neg ? "-" : "+") + ": '" + type_name(v) + "'");
    }
    case ExprKind::Not: return Value::boolean(!truthy(eval(*e.a, f)));
    case ExprKind::Binary: {
      Value a = eval(*e.a, f);
      Value b = eval(*e.b, f);
      line_ = e.line;
      return binary(e.op, a, b);
    }
    case ExprKind::And: {
      Value l = eval(*e.a, f);
      if (!truthy(l)) return l;
      return eval(*e.b, f);
    }
    case ExprKind::Or: {
      Value l = eval(*e.a, f);
      if (truthy(l)) return l;
      return eval(*e.b, f);
    }
    case ExprKind::Concat: {
      std::string s;
      for (const auto& i : e.items) {
        append_str(s, eval(*i, f));
        check_size(s.size());
      }
      return Value::string(std::move(s));
    }
    case ExprKind::Compare: return eval_compare(e, f);
    case ExprKind::CondExpr: {
      if (truthy(eval(*e.b, f))) return eval(*e.a, f);
      if (e.c) return eval(*e.c, f);
      return Value::undefined("the inline if-expression on line " + std::to_string(e.line) +
                              " evaluated to false and no else section was defined.");
    }
  }
  fail("unknown expression");
}

}  // namespace kvad::jinja
