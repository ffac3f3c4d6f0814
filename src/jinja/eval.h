// Tree-walking interpreter of the Jinja2 chat-template engine, sandboxed:
// every statement and expression costs a step, output and strings are capped,
// recursion is bounded, and there is no I/O. Semantics follow jinja2 3.1's
// ImmutableSandboxedEnvironment as HuggingFace transformers configures it
// (list/dict mutators such as append and update are unsafe and fail when
// called, as there).
//
// Internal to src/jinja; the public API is chat_template.h.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "jinja/parse.h"
#include "jinja/value.h"

namespace kvad::jinja {

struct EvalLimits {
  size_t max_output_bytes = 16u << 20;  ///< rendered text, and any one string value
  uint64_t max_steps = 5'000'000;       ///< statements + expressions evaluated (+1 per 256 bytes built)
  int max_depth = 1000;                 ///< nested evaluation (expressions, blocks, macro calls)
  int max_call_depth = 100;             ///< nested macro calls
  int64_t max_range = 100000;           ///< largest range() (jinja2's sandbox MAX_RANGE)
};

/// A scope: variables set in it, then its parent's. A for-loop iteration,
/// a macro call, {% with %} and block bodies get their own.
struct Frame {
  std::shared_ptr<Frame> parent;
  std::vector<std::pair<std::string, Value>> vars;
  const Value* find(std::string_view name) const;
  void set(const std::string& name, Value v);
};
using FramePtr = std::shared_ptr<Frame>;

class Macro;

/// Fails with an Undefined's message: the template used it (called it,
/// iterated it, did arithmetic with it).
[[noreturn]] void undefined_used(const Value& v);

/// A native callable (built-in function, bound method).
class NativeFunction : public Object {
 public:
  using Fn = std::function<Value(Interp&, Args&)>;
  NativeFunction(std::string name, Fn fn, std::string type = "builtin_function_or_method")
      : name_(std::move(name)), type_(std::move(type)), fn_(std::move(fn)) {}
  std::string type_name() const override { return type_; }
  std::string repr() const override { return "<built-in function " + name_ + ">"; }
  bool callable() const override { return true; }
  Value call(Interp& in, Args& args) override { return fn_(in, args); }

 private:
  std::string name_, type_;
  Fn fn_;
};

/// jinja2's Namespace: the one mutable object ({% set ns.x = ... %}).
class Namespace : public Object {
 public:
  std::string type_name() const override { return "Namespace"; }
  std::string repr() const override;
  Value getattr(const std::string& name) const override;
  bool is_namespace() const override { return true; }
  Dict attrs;
};

class Interp {
 public:
  explicit Interp(const EvalLimits& limits) : limits_(limits) {}
  ~Interp();

  /// Renders a program with `globals` as the template's variables.
  std::string render(const Program& prog, const FramePtr& globals);

  /// Counts `n` steps; fails past the limit.
  void step(uint64_t n = 1) {
    steps_ += n;
    if (steps_ > limits_.max_steps) step_limit();
  }
  /// Accounts for building a string or list of `bytes`/elements: fails when
  /// larger than the output limit, and charges steps for the work.
  void check_size(size_t bytes) {
    if (bytes > limits_.max_output_bytes) size_limit(bytes);
    step(bytes / 256);
  }
  const EvalLimits& limits() const { return limits_; }
  /// Line of the statement or expression being evaluated (for errors).
  int line() const { return line_; }

  Value eval(const Expr& e, const FramePtr& f);
  /// Calls a callable value (macro, builtin, method). Undefined fails with its message.
  Value call(const Value& fn, Args& args);
  /// jinja2's sandboxed getattr (a.b) and getitem (a[b]).
  Value getattr(const Value& obj, const std::string& name);
  Value getitem(const Value& obj, const Value& key);
  /// Python iteration: a list's items, a dict's keys, a string's characters;
  /// Undefined iterates as empty. Fails for other types.
  std::shared_ptr<const List> iterate(const Value& v);
  /// `item in container`.
  bool contains(const Value& container, const Value& item);
  /// Applies the named filter / test (jinja2 builtins, HF's tojson).
  Value filter(const std::string& name, const Value& v, Args& args);
  bool test(const std::string& name, const Value& v, Args& args);
  bool has_filter(const std::string& name) const;
  bool has_test(const std::string& name) const;
  /// Global functions (range, dict, namespace, raise_exception, strftime_now, ...); Undefined if none.
  Value global(const std::string& name);
  /// Calls a macro object.
  Value call_macro(Macro& m, Args& args);
  /// Binary arithmetic with Python semantics.
  Value binary(BinOp op, const Value& a, const Value& b);
  /// Python slicing obj[start:stop:step].
  Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

 private:
  enum class Flow { Normal, Break, Continue };
  Flow exec_body(const Body& body, const FramePtr& f, std::string& out);
  Flow exec(const Stmt& s, const FramePtr& f, std::string& out);
  void exec_for(const Stmt& s, const FramePtr& f, std::string& out);
  void assign(const Target& t, const Value& v, const FramePtr& f);
  void append_out(std::string& out, const Value& v);
  void append_out(std::string& out, std::string_view s);
  Value eval_call(const Expr& e, const FramePtr& f, const Value* caller);
  void eval_args(const Expr& e, const FramePtr& f, Args& args);
  Value eval_compare(const Expr& e, const FramePtr& f);
  Value lookup(const std::string& name, const FramePtr& f);
  [[noreturn]] void step_limit();
  [[noreturn]] void size_limit(size_t bytes);

  friend struct DepthGuard;
  const EvalLimits& limits_;
  uint64_t steps_ = 0;
  int depth_ = 0;
  int call_depth_ = 0;
  int line_ = 0;
  std::vector<std::shared_ptr<Macro>> macros_;  // closures are cleared at the end (frame <-> macro cycles)
};

}  // namespace kvad::jinja
