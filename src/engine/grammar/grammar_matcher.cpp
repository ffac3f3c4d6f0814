// The recognizer and the token masks of engine/grammar/grammar.h.
//
// A parse stack is a linked list of nodes {pos, parent}: `pos` indexes
// Grammar::elems, the top node's pos is a byte set still to match, the nodes
// below are where to continue when the rule above them ends. Nodes are
// hash-consed (one id per {pos, parent}), so equal stacks have equal ids and
// a set of stacks is a sorted vector of ids. Each distinct set is a "state";
// state x byte -> state is memoized in a table filled on demand, which makes
// the walk of the token trie mostly table look-ups after the first tokens.
#include <algorithm>
#include <limits>
#include <map>
#include <unordered_map>

#include "engine/grammar/grammar.h"

namespace kvad {

namespace {
constexpr uint32_t kNil = 0xffffffffu;
constexpr uint32_t kUnknown = GrammarMatcher::kUnknown;
}  // namespace

struct GrammarMatcher::Impl {
  std::shared_ptr<const Grammar> g;
  GrammarLimits lim;
  struct Node { uint32_t pos, parent, depth; };
  std::vector<Node> nodes;
  std::vector<uint32_t> table;  // open addressing: node id + 1, 0 empty
  struct State { std::vector<uint32_t> stacks; bool accept; };
  std::vector<State> states;
  std::map<std::vector<uint32_t>, uint32_t> state_ids;  // stacks + accept flag -> id
  std::vector<uint32_t> trans;  // states x 256
  uint32_t cur = 0;
  uint32_t initial = 0;
  // scratch
  std::vector<std::pair<uint32_t, uint32_t>> work;
  std::vector<uint32_t> out;
  std::vector<uint32_t> stamp;
  uint32_t epoch = 0;
  uint64_t generation = 0;  // clear_tables() calls (GrammarMatcher::generation)

  static uint64_t hash(uint32_t pos, uint32_t parent) {
    uint64_t k = (uint64_t{pos} << 32) | parent;
    k ^= k >> 33; k *= 0xff51afd7ed558ccdULL; k ^= k >> 33; k *= 0xc4ceb9fe1a85ec53ULL; k ^= k >> 33;
    return k;
  }
  void rehash(size_t cap) {
    table.assign(cap, 0);
    for (uint32_t id = 0; id < nodes.size(); ++id) {
      size_t h = hash(nodes[id].pos, nodes[id].parent) & (cap - 1);
      while (table[h]) h = (h + 1) & (cap - 1);
      table[h] = id + 1;
    }
  }
  // The node {pos, parent}; kNil when it would be deeper than max_depth
  // (a dead path: nothing that deep is allowed).
  uint32_t node(uint32_t pos, uint32_t parent) {
    const uint32_t depth = parent == kNil ? 1 : nodes[parent].depth + 1;
    if (depth > lim.max_depth) return kNil;
    if (table.empty()) rehash(1024);
    size_t h = hash(pos, parent) & (table.size() - 1);
    while (table[h]) {
      const Node& n = nodes[table[h] - 1];
      if (n.pos == pos && n.parent == parent) return table[h] - 1;
      h = (h + 1) & (table.size() - 1);
    }
    if (nodes.size() >= lim.max_nodes)
      throw GrammarError("grammar: more than " + std::to_string(lim.max_nodes) + " parse-stack nodes (the grammar is too ambiguous or nests too deep)");
    const uint32_t id = static_cast<uint32_t>(nodes.size());
    nodes.push_back({pos, parent, depth});
    table[h] = id + 1;
    if (nodes.size() * 2 > table.size()) rehash(table.size() * 2);
    return id;
  }

  // Expands (pos, parent) until every stack's top is a byte set; adds those
  // tops to `out` (deduplicated), sets `accept` when a stack empties.
  void closure(uint32_t pos, uint32_t parent, bool& accept) {
    work.clear();
    work.emplace_back(pos, parent);
    size_t steps = 0;
    while (!work.empty()) {
      auto [p, par] = work.back();
      work.pop_back();
      if (++steps > 64u * lim.max_stacks)
        throw GrammarError("grammar: more than " + std::to_string(64u * lim.max_stacks) + " expansions in one step (the grammar is too ambiguous)");
      const Grammar::Elem& e = g->elems[p];
      if (e.kind == Grammar::kBytes) {
        const uint32_t id = node(p, par);
        if (id == kNil) continue;
        if (stamp.size() <= id) stamp.resize(nodes.size() + 1024, 0);
        if (stamp[id] == epoch) continue;
        stamp[id] = epoch;
        out.push_back(id);
        if (out.size() > lim.max_stacks)
          throw GrammarError("grammar: more than " + std::to_string(lim.max_stacks) + " parse stacks at once (the grammar is too ambiguous)");
      } else if (e.kind == Grammar::kEnd) {
        if (par == kNil) accept = true;
        else work.emplace_back(nodes[par].pos, nodes[par].parent);
      } else {
        uint32_t ret = par;
        if (g->elems[p + 1].kind != Grammar::kEnd) {  // tail calls push nothing
          ret = node(p + 1, par);
          if (ret == kNil) continue;
        }
        const auto& alts = g->alts[e.arg];
        for (size_t k = alts.size(); k-- > 0;) work.emplace_back(alts[k], ret);
      }
    }
  }

