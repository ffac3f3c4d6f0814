// Attribute and item access, iteration, membership, arithmetic and slicing of
// the Jinja2 chat-template engine's interpreter (eval.h). Sources: jinja2 3.1
// sandbox.py getattr/getitem, runtime.py Undefined; CPython's operator
// semantics.
#include <cmath>
#include <optional>

#include "jinja/builtins.h"
#include "jinja/eval.h"

namespace kvad::jinja {

namespace {

// "dict object", "list object", "None" (jinja2.utils.object_type_repr).
std::string object_type_repr(const Value& v) {
  if (v.is_none()) return "None";
  if (v.is_object() && v.as_object().is_namespace()) return "jinja2.utils.Namespace object";
  return type_name(v) + " object";
}

Value no_attribute(const Value& obj, const std::string& name) {
  // std::string("'").append: "'" + std::string makes GCC 12 warn (-Wrestrict, a false positive).
  return Value::undefined(std::string("'").append(object_type_repr(obj)) + "' has no attribute '" + name + "'");
}
Value no_element(const Value& obj, const Value& key) {
  return Value::undefined(object_type_repr(obj) + " has no element " + repr(key));
}

}  // namespace

// --- attribute and item access ------------------------------------------------------

Value Interp::getattr(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Value::Kind::Undefined: undefined_used(obj);
    case Value::Kind::Object: return obj.as_object().getattr(name);
    case Value::Kind::Dict: {
      Value m;
      if (find_method(obj, name, m)) return m;
      if (const Value* v = obj.as_dict().find(std::string_view(name))) return *v;
      return no_attribute(obj, name);
    }
    default: {
      Value m;
      if (find_method(obj, name, m)) return m;
      return no_attribute(obj, name);
    }
  }
}

Value Interp::getitem(const Value& obj, const Value& key) {
  switch (obj.kind()) {
    case Value::Kind::Undefined: undefined_used(obj);
    case Value::Kind::Dict: {
      if (const Value* v = obj.as_dict().find(key)) return *v;
      break;
    }
    case Value::Kind::List: {
      if (key.is_integral()) {
        const auto& items = obj.as_list().items;
        int64_t i = key.as_int(), n = static_cast<int64_t>(items.size());
        if (i < 0) i += n;
        if (i >= 0 && i < n) return items[i];
        return no_element(obj, key);
      }
      break;
    }
    case Value::Kind::String: {
      if (key.is_integral()) {
        const std::string& s = obj.as_string();
        auto offs = cp_offsets(s);
        int64_t n = static_cast<int64_t>(offs.size()) - 1, i = key.as_int();
        if (i < 0) i += n;
        if (i >= 0 && i < n) return Value::string(s.substr(offs[i], offs[i + 1] - offs[i]));
        return no_element(obj, key);
      }
      break;
    }
    case Value::Kind::Object:
      if (key.is_string()) return obj.as_object().getattr(key.as_string());
      return no_element(obj, key);
    default: break;
  }
  if (key.is_string()) {
    Value m;
    if (find_method(obj, key.as_string(), m)) return m;
    return no_attribute(obj, key.as_string());
  }
  return no_element(obj, key);
}

std::shared_ptr<const List> Interp::iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::List: return v.list_ptr();
    case Value::Kind::Undefined: return std::make_shared<List>();
    case Value::Kind::Dict: {
      auto l = std::make_shared<List>();
      l->items.reserve(v.as_dict().items.size());
      for (const auto& kv : v.as_dict().items) l->items.push_back(kv.first);
      return l;
    }
    case Value::Kind::String: {
      const std::string& s = v.as_string();
      auto l = std::make_shared<List>();
      auto offs = cp_offsets(s);
      check_size(offs.size() * 16);
      l->items.reserve(offs.size() - 1);
      for (size_t i = 0; i + 1 < offs.size(); ++i) l->items.push_back(Value::string(s.substr(offs[i], offs[i + 1] - offs[i])));
      return l;
    }
    default: fail("'" + type_name(v) + "' object is not iterable");
  }
}

bool Interp::contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::String:
      if (!item.is_string()) fail("'in <string>' requires string as left operand, not " + type_name(item));
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::List:
      for (const Value& v : container.as_list().items)
        if (equal(v, item)) return true;
      return false;
    case Value::Kind::Dict:
      if ((item.is_list() && !item.is_tuple()) || item.is_dict()) fail("unhashable type: '" + type_name(item) + "'");
      return container.as_dict().find(item) != nullptr;
    case Value::Kind::Undefined: return false;
    default: fail("argument of type '" + type_name(container) + "' is not iterable");
  }
}

