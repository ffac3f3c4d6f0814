// Arrays and objects of the JSON Schema compiler (json_schema_compiler.h):
// items, prefixItems, contains, uniqueItems; properties, required,
// additionalProperties, propertyNames, dependentRequired, min/maxProperties.
// Semantics: JSON Schema 2020-12 Core (applicators) and Validation.
#include "engine/grammar/json_schema_compiler.h"
#include "engine/grammar/json_schema_keys.h"

namespace kvad::schema_compile {

std::string Compiler::gen_array(const oj& s, const std::string& path, int depth) {
  const int64_t lo = count(s, "minItems", path, 0);
  int64_t hi = count(s, "maxItems", path, -1);
  if (hi >= 0 && hi < lo) return kNever;
  if (s.contains("uniqueItems") && !s["uniqueItems"].is_boolean()) refuse("uniqueItems", path, "must be a boolean");
  const bool unique = s.contains("uniqueItems") && s["uniqueItems"].get<bool>();
  if (s.contains("contains")) {
    if (unique) refuse("uniqueItems", path, "uniqueItems together with contains is not supported");
    return gen_contains(s, path, depth, lo, hi);
  }
  if (unique) return gen_unique(s, path, lo, hi);
  // The default bound (JsonSchemaOptions::max_items) beyond prefixItems,
  // never below minItems.
  if (hi < 0 && opt_.max_items) {
    const oj& p = s.contains("prefixItems") ? s["prefixItems"] : oj::array();
    hi = std::max<int64_t>(lo, (p.is_array() ? static_cast<int64_t>(p.size()) : 0) + opt_.max_items);
  }
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

// contains / minContains / maxContains over the items schema.
std::string Compiler::gen_contains(const oj& s, const std::string& path, int depth, int64_t lo, int64_t hi) {
  const int64_t n = count(s, "minContains", path, 1);
  const int64_t m = count(s, "maxContains", path, -1);
  if (m >= 0 && m < n) return kNever;
  if (n == 0 && m < 0) {  // asserts nothing
    oj t = s;
    t.erase("contains");
    t.erase("minContains");
    return gen_array(t, path, depth);
  }
  if (s.contains("prefixItems")) refuse("contains", path, "contains together with prefixItems is not supported");
  if (n > 64 || m > 64 || lo > 64 || hi > 64)
    refuse(n > 64 ? "minContains" : m > 64 ? "maxContains" : lo > 64 ? "minItems" : "maxItems", path,
           "counts over 64 next to contains are not supported");
  const oj items = s.contains("items") ? s["items"] : oj(true);
  const std::string any = gen(items, path + "/items", depth + 1);
  const std::string yes = gen(mg_.merge(items, s["contains"], path + "/contains", depth), path + "/contains", depth + 1);
  std::optional<std::string> no;
  try {
    std::vector<oj> branches;
    for (const oj& d : schema_logic::negate(mg_, s["contains"], "contains", path + "/contains", depth))
      branches.push_back(mg_.merge(items, d, path + "/contains", depth));
    no = gen_branches(branches, "contains", path, depth);
  } catch (const SchemaError&) {
    if (m >= 0) throw;  // counting the matches needs the items that do not match
  }
  return schema_struct::contains_items(*this, yes, no, any, n, m, lo, hi);
}

// uniqueItems over items drawn from short lists of values.
std::string Compiler::gen_unique(const oj& s, const std::string& path, int64_t lo, int64_t hi) {
  const oj empty = oj::array();
  const oj& pre = s.contains("prefixItems") ? s["prefixItems"] : empty;
  if (!pre.is_array()) refuse("prefixItems", path, "must be an array");
  const oj items = s.contains("items") ? s["items"] : oj(true);
  std::vector<oj> values;  // distinct values by JSON equality
  auto ids = [&](const oj& sub, const std::string& at, std::vector<size_t>& dom) {
    std::vector<oj> vs;
    if (!schema_logic::finite_values(mg_, sub, 16, vs, at))
      refuse("uniqueItems", path, "uniqueItems over items that are not a short list of values (enum, const, boolean, "
                                  "null, a small integer range) cannot be compiled");
    for (const oj& v : vs) {
      size_t k = 0;
      while (k < values.size() && !(values[k] == v)) ++k;
      if (k == values.size()) values.push_back(v);
      dom.push_back(k);
    }
    if (values.size() > 16) refuse("uniqueItems", path, "uniqueItems over more than 16 distinct values is not supported");
  };
  std::vector<std::vector<size_t>> domains;
  for (size_t i = 0; i < pre.size() && (hi < 0 || static_cast<int64_t>(i) < hi); ++i) {
    domains.emplace_back();
    ids(pre[i], path + "/prefixItems/" + std::to_string(i), domains.back());
  }
  if ((hi < 0 || static_cast<int64_t>(pre.size()) < hi) && !(items.is_boolean() && !items.get<bool>())) {
    std::vector<size_t> dom;
    ids(items, path + "/items", dom);
    // At most as many more items as there are distinct values.
    for (size_t k = 0; k < dom.size() && (hi < 0 || static_cast<int64_t>(domains.size()) < hi); ++k) domains.push_back(dom);
  }
  std::vector<std::string> lits;
  for (const oj& v : values) lits.push_back(lit_value(v));
  return schema_struct::unique_items(*this, domains, lits, lo, path);
}

// A key that is none of `names`: a trie of the names by character, left
// at any character no name continues with. Extra keys use no escapes but
// the ones JSON requires (\" \\ \b \f \n \r \t, \u00XX for controls), so
// a character of a name has one spelling, or, for a control character, the
// few of json_escape_spellings, each of which follows the trie.
// With `lo` / `hi` (-1: none): of that many characters.
namespace {
// The JSON spellings an extra key may give the character `c` that needs an
// escape (a control character, '"' or '\\'): its short escape, and \u00XX
// in either case of hex digit (the key grammar's "\\u00" [01] [0-9a-fA-F]).
std::vector<std::string> json_escape_spellings(uint8_t c) {
  if (c == '"') return {"\\\""};
  if (c == '\\') return {"\\\\"};
  std::vector<std::string> out;
  const char* shorts = "btnfr";  // 0x08 .. 0x0D but 0x0B
  if (c >= 0x08 && c <= 0x0D && c != 0x0B) out.push_back(std::string("\\") + shorts[c == 0x08 ? 0 : c - 0x08 - (c > 0x0B)]);
  char lo[8], up[8];
  std::snprintf(lo, sizeof lo, "\\u%04x", c);
  std::snprintf(up, sizeof up, "\\u%04X", c);
  out.push_back(lo);
  if (std::string(lo) != up) out.push_back(up);
  return out;
}
bool needs_escape(const std::string& c) {
  const uint8_t b = static_cast<uint8_t>(c[0]);
  return c.size() == 1 && (b < 0x20 || b == '"' || b == '\\');
}
}  // namespace

std::string Compiler::key_except(const std::vector<std::string>& names, const std::string& path, const std::string& kw, int64_t lo, int64_t hi) {
  std::vector<std::vector<std::string>> chars;  // each name as UTF-8 characters
  for (auto& n : names) {
    if (n.size() > 256)
      refuse(kw, path, "property names over 256 bytes next to additional properties are not supported");
    std::vector<std::string> cs;
    for (size_t i = 0; i < n.size();) {
      const uint8_t c = static_cast<uint8_t>(n[i]);
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
    const int64_t d = static_cast<int64_t>(prefix.size());
    if (!terminal && d >= lo && (hi < 0 || d <= hi)) alts.push_back("\"\\\"\"");
    std::string cls = "[^\"\\\\\\x00-\\x1F";
    std::set<uint8_t> escaped_next;
    for (const std::string& c : next) {
      std::vector<std::string> p2 = prefix;
      p2.push_back(c);
      if (needs_escape(c)) {
        escaped_next.insert(static_cast<uint8_t>(c[0]));
        std::vector<std::string> sp;
        for (const std::string& e : json_escape_spellings(static_cast<uint8_t>(c[0]))) sp.push_back(lit(e));
        if (hi < 0 || d + 1 <= hi) alts.push_back("( " + alt(sp) + " ) " + node(p2));
        continue;
      }
      if (hi < 0 || d + 1 <= hi) alts.push_back(lit(c) + " " + node(p2));
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
    // Leaving the trie: one character no name continues with, then any.
    const int64_t a = std::max<int64_t>(lo - d - 1, 0), b = hi < 0 ? -1 : hi - d - 1;
    // The escapes that leave: all, or those of the characters no name continues with.
    std::string escapes = "\"\\\\\" [\"\\\\bfnrt] | \"\\\\u00\" [01] [0-9a-fA-F]";
    if (!escaped_next.empty()) {
      std::vector<std::string> sp;
      for (int e = 0; e < 0x60; ++e) {
        const uint8_t c = static_cast<uint8_t>(e);
        if ((c < 0x20 || c == '"' || c == '\\') && !escaped_next.count(c))
          for (const std::string& x : json_escape_spellings(c)) sp.push_back(lit(x));
      }
      escapes = alt(sp);
    }
    if (hi < 0 || b >= 0)
      alts.push_back("( " + cls + " | " + escapes + " ) " + kchar +
                     (a == 0 && b < 0 ? std::string("*")
                                      : "{" + std::to_string(a) + (b < 0 ? "," : "," + std::to_string(b)) + "}") +
                     " \"\\\"\"");
    return rule("key", alt(alts));
  };
  return rule("key", "\"\\\"\" " + node({}));
}

// One additional member under patternProperties: a rule per state of the
// keys' automaton (the key's characters so far), closing the key where it
// is no declared name, with the value for the patterns it matches. States
// from which no key can close are left out, so the grammar never leads
// into a key it cannot finish. "" when no additional key can close.
std::string Compiler::pattern_member(const schema_keys::KeyAutomaton& a,
                                     const std::function<std::string(uint32_t)>& value_of) {
  const size_t n = a.states.size();
  std::vector<std::string> close(n);
  std::vector<bool> live(n, false);
  for (size_t q = 0; q < n; ++q) {
    if (a.states[q].name >= 0) continue;
    const std::string v = value_of(a.states[q].matched);
    if (v == kNever) continue;
    close[q] = "\"\\\"\" ws \":\" ws " + v;
    live[q] = true;
  }
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t q = 0; q < n; ++q)
      if (!live[q])
        for (int t : a.states[q].next)
          if (live[static_cast<size_t>(t)]) { live[q] = true; changed = true; break; }
  }
  if (!live[0]) return "";
  std::vector<std::string> name(n);
  for (size_t q = 0; q < n; ++q) if (live[q]) name[q] = reserve("pkey");
  for (size_t q = 0; q < n; ++q) {
    if (!live[q]) continue;
    std::map<int, schema_text::CodeRanges> by_target;
    for (size_t c = 0; c < a.classes.size(); ++c) {
      const int t = a.states[q].next[c];
      if (live[static_cast<size_t>(t)]) for (auto r : a.classes[c]) by_target[t].push_back(r);
    }
    std::vector<std::string> alts;
    for (auto& [t, set] : by_target) alts.push_back(schema_text::json_char_set(set) + " " + name[static_cast<size_t>(t)]);
    if (!close[q].empty()) alts.push_back(close[q]);
    define(name[q], alt(alts));
  }
  return rule("extra", "\"\\\"\" " + name[0]);
}

std::string Compiler::gen_object(const oj& s, const std::string& path, int depth) {
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
  // dependentRequired: names it mentions become members (optional unless required).
  std::vector<std::pair<std::string, std::vector<std::string>>> dep_names;
  std::vector<std::string> dep_extra;
  if (s.contains("dependentRequired")) {
    const oj& dr = s["dependentRequired"];
    if (!dr.is_object()) refuse("dependentRequired", path, "must be an object");
    if (dr.size() > 64) refuse("dependentRequired", path, "more than 64 dependencies");
    std::unordered_set<std::string> added;
    for (auto& [a, bs] : dr.items()) {
      if (!bs.is_array()) refuse("dependentRequired", path, "must map names to arrays of names");
      std::vector<std::string> list;
      for (auto& b : bs) {
        if (!b.is_string()) refuse("dependentRequired", path, "must map names to arrays of names");
        if (b.get<std::string>() != a && !req_set.count(b.get<std::string>())) list.push_back(b.get<std::string>());
      }
      if (list.empty()) continue;
      std::vector<std::string> mentioned = list;
      mentioned.push_back(a);
      for (const std::string& x : mentioned)
        if (!prop_names.count(x) && !req_set.count(x) && added.insert(x).second) dep_extra.push_back(x);
      dep_names.emplace_back(a, std::move(list));
    }
  }
  const int64_t min_p = count(s, "minProperties", path, 0);
  const int64_t max_p = count(s, "maxProperties", path, -1);
  if (max_p >= 0 && max_p < min_p) return kNever;
  oj addl = s.contains("additionalProperties") ? s["additionalProperties"] : oj(true);
  // patternProperties: ignored where they constrain nothing (any value, and
  // no additionalProperties they would take keys away from); else the keys'
  // automaton (json_schema_keys.h) decides each member's schemas.
  std::vector<std::string> pat_text;
  std::vector<const oj*> pat_schema;
  if (s.contains("patternProperties")) {
    const oj& pp = s["patternProperties"];
    if (!pp.is_object()) refuse("patternProperties", path, "must be an object");
    bool trivial = addl == oj(true);
    for (auto& [pat, sub] : pp.items()) trivial &= sub == oj(true) || sub == oj::object();
    if (!trivial) {
      if (pp.size() > 16) refuse("patternProperties", path, "more than 16 patterns");
      if (s.contains("propertyNames") && !(s["propertyNames"] == oj(true) || s["propertyNames"] == oj::object()))
        refuse("patternProperties", path, "patternProperties next to propertyNames are not supported");
      for (auto& [pat, sub] : pp.items()) {
        pat_text.push_back(pat);
        pat_schema.push_back(&sub);
      }
    }
  }
  // propertyNames: declared names are checked against it; additional keys
  // follow its string grammar when no declared name is allowed by it.
  std::string pn_key;
  std::function<bool(const std::string&)> name_ok = [](const std::string&) { return true; };
  std::vector<bool> pn_ok;
  if (s.contains("propertyNames") && !(s["propertyNames"] == oj(true) || s["propertyNames"] == oj::object())) {
    const oj key_schema = mg_.merge(oj{{"type", "string"}}, s["propertyNames"], path + "/propertyNames", depth);
    pn_key = gen(key_schema, path + "/propertyNames", depth + 1);
    oj names_json = oj::array();
    for (auto& [k, v] : props.items()) names_json.push_back(k);
    for (auto& r : required) names_json.push_back(r);
    for (auto& r : dep_extra) names_json.push_back(r);
    const std::vector<bool> ok = pn_key == kNever ? std::vector<bool>(names_json.size(), false)
                                                  : accepts(pn_key, names_json, path);
    std::unordered_set<std::string> allowed;
    for (size_t i = 0; i < ok.size(); ++i) if (ok[i]) allowed.insert(names_json[i].get<std::string>());
    name_ok = [allowed](const std::string& k) { return allowed.count(k) > 0; };
    if (!allowed.empty() && gen(addl, path + "/additionalProperties", depth + 1) != kNever)
      refuse("propertyNames", path, "propertyNames that allow declared properties next to additional properties are not supported");
  }
  const std::string addl_expr = gen(addl, path + "/additionalProperties", depth + 1);
  std::vector<std::string> names;
  for (auto& [k, v] : props.items()) names.push_back(k);
  for (auto& r : required) if (!prop_names.count(r)) names.push_back(r);
  for (auto& r : dep_extra) names.push_back(r);
  std::optional<schema_keys::KeyAutomaton> keys;
  if (!pat_text.empty()) {
    try {
      keys = schema_keys::build_key_automaton(pat_text, names);
    } catch (const std::invalid_argument& e) {
      refuse("patternProperties", path, e.what());
    }
  }
  // The value of a member whose key matches the patterns `mask`: the
  // declared schema (or additionalProperties where none is declared and no
  // pattern matches) and every matching pattern's.
  std::map<uint32_t, std::string> undeclared;  // by mask
  auto value = [&](const oj* declared, uint32_t mask, const std::string& at) {
    if (mask == 0) return declared ? gen(*declared, at, depth + 1) : addl_expr;
    if (!declared)
      if (auto it = undeclared.find(mask); it != undeclared.end()) return it->second;
    oj v = declared ? *declared : oj(true);
    for (size_t i = 0; i < pat_schema.size(); ++i)
      if (mask >> i & 1) v = mg_.merge(v, *pat_schema[i], path + "/patternProperties", depth + 1);
    const std::string g = gen(v, declared ? at : path + "/patternProperties", depth + 1);
    if (!declared) undeclared[mask] = g;
    return g;
  };
  auto mask_of = [&](const std::string& k) { return keys ? schema_keys::patterns_matching(*keys, k) : 0u; };
  struct Prop { std::string name, value; bool req; };
  std::vector<Prop> list;
  auto is_req = [&](const std::string& k) { return req_set.count(k) > 0; };
  for (auto& [k, v] : props.items()) {
    const std::string at = path + "/properties/" + k;
    list.push_back({k, name_ok(k) ? value(&v, mask_of(k), at) : std::string(kNever), is_req(k)});
  }
  for (auto& r : required)
    if (!prop_names.count(r)) list.push_back({r, name_ok(r) ? value(nullptr, mask_of(r), "") : std::string(kNever), true});
  for (auto& r : dep_extra) list.push_back({r, name_ok(r) ? value(nullptr, mask_of(r), "") : std::string(kNever), false});
  if (list.size() > 512) refuse("properties", path, "more than 512 properties");
  // A dependency on a member that cannot be present forbids its source.
  for (bool changed = true; changed;) {
    changed = false;
    for (auto& [a, bs] : dep_names)
      for (auto& b : bs)
        for (auto& p : list)
          if (p.name == b && p.value == kNever)
            for (auto& q : list)
              if (q.name == a && q.value != kNever) { q.value = kNever; changed = true; }
  }
  std::vector<Prop> live;
  for (auto& p : list) {
    if (p.value == kNever) {
      if (p.req) return kNever;
      continue;
    }
    live.push_back(p);
  }
  std::string ex;  // one additional member
  if (keys) {
    ex = pattern_member(*keys, [&](uint32_t mask) { return value(nullptr, mask, ""); });
  } else if (addl_expr != kNever && !(s.contains("propertyNames") && s["propertyNames"] == oj(false))) {
    const std::string key = !pn_key.empty() ? pn_key
                            : names.empty() && !opt_.max_string_length ? std::string("string")
                                            : key_except(names, path, "additionalProperties", 0,
                                                         opt_.max_string_length ? int64_t{opt_.max_string_length} : -1);
    if (key != kNever) ex = rule("extra", key + " ws \":\" ws " + addl_expr);
  }
  std::vector<Member> ms;
  for (auto& p : live) ms.push_back({rule("kv", lit(oj(p.name).dump()) + " ws \":\" ws " + p.value), p.req});
  std::vector<std::pair<size_t, std::vector<size_t>>> deps;
  for (auto& [a, bs] : dep_names) {
    auto at = [&](const std::string& k) -> std::optional<size_t> {
      for (size_t i = 0; i < live.size(); ++i) if (live[i].name == k) return i;
      return std::nullopt;
    };
    const auto ia = at(a);
    if (!ia) continue;
    std::vector<size_t> ib;
    for (auto& b : bs) if (auto j = at(b)) ib.push_back(*j);
    deps.emplace_back(*ia, std::move(ib));
  }
  if (deps.empty() && min_p == 0 && max_p < 0) return members(ms, ex, any_order_);
  std::vector<schema_struct::Member> sm;
  for (auto& m : ms) sm.push_back({m.kv, m.req});
  return schema_struct::counted_members(*this, sm, ex, any_order_, min_p, max_p, deps,
                                        s.contains("dependentRequired") ? "dependentRequired" : "maxProperties", path);
}

// An object of the members `ms` (each "key": value, required or not) and
// of any number of `ex` members (none when empty). `any_order` and up to
// 6 members: in any order, each at most once (one rule per subset written
// so far); else in the order given, `ex` members anywhere between them.
std::string Compiler::members(const std::vector<Member>& ms, const std::string& ex, bool any_order) {
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
}  // namespace kvad::schema_compile
