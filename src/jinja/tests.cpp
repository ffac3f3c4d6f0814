// Tests of the Jinja2 chat-template engine (`x is defined`, Interp::test).
// Source: jinja2 3.1 tests.py.
#include <unordered_map>

#include "base/utf8.h"
#include "jinja/builtin_helpers.h"

namespace kvad::jinja {

bool t_lower(Interp&, const Value& v, Args&) {
  std::string s = to_str(v);
  bool cased = false;
  for (size_t i = 0; i < s.size();) {
    uint32_t c = utf8::decode(s, i);
    if (is_cased_upper(c)) return false;
    cased = cased || is_cased_lower(c);
  }
  return cased;
}
bool t_upper(Interp&, const Value& v, Args&) {
  std::string s = to_str(v);
  bool cased = false;
  for (size_t i = 0; i < s.size();) {
    uint32_t c = utf8::decode(s, i);
    if (is_cased_lower(c)) return false;
    cased = cased || is_cased_upper(c);
  }
  return cased;
}

namespace {

using TestFn = bool (*)(Interp&, const Value&, Args&);

Value test_arg(const Args& a, const char* name) {
  auto p = bind(a, {"other"}, name);
  if (!p[0]) fail(std::string(name) + "() missing required argument");
  return *p[0];
}

bool t_defined(Interp&, const Value& v, Args&) { return !v.is_undefined(); }
bool t_undefined(Interp&, const Value& v, Args&) { return v.is_undefined(); }
bool t_none(Interp&, const Value& v, Args&) { return v.is_none(); }
bool t_boolean(Interp&, const Value& v, Args&) { return v.is_bool(); }
bool t_true(Interp&, const Value& v, Args&) { return v.is_bool() && v.as_bool(); }
bool t_false(Interp&, const Value& v, Args&) { return v.is_bool() && !v.as_bool(); }
bool t_integer(Interp&, const Value& v, Args&) { return v.is_int(); }
bool t_float(Interp&, const Value& v, Args&) { return v.is_float(); }
bool t_number(Interp&, const Value& v, Args&) { return v.is_number(); }
bool t_string(Interp&, const Value& v, Args&) { return v.is_string(); }
bool t_mapping(Interp&, const Value& v, Args&) { return v.is_dict(); }
bool t_iterable(Interp&, const Value& v, Args&) {
  return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
}
bool t_sequence(Interp&, const Value& v, Args&) {
  return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
}
bool t_callable(Interp&, const Value& v, Args&) { return v.is_object() && v.as_object().callable(); }
bool t_escaped(Interp&, const Value&, Args&) { return false; }
bool t_odd(Interp& in, const Value& v, Args&) {
  return equal(in.binary(BinOp::Mod, v, Value::integer(2)), Value::integer(1));
}
bool t_even(Interp& in, const Value& v, Args&) {
  return equal(in.binary(BinOp::Mod, v, Value::integer(2)), Value::integer(0));
}
bool t_divisibleby(Interp& in, const Value& v, Args& a) {
  auto p = bind(a, {"num"}, "divisibleby");
  if (!p[0]) fail("divisibleby() missing required argument 'num'");
  return equal(in.binary(BinOp::Mod, v, *p[0]), Value::integer(0));
}
bool t_eq(Interp&, const Value& v, Args& a) { return equal(v, test_arg(a, "eq")); }
bool t_ne(Interp&, const Value& v, Args& a) { return !equal(v, test_arg(a, "ne")); }
int ordered(const Value& v, const Value& o, const char* op) {
  if (v.is_undefined()) fail(v.undefined_message());
  if (o.is_undefined()) fail(o.undefined_message());
  return compare(v, o, op);
}
bool t_lt(Interp&, const Value& v, Args& a) {
  int c = ordered(v, test_arg(a, "lt"), "<");
  return c != 2 && c < 0;
}
bool t_le(Interp&, const Value& v, Args& a) {
  int c = ordered(v, test_arg(a, "le"), "<=");
  return c != 2 && c <= 0;
}
bool t_gt(Interp&, const Value& v, Args& a) {
  int c = ordered(v, test_arg(a, "gt"), ">");
  return c != 2 && c > 0;
}
bool t_ge(Interp&, const Value& v, Args& a) {
  int c = ordered(v, test_arg(a, "ge"), ">=");
  return c != 2 && c >= 0;
}
bool t_in(Interp& in, const Value& v, Args& a) { return in.contains(test_arg(a, "in"), v); }
bool t_sameas(Interp&, const Value& v, Args& a) {
  Value o = test_arg(a, "sameas");
  if (v.kind() != o.kind()) return false;
  switch (v.kind()) {
    case Value::Kind::None:
    case Value::Kind::Undefined: return v.is_none();
    case Value::Kind::Bool: return v.as_bool() == o.as_bool();
    case Value::Kind::Int: return v.as_int() == o.as_int() && v.as_int() >= -5 && v.as_int() <= 256;
    default: return v.same_ptr(o);
  }
}
bool t_filter(Interp& in, const Value& v, Args& a) {
  bind(a, {}, "filter");
  return v.is_string() && in.has_filter(v.as_string());
}
bool t_test(Interp& in, const Value& v, Args& a) {
  bind(a, {}, "test");
  return v.is_string() && in.has_test(v.as_string());
}

const std::unordered_map<std::string, TestFn>& tests() {
  static const std::unordered_map<std::string, TestFn> table = {
      {"boolean", t_boolean},   {"callable", t_callable}, {"defined", t_defined},   {"divisibleby", t_divisibleby},
      {"eq", t_eq},             {"equalto", t_eq},        {"==", t_eq},             {"escaped", t_escaped},
      {"even", t_even},         {"false", t_false},       {"filter", t_filter},     {"float", t_float},
      {"ge", t_ge},             {">=", t_ge},             {"gt", t_gt},             {"greaterthan", t_gt},
      {">", t_gt},              {"in", t_in},             {"integer", t_integer},   {"iterable", t_iterable},
      {"le", t_le},             {"<=", t_le},             {"lower", t_lower},       {"lt", t_lt},
      {"lessthan", t_lt},       {"<", t_lt},              {"mapping", t_mapping},   {"ne", t_ne},
      {"!=", t_ne},             {"none", t_none},         {"number", t_number},     {"odd", t_odd},
      {"sameas", t_sameas},     {"sequence", t_sequence}, {"string", t_string},     {"test", t_test},
      {"true", t_true},         {"undefined", t_undefined}, {"upper", t_upper},
  };
  return table;
}

}  // namespace

bool Interp::test(const std::string& name, const Value& v, Args& args) {
  const auto& t = tests();
  auto it = t.find(name);
  if (it != t.end()) return it->second(*this, v, args);
  fail("No test named '" + name + "'.");
}

bool Interp::has_test(const std::string& name) const { return tests().count(name) > 0; }

}  // namespace kvad::jinja
