// allOf merging, $ref resolution and oneOf checks (json_schema_merge.h).
// Semantics: JSON Schema 2020-12 Core (applicators, $ref) and Validation.
#include "engine/grammar/json_schema_merge.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <map>
#include <numeric>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "engine/grammar/json_schema.h"
#include "engine/grammar/json_schema_uri.h"

namespace kvad::schema_merge {

namespace {
[[noreturn]] void refuse(const std::string& kw, const std::string& path, const std::string& why) {
  throw SchemaError(kw, path, why);
}
// A positive number written without an exponent as K / 10^d (K at most
// 10^12 and d at most 6), or nullopt.
std::optional<std::pair<uint64_t, uint32_t>> decimal_of(const oj& v) {
  if (!v.is_number() || !(v.get<double>() > 0)) return std::nullopt;
  const std::string t = v.dump();
  if (t.find_first_of("eE-") != std::string::npos) return std::nullopt;
  const size_t dot = t.find('.');
  std::string frac = dot == std::string::npos ? "" : t.substr(dot + 1);
  while (!frac.empty() && frac.back() == '0') frac.pop_back();
  std::string digits = t.substr(0, dot) + frac;
  digits.erase(0, std::min(digits.find_first_not_of('0'), digits.size()));
  if (digits.empty() || digits.size() > 12 || frac.size() > 6) return std::nullopt;
  return std::pair{static_cast<uint64_t>(std::stoull(digits)), static_cast<uint32_t>(frac.size())};
}
}  // namespace

Merger::~Merger() = default;

const oj* Merger::member(const oj& obj, const std::string& key) const {
  if (obj.size() <= 64) {
    auto it = obj.find(key);
    return it == obj.end() ? nullptr : &*it;
  }
  auto [ix, added] = index_.try_emplace(&obj);
  if (added)
    for (auto& [k, v] : obj.items()) ix->second.emplace(k, &v);  // the first of a repeated key, as find() returns
  auto it = ix->second.find(key);
  return it == ix->second.end() ? nullptr : it->second;
}

const oj& Merger::resolve(const oj& ref, const std::string& path, std::string& ptr) const {
  if (!ref.is_string()) refuse("$ref", path, "must be a string");
  std::string r = ref.get<std::string>();
  // An absolute URI (json_schema_uri.h rewrote every base-dependent
  // reference so): a resource of this document, then the fragment in it.
  const oj* start = &root_;
  std::string start_ptr, resource;
  if (r.empty() || r[0] != '#') {
    if (!uris_) uris_ = schema_uri::index(root_);
    const size_t hash = r.find('#');
    resource = r.substr(0, hash);
    auto it = uris_->resources.find(resource);
    if (it == uris_->resources.end())
      refuse("$ref", path, "'" + r + "' is outside the document: only references to the document itself and its "
                           "$id resources are supported");
    start = it->second.node;
    start_ptr = it->second.ptr;
    r = "#" + (hash == std::string::npos ? std::string() : r.substr(hash + 1));
  }
  // Percent-decoding (URI fragment), then JSON pointer (RFC 6901).
  std::string dec;
  for (size_t i = 1; i < r.size(); ++i) {
    if (r[i] == '%' && i + 2 < r.size() + 0 && std::isxdigit(static_cast<unsigned char>(r[i + 1])) &&
        i + 2 < r.size() && std::isxdigit(static_cast<unsigned char>(r[i + 2]))) {
      dec += static_cast<char>(std::stoi(r.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      dec += r[i];
    }
  }
  if (!dec.empty() && dec[0] != '/' && !resource.empty()) {
    auto it = uris_->anchors.find({resource, dec});
    if (it == uris_->anchors.end()) refuse("$ref", path, "'" + ref.get<std::string>() + "' names no $anchor");
    ptr = "#" + it->second.ptr;
    return *it->second.node;
  }
  if (!dec.empty() && dec[0] != '/') {
    // A plain-name fragment: the subschema whose $anchor it is, within the
    // root's resource (not inside a subschema with its own $id).
    const oj* found = nullptr;
    std::vector<std::pair<const oj*, std::string>> todo{{&root_, ""}};
    std::string where;
    size_t seen = 0;
    while (!todo.empty()) {
      auto [x, at] = todo.back();
      todo.pop_back();
      if (++seen > 1000000) break;
      if (x->is_object()) {
        if (x != &root_ && x->contains("$id")) continue;
        if (auto it = x->find("$anchor"); it != x->end() && *it == oj(dec)) {
          if (found) refuse("$anchor", path, "anchor '" + dec + "' is defined twice");
          found = x;
          where = at;
        }
        for (auto& [k, v] : x->items())
          if (k != "enum" && k != "const" && k != "default" && k != "examples") todo.emplace_back(&v, at + "/" + k);
      } else if (x->is_array()) {
        for (size_t i = 0; i < x->size(); ++i) todo.emplace_back(&(*x)[i], at + "/" + std::to_string(i));
      }
    }
    if (!found) refuse("$ref", path, "'" + r + "' names no $anchor in this document");
    ptr = "#" + where;
    return *found;
  }
  const oj* cur = start;
  size_t i = 0;
  while (i < dec.size()) {
    size_t j = dec.find('/', i + 1);
    if (j == std::string::npos) j = dec.size();
    std::string tok = dec.substr(i + 1, j - i - 1), t;
    for (size_t k = 0; k < tok.size(); ++k) {
      if (tok[k] == '~' && k + 1 < tok.size() && tok[k + 1] == '1') { t += '/'; ++k; }
      else if (tok[k] == '~' && k + 1 < tok.size() && tok[k + 1] == '0') { t += '~'; ++k; }
      else t += tok[k];
    }
    if (const oj* next = cur->is_object() ? member(*cur, t) : nullptr) cur = next;
    else if (cur->is_array() && !t.empty() && t.find_first_not_of("0123456789") == std::string::npos && t.size() < 9 &&
             std::stoul(t) < cur->size()) cur = &(*cur)[std::stoul(t)];
    else refuse("$ref", path, "'" + ref.get<std::string>() + "' does not resolve in this document");
    i = j;
  }
  ptr = "#" + start_ptr + dec;
  return *cur;
}

// A schema with its $ref replaced by the target merged in (for allOf and
// $ref with siblings).
oj Merger::inline_ref(const oj& s, const std::string& path, int depth) const {
  if (!s.is_object() || !s.contains("$ref")) return s;
  if (depth > 16) refuse("$ref", path, "references nested deeper than 16 next to other keywords");
  std::string ptr;
  oj target = inline_ref(resolve(s["$ref"], path, ptr), ptr, depth + 1);
  oj rest = s;
  rest.erase("$ref");
  return merge(rest, target, path, depth + 1);
}

oj settle_unevaluated(const oj& s, const std::string& path) {
  if (!s.is_object() || (!s.contains("unevaluatedProperties") && !s.contains("unevaluatedItems"))) return s;
  const char* kw = s.contains("unevaluatedProperties") ? "unevaluatedProperties" : "unevaluatedItems";
  for (const char* k : {"allOf", "anyOf", "oneOf", "not", "if", "then", "else", "$ref", "dependentSchemas", "$dynamicRef"})
    if (s.contains(k))
      refuse(kw, path, std::string("next to '") + k + "' in the same subschema is not supported");
  oj r = s;
  if (r.contains("unevaluatedProperties")) {
    if (!r.contains("additionalProperties")) r["additionalProperties"] = r["unevaluatedProperties"];
    r.erase("unevaluatedProperties");
  }
  if (r.contains("unevaluatedItems")) {
    if (r.contains("contains")) refuse("unevaluatedItems", path, "next to contains is not supported");
    if (!r.contains("items")) r["items"] = r["unevaluatedItems"];
    r.erase("unevaluatedItems");
  }
  return r;
}

int compare_numbers(const oj& a, const oj& b) {
  using i128 = __int128;
  auto integer = [](const oj& v) -> i128 {
    return v.is_number_unsigned() ? static_cast<i128>(v.get<uint64_t>()) : static_cast<i128>(v.get<int64_t>());
  };
  auto sign = [](auto d) { return d < 0 ? -1 : d > 0 ? 1 : 0; };
  // An integer x against a double d: through floor(d), exact for |d| < 2^100.
  auto int_vs_double = [&](i128 x, double d) {
    if (d >= 0x1p100) return -1;
    if (d <= -0x1p100) return 1;
    const double f = std::floor(d);
    const i128 fi = static_cast<i128>(f);
    if (x != fi) return x < fi ? -1 : 1;
    return d > f ? -1 : 0;
  };
  const bool ai = !a.is_number_float(), bi = !b.is_number_float();
  if (ai && bi) return sign(integer(a) - integer(b));
  if (ai) return int_vs_double(integer(a), b.get<double>());
  if (bi) return -int_vs_double(integer(b), a.get<double>());
  return sign(a.get<double>() - b.get<double>());
}

oj Merger::merge(const oj& a0, const oj& b0, const std::string& path, int depth) const {
  if (depth > kMaxDepth) refuse("allOf", path, "nested deeper than 64");
  if (a0.is_boolean()) return a0.get<bool>() ? inline_ref(b0, path, depth) : a0;
  if (b0.is_boolean()) return b0.get<bool>() ? inline_ref(a0, path, depth) : b0;
  if (!a0.is_object() || !b0.is_object()) refuse("allOf", path, "a schema must be an object or a boolean");
  oj a = inline_ref(a0, path, depth), b = inline_ref(b0, path, depth);
  // b is a subschema of a's scope (an allOf branch, a $ref target, an
  // anyOf branch): its own unevaluated* see only itself.
  b = settle_unevaluated(b, path);
  if (a.is_boolean() || b.is_boolean()) return merge(a, b, path, depth + 1);
  // Keywords that act only with a sibling (then/else with if, min/maxContains
  // with contains) do nothing alone, and must not pair with another
  // branch's sibling once merged.
  for (oj* x : {&a, &b}) {
    if (!x->contains("if")) { x->erase("then"); x->erase("else"); }
    if (!x->contains("contains")) { x->erase("minContains"); x->erase("maxContains"); }
  }
  for (const char* k : {"if", "contains"})
    if (a.contains(k) && b.contains(k) && (a[k] != b[k] || k == std::string("if")))
      refuse(k, path, std::string("two '") + k + "' in allOf cannot be combined");
  // `items` applies past its own schema's prefixItems: merged next to a
  // longer prefixItems it would constrain fewer elements.
  auto plen = [](const oj& x) { return x.contains("prefixItems") && x["prefixItems"].is_array() ? x["prefixItems"].size() : size_t{0}; };
  if ((a.contains("items") && plen(b) > plen(a)) || (b.contains("items") && plen(a) > plen(b)))
    refuse("allOf", path, "'items' next to a longer 'prefixItems' of another branch cannot be combined");
  // Bounded before anything is combined: the keywords of both (an unknown
  // one is refused as the compiler would refuse it), their enums and
  // properties (as gen_values and gen_object cap them), so that each step
  // below costs at most those bounds.
  for (const oj* x : {&a, &b})
    for (auto& [k, v] : x->items()) {
      if (!kIgnored.count(k) && !kSupportedKeywords.count(k)) refuse(k, path, "not supported by the grammar compiler");
      if (k == "enum" && v.is_array() && v.size() > kMaxEnumValues) refuse("enum", path, "more than 1024 values");
      if ((k == "properties" || k == "required") && v.size() > kMaxProperties)
        refuse("properties", path, "more than 512 properties");
    }
  oj r = a;
  for (auto& [k, v] : b.items()) {
    if (kIgnored.count(k) || k == "properties" || k == "additionalProperties") continue;
    if (!r.contains(k)) { r[k] = v; continue; }
    oj& u = r[k];
    if (u == v) continue;
    if (k == "type") {
      auto set = [](const oj& t) {
        std::set<std::string> s;
        if (t.is_string()) s.insert(t.get<std::string>());
        else if (t.is_array()) for (auto& x : t) if (x.is_string()) s.insert(x.get<std::string>());
        return s;
      };
      auto x = set(u), y = set(v);
      oj out = oj::array();
      for (auto& t : x) {
        if (y.count(t)) out.push_back(t);
        else if (t == "integer" && y.count("number")) out.push_back(t);
        else if (t == "number" && y.count("integer")) out.push_back("integer");
      }
      if (out.empty()) return oj(false);
      u = out;
    } else if (k == "minimum" || k == "exclusiveMinimum" || k == "minLength" || k == "minItems" || k == "minProperties") {
      if (!u.is_number() || !v.is_number()) refuse(k, path, "must be a number");
      if (compare_numbers(v, u) > 0) u = v;
    } else if (k == "maximum" || k == "exclusiveMaximum" || k == "maxLength" || k == "maxItems" || k == "maxProperties") {
      if (!u.is_number() || !v.is_number()) refuse(k, path, "must be a number");
      if (compare_numbers(v, u) < 0) u = v;
    } else if (k == "required") {
      if (!u.is_array() || !v.is_array()) refuse(k, path, "must be an array");
      std::unordered_set<std::string> have;
      for (auto& x : u) have.insert(x.dump());
      for (auto& x : v) if (have.insert(x.dump()).second) u.push_back(x);
    } else if (k == "enum") {
      if (!u.is_array() || !v.is_array()) refuse(k, path, "must be an array");
      oj out = oj::array();
      for (auto& x : u) if (std::find(v.begin(), v.end(), x) != v.end()) out.push_back(x);
      u = out;
    } else if (k == "multipleOf") {
      // Multiples of both K1/10^d1 and K2/10^d2: of their least common
      // multiple, exactly, in units of the finer decimal.
      const auto a = decimal_of(u), b2 = decimal_of(v);
      if (!a || !b2) refuse(k, path, "two different 'multipleOf' values in allOf cannot be combined");
      const uint32_t d = std::max(a->second, b2->second);
      uint64_t ka = a->first, kb = b2->first;
      for (uint32_t j = a->second; j < d; ++j) ka *= 10;
      for (uint32_t j = b2->second; j < d; ++j) kb *= 10;
      const uint64_t l = ka / std::gcd(ka, kb) * kb;
      if (l > (uint64_t{1} << 40)) refuse(k, path, "the least common multiple of the 'multipleOf' values is too large");
      if (d == 0) {
        u = l;
      } else {
        std::string t = std::to_string(l);
        if (t.size() <= d) t.insert(0, d + 1 - t.size(), '0');
        t.insert(t.size() - d, ".");
        u = oj::parse(t);
      }
    } else if (k == "const") {
      return oj(false);
    } else if (k == "items") {
      u = merge(settle_unevaluated(u, path), v, path + "/items", depth + 1);
    } else if (k == "prefixItems") {
      if (!u.is_array() || !v.is_array() || u.size() != v.size())
        refuse(k, path, "prefixItems of different lengths in allOf cannot be combined");
      for (size_t i = 0; i < u.size(); ++i) u[i] = merge(settle_unevaluated(u[i], path), v[i], path + "/prefixItems", depth + 1);
    } else if (k == "allOf") {
      for (auto& x : v) u.push_back(x);
    } else if (k == "not") {
      u = oj{{"anyOf", oj::array({u, v})}};  // ¬A ∧ ¬B = ¬(A ∨ B)
    } else if (k == "propertyNames") {
      u = merge(settle_unevaluated(u, path), v, path + "/propertyNames", depth + 1);
    } else if (k == "x-kvad-notValues") {
      if (!u.is_array() || !v.is_array()) refuse(k, path, "must be an array");
      for (auto& x : v) if (std::find(u.begin(), u.end(), x) == u.end()) u.push_back(x);
    } else if (k == "dependentSchemas") {
      if (!u.is_object() || !v.is_object()) refuse(k, path, "must be an object");
      for (auto& [name, sub] : v.items()) u[name] = u.contains(name) ? merge(u[name], sub, path + "/dependentSchemas", depth + 1) : sub;
    } else if (k == "dependentRequired") {
      if (!u.is_object() || !v.is_object()) refuse(k, path, "must be an object");
      for (auto& [name, list] : v.items()) {
        if (!u.contains(name)) { u[name] = list; continue; }
        if (!u[name].is_array() || !list.is_array()) refuse(k, path, "must map names to arrays");
        for (auto& x : list) if (std::find(u[name].begin(), u[name].end(), x) == u[name].end()) u[name].push_back(x);
      }
    } else {
      refuse(k, path, "two different '" + k + "' values in allOf cannot be combined");
    }
  }
  // patternProperties change which keys additionalProperties sees: merged
  // only where they constrain nothing.
  auto vacuous_patterns = [](const oj& x) {
    if (!x.contains("patternProperties")) return true;
    if (!x["patternProperties"].is_object()) return false;
    for (auto& [p, sub] : x["patternProperties"].items())
      if (!(sub == oj(true) || sub == oj::object())) return false;
    return !x.contains("additionalProperties") || x["additionalProperties"] == oj(true);
  };
  if (!vacuous_patterns(a) || !vacuous_patterns(b)) {
    const bool other_a = a.contains("properties") || a.contains("additionalProperties");
    const bool other_b = b.contains("properties") || b.contains("additionalProperties");
    if ((a.contains("patternProperties") && other_b) || (b.contains("patternProperties") && other_a) ||
        (a.contains("patternProperties") && b.contains("patternProperties") && a["patternProperties"] != b["patternProperties"]))
      refuse("patternProperties", path, "patternProperties in allOf next to other properties cannot be combined");
  }
  // properties / additionalProperties: a key declared on one side only is
  // also checked by the other side's additionalProperties.
  if (b.contains("properties") || b.contains("additionalProperties")) {
    const oj empty = oj::object();
    const oj& pa = a.contains("properties") ? a["properties"] : empty;
    const oj& pb = b.contains("properties") ? b["properties"] : empty;
    if (!pa.is_object() || !pb.is_object()) refuse("properties", path, "must be an object");
    const oj ta = a.contains("additionalProperties") ? a["additionalProperties"] : oj(true);
    const oj tb = b.contains("additionalProperties") ? b["additionalProperties"] : oj(true);
    oj props = oj::object();
    auto sub = [&](const oj& x, const oj& y) { return merge(settle_unevaluated(x, path), y, path, depth + 1); };
    for (auto& [k, v] : pa.items()) props[k] = pb.contains(k) ? sub(v, pb[k]) : sub(v, tb);
    for (auto& [k, v] : pb.items()) if (!pa.contains(k)) props[k] = sub(ta, v);
    if (!props.empty()) r["properties"] = props;
    const oj add = sub(ta, tb);
    // Kept when written, even as true: it evaluates every member, which
    // an unevaluatedProperties of the enclosing scope sees.
    if (!(add.is_boolean() && add.get<bool>()) || a.contains("additionalProperties") || b.contains("additionalProperties"))
      r["additionalProperties"] = add;
    else r.erase("additionalProperties");
  }
  return r;
}

// A custom metaschema may switch vocabularies off: only the published
// drafts' metaschemas are known.
void check_metaschema(const oj& v, const std::string& path) {
  static const std::set<std::string> known = {
      "https://json-schema.org/draft/2020-12/schema", "https://json-schema.org/draft/2019-09/schema",
      "http://json-schema.org/draft-07/schema", "http://json-schema.org/draft-06/schema",
      "http://json-schema.org/draft-04/schema"};
  std::string m = v.is_string() ? v.get<std::string>() : "";
  if (!m.empty() && m.back() == '#') m.pop_back();
  if (!known.count(m)) refuse("$schema", path, "unknown metaschema " + v.dump());
}

namespace {
// Objects told apart by one property: every branch that can match is of
// type object, requires the property, and gives it const/enum values no
// other branch gives (Pydantic's and OpenAPI's discriminated unions).
template <class Key>
bool discriminated(const std::vector<oj>& br, const Key& value_key) {
  std::vector<const oj*> live;
  for (const oj& b : br) {
    if (b.is_boolean() && !b.get<bool>()) continue;
    if (!b.is_object() || !b.contains("type") || !(b["type"] == oj("object") || b["type"] == oj::array({"object"})))
      return false;
    if (!b.contains("properties") || !b["properties"].is_object() || !b.contains("required") || !b["required"].is_array())
      return false;
    live.push_back(&b);
  }
  if (live.size() < 2) return true;
  for (auto& [k, first] : (*live[0])["properties"].items()) {
    std::unordered_set<std::string> seen;
    bool ok = true;
    for (const oj* b : live) {
      const oj& req = (*b)["required"];
      const oj& props = (*b)["properties"];
      if (std::find(req.begin(), req.end(), oj(k)) == req.end() || !props.contains(k) || !props[k].is_object()) { ok = false; break; }
      const oj& p = props[k];
      oj vals;
      if (p.contains("const")) vals = oj::array({p["const"]});
      else if (p.contains("enum") && p["enum"].is_array()) vals = p["enum"];
      else { ok = false; break; }
      std::unordered_set<std::string> own;
      for (auto& x : vals) {
        const std::string key = value_key(x);
        if (own.insert(key).second && !seen.insert(key).second) { ok = false; break; }
      }
      if (!ok) break;
    }
    if (ok) return true;
  }
  return false;
}
}  // namespace

// oneOf is anyOf when no value can match two branches: shown here by
// disjoint types, or by const/enum values no other branch lists.
void check_disjoint(const std::vector<oj>& br, const std::string& path) {
  auto types = [](const oj& s) -> std::set<std::string> {
    if (s.is_boolean()) return s.get<bool>() ? kTypes : std::set<std::string>{};
    std::set<std::string> t;
    if (s.contains("type")) {
      const oj& v = s["type"];
      if (v.is_string()) t.insert(v.get<std::string>());
      else if (v.is_array()) for (auto& x : v) if (x.is_string()) t.insert(x.get<std::string>());
    } else if (s.contains("const") || s.contains("enum")) {
      oj vals = s.contains("const") ? oj::array({s["const"]}) : s["enum"];
      for (auto& x : vals) {
        t.insert(x.is_null() ? "null" : x.is_boolean() ? "boolean" : x.is_object() ? "object" : x.is_array() ? "array" :
                 x.is_string() ? "string" : "number");
      }
    } else {
      t = kTypes;
    }
    if (t.count("integer")) t.insert("number");
    if (t.count("number")) t.insert("integer");
    return t;
  };
  auto values = [](const oj& s) -> std::optional<oj> {
    if (!s.is_object()) return std::nullopt;
    if (s.contains("const")) return oj::array({s["const"]});
    if (s.contains("enum") && s["enum"].is_array()) return s["enum"];
    return std::nullopt;
  };
  // Each branch's types and values once; a type or a value seen in two
  // branches is a pair that may both match (a branch of values overlaps a
  // branch of types when one of its values has one of those types). Linear
  // in the branches and their values, not pairwise.
  auto refuse_pair = [&](size_t i, size_t j) {
    if (i > j) std::swap(i, j);
    refuse("oneOf", path, "branches " + std::to_string(i) + " and " + std::to_string(j) +
                              " may both match; only branches of disjoint types or values are supported");
  };
  // A value's identity as json's == sees it (1 and 1.0 are equal).
  auto value_key = [](const oj& x) {
    if (x.is_number()) {
      const double d = x.get<double>();
      if (!x.is_number_float()) return "n" + x.dump();
      if (std::floor(d) == d && std::fabs(d) < 0x1p63) return "n" + std::to_string(static_cast<int64_t>(d));
      return "n" + x.dump();
    }
    return "v" + x.dump();
  };
  if (discriminated(br, value_key)) return;
  std::map<std::string, size_t> typed_by, valued_by;  // type -> first branch of that kind with it
  std::unordered_map<std::string, size_t> value_of;   // value -> branch
  for (size_t i = 0; i < br.size(); ++i) {
    const auto ti = types(br[i]);
    const auto vi = values(br[i]);
    for (const auto& t : ti) {
      auto& own = vi ? valued_by : typed_by;
      auto& other = vi ? typed_by : valued_by;
      if (auto it = other.find(t); it != other.end()) refuse_pair(it->second, i);
      if (!vi) {
        if (auto it = own.find(t); it != own.end()) refuse_pair(it->second, i);
      }
      own.emplace(t, i);
    }
    if (vi)
      for (const auto& x : *vi) {
        auto [it, added] = value_of.emplace(value_key(x), i);
        if (!added && it->second != i) refuse_pair(it->second, i);
      }
  }
}

}  // namespace kvad::schema_merge
