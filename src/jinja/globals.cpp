// Globals of the Jinja2 chat-template engine (Interp::global): range, dict,
// namespace, joiner, and HuggingFace's raise_exception and strftime_now.
// Sources: jinja2 3.1 defaults.py, utils.py (Namespace, joiner), sandbox.py
// (safe_range); HuggingFace transformers' chat-template environment.
#include <ctime>
#include <unordered_map>

#include "jinja/builtin_helpers.h"

namespace kvad::jinja {

namespace {

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

}  // namespace

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
