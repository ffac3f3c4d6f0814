// Filters of the Jinja2 chat-template engine (Interp::filter). Sources:
// jinja2 3.1 filters.py; HuggingFace transformers' chat-template
// environment (tojson = json.dumps(x, ensure_ascii=False, indent, separators,
// sort_keys)).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <unordered_map>
#include <unordered_set>

#include "base/utf8.h"
#include "jinja/builtin_helpers.h"
#include "jinja/builtins.h"

namespace kvad::jinja {

namespace {

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

}  // namespace

Value Interp::filter(const std::string& name, const Value& v, Args& args) {
  const auto& t = filters();
  auto it = t.find(name);
  if (it != t.end()) return it->second(*this, v, args);
  if (unsupported_filters().count(name)) fail("filter '" + name + "' is not supported by kvad's template engine");
  fail("No filter named '" + name + "'.");
}

bool Interp::has_filter(const std::string& name) const {
  return filters().count(name) || unsupported_filters().count(name);
}

}  // namespace kvad::jinja
