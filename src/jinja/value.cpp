// Python semantics for the Jinja2 engine's values: str()/repr(), ==, <,
// float repr, json.dumps, and the Unicode helpers behind str methods.
// Sources: CPython 3 (Objects/unicodeobject.c unicode_repr, Python/pystrtod.c
// float repr, Lib/json/encoder.py), jinja2 3.1 runtime.py (Undefined).
#include "jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "base/utf8.h"

namespace kvad::jinja {

[[noreturn]] void fail(std::string message) { throw TemplateFailure{std::move(message)}; }

// --- Value -------------------------------------------------------------------

Value Value::undefined(std::string message) {
  Value v;
  v.p_ = std::make_shared<std::string>(std::move(message));
  return v;
}
Value Value::none() {
  Value v;
  v.kind_ = Kind::None;
  return v;
}
Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::Bool;
  v.b_ = b;
  return v;
}
Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = Kind::Int;
  v.i_ = i;
  return v;
}
Value Value::number(double d) {
  Value v;
  v.kind_ = Kind::Float;
  v.f_ = d;
  return v;
}
Value Value::string(std::string s) {
  Value v;
  v.kind_ = Kind::String;
  v.p_ = std::make_shared<std::string>(std::move(s));
  return v;
}

namespace {
// Nesting depth and namespace presence a child contributes to its container.
void child_info(const Value& c, int& depth, bool& has_ns) {
  if (c.is_list()) {
    depth = std::max<int>(depth, c.as_list().depth);
    has_ns = has_ns || c.as_list().has_namespace;
  } else if (c.is_dict()) {
    depth = std::max<int>(depth, c.as_dict().depth);
    has_ns = has_ns || c.as_dict().has_namespace;
  } else if (c.is_object() && c.as_object().is_namespace()) {
    has_ns = true;
  }
}
[[noreturn]] void too_deep() {
  fail("value nested more than " + std::to_string(kMaxNesting) + " levels deep");
}
}  // namespace

Value Value::list(std::vector<Value> items, bool tuple) {
  auto l = std::make_shared<List>();
  int depth = 0;
  bool has_ns = false;
  for (const Value& c : items) child_info(c, depth, has_ns);
  if (depth + 1 > kMaxNesting) too_deep();
  l->items = std::move(items);
  l->tuple = tuple;
  l->depth = static_cast<uint16_t>(depth + 1);
  l->has_namespace = has_ns;
  Value v;
  v.kind_ = Kind::List;
  v.p_ = std::move(l);
  return v;
}
Value Value::dict(std::shared_ptr<Dict> d) {
  int depth = 0;
  bool has_ns = false;
  for (const auto& [k, c] : d->items) {
    child_info(k, depth, has_ns);
    child_info(c, depth, has_ns);
  }
  if (depth + 1 > kMaxNesting) too_deep();
  d->depth = static_cast<uint16_t>(depth + 1);
  d->has_namespace = has_ns;
  Value v;
  v.kind_ = Kind::Dict;
  v.p_ = std::move(d);
  return v;
}
Value Value::object(std::shared_ptr<Object> o) {
  Value v;
  v.kind_ = Kind::Object;
  v.p_ = std::move(o);
  return v;
}
std::string Value::undefined_message() const {
  if (p_) return *static_cast<const std::string*>(p_.get());
  return "value is undefined";
}

const Value* Dict::find(const Value& key) const {
  for (const auto& kv : items)
    if (equal(kv.first, key)) return &kv.second;
  return nullptr;
}
const Value* Dict::find(std::string_view key) const {
  for (const auto& kv : items)
    if (kv.first.is_string() && kv.first.as_string() == key) return &kv.second;
  return nullptr;
}
void Dict::set(Value key, Value value) {
  for (auto& kv : items)
    if (equal(kv.first, key)) {
      kv.second = std::move(value);
      return;
    }
  items.emplace_back(std::move(key), std::move(value));
}

std::string Object::repr() const {
  std::string s = "<";
  s += type_name();
  s += " object>";
  return s;
}
Value Object::getattr(const std::string& name) const {
  std::string s = "'";
  s += type_name();
  s += " object' has no attribute '";
  s += name;
  s += "'";
  return Value::undefined(std::move(s));
}
Value Object::call(Interp&, Args&) { fail("'" + type_name() + "' object is not callable"); }

