// Helpers the built-ins of the Jinja2 chat-template engine share: Python-style
// argument binding and the string operations more than one of filters.cpp,
// tests.cpp, globals.cpp, methods.cpp and format.cpp use.
//
// Internal to src/jinja; the public API is chat_template.h.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "jinja/eval.h"

namespace kvad::jinja {

using Opt = std::optional<Value>;

/// Binds positional and keyword arguments to parameter names, as Python does.
std::vector<Opt> bind(const Args& a, std::initializer_list<const char*> names, const std::string& fname);
Value get(const Opt& o, Value def);
int64_t to_index(const Value& v, const std::string& what);
std::string str_arg(const Value& v, const std::string& what);
Value str_value(std::string s);
Value native(const std::string& name, NativeFunction::Fn fn);

/// Python str.splitlines(keepends).
std::vector<std::string> split_lines(const std::string& s, bool keepends);
/// Python str.replace(old, rep, count); count < 0: all.
std::string str_replace(Interp& in, const std::string& s, const std::string& old, const std::string& rep,
                        int64_t count);
/// Python str.capitalize(): first character upper, the rest lower.
std::string capitalize(const std::string& s);
/// Pads to `width` code points with `fill`; align is '<', '>' or '^'.
std::string pad(const std::string& s, int64_t width, uint32_t fill, char align);
/// Python int(float): truncates; NaN, infinities and overflow fail.
int64_t float_to_int(double d);

/// The `lower` and `upper` tests (tests.cpp); str.islower() and
/// str.isupper() (methods.cpp) are the same.
bool t_lower(Interp&, const Value& v, Args&);
bool t_upper(Interp&, const Value& v, Args&);

/// Python's str.format (format.cpp).
std::string str_format(Interp& in, const std::string& fmt, const Args& a);

}  // namespace kvad::jinja
