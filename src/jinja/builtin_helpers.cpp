// Helpers the built-ins of the Jinja2 chat-template engine share
// (builtin_helpers.h). Sources: CPython's argument binding and str methods.
#include "jinja/builtin_helpers.h"

#include <cmath>

#include "base/utf8.h"

namespace kvad::jinja {

namespace {

// Python str.splitlines boundaries.
bool is_line_break(uint32_t c) {
  return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E || c == 0x85 ||
         c == 0x2028 || c == 0x2029;
}

}  // namespace

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

int64_t float_to_int(double d) {
  if (std::isnan(d)) fail("cannot convert float NaN to integer");
  if (std::isinf(d)) fail("cannot convert float infinity to integer");
  double t = std::trunc(d);
  if (t >= 9223372036854775808.0 || t < -9223372036854775808.0) fail("integer overflow");
  return static_cast<int64_t>(t);
}

}  // namespace kvad::jinja
