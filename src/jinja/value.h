// Values of the Jinja2 chat-template engine (chat_template.h), with Python's
// semantics: the rules below are those of CPython 3 and of jinja2 3.1's
// runtime (Undefined, Namespace), which HuggingFace transformers uses to
// render chat templates. Output must match theirs byte for byte, so printing
// follows Python's str()/repr() (True, None, ['a', 'b'], 1.0, 1e+16).
//
// Internal to src/jinja; the public API is chat_template.h.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace kvad::jinja {

class Value;
class Object;
class Interp;

/// A Python list or tuple. Shared between values; never changed once a value
/// holds it (the sandbox is immutable, as HF's ImmutableSandboxedEnvironment).
struct List {
  std::vector<Value> items;
  bool tuple = false;
  uint16_t depth = 1;      ///< nesting depth (bounded: destruction and printing recurse)
  bool has_namespace = false;  ///< holds a namespace() somewhere inside
};

/// A Python dict: keys in insertion order.
struct Dict {
  std::vector<std::pair<Value, Value>> items;
  uint16_t depth = 1;
  bool has_namespace = false;
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  /// Inserts or replaces (keeping the first position, as Python does).
  void set(Value key, Value value);
};

/// Positional and keyword arguments of a call.
struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
};

/// Deepest nesting of lists/dicts a value may have (input JSON included).
constexpr int kMaxNesting = 256;

class Value {
 public:
  enum class Kind : uint8_t { Undefined, None, Bool, Int, Float, String, List, Dict, Object };

  /// Undefined with no name: "is undefined".
  Value() = default;
  /// An Undefined whose use (attribute, call, arithmetic) fails with `message`
  /// (jinja2's hint: "'x' is undefined", "'dict object' has no attribute 'y'").
  static Value undefined(std::string message);
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value number(double d);
  static Value string(std::string s);
  static Value list(std::vector<Value> items, bool tuple = false);
  /// Fails when nesting would exceed kMaxNesting.
  static Value dict(std::shared_ptr<Dict> d);
  static Value object(std::shared_ptr<Object> o);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_int() const { return kind_ == Kind::Int; }
  bool is_float() const { return kind_ == Kind::Float; }
  /// int, bool or float (Python's numbers.Number).
  bool is_number() const { return kind_ == Kind::Int || kind_ == Kind::Bool || kind_ == Kind::Float; }
  /// int or bool (bool is a subclass of int in Python).
  bool is_integral() const { return kind_ == Kind::Int || kind_ == Kind::Bool; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_list() const { return kind_ == Kind::List; }   ///< list or tuple
  bool is_tuple() const { return kind_ == Kind::List && as_list().tuple; }
  bool is_dict() const { return kind_ == Kind::Dict; }
  bool is_object() const { return kind_ == Kind::Object; }

  bool as_bool() const { return b_; }
  /// int or bool as an integer.
  int64_t as_int() const { return kind_ == Kind::Bool ? (b_ ? 1 : 0) : i_; }
  /// Any number as a double.
  double as_double() const { return kind_ == Kind::Float ? f_ : static_cast<double>(as_int()); }
  const std::string& as_string() const { return *static_cast<const std::string*>(p_.get()); }
  const List& as_list() const { return *static_cast<const List*>(p_.get()); }
  const std::shared_ptr<const List> list_ptr() const { return std::static_pointer_cast<const List>(p_); }
  const Dict& as_dict() const { return *static_cast<const Dict*>(p_.get()); }
  Object& as_object() const { return *static_cast<Object*>(p_.get()); }
  std::shared_ptr<Object> object_ptr() const { return std::static_pointer_cast<Object>(p_); }
  /// The message an Undefined fails with when used.
  std::string undefined_message() const;
  /// True when both hold the same list/dict/object (Python's `is` for containers).
  bool same_ptr(const Value& o) const { return p_ && p_ == o.p_; }

 private:
  Kind kind_ = Kind::Undefined;
  union {
    bool b_;
    int64_t i_ = 0;
    double f_;
  };
  std::shared_ptr<void> p_;  // string, List, Dict, Object, or Undefined's message
};

/// Something with attributes or a call: namespace(), loop, macros, bound
/// methods, built-in functions.
class Object {
 public:
  virtual ~Object() = default;
  /// Python type name, for error messages.
  virtual std::string type_name() const = 0;
  /// Python str()/repr().
  virtual std::string repr() const;
  /// Attribute lookup; Undefined when absent.
  virtual Value getattr(const std::string& name) const;
  virtual bool callable() const { return false; }
  virtual Value call(Interp& in, Args& args);
  virtual bool is_namespace() const { return false; }
};

/// Thrown by the engine; chat_template.cpp turns it into kvad::ChatTemplateError
/// with the template line. `raised` marks raise_exception().
struct TemplateFailure {
  std::string message;
  int line = 0;
  int column = 0;
  bool raised = false;
};
[[noreturn]] void fail(std::string message);

// --- Python semantics -------------------------------------------------------

/// While alive, printing (str/repr/json) fails once its output passes
/// `max_bytes` (per thread), so a small value that prints huge (a list
/// holding one long string many times) cannot exhaust memory.
class PrintLimit {
 public:
  explicit PrintLimit(size_t max_bytes);
  ~PrintLimit();
  PrintLimit(const PrintLimit&) = delete;
  PrintLimit& operator=(const PrintLimit&) = delete;
  static void check(size_t bytes);

 private:
  size_t saved_;
};

/// Python's truth value (Undefined is false).
bool truthy(const Value& v);
/// Python's str(v) (Undefined prints as "").
std::string to_str(const Value& v);
/// Appends str(v) to out.
void append_str(std::string& out, const Value& v);
/// Python's repr(v).
std::string repr(const Value& v);
/// Python's type(v).__name__ ('str', 'int', 'NoneType', 'list', ...).
std::string type_name(const Value& v);
/// Python ==.
bool equal(const Value& a, const Value& b);
/// Python ordering: <0, 0, >0. Throws TypeError-style failure naming `op`
/// ("'<' not supported between instances of 'int' and 'str'").
int compare(const Value& a, const Value& b, const char* op);
/// Python float repr ("1.0", "1e+16", "0.0001", "inf").
std::string float_repr(double d);

/// json.dumps(v, ensure_ascii, indent, separators, sort_keys) as Python does it.
/// `indent`: None (Undefined/None), an int (spaces) or a string.
std::string to_json(const Value& v, const Value& indent, const std::string& item_sep,
                    const std::string& key_sep, bool sort_keys, bool ensure_ascii);
/// JSON (insertion-ordered) to a Value: objects become dicts, arrays lists.
Value from_json(const nlohmann::ordered_json& j);

// --- Unicode helpers (code points, Python's str.isspace/upper/lower) --------

/// Python's str.isspace() for one code point.
bool is_space(uint32_t cp);
/// Number of code points (Python's len()).
size_t cp_len(std::string_view s);
/// Code points of s.
std::vector<uint32_t> code_points(std::string_view s);
/// Byte offsets of each code point start, plus s.size() at the end.
std::vector<size_t> cp_offsets(std::string_view s);
uint32_t to_upper(uint32_t cp);
uint32_t to_lower(uint32_t cp);
bool is_cased_upper(uint32_t cp);
bool is_cased_lower(uint32_t cp);
/// str.upper()/lower() (ß upper-cases to SS as Python does).
std::string str_upper(std::string_view s);
std::string str_lower(std::string_view s);
/// Python's str.strip(chars) family; `chars` null = whitespace.
std::string_view str_strip(std::string_view s, const std::string* chars, bool left, bool right);

}  // namespace kvad::jinja
