// Built-ins of the Jinja2 chat-template engine: jinja2 3.1's filters and tests,
// the globals HuggingFace adds (raise_exception, strftime_now, its tojson),
// and the Python str/dict/list methods templates call. Implemented in
// filters.cpp, tests.cpp, globals.cpp (Interp::filter, test, global),
// methods.cpp and format.cpp, on the helpers of builtin_helpers.h.
//
// Internal to src/jinja; the public API is chat_template.h.
#pragma once
#include <string>

#include "jinja/eval.h"

namespace kvad::jinja {

/// Python attribute `name` of a str, dict, list or number. Returns true when
/// the attribute exists: `out` is then a bound method, or for a list/dict
/// mutator (append, update, ...) an Undefined that fails when called, as
/// jinja2's ImmutableSandboxedEnvironment does. False when there is no such attribute.
bool find_method(const Value& self, const std::string& name, Value& out);

/// Python's printf-style `fmt % args` (%s %r %d %i %f %e %g %x %o %c %%,
/// flags, width, precision, %(name)s with a dict).
std::string percent_format(Interp& in, const std::string& fmt, const Value& args);

}  // namespace kvad::jinja
