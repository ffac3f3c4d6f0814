// String formatting of the Jinja2 chat-template engine: Python's str.format
// (builtin_helpers.h) and printf-style `fmt % args` (the `format` filter,
// the `%` operator; builtins.h). Source: CPython's str.format and
// printf-style formatting.
#include <algorithm>
#include <cstdio>
#include <cstring>

#include "base/utf8.h"
#include "jinja/builtin_helpers.h"
#include "jinja/builtins.h"

namespace kvad::jinja {

namespace {

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

}  // namespace

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

}  // namespace kvad::jinja
