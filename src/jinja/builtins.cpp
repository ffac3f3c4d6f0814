// Filters, tests, globals and Python methods of the Jinja2 chat-template
// engine (builtins.h). Sources: jinja2 3.1 filters.py, tests.py,
// defaults.py, utils.py (Namespace, joiner), sandbox.py (safe_range,
// modifies_known_mutable); HuggingFace transformers' chat-template
// environment (tojson = json.dumps(x, ensure_ascii=False, indent, separators,
// sort_keys), raise_exception, strftime_now); CPython's str methods.
#include "jinja/builtins.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <initializer_list>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "base/utf8.h"

namespace kvad::jinja {

namespace {

// --- argument binding -------------------------------------------------------------

using Opt = std::optional<Value>;

/// Binds positional and keyword arguments to parameter names, as Python does.
std::vector<Opt> bind(const Args& a, std::initializer_list<const char*> names, const std::string& fname) {
  std::vector<Opt> out(names.size());
  if (a.pos.size() > names.size())
    fail(fname + "() takes at most " + std::to_string(names.size()) + " argument(s) (" +
         std::to_string(a.pos.size()) + " given)");
  for (size_t i = 0; i < a.pos.size(); ++i) out[i] = a.pos[i];
  for (const auto& [k, v] : a.kw) {
    size_t i = 0;
    for (const char* n : names) {
      if (k == n) break;
      ++i;
    }
    if (i == names.size()) fail(fname + "() got an unexpected keyword argument '" + k + "'");
    if (out[i]) fail(fname + "() got multiple values for argument '" + k + "'");
    out[i] = v;
  }
  return out;
}

Value get(const Opt& o, Value def) { return o ? *o : std::move(def); }

int64_t to_index(const Value& v, const std::string& what) {
  if (v.is_integral()) return v.as_int();
  fail("'" + type_name(v) + "' object cannot be interpreted as an integer (" + what + ")");
}

std::string str_arg(const Value& v, const std::string& what) {
  if (v.is_string()) return v.as_string();
  fail(what + " must be str, not " + type_name(v));
}

Value str_value(std::string s) { return Value::string(std::move(s)); }

Value native(const std::string& name, NativeFunction::Fn fn) {
  return Value::object(std::make_shared<NativeFunction>(name, std::move(fn)));
}

Value ignore_case(const Value& v) { return v.is_string() ? Value::string(str_lower(v.as_string())) : v; }

// jinja2's make_attrgetter: "a.b.0" looks up a, then b, then item 0.
Value attr_get(Interp& in, Value item, const Value& attribute, const Value* deflt) {
  std::vector<Value> parts;
  if (attribute.is_string()) {
    const std::string& s = attribute.as_string();
    size_t b = 0;
    while (true) {
      size_t e = s.find('.', b);
      std::string part = s.substr(b, e == std::string::npos ? std::string::npos : e - b);
      bool digits = !part.empty() && part.size() <= 18 &&
                    std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
      parts.push_back(digits ? Value::integer(std::stoll(part)) : Value::string(part));
      if (e == std::string::npos) break;
      b = e + 1;
    }
  } else if (!attribute.is_none() && !attribute.is_undefined()) {
    parts.push_back(attribute);
  }
  for (const Value& p : parts) {
    item = in.getitem(item, p);
    if (deflt && item.is_undefined()) item = *deflt;
  }
  return item;
}

bool is_html_special(char c) { return c == '&' || c == '<' || c == '>' || c == '"' || c == '\''; }

std::string html_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (!is_html_special(c)) {
      out += c;
      continue;
    }
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      default: out += "&#39;"; break;
    }
  }
  return out;
}

// Python str.splitlines boundaries.
bool is_line_break(uint32_t c) {
  return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E || c == 0x85 ||
         c == 0x2028 || c == 0x2029;
}

std::vector<std::string> split_lines(const std::string& s, bool keepends) {
  std::vector<std::string> out;
  size_t i = 0, start = 0;
  while (i < s.size()) {
    size_t j = i;
    uint32_t c = utf8::decode(s, j);
    if (is_line_break(c)) {
      size_t eol = j;
      if (c == '\r' && eol < s.size() && s[eol] == '\n') ++eol;
      out.push_back(s.substr(start, (keepends ? eol : i) - start));
      start = i = eol;
    } else {
      i = j;
    }
  }
  if (start < s.size()) out.push_back(s.substr(start));
  return out;
}

std::string str_replace(Interp& in, const std::string& s, const std::string& old, const std::string& rep,
                        int64_t count) {
  std::string out;
  if (old.empty()) {
    auto offs = cp_offsets(s);
    int64_t done = 0;
    for (size_t i = 0; i + 1 < offs.size(); ++i) {
      if (count < 0 || done < count) {
        out += rep;
        ++done;
      }
      out.append(s, offs[i], offs[i + 1] - offs[i]);
      in.check_size(out.size());
    }
    if (count < 0 || done < count) out += rep;
    in.check_size(out.size());
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t f = s.find(old, pos);
    if (f == std::string::npos) break;
    out.append(s, pos, f - pos);
    out += rep;
    in.check_size(out.size());
    pos = f + old.size();
    ++done;
  }
  out.append(s, pos, std::string::npos);
  in.check_size(out.size());
  return out;
}

// Python str.capitalize(): first character upper, the rest lower.
std::string capitalize(const std::string& s) {
  std::string out;
  size_t i = 0;
  bool first = true;
  while (i < s.size()) {
    uint32_t c = utf8::decode(s, i);
    utf8::append(out, first ? to_upper(c) : to_lower(c));
    first = false;
  }
  return out;
}

bool is_cased(uint32_t c) { return is_cased_upper(c) || is_cased_lower(c); }

// Python str.title(): a cased character after an uncased one is upper-cased,
// other cased characters are lower-cased.
std::string py_title(const std::string& s) {
  std::string out;
  bool prev_cased = false;
  for (size_t i = 0; i < s.size();) {
    uint32_t c = utf8::decode(s, i);
    utf8::append(out, prev_cased ? to_lower(c) : to_upper(c));
    prev_cased = is_cased(c);
  }
  return out;
}

// jinja2's do_title: words start after -, whitespace, (, {, [ or <.
std::string jinja_title(const std::string& s) {
  std::string out;
  bool word_start = true;
  for (size_t i = 0; i < s.size();) {
    uint32_t c = utf8::decode(s, i);
    bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || is_space(c);
    if (sep) {
      utf8::append(out, c);
      word_start = true;
    } else {
      utf8::append(out, word_start ? to_upper(c) : to_lower(c));
      word_start = false;
    }
  }
  return out;
}

std::string pad(const std::string& s, int64_t width, uint32_t fill, char align) {
  int64_t len = static_cast<int64_t>(cp_len(s));
  if (width <= len) return s;
  if (width > (16 << 20)) fail("padding width too large");
  int64_t marg = width - len;
  int64_t left = align == '<' ? 0 : align == '>' ? marg : marg / 2 + (marg & width & 1);
  std::string f;
  utf8::append(f, fill);
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += f;
  out += s;
  for (int64_t i = 0; i < marg - left; ++i) out += f;
  return out;
}

uint32_t fill_char(const Value& v) {
  std::string f = str_arg(v, "fill character");
  if (cp_len(f) != 1) fail("The fill character must be exactly one character long");
  size_t i = 0;
  return utf8::decode(f, i);
}

// Parses like Python's int(str, base): whitespace, sign, underscores, prefixes.
std::optional<int64_t> parse_int(std::string_view s, int base) {
  s = str_strip(s, nullptr, true, true);
  bool neg = false;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    neg = s[0] == '-';
    s.remove_prefix(1);
  }
  auto has_prefix = [&](char a, char b) { return s.size() >= 2 && s[0] == '0' && (s[1] == a || s[1] == b); };
  if (base == 0) {
    if (has_prefix('x', 'X')) base = 16;
    else if (has_prefix('o', 'O')) base = 8;
    else if (has_prefix('b', 'B')) base = 2;
    else base = 10;
    if (base != 10) s.remove_prefix(2);
  } else if ((base == 16 && has_prefix('x', 'X')) || (base == 8 && has_prefix('o', 'O')) ||
             (base == 2 && has_prefix('b', 'B'))) {
    s.remove_prefix(2);
    if (!s.empty() && s[0] == '_') s.remove_prefix(1);
  }
  if (s.empty() || base < 2 || base > 36) return std::nullopt;
  uint64_t v = 0;
  bool prev_digit = false;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '_') {
      if (!prev_digit || i + 1 == s.size()) return std::nullopt;
      prev_digit = false;
      continue;
    }
    int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'z') ? c - 'a' + 10 : (c >= 'A' && c <= 'Z') ? c - 'A' + 10 : 99;
    if (d >= base) return std::nullopt;
    if (v > (static_cast<uint64_t>(INT64_MAX) + 1 - d) / base) fail("integer overflow");
    v = v * base + d;
    prev_digit = true;
  }
  if (!neg && v > static_cast<uint64_t>(INT64_MAX)) fail("integer overflow");
  return neg ? -static_cast<int64_t>(v) : static_cast<int64_t>(v);
}

