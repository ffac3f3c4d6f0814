// JSON Schema -> GBNF (engine/grammar/json_schema.h). The compiler writes GBNF text
// (easy to read in an error report, and the same parser checks it), one
// rule per subschema, $ref targets memoized by JSON pointer so recursion is
// a recursive rule.
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

#include "engine/grammar/json_schema_merge.h"
#include "engine/grammar/json_schema_text.h"

namespace kvad {

namespace {

using oj = nlohmann::ordered_json;
using schema_text::lit;
using schema_merge::kIgnored;
using schema_merge::kMaxDepth;
using schema_merge::kTypes;

using schema_merge::kMaxBranches;
using schema_merge::kMaxEnumValues;
using schema_merge::kMaxProperties;
const std::set<std::string>& kSupported = schema_merge::kSupportedKeywords;

constexpr size_t kMaxRules = 4096;
constexpr int64_t kMaxCount = 10000;
constexpr double kMaxBound = 1e18;
constexpr int64_t kMaxIntBound = 1000000000000000000;  ///< kMaxBound, for integers compared exactly

const char* kNever = "never";

const char* kBase =
    "value ::= object | array | string | number | \"true\" | \"false\" | \"null\"\n"
    "object ::= \"{\" ws ( member ( ws \",\" ws member )* ws )? \"}\"\n"
    "member ::= string ws \":\" ws value\n"
    "array ::= \"[\" ws ( value ( ws \",\" ws value )* ws )? \"]\"\n"
    "string ::= \"\\\"\" jchar* \"\\\"\"\n"
    "jchar ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )\n"
    "number ::= \"-\"? ( \"0\" | [1-9] [0-9]* ) ( \".\" [0-9]+ )? ( [eE] [-+]? [0-9]+ )?\n"
    "integer ::= \"-\"? ( \"0\" | [1-9] [0-9]* ) ( \".\" \"0\"+ )?\n"
    "ws ::= [ \\t\\n\\r]{0,20}\n"
    "never ::= [^\\x00-\\U0010FFFF]\n"
    "frac ::= ( \".\" [0-9]+ )?\n";

bool is_int_value(const oj& v) {
  if (v.is_number_integer()) return true;
  if (!v.is_number_float()) return false;
  const double d = v.get<double>();
  return std::isfinite(d) && std::floor(d) == d;
}

class Compiler {
 public:
  Compiler(const oj& root, bool any_order) : root_(root), mg_(root), any_order_(any_order) {}