  uint32_t intern_state(bool accept) {
    std::sort(out.begin(), out.end());
    std::vector<uint32_t> key = out;
    key.push_back(accept ? 1 : 0);
    auto it = state_ids.find(key);
    if (it != state_ids.end()) return it->second;
    if (states.size() >= lim.max_states)
      throw GrammarError("grammar: more than " + std::to_string(lim.max_states) + " parser states");
    const uint32_t id = static_cast<uint32_t>(states.size());
    states.push_back({out, accept});
    state_ids.emplace(std::move(key), id);
    trans.resize(states.size() * 256, kUnknown);
    return id;
  }

  void begin() { out.clear(); if (++epoch == 0) { stamp.assign(stamp.size(), 0); epoch = 1; } }

  uint32_t start_state() {
    begin();
    bool accept = false;
    const auto& alts = g->alts[g->root];
    for (uint32_t a : alts) closure(a, kNil, accept);
    return intern_state(accept);
  }

  uint32_t step(uint32_t s, uint8_t b) {
    uint32_t& t = trans[size_t{s} * 256 + b];
    if (t != kUnknown) return t;
    begin();
    bool accept = false;
    const std::vector<uint32_t> stacks = states[s].stacks;  // a copy: states may grow
    for (uint32_t n : stacks) {
      const Node nd = nodes[n];
      if (Grammar::has(g->sets[g->elems[nd.pos].arg], b)) closure(nd.pos + 1, nd.parent, accept);
    }
    const uint32_t r = (out.empty() && !accept) ? kDead : intern_state(accept);
    trans[size_t{s} * 256 + b] = r;
    return r;
  }

  void clear_tables() {
    ++generation;
    nodes.clear();
    table.clear();
    states.clear();
    state_ids.clear();
    trans.clear();
    stamp.clear();
    epoch = 0;
  }

  // Keeps only the stacks of the current state (re-interned bottom up).
  void compact() {
    std::vector<std::vector<std::pair<uint32_t, uint32_t>>> paths;  // each stack, bottom first: (pos)
    const bool accept = states[cur].accept;
    std::vector<std::vector<uint32_t>> stacks;
    for (uint32_t n : states[cur].stacks) {
      std::vector<uint32_t> ps;
      for (uint32_t k = n; k != kNil; k = nodes[k].parent) ps.push_back(nodes[k].pos);
      stacks.push_back(std::move(ps));
    }
    clear_tables();
    begin();
    for (auto& ps : stacks) {
      uint32_t parent = kNil;
      for (size_t k = ps.size(); k-- > 0;) parent = node(ps[k], parent);
      out.push_back(parent);
    }
    cur = intern_state(accept);
    initial = kUnknown;
  }
};

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> g, GrammarLimits lim) : p_(std::make_unique<Impl>()) {
  if (!g) throw GrammarError("grammar: null grammar");
  p_->g = std::move(g);
  p_->lim = lim;
  p_->initial = p_->cur = p_->start_state();
}
GrammarMatcher::~GrammarMatcher() = default;
GrammarMatcher::GrammarMatcher(GrammarMatcher&&) noexcept = default;
GrammarMatcher& GrammarMatcher::operator=(GrammarMatcher&&) noexcept = default;

bool GrammarMatcher::accept(std::string_view bytes) {
  uint32_t s = p_->cur;
  for (char c : bytes) {
    s = p_->step(s, static_cast<uint8_t>(c));
    if (s == kDead) return false;
  }
  p_->cur = s;
  maybe_compact();
  return true;
}
bool GrammarMatcher::accepting() const { return p_->states[p_->cur].accept; }
bool GrammarMatcher::finished() const { return p_->states[p_->cur].accept && p_->states[p_->cur].stacks.empty(); }
void GrammarMatcher::reset() {
  if (p_->initial == kUnknown) { p_->clear_tables(); p_->initial = p_->start_state(); }
  p_->cur = p_->initial;
}
uint32_t GrammarMatcher::state() const { return p_->cur; }
uint32_t GrammarMatcher::step(uint32_t s, uint8_t b) { return p_->step(s, b); }
bool GrammarMatcher::state_accepting(uint32_t s) const { return p_->states[s].accept; }
bool GrammarMatcher::state_empty(uint32_t s) const { return p_->states[s].stacks.empty(); }
void GrammarMatcher::set_state(uint32_t s) { p_->cur = s; }
const uint32_t* GrammarMatcher::transitions() const { return p_->trans.data(); }
uint64_t GrammarMatcher::generation() const { return p_->generation; }
bool GrammarMatcher::maybe_compact() {
  if (p_->nodes.size() * 2 < p_->lim.max_nodes && p_->states.size() * 2 < p_->lim.max_states) return false;
  p_->compact();
  return true;
}

}  // namespace kvad