// Python's float(str).
std::optional<double> parse_float(std::string_view s) {
  s = str_strip(s, nullptr, true, true);
  std::string t;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '_') {
      if (i == 0 || i + 1 == s.size() || !std::isdigit(static_cast<unsigned char>(s[i - 1])) ||
          !std::isdigit(static_cast<unsigned char>(s[i + 1])))
        return std::nullopt;
      continue;
    }
    if (c == 'x' || c == 'X' || c == 'p' || c == 'P') {
      std::string lower = str_lower(s);
      if (lower.find("inf") == std::string::npos) return std::nullopt;  // no hex floats
    }
    t += c;
  }
  if (t.empty()) return std::nullopt;
  std::string lower = str_lower(t);
  std::string_view body = lower;
  if (!body.empty() && (body[0] == '+' || body[0] == '-')) body.remove_prefix(1);
  if (body == "inf" || body == "infinity" || body == "nan") {
    double v = body == "nan" ? NAN : INFINITY;
    return lower[0] == '-' ? -v : v;
  }
  if (body.find_first_not_of("0123456789.e+-") != std::string_view::npos) return std::nullopt;
  char* end = nullptr;
  double v = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size()) return std::nullopt;
  return v;
}

int64_t float_to_int(double d) {
  if (std::isnan(d)) fail("cannot convert float NaN to integer");
  if (std::isinf(d)) fail("cannot convert float infinity to integer");
  double t = std::trunc(d);
  if (t >= 9223372036854775808.0 || t < -9223372036854775808.0) fail("integer overflow");
  return static_cast<int64_t>(t);
}

int64_t len_of(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::String: return static_cast<int64_t>(cp_len(v.as_string()));
    case Value::Kind::List: return static_cast<int64_t>(v.as_list().items.size());
    case Value::Kind::Dict: return static_cast<int64_t>(v.as_dict().items.size());
    case Value::Kind::Undefined: return 0;
    default: fail("object of type '" + type_name(v) + "' has no len()");
  }
}

// Python round(x, ndigits) for floats: correctly rounded, ties to even.
double py_round(double x, int64_t nd) {
  if (!std::isfinite(x)) return x;
  if (nd > 300) return x;
  if (nd >= 0) {
    char buf[400];
    std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(nd), x);
    return std::strtod(buf, nullptr);
  }
  if (nd < -308) return std::copysign(0.0, x);
  double p = std::pow(10.0, static_cast<double>(-nd));
  double y = x / p;
  double r = std::nearbyint(y);  // ties to even (default rounding mode)
  return r * p;
}

// --- sorting helpers ------------------------------------------------------------------

bool less_than(const Value& a, const Value& b) { return compare(a, b, "<") < 0; }