// --- arithmetic -----------------------------------------------------------------------

namespace {

[[noreturn]] void unsupported(const char* op, const Value& a, const Value& b) {
  fail(std::string("unsupported operand type(s) for ") + op + ": '" + type_name(a) + "' and '" + type_name(b) + "'");
}

// CPython's float divmod (Objects/floatobject.c, _float_div_mod).
void float_divmod(double vx, double wx, double& floordiv, double& mod) {
  mod = std::fmod(vx, wx);
  double div = (vx - mod) / wx;
  if (mod != 0) {
    if ((wx < 0) != (mod < 0)) {
      mod += wx;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, wx);
  }
  if (div != 0) {
    floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
  } else {
    floordiv = std::copysign(0.0, vx / wx);
  }
}

Value repeat(Interp& in, const Value& seq, int64_t n) {
  if (n <= 0) return seq.is_string() ? Value::string("") : Value::list({}, seq.is_tuple());
  if (seq.is_string()) {
    const std::string& s = seq.as_string();
    if (!s.empty() && static_cast<uint64_t>(n) > in.limits().max_output_bytes / s.size() + 1)
      in.check_size(in.limits().max_output_bytes + 1);
    in.check_size(s.size() * n);
    std::string out;
    out.reserve(s.size() * n);
    for (int64_t i = 0; i < n; ++i) out += s;
    return Value::string(std::move(out));
  }
  const auto& items = seq.as_list().items;
  if (!items.empty() && static_cast<uint64_t>(n) > in.limits().max_output_bytes / items.size() + 1)
    in.check_size(in.limits().max_output_bytes + 1);
  in.check_size(items.size() * n * 8);
  std::vector<Value> out;
  out.reserve(items.size() * n);
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), items.begin(), items.end());
  return Value::list(std::move(out), seq.is_tuple());
}

}  // namespace

Value Interp::binary(BinOp op, const Value& a, const Value& b) {
  if (a.is_undefined()) undefined_used(a);
  if (b.is_undefined()) undefined_used(b);
  const bool nums = a.is_number() && b.is_number();
  const bool ints = a.is_integral() && b.is_integral();
  switch (op) {
    case BinOp::Add: {
      if (ints) {
        int64_t r;
        if (__builtin_add_overflow(a.as_int(), b.as_int(), &r)) fail("integer overflow");
        return Value::integer(r);
      }
      if (nums) return Value::number(a.as_double() + b.as_double());
      if (a.is_string() && b.is_string()) {
        check_size(a.as_string().size() + b.as_string().size());
        return Value::string(a.as_string() + b.as_string());
      }
      if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
        const auto& x = a.as_list().items;
        const auto& y = b.as_list().items;
        check_size((x.size() + y.size()) * 8);
        std::vector<Value> r;
        r.reserve(x.size() + y.size());
        r.insert(r.end(), x.begin(), x.end());
        r.insert(r.end(), y.begin(), y.end());
        return Value::list(std::move(r), a.is_tuple());
      }
      if (a.is_string() || a.is_list())
        fail("can only concatenate " + type_name(a) + " (not \"" + type_name(b) + "\") to " + type_name(a));
      unsupported("+", a, b);
    }
    case BinOp::Sub: {
      if (ints) {
        int64_t r;
        if (__builtin_sub_overflow(a.as_int(), b.as_int(), &r)) fail("integer overflow");
        return Value::integer(r);
      }
      if (nums) return Value::number(a.as_double() - b.as_double());
      unsupported("-", a, b);
    }
    case BinOp::Mul: {
      if (ints) {
        int64_t r;
        if (__builtin_mul_overflow(a.as_int(), b.as_int(), &r)) fail("integer overflow");
        return Value::integer(r);
      }
      if (nums) return Value::number(a.as_double() * b.as_double());
      if ((a.is_string() || a.is_list()) && b.is_integral()) return repeat(*this, a, b.as_int());
      if ((b.is_string() || b.is_list()) && a.is_integral()) return repeat(*this, b, a.as_int());
      unsupported("*", a, b);
    }
    case BinOp::Div: {
      if (!nums) unsupported("/", a, b);
      if (b.as_double() == 0) fail("division by zero");
      return Value::number(a.as_double() / b.as_double());
    }
    case BinOp::FloorDiv:
    case BinOp::Mod: {
      const bool mod = op == BinOp::Mod;
      if (mod && a.is_string()) return Value::string(percent_format(*this, a.as_string(), b));
      if (!nums) unsupported(mod ? "%" : "//", a, b);
      if (ints) {
        int64_t x = a.as_int(), y = b.as_int();
        if (y == 0) fail("integer division or modulo by zero");
        if (x == INT64_MIN && y == -1) {
          if (mod) return Value::integer(0);
          fail("integer overflow");
        }
        int64_t q = x / y, r = x % y;
        if (r != 0 && ((r < 0) != (y < 0))) {
          r += y;
          q -= 1;
        }
        return Value::integer(mod ? r : q);
      }
      double x = a.as_double(), y = b.as_double();
      if (y == 0) fail(mod ? "float modulo by zero" : "float floor division by zero");
      double q, r;
      float_divmod(x, y, q, r);
      return Value::number(mod ? r : q);
    }
    case BinOp::Pow: {
      if (!nums) unsupported("** or pow()", a, b);
      if (ints && b.as_int() >= 0) {
        int64_t base = a.as_int(), e = b.as_int(), r = 1;
        while (e > 0) {
          if (e & 1)
            if (__builtin_mul_overflow(r, base, &r)) fail("integer overflow");
          e >>= 1;
          if (e > 0 && __builtin_mul_overflow(base, base, &base)) fail("integer overflow");
        }
        return Value::integer(r);
      }
      double x = a.as_double(), y = b.as_double();
      if (x == 0 && y < 0) fail("0.0 cannot be raised to a negative power");
      if (x < 0 && y != std::floor(y)) fail("complex results of ** are not supported");
      return Value::number(std::pow(x, y));
    }
  }
  fail("unknown operator");
}

