// Negation, bound checks and finite value sets (json_schema_logic.h).
// Semantics: JSON Schema 2020-12 Core (not, if/then/else, oneOf) and
// Validation (each assertion applies to instances of its own type only).
#include "engine/grammar/json_schema_logic.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "engine/grammar/json_schema.h"

namespace kvad::schema_logic {

namespace {

using schema_merge::kIgnored;
using schema_merge::kTypes;

[[noreturn]] void refuse(const std::string& kw, const std::string& path, const std::string& why) {
  throw SchemaError(kw, path, why);
}

constexpr size_t kMaxDisjuncts = 64;

std::set<std::string> type_set(const oj& s, const std::string& path) {
  if (!s.contains("type")) return kTypes;
  std::set<std::string> t;
  auto add = [&](const oj& x) {
    if (!x.is_string() || !kTypes.count(x.get<std::string>())) refuse("type", path, "unknown type " + x.dump());
    t.insert(x.get<std::string>());
  };
  if (s["type"].is_array()) for (auto& x : s["type"]) add(x);
  else add(s["type"]);
  return t;
}

bool nonneg_int(const oj& v) {
  if (!v.is_number() || v.get<double>() < 0) return false;
  const double d = v.get<double>();
  return std::floor(d) == d && d <= 1e4;
}

}  // namespace

std::vector<oj> conjoin(const schema_merge::Merger& mg, const std::vector<std::vector<oj>>& parts, const std::string& kw,
                        const std::string& path, int depth) {
  std::vector<oj> acc{oj(true)};
  for (const auto& part : parts) {
    std::vector<oj> next;
    for (const oj& a : acc)
      for (const oj& b : part) {
        oj m = mg.merge(a, b, path, depth + 1);
        if (m.is_boolean() && !m.get<bool>()) continue;
        next.push_back(std::move(m));
        if (next.size() > kMaxDisjuncts)
          refuse(kw, path, "the negation spreads into more than 64 alternatives");
      }
    acc = std::move(next);
  }
  return acc;
}

std::vector<oj> negate(const schema_merge::Merger& mg, const oj& s0, const std::string& kw, const std::string& path,
                       int depth) {
  if (depth > schema_merge::kMaxDepth) refuse(kw, path, "negations nested deeper than 64");
  if (s0.is_boolean()) return s0.get<bool>() ? std::vector<oj>{} : std::vector<oj>{oj(true)};
  if (!s0.is_object()) refuse("", path, "a schema must be an object or a boolean");
  const oj s = mg.inline_ref(s0, path, depth);
  if (s.is_boolean()) return negate(mg, s, kw, path, depth + 1);
  const std::set<std::string> T = type_set(s, path);
  const bool has_type = s.contains("type");
  std::vector<oj> out;
  auto push = [&](oj d) {
    if (d.is_boolean() && !d.get<bool>()) return;
    out.push_back(std::move(d));
    if (out.size() > kMaxDisjuncts) refuse(kw, path, "the negation spreads into more than 64 alternatives");
  };
  // Instances of the types s does not allow violate it.
  {
    oj other = oj::array();
    for (const char* t : {"null", "boolean", "object", "array", "string"})
      if (!T.count(t)) other.push_back(t);
    const bool num = T.count("number") > 0, integer = T.count("integer") > 0;
    if (!num && !integer) other.push_back("number");
    if (!other.empty()) push(oj{{"type", other}});
    if (!num && integer) push(oj{{"type", "number"}, {kFraction, true}});
  }
  // A violation of one keyword, among the instances of its type that s's
  // type allows (none: the keyword is vacuous here).
  auto typed_for = [&](const std::string& kt, oj extra) {
    std::string t = kt;
    if (kt == "number") t = T.count("number") ? "number" : T.count("integer") ? "integer" : "";
    else if (kt == "integer") t = (T.count("number") || T.count("integer")) ? "integer" : "";
    else if (!T.count(kt)) t = "";
    if (t.empty()) return;
    extra["type"] = t;
    push(std::move(extra));
  };
  auto typed = [&](const oj& d) {
    if (!has_type) return push(d);
    push(mg.merge(oj{{"type", s["type"]}}, d, path, depth + 1));
  };
  auto count_kw = [&](const std::string& k, const oj& v) {
    if (!nonneg_int(v)) refuse(k, path, "must be a non-negative integer");
    return static_cast<int64_t>(v.get<double>());
  };
  static const std::map<std::string, std::pair<const char*, const char*>> kFlipNum = {
      {"minimum", {"exclusiveMaximum", "number"}}, {"exclusiveMinimum", {"maximum", "number"}},
      {"maximum", {"exclusiveMinimum", "number"}}, {"exclusiveMaximum", {"minimum", "number"}}};
  static const std::map<std::string, std::pair<const char*, const char*>> kFlipMin = {
      {"minLength", {"maxLength", "string"}}, {"minItems", {"maxItems", "array"}},
      {"minProperties", {"maxProperties", "object"}}};
  static const std::map<std::string, std::pair<const char*, const char*>> kFlipMax = {
      {"maxLength", {"minLength", "string"}}, {"maxItems", {"minItems", "array"}},
      {"maxProperties", {"minProperties", "object"}}};
  const bool has_contains = s.contains("contains");
  for (auto& [k, v] : s.items()) {
    if (kIgnored.count(k) || k == "type") continue;
    if (k == "not") {
      typed(v);
    } else if (k == "const" || k == "enum") {
      if (k == "enum" && !v.is_array()) refuse("enum", path, "must be an array");
      typed(oj{{kNotValues, k == "const" ? oj::array({v}) : v}});
    } else if (k == kNotValues) {
      typed(oj{{"enum", v}});
    } else if (k == kFraction) {
      typed_for("integer", oj::object());
    } else if (auto f = kFlipNum.find(k); f != kFlipNum.end()) {
      if (!v.is_number()) refuse(k, path, "must be a number");
      typed_for(f->second.second, oj{{f->second.first, v}});
    } else if (auto f2 = kFlipMin.find(k); f2 != kFlipMin.end()) {
      const int64_t n = count_kw(k, v);
      if (n > 0) typed_for(f2->second.second, oj{{f2->second.first, n - 1}});
    } else if (auto f3 = kFlipMax.find(k); f3 != kFlipMax.end()) {
      typed_for(f3->second.second, oj{{f3->second.first, count_kw(k, v) + 1}});
    } else if (k == "required") {
      if (!v.is_array()) refuse(k, path, "must be an array");
      for (auto& name : v) {
        if (!name.is_string()) refuse(k, path, "must list strings");
        typed_for("object", oj{{"properties", oj{{name.get<std::string>(), false}}}});
      }
    } else if (k == "properties") {
      if (!v.is_object()) refuse(k, path, "must be an object");
      if (s.contains("additionalProperties") && s["additionalProperties"] != oj(true))
        refuse(kw, path, "'additionalProperties' inside a negated schema cannot be compiled");
      for (auto& [name, p] : v.items())
        for (oj& d : negate(mg, p, kw, path + "/properties/" + name, depth + 1))
          typed_for("object", oj{{"required", oj::array({name})}, {"properties", oj{{name, d}}}});
    } else if (k == "dependentRequired") {
      if (!v.is_object()) refuse(k, path, "must be an object");
      for (auto& [a, bs] : v.items()) {
        if (!bs.is_array()) refuse(k, path, "must map names to arrays");
        for (auto& b : bs) {
          if (!b.is_string()) refuse(k, path, "must list strings");
          if (b.get<std::string>() == a) continue;
          typed_for("object", oj{{"required", oj::array({a})}, {"properties", oj{{b.get<std::string>(), false}}}});
        }
      }
    } else if (k == "allOf") {
      if (!v.is_array()) refuse(k, path, "must be an array");
      for (size_t i = 0; i < v.size(); ++i)
        for (oj& d : negate(mg, v[i], kw, path + "/allOf/" + std::to_string(i), depth + 1)) typed(d);
    } else if (k == "anyOf") {
      if (!v.is_array()) refuse(k, path, "must be an array");
      std::vector<std::vector<oj>> parts;
      for (size_t i = 0; i < v.size(); ++i) parts.push_back(negate(mg, v[i], kw, path + "/anyOf/" + std::to_string(i), depth + 1));
      for (oj& d : conjoin(mg, parts, kw, path, depth)) typed(d);
    } else if (k == "if") {
      // ¬((I ∧ T) ∨ (¬I ∧ E)) = (I ∧ ¬T) ∨ (¬I ∧ ¬E)
      const oj then_s = s.contains("then") ? s["then"] : oj(true);
      const oj else_s = s.contains("else") ? s["else"] : oj(true);
      if (!s.contains("then") && !s.contains("else")) continue;
      for (oj& d : conjoin(mg, {{v}, negate(mg, then_s, kw, path + "/then", depth + 1)}, kw, path, depth)) typed(d);
      for (oj& d : conjoin(mg, {negate(mg, v, kw, path + "/if", depth + 1), negate(mg, else_s, kw, path + "/else", depth + 1)},
                           kw, path, depth))
        typed(d);
    } else if (k == "then" || k == "else") {
      continue;  // with "if" above; alone they assert nothing
    } else if ((k == "minContains" || k == "maxContains") && !has_contains) {
      continue;
    } else if ((k == "uniqueItems" && v == oj(false)) ||
               ((k == "additionalProperties" || k == "items" || k == "propertyNames") && v == oj(true))) {
      continue;  // vacuous
    } else {
      refuse(kw, path, "'" + k + "' inside '" + kw + "' (a negated schema) cannot be compiled");
    }
  }
  return out;
}

void check_bounds(const oj& root) {
  std::vector<std::pair<const oj*, std::string>> todo{{&root, ""}};
  size_t seen = 0;
  while (!todo.empty()) {
    const oj* s = todo.back().first;
    const std::string path = todo.back().second;
    todo.pop_back();
    if (!s->is_object() || ++seen > 1000000) continue;
    auto num = [&](const char* k) { return s->contains(k) && (*s)[k].is_number(); };
    auto pair = [&](const char* lo, const char* hi, bool strict) {
      if (!num(lo) || !num(hi)) return;
      const int c = schema_merge::compare_numbers((*s)[lo], (*s)[hi]);
      if (c > 0 || (c == 0 && strict))
        refuse(lo, path, std::string(lo) + " " + (*s)[lo].dump() + (c > 0 ? " > " : " = ") + hi + " " + (*s)[hi].dump() +
                             ": no value is valid");
    };
    pair("minimum", "maximum", false);
    pair("exclusiveMinimum", "maximum", true);
    pair("minimum", "exclusiveMaximum", true);
    pair("exclusiveMinimum", "exclusiveMaximum", true);
    pair("minLength", "maxLength", false);
    pair("minItems", "maxItems", false);
    pair("minProperties", "maxProperties", false);
    if (s->contains("contains")) pair("minContains", "maxContains", false);
    if (s->contains("enum") && (*s)["enum"].is_array() && (*s)["enum"].empty())
      refuse("enum", path, "an empty enum: no value is valid");
    for (auto& [k, v] : s->items()) {
      if (k == "properties" || k == "patternProperties" || k == "$defs" || k == "definitions" || k == "dependentSchemas") {
        if (v.is_object())
          for (auto& [name, sub] : v.items()) todo.emplace_back(&sub, path + "/" + k + "/" + name);
      } else if (k == "allOf" || k == "anyOf" || k == "oneOf" || k == "prefixItems") {
        if (v.is_array())
          for (size_t i = 0; i < v.size(); ++i) todo.emplace_back(&v[i], path + "/" + k + "/" + std::to_string(i));
      } else if (k == "items" || k == "contains" || k == "not" || k == "if" || k == "then" || k == "else" ||
                 k == "additionalProperties" || k == "propertyNames" || k == "unevaluatedItems" ||
                 k == "unevaluatedProperties") {
        todo.emplace_back(&v, path + "/" + k);
      }
    }
  }
}

bool finite_values(const schema_merge::Merger& mg, const oj& s0, size_t cap, std::vector<oj>& out,
                   const std::string& path) {
  out.clear();
  if (s0.is_boolean()) return !s0.get<bool>();
  if (!s0.is_object()) return false;
  const oj s = mg.inline_ref(s0, path, 0);
  if (s.is_boolean()) return !s.get<bool>();
  for (auto& [k, v] : s.items())
    if (!kIgnored.count(k) && k != "type" && k != "enum" && k != "const" && k != "minimum" && k != "maximum")
      return false;
  const std::set<std::string> T = type_set(s, path);
  auto type_ok = [&](const oj& x) {
    const bool integral = x.is_number() && std::floor(x.get<double>()) == x.get<double>();
    return x.is_null() ? T.count("null") > 0 : x.is_boolean() ? T.count("boolean") > 0 : x.is_string() ? T.count("string") > 0
         : x.is_array() ? T.count("array") > 0 : x.is_object() ? T.count("object") > 0
         : (T.count("number") > 0 || (T.count("integer") > 0 && integral));
  };
  auto add = [&](const oj& x) {
    if (!type_ok(x)) return true;
    if (x.is_number()) {
      if (s.contains("minimum") && (!s["minimum"].is_number() || schema_merge::compare_numbers(x, s["minimum"]) < 0)) return true;
      if (s.contains("maximum") && (!s["maximum"].is_number() || schema_merge::compare_numbers(x, s["maximum"]) > 0)) return true;
    }
    for (auto& y : out) if (y == x) return true;
    out.push_back(x);
    return out.size() <= cap;
  };
  if (s.contains("enum") || s.contains("const")) {
    if (s.contains("enum") && !s["enum"].is_array()) return false;
    const oj vals = s.contains("enum") ? s["enum"] : oj::array({s["const"]});
    for (auto& x : vals) {
      if (s.contains("const") && x != s["const"]) continue;
      if (!add(x)) return false;
    }
    return true;
  }
  for (auto& t : T)
    if (t != "null" && t != "boolean" && t != "integer") return false;
  if (T.count("null") && !add(oj(nullptr))) return false;
  if (T.count("boolean") && (!add(oj(false)) || !add(oj(true)))) return false;
  if (T.count("integer")) {
    if (!s.contains("minimum") || !s.contains("maximum") || !s["minimum"].is_number() || !s["maximum"].is_number()) return false;
    const double lo = std::ceil(s["minimum"].get<double>()), hi = std::floor(s["maximum"].get<double>());
    if (!(std::fabs(lo) < 1e15 && std::fabs(hi) < 1e15) || hi - lo > 64) return false;
    for (double x = lo; x <= hi; ++x)
      if (!add(oj(static_cast<int64_t>(x)))) return false;
  }
  return true;
}

}  // namespace kvad::schema_logic
