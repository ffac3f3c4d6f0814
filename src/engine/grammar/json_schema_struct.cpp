// Counting automata as GBNF rules (json_schema_struct.h). Semantics: JSON
// Schema 2020-12 Validation, minProperties / maxProperties /
// dependentRequired (6.5), contains / minContains / maxContains (10.3.1.3,
// 6.4.4-5), uniqueItems (6.4.3).
#include "engine/grammar/json_schema_struct.h"

#include <algorithm>
#include <functional>
#include <map>
#include <tuple>

#include "engine/grammar/json_schema.h"

namespace kvad::schema_struct {

namespace {

constexpr size_t kMaxStates = 4096;
const std::string kSep = "ws \",\" ws";

std::string join(const std::vector<std::string>& alts) {
  if (alts.empty()) return kNever;
  if (alts.size() == 1) return alts[0];
  std::string o = "( ";
  for (size_t i = 0; i < alts.size(); ++i) o += (i ? " | " : "") + alts[i];
  return o + " )";
}

}  // namespace

std::string counted_members(RuleSink& out, const std::vector<Member>& ms, const std::string& ex, bool any_order,
                            int64_t lo, int64_t hi, const std::vector<std::pair<size_t, std::vector<size_t>>>& deps,
                            const std::string& kw, const std::string& path) {
  const size_t n = ms.size();
  const bool anyo = any_order && n <= 6;
  const int64_t cap = hi >= 0 ? hi : lo;  // counts past lo are all alike when there is no maximum
  // Members a dependency names, tracked by a bit (in any order the mask of
  // written members is the state already).
  std::vector<int> bit(n, -1);
  int nb = 0;
  if (!anyo)
    for (auto& [a, bs] : deps) {
      if (bit[a] < 0) bit[a] = nb++;
      for (size_t b : bs) if (bit[b] < 0) bit[b] = nb++;
    }
  if (nb > 12) throw SchemaError(kw, path, "dependencies among more than 12 properties are not supported");
  using Key = std::tuple<uint32_t, int64_t, uint32_t, bool>;  // position or mask, count, tracked bits, started
  std::map<Key, std::string> memo;
  auto present = [&](uint32_t pos, uint32_t d, size_t j) {
    return anyo ? ((pos >> j) & 1) != 0 : ((d >> bit[j]) & 1) != 0;
  };
  auto deps_ok = [&](uint32_t pos, uint32_t d) {
    for (auto& [a, bs] : deps) {
      if (!present(pos, d, a)) continue;
      for (size_t b : bs) if (!present(pos, d, b)) return false;
    }
    return true;
  };
  std::function<std::string(uint32_t, int64_t, uint32_t, bool)> build = [&](uint32_t pos, int64_t c, uint32_t d,
                                                                            bool st) -> std::string {
    const Key key{pos, c, d, st};
    if (auto it = memo.find(key); it != memo.end()) return it->second;
    if (memo.size() >= kMaxStates)
      throw SchemaError(kw, path, "counting the object's members needs more than 4096 grammar rules");
    const std::string pre = st ? kSep + " " : "";
    const int64_t c1 = hi >= 0 ? c + 1 : std::min(c + 1, cap);
    const bool can_add = hi < 0 || c + 1 <= hi;
    std::vector<std::string> alts;
    auto to = [&](const std::string& text, uint32_t p2, int64_t c2, uint32_t d2, bool st2) {
      const std::string t = build(p2, c2, d2, st2);
      if (t != kNever) alts.push_back(text + (text.empty() ? "" : " ") + t);
    };
    if (anyo) {
      bool req_ok = true;
      for (size_t j = 0; j < n; ++j) {
        if ((pos >> j) & 1) continue;
        if (ms[j].req) req_ok = false;
        if (can_add) to(pre + ms[j].kv, pos | (1u << j), c1, 0, true);
      }
      if (req_ok && c >= lo && deps_ok(pos, d)) alts.push_back("\"\"");
    } else if (pos < n) {
      if (can_add) to(pre + ms[pos].kv, pos + 1, c1, bit[pos] >= 0 ? d | (1u << bit[pos]) : d, true);
      if (!ms[pos].req) to("", pos + 1, c, d, st);
    } else if (c >= lo && deps_ok(pos, d)) {
      alts.push_back("\"\"");
    }
    const bool self_loop = !ex.empty() && can_add && c1 == c && st;
    if (!ex.empty() && can_add && !self_loop) to(pre + ex, pos, c1, d, true);
    if (alts.empty()) return memo[key] = kNever;
    const std::string name = out.reserve("members");
    if (self_loop) alts.push_back(pre + ex + " " + name);
    out.define(name, join(alts));
    return memo[key] = name;
  };
  const std::string first = build(0, 0, 0, false);
  if (first == kNever) return kNever;
  return out.rule("object", "( \"{\" ws " + first + " ws \"}\" )");
}

std::string contains_items(RuleSink& out, const std::string& yes, const std::optional<std::string>& no,
                           const std::string& any, int64_t n, int64_t m, int64_t lo, int64_t hi) {
  if (yes == kNever && n > 0) return kNever;
  // State (k, t): k items matched so far (saturating at n without a
  // maximum), t items so far (saturating at lo without maxItems).
  const int64_t K = m >= 0 ? m : n, T = hi >= 0 ? hi : lo;
  const std::string other = no ? *no : any;
  auto oth = [&](int64_t k) { return m < 0 && k == K ? any : other; };
  auto next_t = [&](int64_t t) { return hi >= 0 ? t + 1 : std::min(t + 1, T); };
  const size_t W = static_cast<size_t>(T + 1);
  auto at = [&](int64_t k, int64_t t) { return static_cast<size_t>(k) * W + static_cast<size_t>(t); };
  if ((K + 1) * (T + 1) > static_cast<int64_t>(kMaxStates))
    throw SchemaError("contains", "", "counting the items needs more than 4096 grammar rules");
  // Which states can still end the array (a fixpoint: saturated states loop).
  std::vector<uint8_t> live(static_cast<size_t>((K + 1) * (T + 1)), 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (int64_t k = 0; k <= K; ++k)
      for (int64_t t = 0; t <= T; ++t) {
        if (live[at(k, t)]) continue;
        const bool room = hi < 0 || t < hi;
        bool ok = k >= n && t >= lo;
        if (!ok && room && oth(k) != kNever) ok = live[at(k, next_t(t))];
        if (!ok && room && k < K && yes != kNever) ok = live[at(k + 1, next_t(t))];
        if (ok) { live[at(k, t)] = 1; changed = true; }
      }
  }
  std::vector<std::string> R(live.size());
  for (size_t i = 0; i < R.size(); ++i) if (live[i]) R[i] = out.reserve("contains");
  for (int64_t k = 0; k <= K; ++k)
    for (int64_t t = 0; t <= T; ++t) {
      if (!live[at(k, t)]) continue;
      const bool room = hi < 0 || t < hi;
      std::vector<std::string> alts;
      if (room && oth(k) != kNever && live[at(k, next_t(t))]) alts.push_back(kSep + " " + oth(k) + " " + R[at(k, next_t(t))]);
      if (room && k < K && yes != kNever && live[at(k + 1, next_t(t))])
        alts.push_back(kSep + " " + yes + " " + R[at(k + 1, next_t(t))]);
      if (k >= n && t >= lo) alts.push_back("\"\"");
      out.define(R[at(k, t)], join(alts));
    }
  std::vector<std::string> first;
  const int64_t t1 = next_t(0);
  if (hi != 0) {
    if (oth(0) != kNever && live[at(0, t1)]) first.push_back(oth(0) + " " + R[at(0, t1)]);
    if (K > 0 && yes != kNever && live[at(1, t1)]) first.push_back(yes + " " + R[at(1, t1)]);
  }
  std::vector<std::string> alts;
  if (n == 0 && lo == 0) alts.push_back("( \"[\" ws \"]\" )");
  if (!first.empty()) alts.push_back("( \"[\" ws " + join(first) + " ws \"]\" )");
  if (alts.empty()) return kNever;
  return out.rule("array", join(alts));
}

std::string unique_items(RuleSink& out, const std::vector<std::vector<size_t>>& domains,
                         const std::vector<std::string>& lits, int64_t lo, const std::string& path) {
  std::map<std::pair<size_t, uint32_t>, std::string> memo;
  const size_t L = domains.size();
  std::function<std::string(size_t, uint32_t)> build = [&](size_t i, uint32_t used) -> std::string {
    if (auto it = memo.find({i, used}); it != memo.end()) return it->second;
    if (memo.size() >= kMaxStates)
      throw SchemaError("uniqueItems", path, "distinct items need more than 4096 grammar rules");
    std::vector<std::string> alts;
    if (static_cast<int64_t>(i) >= lo) alts.push_back("\"\"");
    if (i < L)
      for (size_t v : domains[i]) {
        if ((used >> v) & 1) continue;
        const std::string t = build(i + 1, used | (1u << v));
        if (t != kNever) alts.push_back((i ? kSep + " " : std::string()) + lits[v] + " " + t);
      }
    return memo[{i, used}] = alts.empty() ? std::string(kNever) : out.rule("unique", join(alts));
  };
  const std::string first = build(0, 0);
  if (first == kNever) return kNever;
  return out.rule("array", "( \"[\" ws " + first + " ws \"]\" )");
}

}  // namespace kvad::schema_struct