std::vector<Value> sort_values(Interp& in, const std::vector<Value>& items, bool reverse, bool case_sensitive,
                               const Value& attribute) {
  in.step(items.size() * 4);
  // Keys: one per comma-separated attribute (jinja2's make_multi_attrgetter).
  std::vector<std::string> attrs;
  if (attribute.is_string()) {
    const std::string& s = attribute.as_string();
    size_t b = 0;
    while (true) {
      size_t e = s.find(',', b);
      attrs.push_back(s.substr(b, e == std::string::npos ? std::string::npos : e - b));
      if (e == std::string::npos) break;
      b = e + 1;
    }
  }
  std::vector<std::vector<Value>> keys(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    if (attrs.empty()) {
      Value k = attribute.is_integral() ? in.getitem(items[i], attribute) : items[i];
      keys[i].push_back(case_sensitive ? k : ignore_case(k));
    } else {
      for (const auto& a : attrs) {
        Value k = attr_get(in, items[i], Value::string(a), nullptr);
        keys[i].push_back(case_sensitive ? k : ignore_case(k));
      }
    }
  }
  std::vector<size_t> idx(items.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  auto key_less = [&](size_t x, size_t y) {
    const auto& a = keys[x];
    const auto& b = keys[y];
    for (size_t k = 0; k < a.size() && k < b.size(); ++k) {
      if (equal(a[k], b[k])) continue;
      return less_than(a[k], b[k]);
    }
    return a.size() < b.size();
  };
  std::stable_sort(idx.begin(), idx.end(), [&](size_t x, size_t y) { return reverse ? key_less(y, x) : key_less(x, y); });
  std::vector<Value> out;
  out.reserve(items.size());
  for (size_t i : idx) out.push_back(items[i]);
  return out;
}

// --- filters ----------------------------------------------------------------------------

using FilterFn = Value (*)(Interp&, const Value&, Args&);
using TestFn = bool (*)(Interp&, const Value&, Args&);

Value f_abs(Interp&, const Value& v, Args& a) {
  bind(a, {}, "abs");
  if (v.is_float()) return Value::number(std::fabs(v.as_double()));
  if (v.is_integral()) {
    if (v.as_int() == INT64_MIN) fail("integer overflow");
    return Value::integer(v.as_int() < 0 ? -v.as_int() : v.as_int());
  }
  fail("bad operand type for abs(): '" + type_name(v) + "'");
}

Value f_attr(Interp& in, const Value& v, Args& a) {
  auto p = bind(a, {"name"}, "attr");
  if (!p[0]) fail("attr() missing required argument 'name'");
  return in.getattr(v, str_arg(*p[0], "attribute name"));
}

Value f_batch(Interp& in, const Value& v, Args& a) {
  auto p = bind(a, {"linecount", "fill_with"}, "batch");
  if (!p[0]) fail("batch() missing required argument 'linecount'");
  int64_t n = to_index(*p[0], "linecount");
  if (n < 1) fail("batch() linecount must be at least 1");
  Value fill = get(p[1], Value::none());
  auto items = in.iterate(v);
  std::vector<Value> out, cur;
  for (const Value& x : items->items) {
    if (static_cast<int64_t>(cur.size()) == n) {
      out.push_back(Value::list(std::move(cur)));
      cur.clear();
    }
    cur.push_back(x);
  }
  if (!cur.empty()) {
    if (!fill.is_none())
      while (static_cast<int64_t>(cur.size()) < n) cur.push_back(fill);
    out.push_back(Value::list(std::move(cur)));
  }
  return Value::list(std::move(out));
}

Value f_capitalize(Interp&, const Value& v, Args& a) {
  bind(a, {}, "capitalize");
  return str_value(capitalize(to_str(v)));
}

Value f_center(Interp&, const Value& v, Args& a) {
  auto p = bind(a, {"width"}, "center");
  return str_value(pad(to_str(v), to_index(get(p[0], Value::integer(80)), "width"), ' ', '^'));
}

Value f_length(Interp&, const Value& v, Args& a) {
  bind(a, {}, "length");
  return Value::integer(len_of(v));
}

Value f_default(Interp&, const Value& v, Args& a) {
  auto p = bind(a, {"default_value", "boolean"}, "default");
  Value d = get(p[0], Value::string(""));
  bool boolean = truthy(get(p[1], Value::boolean(false)));
  if (v.is_undefined() || (boolean && !truthy(v))) return d;
  return v;
}

Value f_dictsort(Interp& in, const Value& v, Args& a) {
  auto p = bind(a, {"case_sensitive", "by", "reverse"}, "dictsort");
  bool cs = truthy(get(p[0], Value::boolean(false)));
  std::string by = to_str(get(p[1], Value::string("key")));
  bool reverse = truthy(get(p[2], Value::boolean(false)));
  if (!v.is_dict()) fail("dictsort: can only sort a mapping");
  int pos;
  if (by == "key") pos = 0;
  else if (by == "value") pos = 1;
  else fail("You can only sort by either \"key\" or \"value\"");
  std::vector<Value> pairs, keys;
  for (const auto& [k, x] : v.as_dict().items) {
    pairs.push_back(Value::list({k, x}, true));
    keys.push_back(pos == 0 ? k : x);
  }
  std::vector<size_t> idx(pairs.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  in.step(pairs.size() * 4);
  auto key = [&](size_t i) { return cs ? keys[i] : ignore_case(keys[i]); };
  std::stable_sort(idx.begin(), idx.end(), [&](size_t x, size_t y) {
    return reverse ? less_than(key(y), key(x)) : less_than(key(x), key(y));
  });
  std::vector<Value> out;
  for (size_t i : idx) out.push_back(pairs[i]);
  return Value::list(std::move(out));
}

Value f_escape(Interp&, const Value& v, Args& a) {
  bind(a, {}, "escape");
  return str_value(html_escape(to_str(v)));
}

Value f_first(Interp& in, const Value& v, Args& a) {
  bind(a, {}, "first");
  auto items = in.iterate(v);
  if (items->items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items->items.front();
}

Value f_last(Interp& in, const Value& v, Args& a) {
  bind(a, {}, "last");
  auto items = in.iterate(v);
  if (items->items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items->items.back();
}

Value f_float(Interp&, const Value& v, Args& a) {
  auto p = bind(a, {"default"}, "float");
  Value d = get(p[0], Value::number(0.0));
  if (v.is_undefined()) fail(v.undefined_message());
  if (v.is_float()) return v;
  if (v.is_integral()) return Value::number(static_cast<double>(v.as_int()));
  if (v.is_string())
    if (auto f = parse_float(v.as_string())) return Value::number(*f);
  return d;
}

Value f_int(Interp&, const Value& v, Args& a) {
  auto p = bind(a, {"default", "base"}, "int");
  Value d = get(p[0], Value::integer(0));
  int64_t base = to_index(get(p[1], Value::integer(10)), "base");
  if (v.is_undefined()) fail(v.undefined_message());
  if (v.is_integral()) return Value::integer(v.as_int());
  if (v.is_float()) return Value::integer(float_to_int(v.as_double()));
  if (v.is_string()) {
    if (auto i = parse_int(v.as_string(), static_cast<int>(base))) return Value::integer(*i);
    if (auto f = parse_float(v.as_string())) return Value::integer(float_to_int(*f));
  }
  return d;
}

Value f_format(Interp& in, const Value& v, Args& a) {
  if (!a.pos.empty() && !a.kw.empty()) fail("can't handle positional and keyword arguments at the same time");
  Value args;
  if (!a.kw.empty()) {
    auto d = std::make_shared<Dict>();
    for (auto& [k, x] : a.kw) d->set(Value::string(k), x);
    args = Value::dict(d);
  } else {
    args = Value::list(a.pos, true);
  }
  return str_value(percent_format(in, to_str(v), args));
}

Value f_indent(Interp& in, const Value& v, Args& a) {
  auto p = bind(a, {"width", "first", "blank"}, "indent");
  Value w = get(p[0], Value::integer(4));
  bool first = truthy(get(p[1], Value::boolean(false)));
  bool blank = truthy(get(p[2], Value::boolean(false)));
  std::string ind;
  if (w.is_string()) ind = w.as_string();
  else {
    int64_t n = to_index(w, "width");
    if (n > 1024) fail("indent width too large");
    ind = std::string(n > 0 ? n : 0, ' ');
  }
  if (v.is_undefined()) fail(v.undefined_message());
  if (!v.is_string()) fail("unsupported operand type(s) for +=: '" + type_name(v) + "' and 'str'");
  std::string s = v.as_string() + "\n";
  std::vector<std::string> lines = split_lines(s, false);
  std::string rv;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i) rv += "\n" + ind;
      rv += lines[i];
      in.check_size(rv.size());
    }
  } else {
    rv = lines.empty() ? std::string() : lines[0];
    if (lines.size() > 1) {
      rv += "\n";
      for (size_t i = 1; i < lines.size(); ++i) {
        if (i > 1) rv += "\n";
        if (!lines[i].empty()) rv += ind;
        rv += lines[i];
        in.check_size(rv.size());
      }
    }
  }
  if (first) rv = ind + rv;
  return str_value(std::move(rv));
}

Value f_items(Interp&, const Value& v, Args& a) {
  bind(a, {}, "items");
  if (v.is_undefined()) return Value::list({});
  if (!v.is_dict()) fail("Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [k, x] : v.as_dict().items) out.push_back(Value::list({k, x}, true));
  return Value::list(std::move(out));
}

Value f_join(Interp& in, const Value& v, Args& a) {
  auto p = bind(a, {"d", "attribute"}, "join");
  std::string sep = to_str(get(p[0], Value::string("")));
  Value attribute = get(p[1], Value::none());
  auto items = in.iterate(v);
  std::string out;
  for (size_t i = 0; i < items->items.size(); ++i) {
    if (i) out += sep;
    Value x = attribute.is_none() ? items->items[i] : attr_get(in, items->items[i], attribute, nullptr);
    append_str(out, x);
    in.check_size(out.size());
  }
  return str_value(std::move(out));
}

Value f_list(Interp& in, const Value& v, Args& a) {
  bind(a, {}, "list");
  auto items = in.iterate(v);
  return Value::list(items->items);
}

Value f_lower(Interp&, const Value& v, Args& a) {
  bind(a, {}, "lower");
  return str_value(str_lower(to_str(v)));
}

Value f_upper(Interp&, const Value& v, Args& a) {
  bind(a, {}, "upper");
  return str_value(str_upper(to_str(v)));
}

Value f_map(Interp& in, const Value& v, Args& a) {
  if (!truthy(v)) return Value::list({});  // jinja2: `if value:` before iterating
  auto items = in.iterate(v);
  std::vector<Value> out;
  out.reserve(items->items.size());
  if (a.pos.empty()) {
    Opt attribute, deflt;
    for (auto& [k, x] : a.kw) {
      if (k == "attribute") attribute = x;
      else if (k == "default") deflt = x;
      else fail("Unexpected keyword argument '" + k + "'");
    }
    if (!attribute) fail("map requires a filter argument");
    const Value* dp = (deflt && !deflt->is_none()) ? &*deflt : nullptr;
    for (const Value& x : items->items) out.push_back(attr_get(in, x, *attribute, dp));
  } else {
    std::string name = str_arg(a.pos[0], "filter name");
    Args rest;
    rest.pos.assign(a.pos.begin() + 1, a.pos.end());
    rest.kw = a.kw;
    for (const Value& x : items->items) {
      Args call = rest;
      out.push_back(in.filter(name, x, call));
    }
  }
  return Value::list(std::move(out));
}

Value min_max(Interp& in, const Value& v, Args& a, bool want_max, const char* fname) {
  auto p = bind(a, {"case_sensitive", "attribute"}, fname);
  bool cs = truthy(get(p[0], Value::boolean(false)));
  Value attribute = get(p[1], Value::none());
  auto items = in.iterate(v);
  if (items->items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  auto key = [&](const Value& x) {
    Value k = attribute.is_none() ? x : attr_get(in, x, attribute, nullptr);
    return cs ? k : ignore_case(k);
  };
  size_t best = 0;
  Value best_key = key(items->items[0]);
  for (size_t i = 1; i < items->items.size(); ++i) {
    Value k = key(items->items[i]);
    if (want_max ? less_than(best_key, k) : less_than(k, best_key)) {
      best = i;
      best_key = k;
    }
  }
  return items->items[best];
}
Value f_max(Interp& in, const Value& v, Args& a) { return min_max(in, v, a, true, "max"); }
Value f_min(Interp& in, const Value& v, Args& a) { return min_max(in, v, a, false, "min"); }

Value select_reject(Interp& in, const Value& v, Args& a, bool select, bool lookup_attr) {
  if (!truthy(v)) return Value::list({});  // jinja2: `if value:` before iterating
  auto items = in.iterate(v);
  size_t off = 0;
  Value attribute;
  if (lookup_attr) {
    if (a.pos.empty()) fail("Missing parameter for attribute name");
    attribute = a.pos[0];
    off = 1;
  }
  std::optional<std::string> test_name;
  Args rest;
  if (a.pos.size() > off) {
    test_name = str_arg(a.pos[off], "test name");
    rest.pos.assign(a.pos.begin() + off + 1, a.pos.end());
  }
  rest.kw = a.kw;
  std::vector<Value> out;
  for (const Value& x : items->items) {
    in.step();
    Value t = lookup_attr ? attr_get(in, x, attribute, nullptr) : x;
    bool ok;
    if (test_name) {
      Args call = rest;
      ok = in.test(*test_name, t, call);
    } else {
      ok = truthy(t);
    }
    if (ok == select) out.push_back(x);
  }
  return Value::list(std::move(out));
}
Value f_select(Interp& in, const Value& v, Args& a) { return select_reject(in, v, a, true, false); }
Value f_reject(Interp& in, const Value& v, Args& a) { return select_reject(in, v, a, false, false); }
Value f_selectattr(Interp& in, const Value& v, Args& a) { return select_reject(in, v, a, true, true); }
Value f_rejectattr(Interp& in, const Value& v, Args& a) { return select_reject(in, v, a, false, true); }

Value f_replace(Interp& in, const Value& v, Args& a) {
  auto p = bind(a, {"old", "new", "count"}, "replace");
  if (!p[0] || !p[1]) fail("replace() missing required arguments 'old' and 'new'");
  Value count = get(p[2], Value::none());
  return str_value(str_replace(in, to_str(v), to_str(*p[0]), to_str(*p[1]),
                               count.is_none() ? -1 : to_index(count, "count")));
}

Value f_reverse(Interp& in, const Value& v, Args& a) {
  bind(a, {}, "reverse");
  if (v.is_string()) {
    auto offs = cp_offsets(v.as_string());
    std::string out;
    out.reserve(v.as_string().size());
    for (size_t i = offs.size() - 1; i > 0; --i) out.append(v.as_string(), offs[i - 1], offs[i] - offs[i - 1]);
    return str_value(std::move(out));
  }
  auto items = in.iterate(v);
  std::vector<Value> out(items->items.rbegin(), items->items.rend());
  return Value::list(std::move(out));
}

Value f_round(Interp&, const Value& v, Args& a) {
  auto p = bind(a, {"precision", "method"}, "round");
  int64_t prec = to_index(get(p[0], Value::integer(0)), "precision");
  std::string method = to_str(get(p[1], Value::string("common")));
  if (method != "common" && method != "ceil" && method != "floor") fail("method must be common, ceil or floor");
  if (!v.is_number()) fail("type " + type_name(v) + " doesn't define __round__ method");
  if (method == "common") {
    if (v.is_integral()) {
      if (prec >= 0) return Value::integer(v.as_int());
      return Value::integer(static_cast<int64_t>(py_round(static_cast<double>(v.as_int()), prec)));
    }
    return Value::number(py_round(v.as_double(), prec));
  }
  double scale = std::pow(10.0, static_cast<double>(prec));
  double x = v.as_double() * scale;
  double r = method == "ceil" ? std::ceil(x) : std::floor(x);
  return Value::number(r / scale);
}

Value f_string(Interp&, const Value& v, Args& a) {
  bind(a, {}, "string");
  return v.is_string() ? v : str_value(to_str(v));
}

Value f_sort(Interp& in, const Value& v, Args& a) {
  auto p = bind(a, {"reverse", "case_sensitive", "attribute"}, "sort");
  auto items = in.iterate(v);
  return Value::list(sort_values(in, items->items, truthy(get(p[0], Value::boolean(false))),
                                 truthy(get(p[1], Value::boolean(false))), get(p[2], Value::none())));
}

Value f_sum(Interp& in, const Value& v, Args& a) {
  auto p = bind(a, {"attribute", "start"}, "sum");
  Value attribute = get(p[0], Value::none());
  Value total = get(p[1], Value::integer(0));
  auto items = in.iterate(v);
  for (const Value& x : items->items) {
    Value y = attribute.is_none() ? x : attr_get(in, x, attribute, nullptr);
    total = in.binary(BinOp::Add, total, y);
  }
  return total;
}

Value f_title(Interp&, const Value& v, Args& a) {
  bind(a, {}, "title");
  return str_value(jinja_title(to_str(v)));
}

Value f_tojson(Interp& in, const Value& v, Args& a) {
  auto p = bind(a, {"ensure_ascii", "indent", "separators", "sort_keys"}, "tojson");
  bool ensure_ascii = truthy(get(p[0], Value::boolean(false)));
  Value indent = get(p[1], Value::none());
  Value seps = get(p[2], Value::none());
  bool sort_keys = truthy(get(p[3], Value::boolean(false)));
  bool has_indent = !indent.is_none() && !indent.is_undefined();
  std::string item_sep = has_indent ? "," : ", ", key_sep = ": ";
  if (!seps.is_none() && !seps.is_undefined()) {
    if (!seps.is_list() || seps.as_list().items.size() != 2) fail("tojson separators must be a pair of strings");
    item_sep = str_arg(seps.as_list().items[0], "separator");
    key_sep = str_arg(seps.as_list().items[1], "separator");
  }
  std::string out = to_json(v, indent, item_sep, key_sep, sort_keys, ensure_ascii);
  in.check_size(out.size());
  return str_value(std::move(out));
}

Value f_trim(Interp&, const Value& v, Args& a) {
  auto p = bind(a, {"chars"}, "trim");
  Value chars = get(p[0], Value::none());
  std::string s = to_str(v);
  std::string cs;
  if (!chars.is_none()) cs = str_arg(chars, "trim chars");
  return str_value(std::string(str_strip(s, chars.is_none() ? nullptr : &cs, true, true)));
}

Value f_truncate(Interp&, const Value& v, Args& a) {
  auto p = bind(a, {"length", "killwords", "end", "leeway"}, "truncate");
  int64_t length = to_index(get(p[0], Value::integer(255)), "length");
  bool killwords = truthy(get(p[1], Value::boolean(false)));
  std::string end = to_str(get(p[2], Value::string("...")));
  Value lw = get(p[3], Value::none());
  int64_t leeway = lw.is_none() ? 5 : to_index(lw, "leeway");
  if (!v.is_string()) {  // jinja2 returns a short enough list or dict unchanged
    if (len_of(v) <= length + leeway) return v;
    fail("truncate: cannot slice a " + type_name(v));
  }
  const std::string& s = v.as_string();
  int64_t end_len = static_cast<int64_t>(cp_len(end));
  if (length < end_len) fail("expected length >= " + std::to_string(end_len) + ", got " + std::to_string(length));
  if (leeway < 0) fail("expected leeway >= 0, got " + std::to_string(leeway));
  auto offs = cp_offsets(s);
  int64_t n = static_cast<int64_t>(offs.size()) - 1;
  if (n <= length + leeway) return str_value(s);
  std::string head = s.substr(0, offs[length - end_len]);
  if (killwords) return str_value(head + end);
  size_t sp = head.rfind(' ');
  if (sp != std::string::npos) head.resize(sp);
  return str_value(head + end);
}

Value f_unique(Interp& in, const Value& v, Args& a) {
  auto p = bind(a, {"case_sensitive", "attribute"}, "unique");
  bool cs = truthy(get(p[0], Value::boolean(false)));
  Value attribute = get(p[1], Value::none());
  auto items = in.iterate(v);
  std::vector<Value> seen, out;
  for (const Value& x : items->items) {
    Value k = attribute.is_none() ? x : attr_get(in, x, attribute, nullptr);
    if (!cs) k = ignore_case(k);
    if ((k.is_list() && !k.is_tuple()) || k.is_dict()) fail("unhashable type: '" + type_name(k) + "'");
    in.step(seen.size() / 8 + 1);
    bool dup = false;
    for (const Value& s : seen)
      if (equal(s, k)) {
        dup = true;
        break;
      }
    if (dup) continue;
    seen.push_back(k);
    out.push_back(x);
  }
  return Value::list(std::move(out));
}

Value f_wordcount(Interp&, const Value& v, Args& a) {
  bind(a, {}, "wordcount");
  std::string s = to_str(v);
  int64_t n = 0;
  bool in_word = false;
  for (size_t i = 0; i < s.size();) {
    uint32_t c = utf8::decode(s, i);
    bool w = (c < 0x80) ? (std::isalnum(static_cast<int>(c)) || c == '_') : (!is_space(c) && c != 0xA0);
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value::integer(n);
}

Value f_safe(Interp&, const Value& v, Args& a) {
  bind(a, {}, "safe");
  return v.is_string() ? v : str_value(to_str(v));
}

const std::unordered_map<std::string, FilterFn>& filters() {
  static const std::unordered_map<std::string, FilterFn> table = {
      {"abs", f_abs},           {"attr", f_attr},       {"batch", f_batch},
      {"capitalize", f_capitalize}, {"center", f_center}, {"count", f_length},
      {"d", f_default},         {"default", f_default}, {"dictsort", f_dictsort},
      {"e", f_escape},          {"escape", f_escape},   {"forceescape", f_escape},
      {"first", f_first},       {"float", f_float},     {"format", f_format},
      {"indent", f_indent},     {"int", f_int},         {"items", f_items},
      {"join", f_join},         {"last", f_last},       {"length", f_length},
      {"list", f_list},         {"lower", f_lower},     {"map", f_map},
      {"max", f_max},           {"min", f_min},         {"reject", f_reject},
      {"rejectattr", f_rejectattr}, {"replace", f_replace}, {"reverse", f_reverse},
      {"round", f_round},       {"safe", f_safe},       {"select", f_select},
      {"selectattr", f_selectattr}, {"sort", f_sort},   {"string", f_string},
      {"sum", f_sum},           {"title", f_title},     {"tojson", f_tojson},
      {"trim", f_trim},         {"truncate", f_truncate}, {"unique", f_unique},
      {"upper", f_upper},       {"wordcount", f_wordcount},
  };
  return table;
}

// jinja2 filters kvad does not implement: a clear error when used.
const std::unordered_set<std::string>& unsupported_filters() {
  static const std::unordered_set<std::string> s = {"filesizeformat", "groupby", "pprint", "random", "slice",
                                                     "striptags", "urlencode", "urlize", "wordwrap", "xmlattr"};
  return s;
}

// --- tests --------------------------------------------------------------------------------

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

// --- globals --------------------------------------------------------------------------------

Value g_range(Interp& in, Args& a) {
  if (!a.kw.empty()) fail("range() takes no keyword arguments");
  if (a.pos.empty() || a.pos.size() > 3) fail("range expected 1 to 3 arguments, got " + std::to_string(a.pos.size()));
  int64_t start = 0, stop, step = 1;
  if (a.pos.size() == 1) {
    stop = to_index(a.pos[0], "range");
  } else {
    start = to_index(a.pos[0], "range");
    stop = to_index(a.pos[1], "range");
    if (a.pos.size() == 3) step = to_index(a.pos[2], "range");
  }
  if (step == 0) fail("range() arg 3 must not be zero");
  __int128 n = 0;
  if (step > 0 && stop > start) n = ((__int128)stop - start + step - 1) / step;
  if (step < 0 && stop < start) n = ((__int128)start - stop - step - 1) / (-step);
  if (n > in.limits().max_range)
    fail("Range too big. The sandbox blocks ranges larger than MAX_RANGE (" + std::to_string(in.limits().max_range) +
         ").");
  in.check_size(static_cast<size_t>(n) * 8);
  std::vector<Value> out;
  out.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < static_cast<int64_t>(n); ++i) out.push_back(Value::integer(start + i * step));
  return Value::list(std::move(out));
}

// dict(mapping or pairs, **kwargs), as Python's dict().
std::shared_ptr<Dict> make_dict(Interp& in, const Args& a, const char* fname) {
  if (a.pos.size() > 1) fail(std::string(fname) + " expected at most 1 argument, got " + std::to_string(a.pos.size()));
  auto d = std::make_shared<Dict>();
  if (!a.pos.empty()) {
    const Value& src = a.pos[0];
    if (src.is_dict()) {
      d->items = src.as_dict().items;
    } else {
      auto items = in.iterate(src);
      for (const Value& kv : items->items) {
        auto pair = in.iterate(kv);
        if (pair->items.size() != 2) fail("dictionary update sequence element has wrong length; 2 is required");
        d->set(pair->items[0], pair->items[1]);
      }
    }
  }
  for (const auto& [k, v] : a.kw) d->set(Value::string(k), v);
  return d;
}

Value g_dict(Interp& in, Args& a) { return Value::dict(make_dict(in, a, "dict")); }

Value g_namespace(Interp& in, Args& a) {
  auto d = make_dict(in, a, "Namespace");
  auto ns = std::make_shared<Namespace>();
  for (const auto& [k, v] : d->items) {
    bool nested = (v.is_object() && v.as_object().is_namespace()) || (v.is_list() && v.as_list().has_namespace) ||
                  (v.is_dict() && v.as_dict().has_namespace);
    if (nested) fail("storing a namespace inside a namespace is not supported");
  }
  ns->attrs = std::move(*d);
  return Value::object(ns);
}

Value g_raise_exception(Interp&, Args& a) {
  auto p = bind(a, {"message"}, "raise_exception");
  throw TemplateFailure{p[0] ? to_str(*p[0]) : std::string(), 0, 0, true};
}

Value g_strftime_now(Interp&, Args& a) {
  auto p = bind(a, {"format"}, "strftime_now");
  if (!p[0]) fail("strftime_now() missing required argument 'format'");
  std::string fmt = str_arg(*p[0], "format");
  if (fmt.size() > 256) fail("strftime_now() format longer than 256 bytes");
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  std::string buf(4096, '\0');
  size_t n = fmt.empty() ? 0 : std::strftime(buf.data(), buf.size(), fmt.c_str(), &tm);
  buf.resize(n);
  return str_value(std::move(buf));
}

Value g_joiner(Interp&, Args& a) {
  auto p = bind(a, {"sep"}, "joiner");
  std::string sep = to_str(get(p[0], Value::string(", ")));
  auto used = std::make_shared<bool>(false);
  return native("joiner", [sep, used](Interp&, Args& args) -> Value {
    bind(args, {}, "joiner");
    if (!*used) {
      *used = true;
      return Value::string("");
    }
    return Value::string(sep);
  });
}

// --- Python methods ------------------------------------------------------------------------------

const std::unordered_set<std::string>& str_attrs() {
  static const std::unordered_set<std::string> s = {
      "capitalize", "casefold", "center", "count", "encode", "endswith", "expandtabs", "find", "format",
      "format_map", "index", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit", "isidentifier", "islower",
      "isnumeric", "isprintable", "isspace", "istitle", "isupper", "join", "ljust", "lower", "lstrip", "maketrans",
      "partition", "removeprefix", "removesuffix", "replace", "rfind", "rindex", "rjust", "rpartition", "rsplit",
      "rstrip", "split", "splitlines", "startswith", "strip", "swapcase", "title", "translate", "upper", "zfill"};
  return s;
}

// Code-point range [start, end) of s from Python's optional start/end arguments.
std::pair<size_t, size_t> byte_range(const std::string& s, const Opt& start, const Opt& end) {
  if ((!start || start->is_none()) && (!end || end->is_none())) return {0, s.size()};
  auto offs = cp_offsets(s);
  int64_t n = static_cast<int64_t>(offs.size()) - 1;
  auto adj = [&](const Opt& o, int64_t def) {
    if (!o || o->is_none()) return def;
    int64_t i = to_index(*o, "slice index");
    if (i < 0) i = std::max<int64_t>(0, i + n);
    return std::min(i, n);
  };
  int64_t b = adj(start, 0), e = adj(end, n);
  if (e < b) e = b;
  return {offs[b], offs[e]};
}

std::vector<std::string> affixes(const Value& v, const char* fname) {
  std::vector<std::string> out;
  if (v.is_string()) out.push_back(v.as_string());
  else if (v.is_tuple())
    for (const Value& x : v.as_list().items) out.push_back(str_arg(x, std::string(fname) + " tuple item"));
  else
    fail(std::string(fname) + " first arg must be str or a tuple of str, not " + type_name(v));
  return out;
}

Value split_impl(Interp& in, const std::string& s, const Value& sepv, int64_t maxsplit, bool right) {
  std::vector<Value> parts;
  if (sepv.is_none()) {
    // Runs of whitespace separate; leading/trailing whitespace is dropped.
    auto cps = cp_offsets(s);
    size_t n = cps.size() - 1;
    auto ws_at = [&](size_t k) {
      size_t j = cps[k];
      return is_space(utf8::decode(s, j));
    };
    if (!right) {
      size_t k = 0;
      while (k < n && ws_at(k)) ++k;
      while (k < n) {
        if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
          size_t e = n;
          parts.push_back(Value::string(s.substr(cps[k], cps[e] - cps[k])));
          break;
        }
        size_t w = k;
        while (w < n && !ws_at(w)) ++w;
        parts.push_back(Value::string(s.substr(cps[k], cps[w] - cps[k])));
        k = w;
        while (k < n && ws_at(k)) ++k;
      }
    } else {
      int64_t k = static_cast<int64_t>(n) - 1;
      while (k >= 0 && ws_at(k)) --k;
      while (k >= 0) {
        if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
          parts.push_back(Value::string(s.substr(0, cps[k + 1])));
          break;
        }
        int64_t w = k;
        while (w >= 0 && !ws_at(w)) --w;
        parts.push_back(Value::string(s.substr(cps[w + 1], cps[k + 1] - cps[w + 1])));
        k = w;
        while (k >= 0 && ws_at(k)) --k;
      }
      std::reverse(parts.begin(), parts.end());
    }
  } else {
    std::string sep = str_arg(sepv, "separator");
    if (sep.empty()) fail("empty separator");
    if (!right) {
      size_t pos = 0;
      while (true) {
        size_t f = (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) ? std::string::npos
                                                                                       : s.find(sep, pos);
        if (f == std::string::npos) {
          parts.push_back(Value::string(s.substr(pos)));
          break;
        }
        parts.push_back(Value::string(s.substr(pos, f - pos)));
        pos = f + sep.size();
      }
    } else {
      size_t end = s.size();
      while (true) {
        size_t f = std::string::npos;
        if (!(maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) && end >= sep.size())
          f = s.rfind(sep, end - sep.size());
        if (f == std::string::npos) {
          parts.push_back(Value::string(s.substr(0, end)));
          break;
        }
        parts.push_back(Value::string(s.substr(f + sep.size(), end - f - sep.size())));
        end = f;
      }
      std::reverse(parts.begin(), parts.end());
    }
  }
  in.check_size(parts.size() * 16);
  return Value::list(std::move(parts));
}

// str.format: {} {0} {name}, !r/!s conversions and format specs
// [[fill]align][sign][width][.precision][type].
std::string format_spec(const Value& v, const std::string& spec) {
  if (spec.empty()) return to_str(v);
  size_t i = 0;
  uint32_t fill = ' ';
  char align = 0;
  auto is_align = [](char c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  {
    size_t j = 0;
    uint32_t first = utf8::decode(spec, j);
    if (j < spec.size() && is_align(spec[j])) {
      fill = first;
      align = spec[j];
      i = j + 1;
    } else if (is_align(spec[0])) {
      align = spec[0];
      i = 1;
    }
  }
  char sign = 0;
  if (i < spec.size() && (spec[i] == '+' || spec[i] == '-' || spec[i] == ' ')) sign = spec[i++];
  if (i < spec.size() && spec[i] == '0') {
    if (!align) {
      fill = '0';
      align = '=';
    }
    ++i;
  }
  int64_t width = 0;
  while (i < spec.size() && std::isdigit(static_cast<unsigned char>(spec[i]))) width = width * 10 + (spec[i++] - '0');
  int prec = -1;
  if (i < spec.size() && spec[i] == '.') {
    ++i;
    prec = 0;
    while (i < spec.size() && std::isdigit(static_cast<unsigned char>(spec[i]))) prec = prec * 10 + (spec[i++] - '0');
  }
  char type = i < spec.size() ? spec[i++] : 0;
  if (i != spec.size()) fail("unsupported format specifier '" + spec + "'");
  std::string body;
  bool numeric = v.is_number();
  if (type == 's' || (type == 0 && v.is_string())) {
    if (!v.is_string()) fail("Unknown format code 's' for object of type '" + type_name(v) + "'");
    body = v.as_string();
    if (prec >= 0) {
      auto offs = cp_offsets(body);
      if (static_cast<size_t>(prec) + 1 < offs.size()) body.resize(offs[prec]);
    }
  } else if (type == 'd' || (type == 0 && v.is_integral())) {
    if (!v.is_integral()) fail("Unknown format code 'd' for object of type '" + type_name(v) + "'");
    body = std::to_string(v.as_int());
  } else if (type == 'f' || type == 'F' || type == 'e' || type == 'E' || type == 'g' || type == 'G' || type == '%' ||
             type == 0) {
    if (!numeric) fail(std::string("Unknown format code '") + type + "' for object of type '" + type_name(v) + "'");
    double d = v.as_double();
    char buf[512];
    if (type == 0) {
      if (prec < 0) body = v.is_float() ? float_repr(d) : to_str(v);
      else {
        std::snprintf(buf, sizeof(buf), "%.*g", prec == 0 ? 1 : prec, d);
        body = buf;
      }
    } else if (type == '%') {
      std::snprintf(buf, sizeof(buf), "%.*f%%", prec < 0 ? 6 : prec, d * 100);
      body = buf;
    } else {
      char f[8] = {'%', '.', '*', type, 0};
      std::snprintf(buf, sizeof(buf), f, prec < 0 ? 6 : prec, d);
      body = buf;
    }
  } else {
    fail(std::string("unsupported format code '") + type + "'");
  }
  if (numeric && !body.empty() && body[0] != '-' && (sign == '+' || sign == ' ')) body.insert(body.begin(), sign);
  if (!align) align = (numeric && type != 's') ? '>' : '<';
  if (align == '=') {
    int64_t len = static_cast<int64_t>(cp_len(body));
    if (width > len) {
      size_t at = (!body.empty() && (body[0] == '-' || body[0] == '+' || body[0] == ' ')) ? 1 : 0;
      std::string f;
      utf8::append(f, fill);
      std::string padding;
      for (int64_t k = 0; k < width - len; ++k) padding += f;
      body.insert(at, padding);
    }
    return body;
  }
  return pad(body, width, fill, align);
}

std::string str_format(Interp& in, const std::string& fmt, const Args& a) {
  std::string out;
  int mode = 0;  // 0 unknown, 1 automatic, 2 manual
  size_t auto_idx = 0;
  for (size_t i = 0; i < fmt.size();) {
    char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') {
        out += '}';
        i += 2;
        continue;
      }
      fail("Single '}' encountered in format string");
    }
    if (c != '{') {
      out += c;
      ++i;
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      i += 2;
      continue;
    }
    size_t close = fmt.find('}', i);
    if (close == std::string::npos) fail("Single '{' encountered in format string");
    std::string field = fmt.substr(i + 1, close - i - 1);
    i = close + 1;
    std::string spec, conv;
    size_t colon = field.find(':');
    if (colon != std::string::npos) {
      spec = field.substr(colon + 1);
      field.resize(colon);
    }
    size_t bang = field.find('!');
    if (bang != std::string::npos) {
      conv = field.substr(bang + 1);
      field.resize(bang);
    }
    if (field.find_first_of(".[") != std::string::npos) fail("str.format field '" + field + "' is not supported");
    Value v;
    if (field.empty()) {
      if (mode == 2) fail("cannot switch from manual field specification to automatic field numbering");
      mode = 1;
      if (auto_idx >= a.pos.size()) fail("Replacement index " + std::to_string(auto_idx) + " out of range for positional args tuple");
      v = a.pos[auto_idx++];
    } else if (field.size() <= 9 && std::all_of(field.begin(), field.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
      if (mode == 1) fail("cannot switch from automatic field numbering to manual field specification");
      mode = 2;
      size_t k = std::stoul(field);
      if (k >= a.pos.size()) fail("Replacement index " + field + " out of range for positional args tuple");
      v = a.pos[k];
    } else {
      bool found = false;
      for (const auto& [name, x] : a.kw)
        if (name == field) {
          v = x;
          found = true;
        }
      if (!found) fail("'" + field + "'");
    }
    if (conv == "r" || conv == "a") v = Value::string(repr(v));
    else if (conv == "s") v = Value::string(to_str(v));
    else if (!conv.empty()) fail("Unknown conversion specifier " + conv);
    out += format_spec(v, spec);
    in.check_size(out.size());
  }
  return out;
}

bool all_cps(const std::string& s, bool (*pred)(uint32_t)) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size();) {
    if (!pred(utf8::decode(s, i))) return false;
  }
  return true;
}
bool cp_digit(uint32_t c) { return c >= '0' && c <= '9'; }
bool cp_alpha(uint32_t c) {
  if (c < 0x80) return std::isalpha(static_cast<int>(c));
  return is_cased_upper(c) || is_cased_lower(c) || (c >= 0x3040 && c <= 0x30FF) || (c >= 0x4E00 && c <= 0x9FFF) ||
         (c >= 0xAC00 && c <= 0xD7AF) || c == 0xAA || c == 0xBA;
}
bool cp_alnum(uint32_t c) { return cp_alpha(c) || cp_digit(c); }
bool cp_space(uint32_t c) { return is_space(c); }
bool cp_ascii(uint32_t c) { return c < 0x80; }

