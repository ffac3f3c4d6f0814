// Sentence embeddings: token ids through a model's last
// hidden state (Model::hidden), pooled and optionally L2-normalised, as
// sentence-transformers' Transformer → Pooling → Normalize modules do
// (sentence_transformers/models/Pooling.py, Normalize.py). Works for encoder
// models (registry kind `embedding`: BERT) and decoder models (llama, qwen2,
// qwen3: last-token or mean pooling).
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"

namespace kvad {

class Cache;
class Model;
class ThreadPool;
class Tokenizer;

/// How token states become one vector (sentence-transformers' pooling modes).
enum class Pooling {
  Mean,  ///< mean over the sequence's tokens (pooling_mode_mean_tokens; no padding, so every token counts)
  CLS,   ///< the first token's state (pooling_mode_cls_token)
  Last,  ///< the last token's state (pooling_mode_lasttoken: decoders)
};
const char* pooling_name(Pooling p);
/// "mean", "cls" or "last"; throws kvad::Error naming the valid ones.
Pooling parse_pooling(const std::string& s);

struct EmbeddingConfig {
  Pooling pooling = Pooling::Mean;
  bool normalize = true;         ///< divide by the L2 norm (max(‖v‖, 1e-12), torch's F.normalize)
  int32_t max_seq_length = 512;  ///< tokens per input, specials included; longer text is truncated
  std::string source;            ///< where the settings came from, for messages
};

/// The embedding settings of a model. From an HF checkpoint directory `dir`
/// with sentence-transformers files: modules.json lists the modules
/// (Transformer, Pooling with path/config.json, Normalize), and
/// sentence_bert_config.json gives max_seq_length. Without them (and for a
/// GGUF, dir ""): the GGUF key {arch}.pooling_type (llama.cpp's enum: 1 mean,
/// 2 cls, 3 last) when present, else mean pooling for an `embedding`-kind
/// model and last-token pooling for a decoder; normalised; max_seq_length
/// min(n_ctx_train, 512). Throws kvad::Error naming the file and field for a
/// malformed file or a module or pooling mode kvad does not apply (Dense,
/// max, mean_sqrt_len, weightedmean, include_prompt false), rather than
/// returning vectors that differ from sentence-transformers'.
EmbeddingConfig embedding_config(const Model& m, const std::string& dir);

/// embed() stopped because its `cancelled` callback said so.
class EmbedCancelled : public Error {
 public:
  EmbedCancelled() : Error("embeddings: cancelled") {}
};

/// Embeds batches of token sequences with one model. Thread-safe: one
/// forward pass at a time; concurrent calls take turns forward call by
/// forward call, the one with the fewest tokens left first (shortest
/// remaining work, ties in arrival order), and while others wait a call
/// packs at most kSharedBatchTokens: a short call waits for the forward call
/// in progress, not for the inputs of the calls ahead of it.
class Embedder {
 public:
  /// n_threads: CPU threads (0: all cores). Throws kvad::Error when the
  /// model gives no hidden states or max_seq_length does not fit the model
  /// (n_ctx_train).
  Embedder(std::shared_ptr<const Model> model, std::shared_ptr<const Tokenizer> tok, EmbeddingConfig cfg,
           int n_threads = 0);
  ~Embedder();
  Embedder(const Embedder&) = delete;
  Embedder& operator=(const Embedder&) = delete;

  /// Text → the token ids the model is fed: the tokenizer's encoding with
  /// its specials (BERT: [CLS] … [SEP]; special-token text is parsed, as HF
  /// tokenizers do), truncated to max_seq_length as HF tokenizers'
  /// truncation does (the text's tokens cut from the right, the specials
  /// kept).
  std::vector<int32_t> tokenize(std::string_view text) const;

  /// Embeddings of each input: [inputs.size(), dim()] f32, row i for input i.
  /// Inputs are token ids, used as given (1..max_seq_length ids, each in
  /// [0, n_vocab)). Inputs are packed into forward calls of at most
  /// max_batch_tokens() tokens, each sequence whole in one call. Throws
  /// kvad::Error naming the input for an empty or too long input or an id
  /// outside the vocabulary, before any work is done. `cancelled`, when
  /// set, is asked before each forward call; true ends the call with
  /// EmbedCancelled (a client that left, a server shutting down).
  std::vector<float> embed(const std::vector<std::vector<int32_t>>& inputs,
                           const std::function<bool()>& cancelled = nullptr);

  int64_t dim() const;                ///< n_embd
  int32_t n_vocab() const;            ///< ids accepted
  const EmbeddingConfig& config() const { return cfg_; }
  int64_t max_batch_tokens() const { return n_batch_; }
  /// Tokens one forward call packs at most while other calls wait their turn.
  static constexpr int64_t kSharedBatchTokens = 512;
  /// Forward calls made so far (all embed() calls together).
  uint64_t forward_calls() const { return forward_calls_.load(); }
  const Model& model() const { return *model_; }

 private:
  std::shared_ptr<const Model> model_;
  std::shared_ptr<const Tokenizer> tok_;
  EmbeddingConfig cfg_;
  int64_t n_batch_ = 0;
  int n_seq_ = 0;
  size_t n_prefix_ = 0, n_suffix_ = 0;  ///< specials the tokenizer adds before / after the text
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<Cache> cache_;
  // Turns: waiting calls by (tokens left, ticket); busy_ while one runs.
  std::mutex mu_;
  std::condition_variable turn_;
  std::set<std::pair<int64_t, uint64_t>> waiting_;
  bool busy_ = false;
  uint64_t next_ticket_ = 0;
  std::atomic<uint64_t> forward_calls_{0};
};

}  // namespace kvad