// --- Unicode -----------------------------------------------------------------

bool is_space(uint32_t c) {
  if (c < 0x80) return c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F);
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
         c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

size_t cp_len(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  // Stray continuation bytes at the start count as characters (decoded as U+FFFD).
  return n;
}

std::vector<uint32_t> code_points(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) out.push_back(utf8::decode(s, i));
  return out;
}

std::vector<size_t> cp_offsets(std::string_view s) {
  std::vector<size_t> out;
  out.reserve(s.size() + 1);
  for (size_t i = 0; i < s.size();) {
    out.push_back(i);
    utf8::decode(s, i);
  }
  out.push_back(s.size());
  return out;
}

namespace {
// Simple case pairs where upper and lower alternate (upper even or odd).
bool in_alternating(uint32_t c, uint32_t lo, uint32_t hi, bool upper_even) {
  return c >= lo && c <= hi && ((c % 2 == 0) == upper_even);
}
}  // namespace

// Case mapping for Latin, Greek, Cyrillic, Armenian and full-width Latin (the
// scripts role names and template literals use); other code points map to
// themselves.
uint32_t to_upper(uint32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') ? c - 32 : c;
  if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 32;
  if (c == 0xFF) return 0x178;
  if (c == 0xB5) return 0x39C;
  if (in_alternating(c, 0x101, 0x137, false) || in_alternating(c, 0x14B, 0x177, false)) return c - 1;
  if (in_alternating(c, 0x13A, 0x148, true) || in_alternating(c, 0x17A, 0x17E, true)) return c - 1;
  if (c == 0x131) return 'I';
  if (c == 0x17F) return 'S';
  if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) return c - 32;
  if (c == 0x3C2) return 0x3A3;
  if (c == 0x3AC) return 0x386;
  if (c >= 0x3AD && c <= 0x3AF) return c - 37;
  if (c == 0x3CC) return 0x38C;
  if (c == 0x3CD || c == 0x3CE) return c - 63;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  if (in_alternating(c, 0x461, 0x481, false) || in_alternating(c, 0x48B, 0x4BF, false)) return c - 1;
  if (c >= 0x561 && c <= 0x586) return c - 48;
  if (in_alternating(c, 0x1E01, 0x1E95, false) || in_alternating(c, 0x1EA1, 0x1EFF, false)) return c - 1;
  if (c >= 0xFF41 && c <= 0xFF5A) return c - 32;
  return c;
}

uint32_t to_lower(uint32_t c) {
  if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
  if (c == 0x178) return 0xFF;
  if (in_alternating(c, 0x100, 0x136, true) || in_alternating(c, 0x14A, 0x176, true)) return c + 1;
  if (in_alternating(c, 0x139, 0x147, false) || in_alternating(c, 0x179, 0x17D, false)) return c + 1;
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
  if (c == 0x386) return 0x3AC;
  if (c >= 0x388 && c <= 0x38A) return c + 37;
  if (c == 0x38C) return 0x3CC;
  if (c == 0x38E || c == 0x38F) return c + 63;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  if (in_alternating(c, 0x460, 0x480, true) || in_alternating(c, 0x48A, 0x4BE, true)) return c + 1;
  if (c >= 0x531 && c <= 0x556) return c + 48;
  if (in_alternating(c, 0x1E00, 0x1E94, true) || in_alternating(c, 0x1EA0, 0x1EFE, true)) return c + 1;
  if (c >= 0xFF21 && c <= 0xFF3A) return c + 32;
  return c;
}

bool is_cased_upper(uint32_t c) { return to_lower(c) != c; }
bool is_cased_lower(uint32_t c) { return to_upper(c) != c || c == 0xDF; }

std::string str_upper(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    unsigned char b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) {
      out += static_cast<char>((b >= 'a' && b <= 'z') ? b - 32 : b);
      ++i;
      continue;
    }
    uint32_t c = utf8::decode(s, i);
    if (c == 0xDF) {
      out += "SS";
      continue;
    }
    utf8::append(out, to_upper(c));
  }
  return out;
}