Value str_method(Interp& in, const std::string& s, const std::string& name, Args& a) {
  const std::string fn = "str." + name;
  if (name == "startswith" || name == "endswith") {
    auto p = bind(a, {"prefix", "start", "end"}, fn);
    if (!p[0]) fail(fn + "() takes at least 1 argument (0 given)");
    auto [b, e] = byte_range(s, p[1], p[2]);
    std::string_view sub = std::string_view(s).substr(b, e - b);
    for (const auto& x : affixes(*p[0], name.c_str())) {
      bool ok = name == "startswith" ? sub.substr(0, x.size()) == x
                                     : (sub.size() >= x.size() && sub.substr(sub.size() - x.size()) == x);
      if (ok) return Value::boolean(true);
    }
    return Value::boolean(false);
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    auto p = bind(a, {"chars"}, fn);
    Value chars = get(p[0], Value::none());
    std::string cs;
    if (!chars.is_none()) cs = str_arg(chars, "strip arg");
    return str_value(std::string(str_strip(s, chars.is_none() ? nullptr : &cs, name != "rstrip", name != "lstrip")));
  }
  if (name == "split" || name == "rsplit") {
    auto p = bind(a, {"sep", "maxsplit"}, fn);
    return split_impl(in, s, get(p[0], Value::none()), to_index(get(p[1], Value::integer(-1)), "maxsplit"),
                      name == "rsplit");
  }
  if (name == "splitlines") {
    auto p = bind(a, {"keepends"}, fn);
    std::vector<Value> out;
    for (auto& l : split_lines(s, truthy(get(p[0], Value::boolean(false))))) out.push_back(Value::string(l));
    return Value::list(std::move(out));
  }
  if (name == "upper") return bind(a, {}, fn), str_value(str_upper(s));
  if (name == "lower" || name == "casefold") return bind(a, {}, fn), str_value(str_lower(s));
  if (name == "title") return bind(a, {}, fn), str_value(py_title(s));
  if (name == "capitalize") return bind(a, {}, fn), str_value(capitalize(s));
  if (name == "swapcase") {
    bind(a, {}, fn);
    std::string out;
    for (size_t i = 0; i < s.size();) {
      uint32_t c = utf8::decode(s, i);
      utf8::append(out, is_cased_upper(c) ? to_lower(c) : to_upper(c));
    }
    return str_value(out);
  }
  if (name == "replace") {
    auto p = bind(a, {"old", "new", "count"}, fn);
    if (!p[0] || !p[1]) fail("replace expected at least 2 arguments");
    return str_value(str_replace(in, s, str_arg(*p[0], "replace arg"), str_arg(*p[1], "replace arg"),
                                 to_index(get(p[2], Value::integer(-1)), "count")));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    auto p = bind(a, {"sub", "start", "end"}, fn);
    if (!p[0]) fail(fn + "() takes at least 1 argument (0 given)");
    std::string sub = str_arg(*p[0], "substring");
    auto [b, e] = byte_range(s, p[1], p[2]);
    std::string_view hay = std::string_view(s).substr(b, e - b);
    if (name == "count") {
      if (sub.empty()) return Value::integer(static_cast<int64_t>(cp_len(hay)) + 1);
      int64_t n = 0;
      for (size_t pos = hay.find(sub); pos != std::string_view::npos; pos = hay.find(sub, pos + sub.size())) ++n;
      return Value::integer(n);
    }
    size_t f = (name[0] == 'r') ? hay.rfind(sub) : hay.find(sub);
    if (f == std::string_view::npos) {
      if (name == "index" || name == "rindex") fail("substring not found");
      return Value::integer(-1);
    }
    return Value::integer(static_cast<int64_t>(cp_len(std::string_view(s).substr(0, b + f))));
  }
  if (name == "join") {
    auto p = bind(a, {"iterable"}, fn);
    if (!p[0]) fail("str.join() takes exactly one argument (0 given)");
    auto items = in.iterate(*p[0]);
    std::string out;
    for (size_t i = 0; i < items->items.size(); ++i) {
      const Value& x = items->items[i];
      if (!x.is_string())
        fail("sequence item " + std::to_string(i) + ": expected str instance, " + type_name(x) + " found");
      if (i) out += s;
      out += x.as_string();
      in.check_size(out.size());
    }
    return str_value(std::move(out));
  }
  if (name == "format") return str_value(str_format(in, s, a));
  if (name == "center" || name == "ljust" || name == "rjust") {
    auto p = bind(a, {"width", "fillchar"}, fn);
    if (!p[0]) fail(fn + "() takes at least 1 argument (0 given)");
    uint32_t fill = p[1] ? fill_char(*p[1]) : ' ';
    return str_value(pad(s, to_index(*p[0], "width"), fill, name == "center" ? '^' : name == "ljust" ? '<' : '>'));
  }
  if (name == "zfill") {
    auto p = bind(a, {"width"}, fn);
    if (!p[0]) fail("zfill() takes exactly one argument (0 given)");
    int64_t w = to_index(*p[0], "width"), len = static_cast<int64_t>(cp_len(s));
    if (w <= len) return str_value(s);
    if (w > (16 << 20)) fail("zfill width too large");
    size_t at = (!s.empty() && (s[0] == '+' || s[0] == '-')) ? 1 : 0;
    std::string out = s;
    out.insert(at, std::string(w - len, '0'));
    return str_value(out);
  }
  if (name == "partition" || name == "rpartition") {
    auto p = bind(a, {"sep"}, fn);
    if (!p[0]) fail(fn + "() takes exactly one argument (0 given)");
    std::string sep = str_arg(*p[0], "separator");
    if (sep.empty()) fail("empty separator");
    size_t f = name == "partition" ? s.find(sep) : s.rfind(sep);
    if (f == std::string::npos) {
      if (name == "partition") return Value::list({Value::string(s), Value::string(""), Value::string("")}, true);
      return Value::list({Value::string(""), Value::string(""), Value::string(s)}, true);
    }
    return Value::list({Value::string(s.substr(0, f)), Value::string(sep), Value::string(s.substr(f + sep.size()))},
                       true);
  }
  if (name == "removeprefix" || name == "removesuffix") {
    auto p = bind(a, {"affix"}, fn);
    if (!p[0]) fail(fn + "() takes exactly one argument (0 given)");
    std::string x = str_arg(*p[0], "affix");
    if (name == "removeprefix" && s.compare(0, x.size(), x) == 0) return str_value(s.substr(x.size()));
    if (name == "removesuffix" && !x.empty() && s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0)
      return str_value(s.substr(0, s.size() - x.size()));
    return str_value(s);
  }
  if (name == "isdigit" || name == "isdecimal" || name == "isnumeric") return bind(a, {}, fn), Value::boolean(all_cps(s, cp_digit));
  if (name == "isalpha") return bind(a, {}, fn), Value::boolean(all_cps(s, cp_alpha));
  if (name == "isalnum") return bind(a, {}, fn), Value::boolean(all_cps(s, cp_alnum));
  if (name == "isspace") return bind(a, {}, fn), Value::boolean(all_cps(s, cp_space));
  if (name == "isascii") return bind(a, {}, fn), Value::boolean(s.empty() || all_cps(s, cp_ascii));
  if (name == "islower" || name == "isupper") {
    bind(a, {}, fn);
    Args none;
    return Value::boolean(name == "islower" ? t_lower(in, Value::string(s), none) : t_upper(in, Value::string(s), none));
  }
  fail("str method '" + name + "' is not supported");
}

