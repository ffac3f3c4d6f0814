// Session: a model plus the caches of its sequences (DESIGN.md seam 6).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "model/model.h"

namespace kvad {

class ThreadPool;

/// Tokens for one forward call; may mix several sequences.
struct Batch {
  std::vector<int32_t> token, pos, seq;
  std::vector<int32_t> out;  ///< indices of entries that want logits, ascending
  /// Empty: every entry runs through the session's adapters (set_lora).
  /// Else one per entry: the LoRA adapters it runs through (nullptr: the
  /// base model), kept alive by the caller — a batch that mixes adapters.
  std::vector<const LoraSet*> lora;

  void add(int32_t tok, int32_t p, int32_t s, bool logits) {
    if (logits) out.push_back(static_cast<int32_t>(token.size()));
    token.push_back(tok);
    pos.push_back(p);
    seq.push_back(s);
  }
  void clear() { token.clear(); pos.clear(); seq.clear(); out.clear(); lora.clear(); }
  size_t size() const { return token.size(); }
};

class Session {
 public:
  /// n_ctx: positions per sequence; n_seq: sequences; n_threads: CPU threads
  /// (0 = all cores); kv: the key/value caches' formats (f16 or f32).
  /// Sessions may share one model, each used from its own thread.
  /// Throws kvad::Error for n_ctx <= 0, n_seq <= 0 or another K/V format.
  Session(std::shared_ptr<const Model> model, int32_t n_ctx, int n_seq = 1, int n_threads = 0, KVTypes kv = {});
  ~Session();

  /// Evaluates a batch; returns logits [batch.out.size(), n_vocab], row j for
  /// entry batch.out[j]. Valid until the next call. Every sequence's
  /// positions must continue from cached(seq) in order; a position at or past
  /// n_ctx throws kvad::Error ("context full ...") before any work is done.
  /// A batch longer than ubatch_tokens() runs as consecutive micro-batches of
  /// equal size (llama.cpp's n_ubatch; the cache cuts them, Cache::split),
  /// which gives the same logits.
  const std::vector<float>& forward(const Batch& batch);

  /// Most tokens per model forward call: the activation buffers of one call
  /// ([n_tok, n_embd] and [n_tok, n_ff] rows, about
  /// 4·(3·n_embd + 2·q_dim + 2·kv_dim + 2·n_ff) + n_embd + n_ff bytes per token)
  /// are kept under kActivationBudget, so that peak memory stays within
  /// weights + KV cache + 64 MiB. At least 64, at most 512, a multiple of 8
  /// (the CPU GEMM's token tile).
  static constexpr size_t kActivationBudget = 16u << 20;  // bytes
  static int64_t ubatch_tokens(const HParams& hp);

  /// Positions held for sequence seq.
  int32_t cached(int seq) const;
  /// Rewinds seq to hold at most n positions and returns where it landed;
  /// the caller continues from the returned position.
  int32_t truncate(int seq, int32_t n);
  /// Cache::copy_prefix: dst holds src's first n positions; false when the
  /// cache cannot (nothing changed).
  bool copy_prefix(int src, int dst, int32_t n);
  /// Cache::snapshot: a later truncate(seq, n) with n >= cached(seq) lands
  /// on n exactly (recurrent layers copy their states now).
  void snapshot(int seq);

  /// From now on (on) or no longer, every forward call also keeps each
  /// row's pre-norm hidden state (Model::forward's prenorm) per sequence and
  /// position, for a multi-token prediction proposer (engine/proposers.h
  /// MtpProposer) to read: at most n_ctx · n_embd floats per sequence.
  /// Throws as Model::forward for a split model, at the next forward.
  void keep_hidden(bool on) { keep_hidden_ = on; }
  /// The kept state [n_embd] f32 of position pos of seq: the one the last
  /// forward that evaluated that position left; nullptr when none is kept
  /// (keep_hidden off then, dropped, or pos >= cached(seq)). Valid until
  /// the next forward or drop_hidden.
  const float* hidden_at(int seq, int32_t pos) const;
  /// Forgets the kept states of seq's positions below pos.
  void drop_hidden(int seq, int32_t pos);

  /// The LoRA adapters every later forward call runs through, each with its
  /// strength (model/lora.h); nullptr or an empty set: the base model. The
  /// model stays as loaded; sessions sharing it may use different sets.
  void set_lora(std::shared_ptr<const LoraSet> lora) { lora_ = std::move(lora); }
  const LoraSet* lora() const { return lora_.get(); }
  const Model& model() const { return *model_; }
  const HParams& hparams() const { return model_->hparams(); }
  const Cache& cache() const { return *cache_; }
  int32_t n_ctx() const { return cache_->n_ctx(); }
  int n_vocab() const { return static_cast<int>(model_->hparams().n_vocab); }
  ThreadPool& pool() { return *pool_; }

 private:
  std::shared_ptr<const Model> model_;
  std::unique_ptr<Cache> cache_;
  std::unique_ptr<ThreadPool> pool_;
  std::vector<float> logits_;
  // keep_hidden: per sequence, the states of positions base .. base + rows / n_embd - 1.
  struct KeptHidden {
    int32_t base = 0;
    std::vector<float> rows;
  };
  bool keep_hidden_ = false;
  std::vector<KeptHidden> kept_;
  std::vector<float> prenorm_;
  std::shared_ptr<const LoraSet> lora_;
};

}  // namespace kvad