std::string str_lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    unsigned char b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) {
      out += static_cast<char>((b >= 'A' && b <= 'Z') ? b + 32 : b);
      ++i;
      continue;
    }
    utf8::append(out, to_lower(utf8::decode(s, i)));
  }
  return out;
}

std::string_view str_strip(std::string_view s, const std::string* chars, bool left, bool right) {
  std::vector<uint32_t> set;
  if (chars) set = code_points(*chars);
  auto strip_cp = [&](uint32_t c) {
    return chars ? std::find(set.begin(), set.end(), c) != set.end() : is_space(c);
  };
  size_t b = 0, e = s.size();
  if (left) {
    while (b < e) {
      size_t j = b;
      uint32_t c = utf8::decode(s, j);
      if (!strip_cp(c)) break;
      b = j;
    }
  }
  if (right) {
    while (e > b) {
      size_t start = e - 1;
      while (start > b && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80 && e - start < 4) --start;
      size_t j = start;
      uint32_t c = utf8::decode(s, j);
      if (j != e) {  // not one whole sequence: treat the last byte alone
        start = e - 1;
        j = start;
        c = utf8::decode(s, j);
      }
      if (!strip_cp(c)) break;
      e = start;
    }
  }
  return s.substr(b, e - b);
}

// --- printing ----------------------------------------------------------------

namespace {
thread_local size_t g_print_limit = SIZE_MAX;
}
PrintLimit::PrintLimit(size_t max_bytes) : saved_(g_print_limit) { g_print_limit = max_bytes; }
PrintLimit::~PrintLimit() { g_print_limit = saved_; }
void PrintLimit::check(size_t bytes) {
  if (bytes > g_print_limit)
    fail("printed value of more than " + std::to_string(g_print_limit) + " bytes exceeds the output limit");
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  // Shortest round-trip digits, as Python's repr (David Gay's mode 0).
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  size_t epos = sci.find('e');
  int exp10 = std::stoi(sci.substr(epos + 1));
  std::string digits;
  for (size_t i = 0; i < epos; ++i)
    if (sci[i] != '.') digits += sci[i];
  int decpt = exp10 + 1;  // position of the decimal point relative to the digits
  std::string out = neg ? "-" : "";
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0." + std::string(-decpt, '0') + digits;
    } else if (static_cast<size_t>(decpt) >= digits.size()) {
      out += digits + std::string(decpt - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, decpt) + "." + digits.substr(decpt);
    }
  } else {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof(eb), "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
    out += eb;
  }
  return out;
}

namespace {

// Python's str.isprintable() for non-ASCII code points: false for control,
// format, separator (other than space), surrogate, private-use and
// non-character code points. Unassigned code points are treated as printable.
bool is_printable(uint32_t c) {
  if (c < 0x20 || c == 0x7F) return false;
  if (c < 0x7F) return true;
  if (c <= 0xA0 || c == 0xAD) return false;
  if (c == 0x1680 || (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) ||
      (c >= 0x205F && c <= 0x2064) || (c >= 0x2066 && c <= 0x206F) || c == 0x3000)
    return false;
  if ((c >= 0x600 && c <= 0x605) || c == 0x61C || c == 0x6DD || c == 0x70F || c == 0x890 || c == 0x891 ||
      c == 0x8E2 || c == 0x180E)
    return false;
  if ((c >= 0xD800 && c <= 0xF8FF) || (c >= 0xFDD0 && c <= 0xFDEF) || c == 0xFEFF ||
      (c >= 0xFFF9 && c <= 0xFFFB) || (c & 0xFFFE) == 0xFFFE)
    return false;
  if (c == 0x110BD || c == 0x110CD || (c >= 0x13430 && c <= 0x1343F) || (c >= 0x1BCA0 && c <= 0x1BCA3) ||
      (c >= 0x1D173 && c <= 0x1D17A) || c == 0xE0001 || (c >= 0xE0020 && c <= 0xE007F) || c >= 0xF0000)
    return false;
  return true;
}

void repr_string(std::string& out, std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  out += quote;
  for (size_t i = 0; i < s.size();) {
    unsigned char b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) {
      ++i;
      if (b == static_cast<unsigned char>(quote) || b == '\\') {
        out += '\\';
        out += static_cast<char>(b);
      } else if (b == '\t') {
        out += "\\t";
      } else if (b == '\n') {
        out += "\\n";
      } else if (b == '\r') {
        out += "\\r";
      } else if (b < 0x20 || b == 0x7F) {
        char eb[8];
        std::snprintf(eb, sizeof(eb), "\\x%02x", b);
        out += eb;
      } else {
        out += static_cast<char>(b);
      }
      continue;
    }
    size_t start = i;
    uint32_t c = utf8::decode(s, i);
    if (is_printable(c)) {
      out.append(s.substr(start, i - start));
    } else {
      char eb[16];
      if (c <= 0xFF) std::snprintf(eb, sizeof(eb), "\\x%02x", c);
      else if (c <= 0xFFFF) std::snprintf(eb, sizeof(eb), "\\u%04x", c);
      else std::snprintf(eb, sizeof(eb), "\\U%08x", c);
      out += eb;
    }
  }
  out += quote;
}

