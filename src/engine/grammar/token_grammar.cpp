// The token side of engine/grammar/grammar.h: the vocabulary's byte strings in a
// preorder trie, and masks computed by walking it once per step with the
// matcher's memoized state transitions (a subtree is skipped at the first
// byte the grammar refuses).
#include <algorithm>
#include <chrono>
#include <limits>

#include "engine/grammar/grammar.h"
#include "tokenizer/tokenizer.h"

namespace kvad {

// ----------------------------------------------------------------- TokenTrie

TokenTrie::TokenTrie(const Tokenizer& tok) {
  n_vocab_ = tok.n_vocab();
  if (n_vocab_ > (1 << 24)) throw Error("token trie: vocabulary of " + std::to_string(n_vocab_) + " tokens (limit 16777216)");
  bytes_.resize(static_cast<size_t>(n_vocab_));
  in_trie_.assign(static_cast<size_t>(n_vocab_), 0);
  std::vector<int32_t> order;
  for (int32_t id = 0; id < n_vocab_; ++id) {
    if (tok.is_eog(id)) eog_.push_back(id);
    const TokenType t = tok.token_type(id);
    if (t == TokenType::CONTROL || t == TokenType::UNKNOWN || t == TokenType::UNUSED) continue;
    std::string b = tok.token_to_piece(id, false);
    if (b.empty() || b.size() > 0xffff) continue;
    bytes_[static_cast<size_t>(id)] = std::move(b);
    in_trie_[static_cast<size_t>(id)] = 1;
    order.push_back(id);
  }
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return bytes_[a] < bytes_[b] || (bytes_[a] == bytes_[b] && a < b);
  });
  // Preorder: each token adds the nodes past its common prefix with the
  // previous one; `path` holds the node index at each depth.
  std::vector<uint32_t> path;
  const std::string* prev = nullptr;
  for (int32_t id : order) {
    const std::string& s = bytes_[id];
    size_t common = 0;
    if (prev) while (common < s.size() && common < prev->size() && (*prev)[common] == s[common]) ++common;
    if (common > path.size()) common = path.size();
    path.resize(common);
    for (size_t d = common; d < s.size(); ++d) {
      path.push_back(static_cast<uint32_t>(nodes_.size()));
      nodes_.push_back({static_cast<uint8_t>(s[d]), static_cast<uint16_t>(d + 1), 0, 0, 0});
      max_depth_ = std::max<uint16_t>(max_depth_, static_cast<uint16_t>(d + 1));
    }
    Node& last = nodes_[path.back()];
    if (last.tok_end == 0) last.tok_begin = last.tok_end = static_cast<uint32_t>(ids_.size());
    ids_.push_back(id);
    ++last.tok_end;
    prev = &s;
  }
  // Subtree ends: the next node at the same or a smaller depth.
  std::vector<uint32_t> open;
  for (uint32_t i = 0; i < nodes_.size(); ++i) {
    while (!open.empty() && nodes_[open.back()].depth >= nodes_[i].depth) { nodes_[open.back()].end = i; open.pop_back(); }
    open.push_back(i);
  }
  for (uint32_t k : open) nodes_[k].end = static_cast<uint32_t>(nodes_.size());
}

// -------------------------------------------------------------- TokenGrammar

TokenGrammar::TokenGrammar(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenTrie> trie, GrammarLimits lim)
    : m_(std::move(g), lim), trie_(std::move(trie)) {
  if (!trie_) throw GrammarError("grammar: null token trie");
  path_.resize(size_t{trie_->max_depth()} + 1);
}

void TokenGrammar::mask(std::vector<uint8_t>& allowed) {
  const auto t0 = std::chrono::steady_clock::now();
  // State ids change when the tables are rebuilt, by this call or by an
  // accept() or reset() since the last mask: the cached masks go with them.
  m_.maybe_compact();
  if (m_.generation() != cache_generation_) {
    cache_.clear();
    cache_generation_ = m_.generation();
  }
  const uint32_t s0 = m_.state();
  // Masks of states seen before (a JSON string's content is one state).
  if (auto it = cache_.find(s0); it != cache_.end()) {
    allowed = it->second;
    mask_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++n_masks_;
    return;
  }
  allowed.assign(static_cast<size_t>(trie_->n_vocab()), 0);
  path_[0] = s0;
  const auto& nodes = trie_->nodes();
  const auto& ids = trie_->ids();
  // The memoized table is read inline; a miss computes the transition
  // (which may grow the table, so the pointer is fetched again).
  const uint32_t* trans = m_.transitions();
  for (size_t i = 0; i < nodes.size();) {
    const TokenTrie::Node& n = nodes[i];
    const uint32_t from = path_[n.depth - 1];
    uint32_t t = trans[size_t{from} * 256 + n.byte];
    if (t == GrammarMatcher::kUnknown) {
      t = m_.step(from, n.byte);
      trans = m_.transitions();
    }
    if (t == GrammarMatcher::kDead) { i = n.end; continue; }
    path_[n.depth] = t;
    for (uint32_t k = n.tok_begin; k < n.tok_end; ++k) allowed[static_cast<size_t>(ids[k])] = 1;
    ++i;
  }
  if (m_.state_accepting(s0))
    for (int32_t id : trie_->eog()) allowed[static_cast<size_t>(id)] = 1;
  if (cache_.size() < kMaskCache) cache_.emplace(s0, allowed);
  mask_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ++n_masks_;
}

void TokenGrammar::apply(float* logits, int32_t n) {
  mask(allowed_);
  bool any = false;
  const int32_t nv = trie_->n_vocab();
  for (int32_t i = 0; i < n; ++i) {
    if (i >= nv || !allowed_[static_cast<size_t>(i)]) logits[i] = -std::numeric_limits<float>::infinity();
    else any = true;
  }
  if (!any) throw GrammarError("grammar: no token of the vocabulary can continue the text");
}

bool TokenGrammar::accept(int32_t id) {
  if (id < 0 || id >= trie_->n_vocab()) return false;
  if (std::find(trie_->eog().begin(), trie_->eog().end(), id) != trie_->eog().end()) return m_.accepting();
  if (!trie_->in_trie(id)) return false;
  return m_.accept(trie_->bytes(id));
}

}  // namespace kvad
