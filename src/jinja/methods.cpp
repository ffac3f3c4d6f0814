// Python methods of str, dict and list values (find_method, builtins.h).
// Sources: CPython's str methods; jinja2 3.1 sandbox.py
// (modifies_known_mutable: list/dict mutators are unsafe).
#include <algorithm>
#include <unordered_set>

#include "base/utf8.h"
#include "jinja/builtin_helpers.h"
#include "jinja/builtins.h"

namespace kvad::jinja {

namespace {

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

uint32_t fill_char(const Value& v) {
  std::string f = str_arg(v, "fill character");
  if (cp_len(f) != 1) fail("The fill character must be exactly one character long");
  size_t i = 0;
  return utf8::decode(f, i);
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

}  // namespace kvad::jinja
