// Sentence embeddings: token ids through a model's last
// hidden state (Model::hidden), pooled and optionally L2-normalised, as
// sentence-transformers' Transformer → Pooling → Normalize modules do
// (sentence_transformers/models/Pooling.py, Normalize.py). Works for encoder
// models (registry kind `embedding`: BERT) and decoder models (llama, qwen2,
// qwen3: last-token or mean pooling).
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

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

/// Embeds batches of token sequences with one model. Thread-safe: calls are
/// serialised (one forward pass at a time), each call batches its inputs.
class Embedder {
 public:
  /// n_threads: CPU threads (0: all cores). Throws kvad::Error when the
  /// model gives no hidden states or max_seq_length does not fit the model
  /// (n_ctx_train).
  Embedder(std::shared_ptr<Model> model, std::shared_ptr<const Tokenizer> tok, EmbeddingConfig cfg,
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
  /// outside the vocabulary, before any work is done.
  std::vector<float> embed(const std::vector<std::vector<int32_t>>& inputs);

  int64_t dim() const;                ///< n_embd
  int32_t n_vocab() const;            ///< ids accepted
  const EmbeddingConfig& config() const { return cfg_; }
  int64_t max_batch_tokens() const { return n_batch_; }
  const Model& model() const { return *model_; }

 private:
  std::shared_ptr<Model> model_;
  std::shared_ptr<const Tokenizer> tok_;
  EmbeddingConfig cfg_;
  int64_t n_batch_ = 0;
  int n_seq_ = 0;
  size_t n_prefix_ = 0, n_suffix_ = 0;  ///< specials the tokenizer adds before / after the text
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<Cache> cache_;
  std::mutex mu_;
};

}  // namespace kvad
