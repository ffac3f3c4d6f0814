// The JSON Schema compiler's internals (engine/grammar/json_schema.h): one
// Compiler per schema, writing GBNF rules; its methods live in
// json_schema.cpp (dispatch, enum/const, types, strings, numbers) and
// json_schema_compound.cpp (arrays and objects). Internal to engine/.
#pragma once
#include "engine/grammar/json_schema.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <functional>
#include <optional>
#include <map>
#include <numeric>
#include <set>
#include <unordered_set>
#include <stdexcept>
#include <utility>
#include <vector>
#include "engine/grammar/json_schema_keys.h"
#include "engine/grammar/json_schema_logic.h"
#include "engine/grammar/json_schema_merge.h"
#include "engine/grammar/json_schema_struct.h"
#include "engine/grammar/json_schema_text.h"

namespace kvad::schema_compile {


using oj = nlohmann::ordered_json;
using schema_text::lit;
using schema_merge::kIgnored;
using schema_merge::kMaxDepth;
using schema_merge::kTypes;

using schema_merge::kMaxBranches;
using schema_merge::kMaxEnumValues;
using schema_merge::kMaxProperties;
inline const std::set<std::string>& kSupported = schema_merge::kSupportedKeywords;

constexpr size_t kMaxRules = 4096;
constexpr int64_t kMaxCount = 10000;
constexpr double kMaxBound = 1e18;
constexpr int64_t kMaxIntBound = 1000000000000000000;  ///< kMaxBound, for integers compared exactly

inline const char* kNever = "never";

// Digits of numbers the schema does not bound: at most 16 before the point
// (int64 and JavaScript's 2^53 fit; llama.cpp's schema grammars use the
// same 16), at most 16 after it (a double's 15-17 significant digits), an
// exponent of at most 3 digits (a double's range is 1e±308); zeros after
// an integer's point at most 16. A bounded number has the digits its
// bounds need. So an output at any temperature ends: no run of digits or
// whitespace goes on without a bound.
inline std::string base_rules(const JsonSchemaOptions& opt) {
  std::string s =
      "value ::= object | array | string | number | \"true\" | \"false\" | \"null\"\n"
      "object ::= \"{\" ws ( member ( ws \",\" ws member )* ws )? \"}\"\n"
      "member ::= string ws \":\" ws value\n"
      "array ::= \"[\" ws ( value ( ws \",\" ws value )* ws )? \"]\"\n"
      "jchar ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )\n"
      "number ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} ) ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?\n"
      "integer ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} ) izero\n"
      "izero ::= ( \".\" \"0\"{1,16} )?\n"
      "never ::= [^\\x00-\\U0010FFFF]\n"
      "frac ::= ( \".\" [0-9]{1,16} )?\n";
  s += opt.max_string_length ? "string ::= \"\\\"\" jchar{0," + std::to_string(opt.max_string_length) + "} \"\\\"\"\n"
                             : "string ::= \"\\\"\" jchar* \"\\\"\"\n";
  // Outside strings: nothing (compact), or one space, or one newline and
  // an indent of at most 20 spaces or tabs (pretty).
  s += opt.whitespace == JsonSchemaOptions::Whitespace::kCompact ? "ws ::= \"\"\n"
                                                                 : "ws ::= ( \" \" | \"\\n\" [ \\t]{0,20} )?\n";
  return s;
}

inline bool is_int_value(const oj& v) {
  if (v.is_number_integer()) return true;
  if (!v.is_number_float()) return false;
  const double d = v.get<double>();
  return std::isfinite(d) && std::floor(d) == d;
}

class Compiler : public schema_struct::RuleSink {
 public:
  Compiler(const oj& root, const JsonSchemaOptions& opt)
      : root_(root), mg_(root), any_order_(opt.key_order == JsonSchemaOptions::KeyOrder::kAny), opt_(opt),
        base_(base_rules(opt)) {}

  std::string run() {
    schema_logic::check_bounds(root_);
    const std::string r = gen(root_, "", 0);
    // A schema no value satisfies (false, {"not": {}}, contradictory
    // branches): nothing could be generated, so it is the client's error.
    if (r == kNever) throw SchemaError("", "", "the schema allows no value, so nothing can be generated");
    std::string out = "root ::= " + r + "\n" + base_;
    for (auto& [name, body] : rules_) {
      if (body.empty()) throw SchemaError("$ref", "", "internal: rule " + name + " left undefined");
      out += name + " ::= " + body + "\n";
    }
    out += extra_;
    return out;
  }

 private:
  const oj& root_;
  schema_merge::Merger mg_;
  bool any_order_;
  JsonSchemaOptions opt_;
  std::string base_;
  const std::string izero_ = "izero";
  std::vector<std::pair<std::string, std::string>> rules_;
  std::map<std::string, size_t> index_;         // name -> rules_ index
  std::map<std::string, std::string> by_body_;  // body -> name
  std::map<std::string, std::string> refs_;     // JSON pointer -> rule name
  std::set<uint32_t> mods_;
  std::string extra_;                            // multipleOf automata
  int n_ = 0;

  [[noreturn]] static void refuse(const std::string& kw, const std::string& path, const std::string& why) {
    throw SchemaError(kw, path, why);
  }

