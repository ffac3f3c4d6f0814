#include "engine/session.h"

#include <algorithm>
#include <string>

#include "base/error.h"
#include "base/thread_pool.h"
#include "tensor/ops.h"

namespace kvad {

Session::Session(std::shared_ptr<const Model> model, int32_t n_ctx, int n_seq, int n_threads, KVTypes kv)
    : model_(std::move(model)) {
  if (n_ctx <= 0) throw Error("context size must be positive, got " + std::to_string(n_ctx));
  if (n_seq <= 0) throw Error("number of sequences must be positive, got " + std::to_string(n_seq));
  cache_ = model_->new_cache(n_ctx, n_seq, ubatch_tokens(model_->hparams()), kv);
  pool_ = std::make_unique<ThreadPool>(n_threads);
}

Session::~Session() = default;

int32_t Session::cached(int seq) const { return cache_->cached(seq); }

int32_t Session::truncate(int seq, int32_t n) {
  if (seq < 0 || seq >= cache_->n_seq()) throw Error("sequence " + std::to_string(seq) + " out of range");
  return cache_->truncate(seq, n);
}

void Session::snapshot(int seq) {
  if (seq < 0 || seq >= cache_->n_seq()) throw Error("sequence " + std::to_string(seq) + " out of range");
  ops::PoolScope scope(*pool_);
  cache_->snapshot(seq);
}

bool Session::copy_prefix(int src, int dst, int32_t n) {
  ops::PoolScope scope(*pool_);
  return cache_->copy_prefix(src, dst, n);
}

const std::vector<float>& Session::forward(const Batch& b) {
  const int n_seq = cache_->n_seq();
  std::vector<int32_t> next(n_seq);
  for (int s = 0; s < n_seq; ++s) next[s] = cache_->cached(s);
  for (size_t i = 0; i < b.size(); ++i) {
    const int32_t s = b.seq[i];
    if (s < 0 || s >= n_seq) throw Error("batch entry " + std::to_string(i) + ": sequence " + std::to_string(s) + " out of range");
    if (b.pos[i] != next[s])
      throw Error("batch entry " + std::to_string(i) + ": position " + std::to_string(b.pos[i]) +
                  " does not continue sequence " + std::to_string(s) + " (next is " + std::to_string(next[s]) + ")");
    if (b.pos[i] >= cache_->n_ctx())
      throw Error("context full: position " + std::to_string(b.pos[i]) + " does not fit ctx-size " +
                  std::to_string(cache_->n_ctx()));
    const int32_t tok = b.token[i];
    if (tok < 0 || tok >= n_vocab())
      throw Error("batch entry " + std::to_string(i) + ": token id " + std::to_string(tok) + " outside the vocabulary");
    ++next[s];
  }
  for (size_t j = 0; j < b.out.size(); ++j)
    if (b.out[j] < 0 || static_cast<size_t>(b.out[j]) >= b.size() || (j && b.out[j] <= b.out[j - 1]))
      throw Error("batch: logits rows must be ascending indices into the batch");
  if (!b.lora.empty() && b.lora.size() != b.size())
    throw Error("batch: " + std::to_string(b.lora.size()) + " adapter entries for " + std::to_string(b.size()) +
                " tokens");
  logits_.resize(b.out.size() * static_cast<size_t>(n_vocab()));
  if (b.size() == 0) return logits_;
  // The cache cuts it into micro-batches of at most ubatch_tokens() (the
  // n_batch it was made with; Cache::split).
  const BatchView v{b.token.data(), b.pos.data(), b.seq.data(), static_cast<int64_t>(b.size()),
                    b.out.data(), static_cast<int64_t>(b.out.size()), lora_.get(),
                    b.lora.empty() ? nullptr : b.lora.data()};
  if (!keep_hidden_) {
    model_->forward(*pool_, *cache_, v, logits_.data());
    return logits_;
  }
  const size_t E = static_cast<size_t>(hparams().n_embd);
  prenorm_.resize(b.size() * E);
  model_->forward(*pool_, *cache_, v, logits_.data(), prenorm_.data());
  kept_.resize(static_cast<size_t>(n_seq));
  for (size_t i = 0; i < b.size(); ++i) {
    KeptHidden& k = kept_[static_cast<size_t>(b.seq[i])];
    const int32_t held = static_cast<int32_t>(k.rows.size() / E), p = b.pos[i];
    // A position past the kept run (states skipped while keep_hidden was
    // off) or before it (a rewind below what was dropped) starts a new run.
    if (p < k.base || p > k.base + held) k.base = p, k.rows.clear();
    k.rows.resize(static_cast<size_t>(p - k.base) * E);  // later positions are stale now
    k.rows.insert(k.rows.end(), prenorm_.begin() + static_cast<std::ptrdiff_t>(i * E),
                  prenorm_.begin() + static_cast<std::ptrdiff_t>((i + 1) * E));
  }
  return logits_;
}

const float* Session::hidden_at(int seq, int32_t pos) const {
  if (seq < 0 || static_cast<size_t>(seq) >= kept_.size() || pos >= cache_->cached(seq)) return nullptr;
  const KeptHidden& k = kept_[static_cast<size_t>(seq)];
  const size_t E = static_cast<size_t>(hparams().n_embd);
  if (pos < k.base || static_cast<size_t>(pos - k.base) >= k.rows.size() / E) return nullptr;
  return k.rows.data() + static_cast<size_t>(pos - k.base) * E;
}

void Session::drop_hidden(int seq, int32_t pos) {
  if (seq < 0 || static_cast<size_t>(seq) >= kept_.size()) return;
  KeptHidden& k = kept_[static_cast<size_t>(seq)];
  const size_t E = static_cast<size_t>(hparams().n_embd);
  const size_t n = std::min(k.rows.size() / E, static_cast<size_t>(std::max(0, pos - k.base)));
  k.rows.erase(k.rows.begin(), k.rows.begin() + static_cast<std::ptrdiff_t>(n * E));
  k.base += static_cast<int32_t>(n);
}

int64_t Session::ubatch_tokens(const HParams& hp) {
  const int64_t q_dim = hp.n_head * hp.head_dim, kv_dim = hp.n_head_kv * hp.head_dim;
  const int64_t per_tok = 4 * (3 * hp.n_embd + 2 * q_dim + 2 * kv_dim + 2 * hp.n_ff) + hp.n_embd + hp.n_ff;
  const int64_t fit = static_cast<int64_t>(kActivationBudget) / std::max<int64_t>(1, per_tok);
  return std::clamp<int64_t>(fit / 8 * 8, 64, 512);
}

}  // namespace kvad