void append_repr(std::string& out, const Value& v);

void append_seq(std::string& out, const List& l) {
  out += l.tuple ? '(' : '[';
  for (size_t i = 0; i < l.items.size(); ++i) {
    if (i) out += ", ";
    append_repr(out, l.items[i]);
    PrintLimit::check(out.size());
  }
  if (l.tuple && l.items.size() == 1) out += ',';
  out += l.tuple ? ')' : ']';
}

void append_dict(std::string& out, const Dict& d) {
  out += '{';
  for (size_t i = 0; i < d.items.size(); ++i) {
    if (i) out += ", ";
    append_repr(out, d.items[i].first);
    out += ": ";
    append_repr(out, d.items[i].second);
    PrintLimit::check(out.size());
  }
  out += '}';
}

void append_repr(std::string& out, const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: out += "Undefined"; return;
    case Value::Kind::String: repr_string(out, v.as_string()); return;
    default: append_str(out, v); return;
  }
}

}  // namespace

void append_str(std::string& out, const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return;
    case Value::Kind::None: out += "None"; return;
    case Value::Kind::Bool: out += v.as_bool() ? "True" : "False"; return;
    case Value::Kind::Int: {
      char buf[24];
      auto r = std::to_chars(buf, buf + sizeof(buf), v.as_int());
      out.append(buf, r.ptr);
      return;
    }
    case Value::Kind::Float: out += float_repr(v.as_double()); return;
    case Value::Kind::String: out += v.as_string(); return;
    case Value::Kind::List: append_seq(out, v.as_list()); return;
    case Value::Kind::Dict: append_dict(out, v.as_dict()); return;
    case Value::Kind::Object: out += v.as_object().repr(); return;
  }
}

std::string to_str(const Value& v) {
  if (v.is_string()) return v.as_string();
  std::string out;
  append_str(out, v);
  return out;
}

std::string repr(const Value& v) {
  std::string out;
  append_repr(out, v);
  return out;
}

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return "Undefined";
    case Value::Kind::None: return "NoneType";
    case Value::Kind::Bool: return "bool";
    case Value::Kind::Int: return "int";
    case Value::Kind::Float: return "float";
    case Value::Kind::String: return "str";
    case Value::Kind::List: return v.as_list().tuple ? "tuple" : "list";
    case Value::Kind::Dict: return "dict";
    case Value::Kind::Object: return v.as_object().type_name();
  }
  return "object";
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return false;
    case Value::Kind::Bool: return v.as_bool();
    case Value::Kind::Int: return v.as_int() != 0;
    case Value::Kind::Float: return v.as_double() != 0;
    case Value::Kind::String: return !v.as_string().empty();
    case Value::Kind::List: return !v.as_list().items.empty();
    case Value::Kind::Dict: return !v.as_dict().items.empty();
    case Value::Kind::Object: return true;
  }
  return false;
}

namespace {
// Exact comparison of an integer with a double (Python compares int and
// float by value, without rounding the int).
int cmp_int_double(int64_t i, double d) {
  if (std::isnan(d)) return 2;  // unordered
  if (d >= 9223372036854775808.0) return -1;
  if (d < -9223372036854775808.0) return 1;
  double fl = std::floor(d);
  int64_t di = static_cast<int64_t>(fl);
  if (i < di) return -1;
  if (i > di) return 1;
  return fl < d ? -1 : 0;
}
}  // namespace