Value dict_method(Interp& in, const Value& self, const std::string& name, Args& a) {
  const Dict& d = self.as_dict();
  const std::string fn = "dict." + name;
  if (name == "get") {
    auto p = bind(a, {"key", "default"}, fn);
    if (!p[0]) fail("get expected at least 1 argument, got 0");
    if (const Value* v = d.find(*p[0])) return *v;
    return get(p[1], Value::none());
  }
  if (name == "items" || name == "keys" || name == "values") {
    bind(a, {}, fn);
    std::vector<Value> out;
    out.reserve(d.items.size());
    for (const auto& [k, v] : d.items) {
      if (name == "items") out.push_back(Value::list({k, v}, true));
      else out.push_back(name == "keys" ? k : v);
    }
    return Value::list(std::move(out));
  }
  if (name == "copy") return bind(a, {}, fn), self;
  (void)in;
  fail("dict method '" + name + "' is not supported");
}

Value list_method(Interp& in, const Value& self, const std::string& name, Args& a) {
  const auto& items = self.as_list().items;
  const std::string fn = type_name(self) + "." + name;
  if (name == "count") {
    auto p = bind(a, {"value"}, fn);
    if (!p[0]) fail("count() takes exactly one argument (0 given)");
    int64_t n = 0;
    for (const Value& x : items) n += equal(x, *p[0]);
    in.step(items.size() / 16);
    return Value::integer(n);
  }
  if (name == "index") {
    auto p = bind(a, {"value", "start", "stop"}, fn);
    if (!p[0]) fail("index expected at least 1 argument, got 0");
    int64_t n = static_cast<int64_t>(items.size());
    auto adj = [&](const Opt& o, int64_t def) {
      if (!o) return def;
      int64_t i = to_index(*o, "index");
      if (i < 0) i = std::max<int64_t>(0, i + n);
      return std::min(i, n);
    };
    for (int64_t i = adj(p[1], 0), e = adj(p[2], n); i < e; ++i)
      if (equal(items[i], *p[0])) return Value::integer(i);
    fail(repr(*p[0]) + " is not in list");
  }
  if (name == "copy") return bind(a, {}, fn), self;
  fail(type_name(self) + " method '" + name + "' is not supported");
}