Value Interp::slice(const Value& obj, const Value& start, const Value& stop, const Value& stp) {
  if (obj.is_undefined()) undefined_used(obj);
  auto as_index = [](const Value& v, const char*) -> std::optional<int64_t> {
    if (v.is_none()) return std::nullopt;
    if (v.is_integral()) return v.as_int();
    fail("slice indices must be integers or None or have an __index__ method");
  };
  int64_t stride = 1;
  if (auto s = as_index(stp, "step")) stride = *s;
  if (stride == 0) fail("slice step cannot be zero");

  std::vector<size_t> offs;
  int64_t len;
  if (obj.is_string()) {
    offs = cp_offsets(obj.as_string());
    len = static_cast<int64_t>(offs.size()) - 1;
  } else if (obj.is_list()) {
    len = static_cast<int64_t>(obj.as_list().items.size());
  } else {
    // jinja2 compiles a[b:c] to Python's own subscript (not environment.getitem).
    if (obj.is_dict()) fail("unhashable type: 'slice'");
    fail(std::string("'").append(type_name(obj)) + "' object is not subscriptable");
  }
  // CPython's PySlice_AdjustIndices.
  auto adjust = [&](std::optional<int64_t> v, bool is_start) -> int64_t {
    if (!v) return stride < 0 ? (is_start ? len - 1 : -1) : (is_start ? 0 : len);
    int64_t i = *v;
    if (i < 0) {
      i += len;
      if (i < 0) i = stride < 0 ? -1 : 0;
    } else if (i >= len) {
      i = stride < 0 ? len - 1 : len;
    }
    return i;
  };
  int64_t b = adjust(as_index(start, "start"), true);
  int64_t e = adjust(as_index(stop, "stop"), false);
  std::vector<int64_t> idx;
  if (stride > 0)
    for (int64_t i = b; i < e; i += stride) idx.push_back(i);
  else
    for (int64_t i = b; i > e; i += stride) idx.push_back(i);
  step(idx.size() / 64);
  if (obj.is_string()) {
    const std::string& s = obj.as_string();
    if (stride == 1) return Value::string(idx.empty() ? std::string() : s.substr(offs[b], offs[e] - offs[b]));
    std::string out;
    for (int64_t i : idx) out.append(s, offs[i], offs[i + 1] - offs[i]);
    return Value::string(std::move(out));
  }
  const auto& items = obj.as_list().items;
  std::vector<Value> out;
  out.reserve(idx.size());
  for (int64_t i : idx) out.push_back(items[i]);
  return Value::list(std::move(out), obj.is_tuple());
}

}  // namespace kvad::jinja