bool equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.as_int() == b.as_int();
    if (a.is_float() && b.is_float()) return a.as_double() == b.as_double();
    if (a.is_float()) return cmp_int_double(b.as_int(), a.as_double()) == 0;
    return cmp_int_double(a.as_int(), b.as_double()) == 0;
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return true;
    case Value::Kind::String: return a.as_string() == b.as_string();
    case Value::Kind::List: {
      const List& x = a.as_list();
      const List& y = b.as_list();
      if (x.tuple != y.tuple || x.items.size() != y.items.size()) return false;
      if (&x == &y) return true;
      for (size_t i = 0; i < x.items.size(); ++i)
        if (!equal(x.items[i], y.items[i])) return false;
      return true;
    }
    case Value::Kind::Dict: {
      const Dict& x = a.as_dict();
      const Dict& y = b.as_dict();
      if (x.items.size() != y.items.size()) return false;
      if (&x == &y) return true;
      for (const auto& [k, v] : x.items) {
        const Value* o = y.find(k);
        if (!o || !equal(v, *o)) return false;
      }
      return true;
    }
    case Value::Kind::Object: return a.same_ptr(b);
    default: return false;
  }
}

int compare(const Value& a, const Value& b, const char* op) {
  auto unorderable = [&]() -> int {
    fail(std::string("'") + op + "' not supported between instances of '" + type_name(a) + "' and '" +
         type_name(b) + "'");
  };
  if (a.is_number() && b.is_number()) {
    int r;
    if (a.is_integral() && b.is_integral()) {
      r = a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
    } else if (a.is_float() && b.is_float()) {
      double x = a.as_double(), y = b.as_double();
      r = x < y ? -1 : x > y ? 1 : x == y ? 0 : 2;
    } else if (a.is_float()) {
      r = cmp_int_double(b.as_int(), a.as_double());
      if (r != 2) r = -r;
    } else {
      r = cmp_int_double(a.as_int(), b.as_double());
    }
    return r;  // 2: unordered (NaN); every comparison is false
  }
  if (a.is_string() && b.is_string()) {
    int c = a.as_string().compare(b.as_string());  // UTF-8 byte order = code point order
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_list() && b.is_list() && a.as_list().tuple == b.as_list().tuple) {
    const auto& x = a.as_list().items;
    const auto& y = b.as_list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (equal(x[i], y[i])) continue;
      return compare(x[i], y[i], op);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  return unorderable();
}

// --- JSON ----------------------------------------------------------------------

namespace {

void json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    unsigned char b = static_cast<unsigned char>(s[i]);
    if (b >= 0x80 && ensure_ascii) {
      uint32_t c = utf8::decode(s, i);
      char eb[16];
      if (c >= 0x10000) {
        c -= 0x10000;
        std::snprintf(eb, sizeof(eb), "\\u%04x\\u%04x", 0xD800 + (c >> 10), 0xDC00 + (c & 0x3FF));
      } else {
        std::snprintf(eb, sizeof(eb), "\\u%04x", c);
      }
      out += eb;
      continue;
    }
    ++i;
    switch (b) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (b < 0x20 || (ensure_ascii && b == 0x7F)) {
          char eb[8];
          std::snprintf(eb, sizeof(eb), "\\u%04x", b);
          out += eb;
        } else {
          out += static_cast<char>(b);
        }
    }
  }
  out += '"';
}

std::string json_float(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d < 0 ? "-Infinity" : "Infinity";
  return float_repr(d);
}

struct JsonWriter {
  const std::string* indent;  // null: no newlines
  std::string item_sep, key_sep;
  bool sort_keys, ensure_ascii;
  std::string out;

  void newline(int level) {
    out += '\n';
    for (int i = 0; i < level; ++i) out += *indent;
  }