Value unsafe(const Value& self, const std::string& name) {
  return Value::undefined("access to attribute '" + name + "' of '" + type_name(self) + "' object is unsafe.");
}

}  // namespace

bool find_method(const Value& self, const std::string& name, Value& out) {
  if (self.is_undefined() || self.is_object()) return false;
  if (name.size() > 4 && name.compare(0, 2, "__") == 0 && name.compare(name.size() - 2, 2, "__") == 0) {
    out = unsafe(self, name);
    return true;
  }
  switch (self.kind()) {
    case Value::Kind::String:
      if (!str_attrs().count(name)) return false;
      out = native(name, [self, name](Interp& in, Args& a) { return str_method(in, self.as_string(), name, a); });
      return true;
    case Value::Kind::Dict: {
      static const std::unordered_set<std::string> safe = {"get", "items", "keys", "values", "copy", "fromkeys"};
      static const std::unordered_set<std::string> mutators = {"clear", "pop", "popitem", "setdefault", "update"};
      if (mutators.count(name)) {
        out = unsafe(self, name);
        return true;
      }
      if (!safe.count(name)) return false;
      out = native(name, [self, name](Interp& in, Args& a) { return dict_method(in, self, name, a); });
      return true;
    }
    case Value::Kind::List: {
      static const std::unordered_set<std::string> safe = {"count", "index", "copy"};
      static const std::unordered_set<std::string> mutators = {"append", "clear",  "extend",  "insert",
                                                               "pop",    "remove", "reverse", "sort"};
      if (self.is_tuple()) {
        if (name != "count" && name != "index") return false;
      } else if (mutators.count(name)) {
        out = unsafe(self, name);
        return true;
      }
      if (!safe.count(name)) return false;
      out = native(name, [self, name](Interp& in, Args& a) { return list_method(in, self, name, a); });
      return true;
    }
    default: return false;
  }
}