  std::string reserve(const std::string& hint) override {
    if (rules_.size() >= kMaxRules) refuse("", "", "the schema needs more than 4096 grammar rules");
    std::string h;
    for (char c : hint) h += (std::isalnum(static_cast<unsigned char>(c)) ? c : '-');
    if (h.size() > 24) h.resize(24);
    if (h.empty() || !std::isalpha(static_cast<unsigned char>(h[0]))) h = "s" + h;
    std::string name = h + "-" + std::to_string(++n_);
    index_[name] = rules_.size();
    rules_.emplace_back(name, "");
    return name;
  }
  void define(const std::string& name, const std::string& body) override { rules_[index_[name]].second = body; }
  std::string rule(const std::string& hint, const std::string& body) override {
    if (body == kNever) return kNever;
    auto it = by_body_.find(body);
    if (it != by_body_.end()) return it->second;
    std::string name = reserve(hint);
    define(name, body);
    by_body_[body] = name;
    return name;
  }
  static std::string alt(const std::vector<std::string>& xs) {
    std::vector<std::string> live;
    for (auto& x : xs) if (x != kNever) live.push_back(x);
    if (live.empty()) return kNever;
    if (live.size() == 1) return live[0];
    std::string o = "( ";
    for (size_t i = 0; i < live.size(); ++i) o += (i ? " | " : "") + live[i];
    return o + " )";
  }

  // ------------------------------------------------------------ helpers
  static int64_t count(const oj& s, const char* kw, const std::string& path, int64_t dflt) {
    if (!s.contains(kw)) return dflt;
    const oj& v = s[kw];
    if (!is_int_value(v) || v.get<double>() < 0) refuse(kw, path, "must be a non-negative integer");
    if (v.get<double>() > kMaxCount) refuse(kw, path, "counts over 10000 are not supported");
    return static_cast<int64_t>(v.get<double>());
  }
  // A bound, checked: an integer as written (exact: compared as int64,
  // never through double), or a decimal below 2^53 in magnitude. A decimal
  // beyond that was rounded when it was read (1.00000000000000001e17 is
  // 1e17 as a double), so it is refused rather than enforced as a rounded,
  // weaker bound.
  static const oj& bound(const oj& s, const char* kw, const std::string& path) {
    const oj& v = s[kw];
    if (!v.is_number()) refuse(kw, path, "must be a number");
    const double d = v.get<double>();
    const bool too_big = v.is_number_unsigned() ? v.get<uint64_t>() >= static_cast<uint64_t>(kMaxIntBound)
                         : v.is_number_integer() ? v.get<int64_t>() >= kMaxIntBound || v.get<int64_t>() <= -kMaxIntBound
                                                 : !std::isfinite(d) || std::fabs(d) >= kMaxBound;
    if (too_big) refuse(kw, path, "bounds beyond 1e18 are not supported");
    if (v.is_number_float() && std::fabs(d) >= 0x1p53)
      refuse(kw, path, "a bound of 2^53 or more written as a decimal (" + v.dump() +
                           ") cannot be represented exactly; write it as an integer");
    return v;
  }
  // The least (or, with `up` false, the greatest) integer allowed by bound v.
  static int64_t integer_bound(const oj& v, bool exclusive, bool up) {
    if (!v.is_number_float()) {
      const int64_t i = v.get<int64_t>();  // |v| < 1e18 (bound())
      return exclusive ? (up ? i + 1 : i - 1) : i;
    }
    const double d = v.get<double>();  // |d| < 2^53: floor and ceil are exact
    if (up) return static_cast<int64_t>(exclusive ? std::floor(d) + 1 : std::ceil(d));
    return static_cast<int64_t>(exclusive ? std::ceil(d) - 1 : std::floor(d));
  }

  // Compiling, by kind of schema (json_schema.cpp: dispatch, values, strings,
  // numbers; json_schema_compound.cpp: arrays and objects).
  std::string gen(const oj& s, const std::string& path, int depth);
  std::string gen_branches(const std::vector<oj>& branches, const std::string& kw, const std::string& path, int depth);
  std::string ref_rule(const oj& ref, const std::string& path, int depth);
  std::string lit_value(const oj& v);
  std::vector<bool> accepts(const std::string& expr, const oj& vals, const std::string& path);
  std::string gen_values(const oj& s, const std::string& path, int depth);
  std::string gen_types(const oj& s, const std::string& path, int depth);
  std::string gen_string(const oj& s, const std::string& path);
  std::string gen_number(const oj& s, const std::string& path, bool integer);
  std::string gen_array(const oj& s, const std::string& path, int depth);
  std::string gen_contains(const oj& s, const std::string& path, int depth, int64_t lo, int64_t hi);
  std::string gen_unique(const oj& s, const std::string& path, int64_t lo, int64_t hi);
  // A key (a JSON string) that is none of `names`, of lo to hi (-1: any)
  // characters.
  std::string key_except(const std::vector<std::string>& names, const std::string& path,
                         const std::string& kw = "additionalProperties", int64_t lo = 0, int64_t hi = -1);
  // One additional member under patternProperties, from the keys'
  // automaton; value_of(mask) is the value for the patterns `mask` matches.
  std::string pattern_member(const schema_keys::KeyAutomaton& a, const std::function<std::string(uint32_t)>& value_of);
  std::string gen_object(const oj& s, const std::string& path, int depth);
  struct Member { std::string kv; bool req; };
  std::string members(const std::vector<Member>& ms, const std::string& ex, bool any_order);
};

}  // namespace kvad::schema_compile