  void key(const Value& k) {
    switch (k.kind()) {
      case Value::Kind::String: json_string(out, k.as_string(), ensure_ascii); return;
      case Value::Kind::Float: json_string(out, json_float(k.as_double()), false); return;
      case Value::Kind::Bool: out += k.as_bool() ? "\"true\"" : "\"false\""; return;
      case Value::Kind::None: out += "\"null\""; return;
      case Value::Kind::Int: out += '"' + to_str(k) + '"'; return;
      default: fail("keys must be str, int, float, bool or None, not " + type_name(k));
    }
  }

  void write(const Value& v, int level) {
    switch (v.kind()) {
      case Value::Kind::None: out += "null"; return;
      case Value::Kind::Bool: out += v.as_bool() ? "true" : "false"; return;
      case Value::Kind::Int: append_str(out, v); return;
      case Value::Kind::Float: out += json_float(v.as_double()); return;
      case Value::Kind::String: json_string(out, v.as_string(), ensure_ascii); return;
      case Value::Kind::List: {
        const auto& items = v.as_list().items;
        if (items.empty()) {
          out += "[]";
          return;
        }
        out += '[';
        if (indent) newline(level + 1);
        for (size_t i = 0; i < items.size(); ++i) {
          if (i) {
            out += item_sep;
            if (indent) newline(level + 1);
          }
          write(items[i], level + 1);
          PrintLimit::check(out.size());
        }
        if (indent) newline(level);
        out += ']';
        return;
      }
      case Value::Kind::Dict: {
        const auto& items = v.as_dict().items;
        if (items.empty()) {
          out += "{}";
          return;
        }
        std::vector<const std::pair<Value, Value>*> order;
        for (const auto& kv : items) order.push_back(&kv);
        if (sort_keys) {
          std::stable_sort(order.begin(), order.end(),
                           [](auto* x, auto* y) { return compare(x->first, y->first, "<") < 0; });
        }
        out += '{';
        if (indent) newline(level + 1);
        for (size_t i = 0; i < order.size(); ++i) {
          if (i) {
            out += item_sep;
            if (indent) newline(level + 1);
          }
          key(order[i]->first);
          out += key_sep;
          write(order[i]->second, level + 1);
          PrintLimit::check(out.size());
        }
        if (indent) newline(level);
        out += '}';
        return;
      }
      default: fail("Object of type " + type_name(v) + " is not JSON serializable");
    }
  }
};

}  // namespace

std::string to_json(const Value& v, const Value& indent, const std::string& item_sep,
                    const std::string& key_sep, bool sort_keys, bool ensure_ascii) {
  std::string indent_str;
  bool has_indent = false;
  if (indent.is_string()) {
    indent_str = indent.as_string();
    has_indent = true;
  } else if (indent.is_integral()) {
    int64_t n = indent.as_int();
    if (n > 64) fail("tojson indent larger than 64");
    indent_str = std::string(n > 0 ? n : 0, ' ');
    has_indent = true;
  } else if (!indent.is_none() && !indent.is_undefined()) {
    fail("tojson indent must be an int or a string, not " + type_name(indent));
  }
  JsonWriter w{has_indent ? &indent_str : nullptr, item_sep, key_sep, sort_keys, ensure_ascii, {}};
  w.write(v, 0);
  return std::move(w.out);
}

namespace {
Value from_json_at(const nlohmann::ordered_json& j, int depth) {
  if (depth > kMaxNesting) too_deep();
  switch (j.type()) {
    case nlohmann::json::value_t::null: return Value::none();
    case nlohmann::json::value_t::boolean: return Value::boolean(j.get<bool>());
    case nlohmann::json::value_t::number_integer: return Value::integer(j.get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return Value::integer(static_cast<int64_t>(u));
      return Value::number(static_cast<double>(u));
    }
    case nlohmann::json::value_t::number_float: return Value::number(j.get<double>());
    case nlohmann::json::value_t::string: return Value::string(j.get<std::string>());
    case nlohmann::json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json_at(e, depth + 1));
      return Value::list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      auto d = std::make_shared<Dict>();
      d->items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it)
        d->items.emplace_back(Value::string(it.key()), from_json_at(it.value(), depth + 1));
      return Value::dict(std::move(d));
    }
    default: fail("unsupported JSON value (binary or discarded)");
  }
}
}  // namespace

Value from_json(const nlohmann::ordered_json& j) { return from_json_at(j, 1); }

}  // namespace kvad::jinja