// --- printf-style formatting ------------------------------------------------------------------

std::string percent_format(Interp& in, const std::string& fmt, const Value& args) {
  std::vector<Value> values;
  const Dict* mapping = nullptr;
  if (args.is_tuple()) values = args.as_list().items;
  else if (args.is_dict()) mapping = &args.as_dict();
  else values.push_back(args);
  size_t next = 0;
  bool used_mapping = false;
  auto take = [&]() -> Value {
    if (mapping && !args.is_tuple()) {
      // A single dict argument used positionally (e.g. "%s" % {...}).
      if (next++ == 0) return args;
      fail("not enough arguments for format string");
    }
    if (next >= values.size()) fail("not enough arguments for format string");
    return values[next++];
  };
  std::string out;
  for (size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c != '%') {
      out += c;
      continue;
    }
    if (++i >= fmt.size()) fail("incomplete format");
    Value v;
    bool have = false;
    if (fmt[i] == '(') {
      size_t close = fmt.find(')', i);
      if (close == std::string::npos) fail("incomplete format key");
      if (!mapping) fail("format requires a mapping");
      std::string key = fmt.substr(i + 1, close - i - 1);
      const Value* x = mapping->find(std::string_view(key));
      if (!x) fail("'" + key + "'");
      v = *x;
      have = true;
      used_mapping = true;
      i = close + 1;
    }
    std::string flags;
    while (i < fmt.size() && std::strchr("-+ #0", fmt[i]) && fmt[i]) flags += fmt[i++];
    int64_t width = -1, prec = -1;
    if (i < fmt.size() && fmt[i] == '*') {
      width = to_index(take(), "width");
      ++i;
    } else {
      while (i < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[i]))) width = std::max<int64_t>(width, 0) * 10 + (fmt[i++] - '0');
    }
    if (i < fmt.size() && fmt[i] == '.') {
      ++i;
      prec = 0;
      if (i < fmt.size() && fmt[i] == '*') {
        prec = to_index(take(), "precision");
        ++i;
      } else {
        while (i < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[i]))) prec = prec * 10 + (fmt[i++] - '0');
      }
    }
    while (i < fmt.size() && (fmt[i] == 'h' || fmt[i] == 'l' || fmt[i] == 'L')) ++i;
    if (i >= fmt.size()) fail("incomplete format");
    char conv = fmt[i];
    if (width > (1 << 20) || prec > 1000) fail("format width or precision too large");
    if (conv == '%') {
      out += '%';
      continue;
    }
    if (!have) v = take();
    std::string body;
    bool numeric = false;
    switch (conv) {
      case 's': body = to_str(v); break;
      case 'r':
      case 'a': body = repr(v); break;
      case 'd':
      case 'i':
      case 'u':
      case 'x':
      case 'X':
      case 'o': {
        int64_t n;
        if (v.is_integral()) n = v.as_int();
        else if (v.is_float()) n = float_to_int(v.as_double());
        else fail(std::string("%") + conv + " format: a real number is required, not " + type_name(v));
        numeric = true;
        bool neg = n < 0;
        uint64_t u = neg ? 0 - static_cast<uint64_t>(n) : static_cast<uint64_t>(n);
        char buf[80];
        if (conv == 'x') std::snprintf(buf, sizeof(buf), "%llx", static_cast<unsigned long long>(u));
        else if (conv == 'X') std::snprintf(buf, sizeof(buf), "%llX", static_cast<unsigned long long>(u));
        else if (conv == 'o') std::snprintf(buf, sizeof(buf), "%llo", static_cast<unsigned long long>(u));
        else std::snprintf(buf, sizeof(buf), "%llu", static_cast<unsigned long long>(u));
        std::string digits = buf;
        if (prec >= 0 && static_cast<int64_t>(digits.size()) < prec) digits.insert(0, prec - digits.size(), '0');
        if (flags.find('#') != std::string::npos && conv != 'd' && conv != 'i' && conv != 'u')
          digits.insert(0, conv == 'o' ? "0o" : conv == 'x' ? "0x" : "0X");
        body = (neg ? "-" : flags.find('+') != std::string::npos ? "+" : flags.find(' ') != std::string::npos ? " " : "") + digits;
        break;
      }
      case 'e':
      case 'E':
      case 'f':
      case 'F':
      case 'g':
      case 'G': {
        if (!v.is_number()) fail(std::string("must be real number, not ") + type_name(v));
        numeric = true;
        std::string f = "%";
        for (char fl : flags)
          if (fl != '0' && fl != '-') f += fl;
        f += ".*";
        f += conv;
        char buf[1200];
        std::snprintf(buf, sizeof(buf), f.c_str(), static_cast<int>(prec < 0 ? 6 : prec), v.as_double());
        body = buf;
        break;
      }
      case 'c': {
        if (v.is_string() && cp_len(v.as_string()) == 1) body = v.as_string();
        else if (v.is_integral() && v.as_int() >= 0 && v.as_int() <= 0x10FFFF) utf8::append(body, static_cast<uint32_t>(v.as_int()));
        else fail("%c requires int or char");
        break;
      }
      default: fail(std::string("unsupported format character '") + conv + "'");
    }
    if (prec >= 0 && (conv == 's' || conv == 'r' || conv == 'a')) {
      auto offs = cp_offsets(body);
      if (static_cast<size_t>(prec) + 1 < offs.size()) body.resize(offs[prec]);
    }
    int64_t len = static_cast<int64_t>(cp_len(body));
    if (width > len) {
      bool left = flags.find('-') != std::string::npos;
      bool zero = numeric && !left && flags.find('0') != std::string::npos;
      if (left) body += std::string(width - len, ' ');
      else if (zero) {
        size_t at = (!body.empty() && (body[0] == '-' || body[0] == '+' || body[0] == ' ')) ? 1 : 0;
        if (body.compare(at, 2, "0x") == 0 || body.compare(at, 2, "0X") == 0 || body.compare(at, 2, "0o") == 0) at += 2;
        body.insert(at, std::string(width - len, '0'));
      } else {
        body.insert(0, std::string(width - len, ' '));
      }
    }
    out += body;
    in.check_size(out.size());
  }
  // Python checks leftovers only for tuples and single non-mapping values
  // (a list or dict argument counts as a mapping: "abc" % [1] is "abc").
  const bool mapping_like = args.is_dict() || (args.is_list() && !args.is_tuple());
  if (!mapping_like && next < values.size()) fail("not all arguments converted during string formatting");
  (void)used_mapping;
  return out;
}