  std::string run() {
    const std::string r = gen(root_, "", 0);
    std::string out = "root ::= " + r + "\n" + kBase;
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

  std::string reserve(const std::string& hint) {
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
  void define(const std::string& name, const std::string& body) { rules_[index_[name]].second = body; }
  std::string rule(const std::string& hint, const std::string& body) {
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

  // -------------------------------------------------------------- gen
  std::string gen(const oj& s, const std::string& path, int depth) {
    if (depth > kMaxDepth) refuse("", path, "schemas nested deeper than 64");
    if (s.is_boolean()) return s.get<bool>() ? "value" : kNever;
    if (!s.is_object()) refuse("", path, "a schema must be an object or a boolean");
    bool constraining = false;
    for (auto& [k, v] : s.items()) {
      if (k == "$schema") schema_merge::check_metaschema(v, path);
      if (kIgnored.count(k)) continue;
      if (!kSupported.count(k)) refuse(k, path, "not supported by the grammar compiler");
      if (k == "uniqueItems" && !(v.is_boolean() && !v.get<bool>()))
        refuse(k, path, "uniqueItems: true cannot be expressed by a context-free grammar");
      constraining = true;
    }
    if (!constraining) return "value";
    if (s.contains("$ref")) {
      bool siblings = false;
      for (auto& [k, v] : s.items()) if (!kIgnored.count(k) && k != "$ref") siblings = true;
      if (!siblings) return ref_rule(s["$ref"], path, depth);
      return gen(mg_.inline_ref(s, path, 0), path, depth + 1);
    }
    if (s.contains("allOf")) {
      const oj& all = s["allOf"];
      if (!all.is_array() || all.empty()) refuse("allOf", path, "must be a non-empty array");
      if (all.size() > kMaxBranches) refuse("allOf", path, "more than 1024 schemas");
      oj merged = s;
      merged.erase("allOf");
      for (size_t i = 0; i < all.size(); ++i) merged = mg_.merge(merged, all[i], path + "/allOf/" + std::to_string(i), depth);
      return gen(merged, path, depth + 1);
    }
    for (const char* kw : {"anyOf", "oneOf"}) {
      if (!s.contains(kw)) continue;
      const oj& br = s[kw];
      if (!br.is_array() || br.empty()) refuse(kw, path, "must be a non-empty array");
      if (br.size() > kMaxBranches) refuse(kw, path, "more than 1024 branches");
      oj rest = s;
      rest.erase(kw);
      std::vector<oj> merged;
      for (size_t i = 0; i < br.size(); ++i) merged.push_back(mg_.merge(rest, br[i], path + "/" + kw + "/" + std::to_string(i), depth));
      if (std::string(kw) == "oneOf") schema_merge::check_disjoint(merged, path);
      std::vector<std::string> alts;
      for (size_t i = 0; i < merged.size(); ++i)
        alts.push_back(gen(merged[i], path + "/" + kw + "/" + std::to_string(i), depth + 1));
      return rule(kw, alt(alts));
    }
    if (s.contains("enum") || s.contains("const")) return gen_values(s, path, depth);
    return gen_types(s, path, depth);
  }

  std::string ref_rule(const oj& ref, const std::string& path, int depth) {
    std::string ptr;
    const oj& target = mg_.resolve(ref, path, ptr);
    auto it = refs_.find(ptr);
    if (it != refs_.end()) return it->second;
    const std::string name = reserve("ref" + ptr.substr(ptr.rfind('/') == std::string::npos ? 1 : ptr.rfind('/') + 1));
    refs_[ptr] = name;
    const std::string body = gen(target, ptr, depth + 1);
    define(name, body == kNever ? std::string(kNever) : body);
    return name;
  }

  std::string lit_value(const oj& v) {
    if (v.is_string() || v.is_null() || v.is_boolean()) return lit(v.dump());
    if (v.is_number()) {
      if (is_int_value(v) && std::fabs(v.get<double>()) < 9e18) {
        const std::string digits = v.is_number_float() ? std::to_string(static_cast<int64_t>(v.get<double>())) : v.dump();
        return "( " + lit(digits) + " ( \".\" \"0\"+ )? )";
      }
      const std::string d = v.dump();
      if (d.find('.') != std::string::npos && d.find_first_of("eE") == std::string::npos) return "( " + lit(d) + " \"0\"* )";
      return lit(d);
    }
    if (v.is_array()) {
      if (v.empty()) return "( \"[\" ws \"]\" )";
      std::string o = "( \"[\" ws";
      for (size_t i = 0; i < v.size(); ++i) o += (i ? " ws \",\" ws " : " ") + lit_value(v[i]);
      return o + " ws \"]\" )";
    }
    std::vector<Member> ms;
    for (auto& [k, x] : v.items()) ms.push_back({lit(oj(k).dump()) + " ws \":\" ws " + lit_value(x), true});
    return members(ms, "", true);
  }

  // Which of `vals` (compact text) does the grammar of `expr` accept?
  std::vector<bool> accepts(const std::string& expr, const oj& vals, const std::string& path) {
    // Only the rules `expr` reaches: the grammar so far can be large.
    std::string text = "root ::= " + expr + "\n" + kBase + extra_;
    std::set<std::string> seen;
    std::vector<std::string> todo{expr};
    while (!todo.empty()) {
      const std::string body = std::move(todo.back());
      todo.pop_back();
      for (size_t i = 0; i < body.size();) {
        const char c = body[i];
        if (c == '"' || c == '[') {  // skip literals and classes
          const char end = c == '"' ? '"' : ']';
          size_t j = i + 1;
          while (j < body.size() && body[j] != end) j += body[j] == '\\' ? 2 : 1;
          i = j + 1;
        } else if (std::isalpha(static_cast<unsigned char>(c))) {
          size_t j = i;
          while (j < body.size() && (std::isalnum(static_cast<unsigned char>(body[j])) || body[j] == '-' || body[j] == '_')) ++j;
          const std::string name = body.substr(i, j - i);
          auto it = index_.find(name);
          if (it != index_.end() && seen.insert(name).second) {
            const std::string& b = rules_[it->second].second;
            if (b.empty()) refuse("enum", path, "enum/const next to a recursive reference is not supported");
            text += name + " ::= " + b + "\n";
            todo.push_back(b);
          }
          i = j;
        } else {
          ++i;
        }
      }
    }
    GrammarMatcher m(Grammar::parse(text));
    std::vector<bool> out;
    for (const oj& v : vals) {
      m.reset();
      out.push_back(m.accept(v.dump()) && m.accepting());
    }
    return out;
  }

  std::string gen_values(const oj& s, const std::string& path, int depth) {
    oj vals;
    if (s.contains("enum")) {
      if (!s["enum"].is_array()) refuse("enum", path, "must be an array");
      vals = s["enum"];
    } else {
      vals = oj::array({s["const"]});
    }
    if (s.contains("enum") && s.contains("const")) {
      oj keep = oj::array();
      for (auto& v : vals) if (v == s["const"]) keep.push_back(v);
      vals = keep;
    }
    if (vals.size() > kMaxEnumValues) refuse("enum", path, "more than 1024 values");
    oj rest = s;
    rest.erase("enum");
    rest.erase("const");
    bool constrained = false, type_only = true;
    for (auto& [k, v] : rest.items())
      if (!kIgnored.count(k)) { constrained = true; type_only &= k == "type"; }
    std::vector<std::string> alts;
    if (constrained && type_only) {
      // The common {"type": ..., "enum": [...]}: filtered by the values'
      // types, without building a grammar per value.
      std::set<std::string> types;
      const oj& t = rest["type"];
      if (t.is_string()) types.insert(t.get<std::string>());
      else if (t.is_array()) for (auto& x : t) if (x.is_string()) types.insert(x.get<std::string>());
      for (auto& x : types) if (!kTypes.count(x)) refuse("type", path, "unknown type " + oj(x).dump());
      for (auto& v : vals) {
        const bool ok = v.is_null() ? types.count("null") : v.is_boolean() ? types.count("boolean")
                      : v.is_string() ? types.count("string") : v.is_array() ? types.count("array")
                      : v.is_object() ? types.count("object")
                      : (types.count("number") || (types.count("integer") && is_int_value(v)));
        if (ok) alts.push_back(lit_value(v));
      }
      return rule("enum", alt(alts));
    }
    std::vector<bool> keep(vals.size(), true);
    if (constrained) {
      const std::string rest_expr = gen(rest, path, depth + 1);
      keep = rest_expr == kNever ? std::vector<bool>(vals.size(), false) : accepts(rest_expr, vals, path);
    }
    for (size_t i = 0; i < vals.size(); ++i)
      if (keep[i]) alts.push_back(lit_value(vals[i]));
    return rule("enum", alt(alts));
  }

  std::string gen_types(const oj& s, const std::string& path, int depth) {
    std::set<std::string> types;
    if (s.contains("type")) {
      const oj& t = s["type"];
      auto add = [&](const oj& x) {
        if (!x.is_string() || !kTypes.count(x.get<std::string>())) refuse("type", path, "unknown type " + x.dump());
        types.insert(x.get<std::string>());
      };
      if (t.is_array()) for (auto& x : t) add(x);
      else add(t);
    } else {
      types = kTypes;
    }
    if (types.count("number")) types.erase("integer");
    std::vector<std::string> alts;
    for (const char* tc : {"null", "boolean", "integer", "number", "string", "array", "object"}) {
      const std::string t = tc;
      if (!types.count(t)) continue;
      if (t == "null") alts.push_back("\"null\"");
      else if (t == "boolean") alts.push_back("( \"true\" | \"false\" )");
      else if (t == "string") alts.push_back(gen_string(s, path));
      else if (t == "integer" || t == "number") alts.push_back(gen_number(s, path, t == "integer"));
      else if (t == "array") alts.push_back(gen_array(s, path, depth));
      else alts.push_back(gen_object(s, path, depth));
    }
    return rule(path.empty() ? "root" : path.substr(path.rfind('/') + 1), alt(alts));
  }

  std::string gen_string(const oj& s, const std::string& path) {
    const int64_t lo = count(s, "minLength", path, 0);
    const int64_t hi = count(s, "maxLength", path, -1);
    const bool lengths = s.contains("minLength") || s.contains("maxLength");
    std::string content;
    if (s.contains("pattern")) {
      if (!s["pattern"].is_string()) refuse("pattern", path, "must be a string");
      if (lengths) refuse(s.contains("minLength") ? "minLength" : "maxLength", path, "length limits together with a pattern are not supported");
      if (s.contains("format")) refuse("format", path, "format together with a pattern is not supported");
      try {
        content = schema_text::regex_to_gbnf(s["pattern"].get<std::string>(), "jchar");
      } catch (const std::invalid_argument& e) {
        refuse("pattern", path, e.what());
      }
    } else if (s.contains("format")) {
      if (!s["format"].is_string()) refuse("format", path, "must be a string");
      auto f = schema_text::format_to_gbnf(s["format"].get<std::string>());
      if (!f) refuse("format", path, "format '" + s["format"].get<std::string>() + "' is not supported");
      if (lengths) refuse(s.contains("minLength") ? "minLength" : "maxLength", path, "length limits together with a format are not supported");
      content = *f;
    } else if (!lengths) {
      return "string";
    } else {
      if (hi >= 0 && hi < lo) return kNever;
      content = "jchar{" + std::to_string(lo) + (hi < 0 ? "," : hi == lo ? "" : "," + std::to_string(hi)) + "}";
    }
    return rule("str", "\"\\\"\" " + content + " \"\\\"\"");
  }

  std::string gen_number(const oj& s, const std::string& path, bool integer) {
    const bool bounded = s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") || s.contains("exclusiveMaximum");
    if (s.contains("multipleOf")) {
      const oj& m = s["multipleOf"];
      if (!m.is_number() || !(m.get<double>() > 0)) refuse("multipleOf", path, "must be a number > 0");
      if (bounded) refuse("multipleOf", path, "multipleOf together with bounds is not supported");
      const double inv = 1.0 / m.get<double>();
      if (integer && !is_int_value(m) && std::fabs(inv - std::round(inv)) < 1e-9) return "integer";  // 1/n divides all
      // k = K / 10^d from its decimal text.
      const std::string t = m.dump();
      if (t.find_first_of("eE") != std::string::npos) refuse("multipleOf", path, "divisors written with an exponent are not supported");
      const size_t dot = t.find('.');
      std::string frac = dot == std::string::npos ? "" : t.substr(dot + 1);
      while (!frac.empty() && frac.back() == '0') frac.pop_back();
      const std::string digits = t.substr(0, dot) + frac;
      const uint32_t d = static_cast<uint32_t>(frac.size());
      const size_t nz = digits.find_first_not_of('0');
      if (nz == std::string::npos || digits.size() - nz > 4 || std::stoul(digits.substr(nz)) > 1000)
        refuse("multipleOf", path, "divisors over 1000 (in units of their last decimal) are not supported");
      uint32_t K = static_cast<uint32_t>(std::stoul(digits.substr(nz)));
      if (integer || d == 0) {
        // x integer: x = n K / 10^d  <=>  K / gcd(K, 10^d) divides x.
        uint64_t p = 1;
        for (uint32_t j = 0; j < d && p <= 1000000; ++j) p *= 10;
        K = static_cast<uint32_t>(K / std::gcd<uint64_t>(K, p));
        if (K == 1) return "integer";
        const std::string defs = schema_text::multiple_of(K);
        const size_t nl = defs.find('\n');
        if (!mods_.count(K)) { mods_.insert(K); extra_ += defs.substr(nl + 1); }
        return rule("mult", defs.substr(0, nl) + " ( \".\" \"0\"+ )?");
      }
      if (static_cast<uint64_t>(K) * (d + 1) > 4000) refuse("multipleOf", path, "a divisor with that many decimals is not supported");
      const std::string defs = schema_text::decimal_multiple_of(K, d);
      const size_t nl = defs.find('\n');
      const uint32_t key = 100000 + K * 10 + d;
      if (!mods_.count(key)) { mods_.insert(key); extra_ += defs.substr(nl + 1); }
      return rule("mult", defs.substr(0, nl));
    }
    if (!bounded) return integer ? "integer" : "number";
    // The tighter of each pair, compared exactly.
    const oj *lo = nullptr, *hi = nullptr;
    bool lo_ex = false, hi_ex = false;
    for (const char* kw : {"minimum", "exclusiveMinimum"}) {
      if (!s.contains(kw)) continue;
      const oj& v = bound(s, kw, path);
      const bool ex = kw[0] == 'e';
      const int c = lo ? schema_merge::compare_numbers(v, *lo) : 1;
      if (c > 0 || (c == 0 && ex)) { lo = &v; lo_ex = ex; }
    }
    for (const char* kw : {"maximum", "exclusiveMaximum"}) {
      if (!s.contains(kw)) continue;
      const oj& v = bound(s, kw, path);
      const bool ex = kw[0] == 'e';
      const int c = hi ? schema_merge::compare_numbers(v, *hi) : -1;
      if (c < 0 || (c == 0 && ex)) { hi = &v; hi_ex = ex; }
    }
    std::optional<int64_t> ilo, ihi;  // integer values allowed
    if (lo) ilo = integer_bound(*lo, lo_ex, true);
    if (hi) ihi = integer_bound(*hi, hi_ex, false);
    const std::string ints = (ilo && ihi && *ilo > *ihi) ? std::string(kNever) : schema_text::int_range(ilo, ihi) + " ( \".\" \"0\"+ )?";
    if (integer) return rule("int", ints);
    // Decimal bounds: compared digit by digit (json_schema_text.h).
    const char* lo_kw = lo_ex ? "exclusiveMinimum" : "minimum";
    const char* hi_kw = hi_ex ? "exclusiveMaximum" : "maximum";
    std::optional<std::string> lo_t, hi_t;
    if (lo) lo_t = lo->dump();
    if (hi) hi_t = hi->dump();
    std::string body;
    try {
      body = schema_text::decimal_range(lo_t, lo_ex, hi_t, hi_ex);
    } catch (const std::invalid_argument& e) {
      refuse(lo_t && lo_t->find_first_of("eE") != std::string::npos ? lo_kw : hi_kw, path, e.what());
    }
    return rule("num", body);
  }

  std::string gen_array(const oj& s, const std::string& path, int depth) {
    const int64_t lo = count(s, "minItems", path, 0);
    const int64_t hi = count(s, "maxItems", path, -1);
    if (hi >= 0 && hi < lo) return kNever;
    std::vector<std::string> pre;
    if (s.contains("prefixItems")) {
      const oj& p = s["prefixItems"];
      if (!p.is_array() || p.empty()) refuse("prefixItems", path, "must be a non-empty array");
      if (p.size() > static_cast<size_t>(kMaxCount)) refuse("prefixItems", path, "more than 10000 items");
      for (size_t i = 0; i < p.size(); ++i) pre.push_back(gen(p[i], path + "/prefixItems/" + std::to_string(i), depth + 1));
    }
    std::string item = "value";
    if (s.contains("items")) item = gen(s["items"], path + "/items", depth + 1);
    const int64_t P = hi >= 0 ? std::min<int64_t>(static_cast<int64_t>(pre.size()), hi) : static_cast<int64_t>(pre.size());
    const std::string sep = "ws \",\" ws";
    // tail(i): items from index i on, each after a separator when i > 0.
    std::string next;  // the expression for index i+1 while building down
    {
      const int64_t i = P;
      const bool more = item != kNever && (hi < 0 || hi > P);
      if (!more) {
        next = i >= lo ? "\"\"" : kNever;
      } else {
        const int64_t rlo = std::max<int64_t>(lo - i, 0);
        const int64_t rhi = hi < 0 ? -1 : hi - i;
        auto reps = [](int64_t a, int64_t b) { return "{" + std::to_string(a) + (b < 0 ? "," : b == a ? "" : "," + std::to_string(b)) + "}"; };
        if (i == 0) {
          const int64_t a = std::max<int64_t>(rlo, 1) - 1;
          next = item + " ( " + sep + " " + item + " )" + reps(a, rhi < 0 ? -1 : rhi - 1);
        } else {
          next = "( " + sep + " " + item + " )" + reps(rlo, rhi);
        }
        next = rule("items", next);
      }
    }
    for (int64_t i = P - 1; i >= 0; --i) {
      const std::string& e = pre[static_cast<size_t>(i)];
      std::string body;
      if (e == kNever || next == kNever) body = kNever;
      else body = (i > 0 ? sep + " " : "") + e + " " + next;
      std::vector<std::string> alts{body == kNever ? std::string(kNever) : "( " + body + " )"};
      if (i > 0 && i >= lo) alts.push_back("\"\"");
      next = rule("prefix", alt(alts));
    }
    std::vector<std::string> alts;
    if (lo == 0) alts.push_back("( \"[\" ws \"]\" )");
    if (next != kNever && next != "\"\"") alts.push_back("( \"[\" ws " + next + " ws \"]\" )");
    return rule("array", alt(alts));
  }

  // A key that is none of `names`: a trie of the names by character, left
  // at any character no name continues with. Sound only if a name has one
  // spelling, so extra keys use no escapes but the ones JSON requires
  // (\" \\ \b \f \n \r \t, \u00XX for other controls), and names needing
  // escapes are refused.
  std::string key_except(const std::vector<std::string>& names, const std::string& path) {
    std::vector<std::vector<std::string>> chars;  // each name as UTF-8 characters
    for (auto& n : names) {
      if (n.size() > 256)
        refuse("additionalProperties", path, "property names over 256 bytes next to additional properties are not supported");
      std::vector<std::string> cs;
      for (size_t i = 0; i < n.size();) {
        const uint8_t c = static_cast<uint8_t>(n[i]);
        if (c < 0x20 || c == '"' || c == '\\')
          refuse("additionalProperties", path, "property names that need escapes next to additional properties are not supported");
        const size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4;
        cs.push_back(n.substr(i, len));
        i += len;
      }
      chars.push_back(std::move(cs));
    }
    const std::string kchar = rule("keychar",
        "[^\"\\\\\\x00-\\x1F] | \"\\\\\" [\"\\\\bfnrt] | \"\\\\u00\" [01] [0-9a-fA-F]");
    std::function<std::string(const std::vector<std::string>&)> node = [&](const std::vector<std::string>& prefix) {
      std::set<std::string> next;
      bool terminal = false;
      for (auto& n : chars)
        if (n.size() >= prefix.size() && std::equal(prefix.begin(), prefix.end(), n.begin())) {
          if (n.size() == prefix.size()) terminal = true;
          else next.insert(n[prefix.size()]);
        }
      std::vector<std::string> alts;
      if (!terminal) alts.push_back("\"\\\"\"");
      std::string cls = "[^\"\\\\\\x00-\\x1F";
      for (const std::string& c : next) {
        std::vector<std::string> p2 = prefix;
        p2.push_back(c);
        alts.push_back(lit(c) + " " + node(p2));
        uint32_t cp = static_cast<uint8_t>(c[0]);
        if (c.size() > 1) {
          cp = c.size() == 2 ? (cp & 31) : c.size() == 3 ? (cp & 15) : (cp & 7);
          for (size_t k = 1; k < c.size(); ++k) cp = (cp << 6) | (static_cast<uint8_t>(c[k]) & 63);
        }
        char b[16];
        std::snprintf(b, sizeof b, "\\U%08X", cp);
        cls += b;
      }
      cls += "]";
      alts.push_back("( " + cls + " | \"\\\\\" [\"\\\\bfnrt] | \"\\\\u00\" [01] [0-9a-fA-F] ) " + kchar + "* \"\\\"\"");
      return rule("key", alt(alts));
    };
    return rule("key", "\"\\\"\" " + node({}));
  }

  std::string gen_object(const oj& s, const std::string& path, int depth) {
    const oj empty = oj::object();
    const oj& props = s.contains("properties") ? s["properties"] : empty;
    if (!props.is_object()) refuse("properties", path, "must be an object");
    // Counted before any property is compiled, and looked up by hash: the
    // work below is linear in the properties, at most kMaxProperties.
    if (props.size() > kMaxProperties) refuse("properties", path, "more than 512 properties");
    std::vector<std::string> required;
    std::unordered_set<std::string> req_set, prop_names;
    for (auto& [k, v] : props.items()) prop_names.insert(k);
    size_t extra = 0;  // required names without a property
    if (s.contains("required")) {
      if (!s["required"].is_array()) refuse("required", path, "must be an array");
      for (auto& r : s["required"]) {
        if (!r.is_string()) refuse("required", path, "must list strings");
        if (!req_set.insert(r.get<std::string>()).second) continue;
        required.push_back(r.get<std::string>());
        if (!prop_names.count(required.back()) && props.size() + ++extra > kMaxProperties)
          refuse("properties", path, "more than 512 properties");
      }
    }
    const oj addl = s.contains("additionalProperties") ? s["additionalProperties"] : oj(true);
    const std::string addl_expr = gen(addl, path + "/additionalProperties", depth + 1);
    struct Prop { std::string name, value; bool req; };
    std::vector<Prop> list;
    std::vector<std::string> names;
    auto is_req = [&](const std::string& k) { return req_set.count(k) > 0; };
    for (auto& [k, v] : props.items()) {
      names.push_back(k);
      list.push_back({k, gen(v, path + "/properties/" + k, depth + 1), is_req(k)});
    }
    for (auto& r : required)
      if (!prop_names.count(r)) { names.push_back(r); list.push_back({r, addl_expr, true}); }
    if (list.size() > 512) refuse("properties", path, "more than 512 properties");
    std::vector<Prop> live;
    for (auto& p : list) {
      if (p.value == kNever) {
        if (p.req) return kNever;
        continue;
      }
      live.push_back(p);
    }
    std::string ex;  // one additional member
    if (addl_expr != kNever) {
      const std::string key = names.empty() ? std::string("string") : key_except(names, path);
      ex = rule("extra", key + " ws \":\" ws " + addl_expr);
    }
    std::vector<Member> ms;
    for (auto& p : live) ms.push_back({rule("kv", lit(oj(p.name).dump()) + " ws \":\" ws " + p.value), p.req});
    return members(ms, ex, any_order_);
  }

  // An object of the members `ms` (each "key": value, required or not) and
  // of any number of `ex` members (none when empty). `any_order` and up to
  // 6 members: in any order, each at most once (one rule per subset written
  // so far); else in the order given, `ex` members anywhere between them.
  struct Member { std::string kv; bool req; };
  std::string members(const std::vector<Member>& ms, const std::string& ex, bool any_order) {
    const std::string sep = "ws \",\" ws";
    const size_t n = ms.size();
    bool any_req = false;
    for (auto& m : ms) any_req |= m.req;
    std::string F;  // at least one member
    if (any_order && n <= 6) {
      uint32_t req_mask = 0;
      for (size_t i = 0; i < n; ++i) if (ms[i].req) req_mask |= 1u << i;
      // S[mask]: members after at least one, `mask` the ones written.
      std::vector<std::string> S(size_t{1} << n);
      for (auto& x : S) x = reserve("members");
      auto alts_for = [&](uint32_t mask, bool started) {
        std::vector<std::string> alts;
        const std::string pre = started ? sep + " " : "";
        for (size_t i = 0; i < n; ++i)
          if (!(mask >> i & 1)) alts.push_back(pre + ms[i].kv + " " + S[mask | (1u << i)]);
        if (!ex.empty()) alts.push_back(pre + ex + " " + S[mask]);
        if (started && (mask & req_mask) == req_mask) alts.push_back("\"\"");
        return alts;
      };
      for (uint32_t mask = 0; mask < S.size(); ++mask) {
        const auto alts = alts_for(mask, true);
        define(S[mask], alts.empty() ? std::string(kNever) : alt(alts));
      }
      const auto first = alts_for(0, false);
      F = first.empty() ? std::string(kNever) : rule("members", alt(first));
    } else {
      // F_i: members from i on, none written yet, at least one;
      // T_i: members from i on after at least one (each after a separator).
      F = kNever;
      std::string T;
      if (ex.empty()) {
        T = "\"\"";
      } else {
        T = reserve("rest");
        define(T, "( " + sep + " " + ex + " " + T + " )?");
        F = rule("first", ex + " " + T);
      }
      for (size_t i = n; i-- > 0;) {
        const std::string& kv = ms[i].kv;
        std::vector<std::string> fa{kv + " " + T}, ta{sep + " " + kv + " " + T};
        if (!ms[i].req) { fa.push_back(F); ta.push_back(T); }
        std::string Tn, Fn;
        if (!ex.empty()) {
          Tn = reserve("rest");
          Fn = reserve("first");
          fa.push_back(ex + " " + Tn);
          ta.push_back(sep + " " + ex + " " + Tn);
          define(Tn, alt(ta));
          define(Fn, alt(fa));
        } else {
          Tn = rule("rest", alt(ta));
          Fn = rule("first", alt(fa));
        }
        T = Tn;
        F = Fn;
      }
    }
    std::vector<std::string> alts;
    if (!any_req) alts.push_back("( \"{\" ws \"}\" )");
    if (F != kNever) alts.push_back("( \"{\" ws " + F + " ws \"}\" )");
    return rule("object", alt(alts));
  }
};

}  // namespace

namespace {
// Prefixes every rule name of GBNF text (identifiers outside literals,
// classes and repetition counts).
std::string prefix_names(const std::string& text, const std::string& prefix) {
  if (prefix.empty()) return text;
  std::string out;
  for (size_t i = 0; i < text.size();) {
    const char c = text[i];
    if (c == '"' || c == '[') {
      const char end = c == '"' ? '"' : ']';
      size_t j = i + 1;
      while (j < text.size() && text[j] != end) j += text[j] == '\\' ? 2 : 1;
      out.append(text, i, j + 1 - i);
      i = j + 1;
    } else if (c == '{') {
      const size_t j = text.find('}', i);
      out.append(text, i, j + 1 - i);
      i = j + 1;
    } else if (std::isalpha(static_cast<unsigned char>(c))) {
      size_t j = i;
      while (j < text.size() && (std::isalnum(static_cast<unsigned char>(text[j])) || text[j] == '-' || text[j] == '_')) ++j;
      out += prefix;
      out.append(text, i, j - i);
      i = j;
    } else {
      out += c;
      ++i;
    }
  }
  return out;
}
}  // namespace

std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema, const JsonSchemaOptions& opt) {
  for (char c : opt.prefix)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_')
      throw SchemaError("", "", "rule prefix '" + opt.prefix + "' has characters other than [A-Za-z0-9_-]");
  if (!opt.prefix.empty() && !std::isalpha(static_cast<unsigned char>(opt.prefix[0])))
    throw SchemaError("", "", "rule prefix '" + opt.prefix + "' must start with a letter");
  return prefix_names(Compiler(schema, opt.key_order == JsonSchemaOptions::KeyOrder::kAny).run(), opt.prefix);
}

std::shared_ptr<const Grammar> json_schema_grammar(const nlohmann::ordered_json& schema, const JsonSchemaOptions& opt) {
  const std::string text = json_schema_to_gbnf(schema, opt);
  try {
    return Grammar::parse(text, opt.prefix + "root");
  } catch (const SchemaError&) {
    throw;
  } catch (const GrammarError& e) {
    const std::string what = e.what();
    if (what.find("left recursive") != std::string::npos) {
      const bool ref = what.find("rule '" + opt.prefix + "ref") != std::string::npos;
      throw SchemaError(ref ? "$ref" : "pattern", "",
                        ref ? "a reference that recurses without consuming input"
                            : "a repetition of something that can match the empty string");
    }
    throw SchemaError("", "", std::string("the compiled grammar is over a limit: ") + e.what());
  }
}

nlohmann::ordered_json tool_call_schema(const nlohmann::ordered_json& tools, const std::string& name_key,
                                        const std::string& args_key) {
  using oj = nlohmann::ordered_json;
  if (!tools.is_array() || tools.empty()) throw SchemaError("", "tools", "tools must be a non-empty array");
  oj branches = oj::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string at = "tools/" + std::to_string(i);
    const oj& t = tools[i];
    const oj* fn = t.is_object() && t.contains("function") ? &t["function"] : nullptr;
    if (!fn || !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string())
      throw SchemaError("", at, "a tool must be {\"type\": \"function\", \"function\": {\"name\": ..., \"parameters\": ...}}");
    oj params = fn->contains("parameters") ? (*fn)["parameters"] : oj{{"type", "object"}};
    oj props = oj::object();
    props[name_key] = {{"const", (*fn)["name"]}};
    props[args_key] = params;
    branches.push_back({{"type", "object"}, {"properties", props}, {"required", {name_key, args_key}},
                        {"additionalProperties", false}});
  }
  return branches.size() == 1 ? branches[0] : oj{{"anyOf", branches}};
}

std::string json_any_gbnf(bool object_only) {
  return std::string("root ::= ") + (object_only ? "object" : "value") + "\n" + kBase;
}

}  // namespace kvad
