// The automaton of object keys under patternProperties (json_schema_keys.h).
#include "engine/grammar/json_schema_keys.h"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <utility>

namespace kvad::schema_keys {
namespace {

using schema_text::CodeRanges;
using schema_text::RegexNode;
constexpr uint32_t kEnd = 0x110000;  // one past the last code point
constexpr size_t kMaxClasses = 512;
constexpr uint64_t kMaxWork = 50'000'000;

// Thompson's construction: each build() adds fresh states after `from` and
// returns the state its match ends in.
struct Nfa {
  std::vector<std::vector<int>> eps;
  struct Edge { CodeRanges set; int from, to; };
  std::vector<Edge> edges;
  std::vector<std::vector<int>> out;  // edge indexes per state
  std::vector<int> accept;            // the pattern a state accepts, or -1
  size_t limit;

  int add() {
    if (eps.size() >= limit) throw std::invalid_argument("the patterns need more than " + std::to_string(limit) + " automaton states");
    eps.emplace_back();
    out.emplace_back();
    accept.push_back(-1);
    return static_cast<int>(eps.size()) - 1;
  }
  void edge(int from, CodeRanges set, int to) {
    out[static_cast<size_t>(from)].push_back(static_cast<int>(edges.size()));
    edges.push_back({std::move(set), from, to});
  }
  void link(int from, int to) { eps[static_cast<size_t>(from)].push_back(to); }
  int star(const RegexNode& n, int from) {
    const int loop = add();
    link(from, loop);
    link(build(n, loop), loop);
    const int end = add();
    link(loop, end);
    return end;
  }
  int build(const RegexNode& n, int from) {
    switch (n.kind) {
      case RegexNode::Kind::Set: {
        const int e = add();
        edge(from, n.set, e);
        return e;
      }
      case RegexNode::Kind::Cat: {
        int cur = from;
        for (const RegexNode& k : n.kids) cur = build(k, cur);
        return cur;
      }
      case RegexNode::Kind::Alt: {
        const int end = add();
        for (const RegexNode& k : n.kids) {
          const int s = add();
          link(from, s);
          link(build(k, s), end);
        }
        return end;
      }
      case RegexNode::Kind::Rep: {
        int cur = from;
        for (uint32_t i = 0; i < n.lo; ++i) cur = build(n.kids[0], cur);
        if (n.open) return star(n.kids[0], cur);
        for (uint32_t i = n.lo; i < n.hi; ++i) {
          const int e = build(n.kids[0], cur), end = add();
          link(cur, end);
          link(e, end);
          cur = end;
        }
        return cur;
      }
    }
    return from;
  }
  // A state that loops on every character.
  int any_loop(int from) {
    const int l = add();
    link(from, l);
    edge(l, {{0, kEnd - 1}}, l);
    return l;
  }
};

std::vector<uint32_t> code_points(const std::string& s) {
  std::vector<uint32_t> cps;
  for (size_t i = 0; i < s.size();) {
    const uint8_t c = static_cast<uint8_t>(s[i]);
    const int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    uint32_t v = n == 1 ? c : n == 2 ? (c & 31u) : n == 3 ? (c & 15u) : (c & 7u);
    for (int k = 1; k < n && i + static_cast<size_t>(k) < s.size(); ++k) v = (v << 6) | (static_cast<uint8_t>(s[i + static_cast<size_t>(k)]) & 63u);
    cps.push_back(v);
    i += static_cast<size_t>(n);
  }
  return cps;
}

// The class (elementary interval) holding code point c.
int class_of(const std::vector<uint32_t>& starts, uint32_t c) {
  return static_cast<int>(std::upper_bound(starts.begin(), starts.end(), c) - starts.begin()) - 1;
}

}  // namespace

KeyAutomaton build_key_automaton(const std::vector<std::string>& patterns, const std::vector<std::string>& names,
                                 size_t max_states, size_t max_nfa) {
  if (patterns.size() > 16) throw std::invalid_argument("more than 16 patterns");
  Nfa nfa;
  nfa.limit = max_nfa;
  const int start = nfa.add();
  for (size_t p = 0; p < patterns.size(); ++p) {
    for (const schema_text::RegexBranch& b : schema_text::parse_regex(patterns[p])) {
      int cur = nfa.add();
      nfa.link(start, cur);
      if (!b.anchored_start) cur = nfa.any_loop(cur);
      cur = nfa.build(b.body, cur);
      if (!b.anchored_end) cur = nfa.any_loop(cur);
      nfa.accept[static_cast<size_t>(cur)] = static_cast<int>(p);
    }
  }

  // The names' trie, by code point.
  struct Node { std::map<uint32_t, int> next; int name = -1; };
  std::vector<Node> trie(1);
  for (size_t i = 0; i < names.size(); ++i) {
    int at = 0;
    for (uint32_t c : code_points(names[i])) {
      auto it = trie[static_cast<size_t>(at)].next.find(c);
      if (it == trie[static_cast<size_t>(at)].next.end()) {
        trie.emplace_back();
        it = trie[static_cast<size_t>(at)].next.emplace(c, static_cast<int>(trie.size()) - 1).first;
      }
      at = it->second;
    }
    if (trie[static_cast<size_t>(at)].name < 0) trie[static_cast<size_t>(at)].name = static_cast<int>(i);
  }

  // Elementary intervals between every boundary the sets and names make.
  std::vector<uint32_t> bounds{0, kEnd};
  for (const Nfa::Edge& e : nfa.edges)
    for (auto [a, b] : e.set) { bounds.push_back(a); bounds.push_back(b + 1); }
  for (const Node& n : trie)
    for (auto& [c, to] : n.next) { bounds.push_back(c); bounds.push_back(c + 1); }
  std::sort(bounds.begin(), bounds.end());
  bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
  if (bounds.size() > kMaxClasses + 1)
    throw std::invalid_argument("the patterns and names tell more than " + std::to_string(kMaxClasses) +
                                " kinds of character apart");
  KeyAutomaton a;
  std::vector<uint32_t> starts(bounds.begin(), bounds.end() - 1);
  for (size_t i = 0; i + 1 < bounds.size(); ++i) a.classes.push_back({{bounds[i], bounds[i + 1] - 1}});
  const size_t n_cls = a.classes.size();
  // Per edge, the classes it takes.
  std::vector<std::vector<bool>> takes(nfa.edges.size(), std::vector<bool>(n_cls, false));
  for (size_t e = 0; e < nfa.edges.size(); ++e)
    for (auto [lo, hi] : nfa.edges[e].set)
      for (int k = class_of(starts, lo); k < static_cast<int>(n_cls) && starts[static_cast<size_t>(k)] <= hi; ++k)
        takes[e][static_cast<size_t>(k)] = true;

  auto closure = [&](std::vector<int> set) {
    std::vector<bool> in(nfa.eps.size(), false);
    for (int s : set) in[static_cast<size_t>(s)] = true;
    for (size_t i = 0; i < set.size(); ++i)
      for (int t : nfa.eps[static_cast<size_t>(set[i])])
        if (!in[static_cast<size_t>(t)]) { in[static_cast<size_t>(t)] = true; set.push_back(t); }
    std::sort(set.begin(), set.end());
    return set;
  };
  using Key = std::pair<std::vector<int>, int>;  // NFA states, trie node (-1: off the trie)
  std::map<Key, int> ids;
  std::vector<Key> todo;
  auto id_of = [&](Key k) {
    auto [it, added] = ids.emplace(k, static_cast<int>(a.states.size()));
    if (added) {
      if (a.states.size() >= max_states)
        throw std::invalid_argument("the patterns and names need more than " + std::to_string(max_states) + " key states");
      KeyAutomaton::State st;
      for (int s : k.first)
        if (nfa.accept[static_cast<size_t>(s)] >= 0) st.matched |= 1u << nfa.accept[static_cast<size_t>(s)];
      if (k.second >= 0) st.name = trie[static_cast<size_t>(k.second)].name;
      a.states.push_back(st);
      todo.push_back(std::move(k));
    }
    return it->second;
  };
  id_of({closure({start}), 0});
  uint64_t work = 0;  // edges looked at: bounded, so a hard pattern is refused rather than slow
  for (size_t q = 0; q < todo.size(); ++q) {
    const Key k = todo[q];
    std::vector<int> next(n_cls, 0);
    for (size_t c = 0; c < n_cls; ++c) {
      std::vector<int> to;
      for (int s : k.first) work += nfa.out[static_cast<size_t>(s)].size() + 1;
      if (work > kMaxWork) throw std::invalid_argument("the patterns' key automaton takes too long to build");
      for (int s : k.first)
        for (int e : nfa.out[static_cast<size_t>(s)])
          if (takes[static_cast<size_t>(e)][c]) to.push_back(nfa.edges[static_cast<size_t>(e)].to);
      std::sort(to.begin(), to.end());
      to.erase(std::unique(to.begin(), to.end()), to.end());
      int node = -1;
      if (k.second >= 0 && a.classes[c][0].first == a.classes[c][0].second) {
        auto it = trie[static_cast<size_t>(k.second)].next.find(a.classes[c][0].first);
        if (it != trie[static_cast<size_t>(k.second)].next.end()) node = it->second;
      }
      next[c] = id_of({closure(std::move(to)), node});
    }
    a.states[q].next = std::move(next);
  }
  return a;
}

uint32_t patterns_matching(const KeyAutomaton& a, const std::string& key) {
  std::vector<uint32_t> starts;
  for (const auto& c : a.classes) starts.push_back(c[0].first);
  size_t q = 0;
  for (uint32_t c : code_points(key)) q = static_cast<size_t>(a.states[q].next[static_cast<size_t>(class_of(starts, c))]);
  return a.states[q].matched;
}

}  // namespace kvad::schema_keys