// --- Interp's tables ------------------------------------------------------------------------------

Value Interp::filter(const std::string& name, const Value& v, Args& args) {
  const auto& t = filters();
  auto it = t.find(name);
  if (it != t.end()) return it->second(*this, v, args);
  if (unsupported_filters().count(name)) fail("filter '" + name + "' is not supported by kvad's template engine");
  fail("No filter named '" + name + "'.");
}

bool Interp::test(const std::string& name, const Value& v, Args& args) {
  const auto& t = tests();
  auto it = t.find(name);
  if (it != t.end()) return it->second(*this, v, args);
  fail("No test named '" + name + "'.");
}

bool Interp::has_filter(const std::string& name) const {
  return filters().count(name) || unsupported_filters().count(name);
}
bool Interp::has_test(const std::string& name) const { return tests().count(name) > 0; }

Value Interp::global(const std::string& name) {
  using G = Value (*)(Interp&, Args&);
  static const std::unordered_map<std::string, G> table = {
      {"range", g_range},         {"dict", g_dict},     {"namespace", g_namespace}, {"raise_exception", g_raise_exception},
      {"strftime_now", g_strftime_now}, {"joiner", g_joiner},
  };
  auto it = table.find(name);
  if (it != table.end()) return native(name, it->second);
  if (name == "lipsum" || name == "cycler")
    return native(name, [name](Interp&, Args&) -> Value { fail("function '" + name + "' is not supported by kvad's template engine"); });
  return Value();
}

}  // namespace kvad::jinja
