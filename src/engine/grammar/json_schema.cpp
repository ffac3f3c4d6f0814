// JSON Schema -> GBNF (engine/grammar/json_schema.h). The compiler writes GBNF text
// (easy to read in an error report, and the same parser checks it), one
// rule per subschema, $ref targets memoized by JSON pointer so recursion is
// a recursive rule.
#include "engine/grammar/json_schema.h"

#include "engine/grammar/json_schema_compiler.h"
#include "engine/grammar/json_schema_uri.h"

namespace kvad::schema_compile {

// -------------------------------------------------------------- gen
std::string Compiler::gen(const oj& s, const std::string& path, int depth) {
  const PathScope scope(cur_path_, path);
  if (depth > kMaxDepth) refuse("", path, "schemas nested deeper than 64");
  if (s.is_boolean()) return s.get<bool>() ? "value" : kNever;
  if (!s.is_object()) refuse("", path, "a schema must be an object or a boolean");
  bool constraining = false;
  for (auto& [k, v] : s.items()) {
    if (k == "$schema") schema_merge::check_metaschema(v, path);
    if (kIgnored.count(k)) continue;
    if (!kSupported.count(k)) refuse(k, path, "not supported by the grammar compiler");
    constraining = true;
  }
  if (!constraining) return "value";
  // unevaluated*: exact where the evaluated members are known without
  // knowing which branch matched (allOf and $ref merge, disjoint oneOf).
  for (const char* u : {"unevaluatedProperties", "unevaluatedItems"})
    if (s.contains(u))
      for (const char* k : {"anyOf", "not", "if", "then", "else", "dependentSchemas", "$dynamicRef"})
        if (s.contains(k)) refuse(u, path, std::string("next to '") + k + "' is not supported");
  // Keywords that act only with a sibling assert nothing alone.
  if ((!s.contains("if") && (s.contains("then") || s.contains("else"))) ||
      (!s.contains("contains") && (s.contains("minContains") || s.contains("maxContains"))) ||
      (s.contains("if") && !s.contains("then") && !s.contains("else"))) {
    oj t = s;
    if (!s.contains("if")) { t.erase("then"); t.erase("else"); }
    else if (!s.contains("then") && !s.contains("else")) t.erase("if");
    if (!s.contains("contains")) { t.erase("minContains"); t.erase("maxContains"); }
    return gen(t, path, depth + 1);
  }
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
  if (s.contains("not")) {
    // s ∧ ¬N: an anyOf of s merged with each violation of N.
    oj rest = s;
    rest.erase("not");
    std::vector<oj> branches;
    for (const oj& d : schema_logic::negate(mg_, s["not"], "not", path + "/not", depth))
      branches.push_back(mg_.merge(rest, d, path, depth));
    return gen_branches(branches, "not", path, depth);
  }
  if (s.contains("dependentSchemas")) {
    // dependentSchemas {a: S}: an object without a, or with a and valid
    // under S (non-objects pass); one entry at a time.
    const oj& ds = s["dependentSchemas"];
    if (!ds.is_object()) refuse("dependentSchemas", path, "must be an object");
    oj rest = s;
    if (ds.size() <= 1) rest.erase("dependentSchemas");
    else rest["dependentSchemas"].erase(ds.begin().key());
    if (ds.empty()) return gen(rest, path, depth + 1);
    const std::string a = ds.begin().key();
    const std::string at = path + "/dependentSchemas/" + a;
    std::vector<oj> branches{
        mg_.merge(rest, oj{{"type", {"null", "boolean", "number", "string", "array"}}}, at, depth),
        mg_.merge(rest, oj{{"type", "object"}, {"properties", {{a, false}}}}, at, depth),
        mg_.merge(mg_.merge(rest, oj{{"type", "object"}, {"required", {a}}}, at, depth), ds.begin().value(), at, depth)};
    return gen_branches(branches, "dependentSchemas", path, depth);
  }
  if (s.contains("if")) {
    // (I ∧ T) ∨ (¬I ∧ E), each merged with the rest of s.
    oj rest = s;
    for (const char* k : {"if", "then", "else"}) rest.erase(k);
    const oj then_s = s.contains("then") ? s["then"] : oj(true);
    const oj else_s = s.contains("else") ? s["else"] : oj(true);
    std::vector<oj> branches{mg_.merge(mg_.merge(rest, s["if"], path + "/if", depth), then_s, path + "/then", depth)};
    const oj rest_else = mg_.merge(rest, else_s, path + "/else", depth);
    for (const oj& d : schema_logic::negate(mg_, s["if"], "if", path + "/if", depth))
      branches.push_back(mg_.merge(rest_else, d, path + "/if", depth));
    return gen_branches(branches, "if", path, depth);
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
    if (std::string(kw) == "oneOf") {
      try {
        schema_merge::check_disjoint(merged, path);
      } catch (const SchemaError& overlap) {
        // Exactly one: branch i and the negation of every other branch.
        if (merged.size() > 4 || s.contains("unevaluatedProperties") || s.contains("unevaluatedItems")) throw;
        std::vector<oj> exact;
        try {
          for (size_t i = 0; i < merged.size(); ++i) {
            std::vector<std::vector<oj>> parts{{merged[i]}};
            for (size_t j = 0; j < br.size(); ++j)
              if (j != i) parts.push_back(schema_logic::negate(mg_, br[j], "oneOf", path + "/oneOf/" + std::to_string(j), depth));
            for (oj& d : schema_logic::conjoin(mg_, parts, "oneOf", path, depth)) exact.push_back(std::move(d));
            if (exact.size() > 64) refuse("oneOf", path, "the branches spread into more than 64 alternatives");
          }
        } catch (const SchemaError&) {
          throw overlap;
        }
        return gen_branches(exact, "oneOf", path, depth);
      }
    }
    std::vector<std::string> alts;
    for (size_t i = 0; i < merged.size(); ++i)
      alts.push_back(gen(merged[i], path + "/" + kw + "/" + std::to_string(i), depth + 1));
    return rule(kw, alt(alts));
  }
  if (s.contains("unevaluatedProperties") || s.contains("unevaluatedItems"))
    return gen(schema_merge::settle_unevaluated(s, path), path, depth + 1);
  if (s.contains("enum") || s.contains("const")) return gen_values(s, path, depth);
  return gen_types(s, path, depth);
}

// An anyOf of already merged schemas.
std::string Compiler::gen_branches(const std::vector<oj>& branches, const std::string& kw, const std::string& path, int depth) {
  std::vector<std::string> alts;
  for (size_t i = 0; i < branches.size(); ++i)
    alts.push_back(gen(branches[i], path + "/" + kw + "/" + std::to_string(i), depth + 1));
  return rule(kw, alt(alts));
}

std::string Compiler::ref_rule(const oj& ref, const std::string& path, int depth) {
  std::string ptr;
  const oj& target = mg_.resolve(ref, path, ptr);
  auto it = refs_.find(ptr);
  if (it != refs_.end()) return it->second;
  const std::string name = reserve("ref" + ptr.substr(ptr.rfind('/') == std::string::npos ? 1 : ptr.rfind('/') + 1));
  refs_[ptr] = name;
  ref_rules_.insert(name);
  const std::string body = gen(target, ptr, depth + 1);
  define(name, body == kNever ? std::string(kNever) : body);
  return name;
}

std::string Compiler::lit_value(const oj& v) {
  if (v.is_string() || v.is_null() || v.is_boolean()) return lit(v.dump());
  if (v.is_number()) {
    if (is_int_value(v) && std::fabs(v.get<double>()) < 9e18) {
      const std::string digits = v.is_number_float() ? std::to_string(static_cast<int64_t>(v.get<double>())) : v.dump();
      return "( " + lit(digits) + " izero )";
    }
    const std::string d = v.dump();
    if (d.find('.') != std::string::npos && d.find_first_of("eE") == std::string::npos) return "( " + lit(d) + " \"0\"{0,16} )";
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
std::vector<bool> Compiler::accepts(const std::string& expr, const oj& vals, const std::string& path) {
  // Only the rules `expr` reaches: the grammar so far can be large.
  std::string text = "root ::= " + expr + "\n" + base_ + extra_;
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

std::string Compiler::gen_values(const oj& s, const std::string& path, int depth) {
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
  if (s.contains(schema_logic::kNotValues)) {
    const oj& no = s[schema_logic::kNotValues];
    oj keep = oj::array();
    for (auto& v : vals) if (std::find(no.begin(), no.end(), v) == no.end()) keep.push_back(v);
    vals = keep;
    rest.erase(schema_logic::kNotValues);
  }
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

std::string Compiler::gen_types(const oj& s, const std::string& path, int depth) {
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
  const bool fraction = s.contains(schema_logic::kFraction);
  if (fraction) types.erase("integer");  // a number that is not an integer
  // Values excluded by a negated enum/const, by type.
  std::vector<std::string> no_str;
  std::vector<int64_t> no_int;
  bool no_true = false, no_false = false;
  if (s.contains(schema_logic::kNotValues)) {
    const oj& no = s[schema_logic::kNotValues];
    if (!no.is_array()) refuse("enum", path, "must be an array");
    for (const oj& v : no) {
      if (v.is_null()) types.erase("null");
      else if (v.is_boolean()) (v.get<bool>() ? no_true : no_false) = true;
      else if (v.is_string() && types.count("string")) no_str.push_back(v.get<std::string>());
      else if (v.is_number() && (types.count("number") || types.count("integer"))) {
        if (!is_int_value(v) || std::fabs(v.get<double>()) >= 1e15)
          refuse("not", path, "excluding the number " + v.dump() + " (not an integer under 1e15) is not supported");
        no_int.push_back(static_cast<int64_t>(v.get<double>()));
      } else if ((v.is_array() && types.count("array")) || (v.is_object() && types.count("object"))) {
        refuse("not", path, "excluding an array or object value is not supported");
      }
    }
  }
  std::vector<std::string> alts;
  for (const char* tc : {"null", "boolean", "integer", "number", "string", "array", "object"}) {
    const std::string t = tc;
    if (!types.count(t)) continue;
    if (t == "null") alts.push_back("\"null\"");
    else if (t == "boolean") {
      if (!no_true) alts.push_back("\"true\"");
      if (!no_false) alts.push_back("\"false\"");
    } else if (t == "string") {
      if (no_str.empty()) { alts.push_back(gen_string(s, path)); continue; }
      for (const char* k : {"pattern", "format"})
        if (s.contains(k)) refuse("not", path, std::string("excluding strings next to '") + k + "' is not supported");
      int64_t slo = count(s, "minLength", path, 0), shi = count(s, "maxLength", path, -1);
      if (shi < 0 && opt_.max_string_length) shi = std::max<int64_t>(slo, opt_.max_string_length);
      if (shi >= 0 && shi < slo) continue;
      alts.push_back(key_except(no_str, path, "not", slo, shi));
    } else if ((t == "integer" || t == "number") && (fraction || !no_int.empty())) {
      // Integer bounds: the ranges between the excluded integers within them.
      std::optional<int64_t> blo, bhi;
      for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}) {
        if (!s.contains(k)) continue;
        if (t == "number" || fraction || k == std::string("multipleOf"))
          refuse("not", path, std::string("a negated type or value next to '") + k + "' is not supported");
        const bool up = std::string(k).find("inimum") != std::string::npos;  // a lower bound
        const int64_t b = integer_bound(bound(s, k, path), k[0] == 'e', up);
        if (up) blo = blo ? std::max(*blo, b) : b;
        else bhi = bhi ? std::min(*bhi, b) : b;
      }
      const std::string frac_num = "( \"-\"? ( \"0\" | [1-9] [0-9]{0,15} ) \".\" [0-9]{0,15} [1-9] [0-9]{0,15} )";
      if (t == "number") alts.push_back(frac_num);
      if (fraction) continue;
      std::sort(no_int.begin(), no_int.end());
      no_int.erase(std::unique(no_int.begin(), no_int.end()), no_int.end());
      std::optional<int64_t> lo = blo;
      for (int64_t x : no_int) {
        if ((blo && x < *blo) || (bhi && x > *bhi)) continue;
        if (!lo || *lo <= x - 1) alts.push_back(schema_text::int_range(lo, x - 1) + " " + izero_);
        lo = x + 1;
      }
      if (!lo || !bhi || *lo <= *bhi) alts.push_back(schema_text::int_range(lo, bhi) + " " + izero_);
    } else if (t == "integer" || t == "number") alts.push_back(gen_number(s, path, t == "integer"));
    else if (t == "array") alts.push_back(gen_array(s, path, depth));
    else alts.push_back(gen_object(s, path, depth));
  }
  return rule(path.empty() ? "root" : path.substr(path.rfind('/') + 1), alt(alts));
}

std::string Compiler::gen_string(const oj& s, const std::string& path) {
  const int64_t lo = count(s, "minLength", path, 0);
  int64_t hi = count(s, "maxLength", path, -1);
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
    if (hi < 0 && opt_.max_string_length) hi = std::max<int64_t>(lo, opt_.max_string_length);
    if (hi >= 0 && hi < lo) return kNever;
    content = "jchar{" + std::to_string(lo) + (hi < 0 ? "," : hi == lo ? "" : "," + std::to_string(hi)) + "}";
  }
  return rule("str", "\"\\\"\" " + content + " \"\\\"\"");
}

std::string Compiler::gen_number(const oj& s, const std::string& path, bool integer) {
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
      return rule("mult", defs.substr(0, nl) + " izero");
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
  const std::string ints = (ilo && ihi && *ilo > *ihi) ? std::string(kNever) : schema_text::int_range(ilo, ihi) + " izero";
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

}  // namespace kvad::schema_compile

namespace kvad {

using schema_compile::Compiler;
using schema_compile::base_rules;

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

namespace {
void check_prefix(const JsonSchemaOptions& opt) {
  for (char c : opt.prefix)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_')
      throw SchemaError("", "", "rule prefix '" + opt.prefix + "' has characters other than [A-Za-z0-9_-]");
  if (!opt.prefix.empty() && !std::isalpha(static_cast<unsigned char>(opt.prefix[0])))
    throw SchemaError("", "", "rule prefix '" + opt.prefix + "' must start with a letter");
}
}  // namespace

std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema, const JsonSchemaOptions& opt) {
  check_prefix(opt);
  // References that depend on a base URI ($id) made absolute first.
  const std::optional<nlohmann::ordered_json> absolute = schema_uri::absolutize(schema);
  return prefix_names(Compiler(absolute ? *absolute : schema, opt).run(), opt.prefix);
}

std::shared_ptr<const Grammar> json_schema_grammar(const nlohmann::ordered_json& schema, const JsonSchemaOptions& opt) {
  check_prefix(opt);
  const std::optional<nlohmann::ordered_json> absolute = schema_uri::absolutize(schema);
  Compiler compiler(absolute ? *absolute : schema, opt);
  const std::string text = prefix_names(compiler.run(), opt.prefix);
  try {
    return Grammar::parse(text, opt.prefix + "root");
  } catch (const SchemaError&) {
    throw;
  } catch (const GrammarError& e) {
    const std::string what = e.what();
    if (what.find("left recursive") != std::string::npos) {
      // The rule GBNF names is one the compiler made (or one GBNF made for a
      // group inside it): the error is at the subschema it was made for.
      const size_t at = what.find("rule '"), end = at == std::string::npos ? at : what.find('\'', at + 6);
      std::string rule = end == std::string::npos ? "" : what.substr(at + 6, end - at - 6);
      if (rule.rfind(opt.prefix, 0) == 0) rule.erase(0, opt.prefix.size());
      bool ref = false;
      const std::string path = compiler.path_of_rule(rule, &ref);
      throw SchemaError(ref ? "$ref" : "pattern", path,
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

std::string json_any_gbnf(bool object_only, const JsonSchemaOptions& opt) {
  return std::string("root ::= ") + (object_only ? "object" : "value") + "\n" + base_rules(opt);
}

}  // namespace kvad
