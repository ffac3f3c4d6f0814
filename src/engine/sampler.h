// Token sampling from logits.
#pragma once
#include <cstdint>
#include <deque>
#include <random>
#include <unordered_map>
#include <utility>
#include <vector>

namespace kvad {

/// Parameters with llama.cpp's meanings and defaults.
struct SamplerParams {
  float temp = 0.8f;            ///< <= 0: greedy (argmax)
  int32_t top_k = 40;           ///< <= 0: off
  float top_p = 0.95f;          ///< >= 1: off
  float min_p = 0.05f;          ///< <= 0: off
  float repeat_penalty = 1.0f;  ///< 1: off (CTRL, Keskar et al. 2019)
  int32_t repeat_last_n = 64;   ///< tokens the penalty looks back over
  uint64_t seed = 0;            ///< same seed, same logits -> same tokens
  /// OpenAI's penalties over the tokens recorded with accept_generated():
  /// logit[t] -= presence_penalty * (count[t] > 0) + frequency_penalty * count[t].
  /// 0: off. Source: OpenAI API reference, "Parameter details" (frequency and
  /// presence penalties).
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  /// Added to the logits of these token ids before anything else (OpenAI's
  /// and llama.cpp's `logit_bias`; -100 in practice bans a token, -inf
  /// always does). Ids outside the vocabulary are skipped by sample();
  /// callers validate them (the server answers 400).
  std::vector<std::pair<int32_t, float>> logit_bias;
};

struct GenerationConfig;

/// `base` with the sampling fields `gc` sets in their place (HF
/// generation_config.json names -> llama.cpp's: temperature -> temp,
/// repetition_penalty -> repeat_penalty, top_k, top_p, min_p); do_sample
/// false makes it greedy (temp 0), as transformers' generate() does.
SamplerParams with_generation_config(SamplerParams base, const GenerationConfig& gc);

/// A token and its probability.
struct TokenProb {
  int32_t id = -1;
  double p = 0.0;
};

/// A token and its log-probability (natural log).
struct TokenLogprob {
  int32_t id = -1;
  float logprob = 0.0f;
};

/// Chain, in llama.cpp's order: logit bias, repetition penalty, presence/frequency
/// penalties, top-k, top-p, min-p,
/// temperature, then a draw from the distribution (or argmax when temp <= 0).
/// top-k/top-p/min-p act on probabilities at temperature 1.
class Sampler {
 public:
  explicit Sampler(const SamplerParams& p);
  /// Picks a token from logits [n_vocab]. Does not record it (see accept()).
  /// Throws kvad::Error when a logit is NaN or +inf, or none is finite.
  /// With top_k off (<= 0) nothing sorts the whole vocabulary: O(n_vocab)
  /// plus a selection of the candidates that top-p keeps.
  int32_t sample(const float* logits, int32_t n_vocab);
  /// The distribution sample() would draw from for these logits, with the
  /// whole chain applied (bias, penalties, top-k/top-p/min-p, temperature):
  /// its candidates and their probabilities (summing to 1), in no set order;
  /// greedy (temp <= 0) is the argmax with probability 1. What speculative
  /// decoding verifies against (engine/speculative.h). Does not draw, so the
  /// random stream is untouched. Throws as sample().
  void distribution(const float* logits, int32_t n_vocab, std::vector<TokenProb>& out);
  /// A draw from `dist` (probabilities that need not sum to 1, all >= 0) with
  /// this sampler's random stream. Throws kvad::Error for an empty one.
  int32_t draw(const std::vector<TokenProb>& dist);
  /// A uniform number in [0, 1) from this sampler's random stream.
  double uniform();
  /// The parameters it was made with.
  const SamplerParams& params() const { return p_; }
  /// Records a token (prompt or generated) for the repetition penalty.
  void accept(int32_t token);
  /// Log-probabilities from the distribution the last sample() call drew
  /// from, after logit bias and penalties and before top-k/top-p/min-p and
  /// temperature (OpenAI's and llama.cpp's `logprobs`): log_softmax of the
  /// adjusted logits over the whole vocabulary. O(n_vocab) on the first call
  /// after a sample(). Throws kvad::Error before any sample() or for an id
  /// outside the vocabulary.
  float logprob(int32_t id);
  /// The `n` most likely tokens of that distribution, most likely first
  /// (ties: lower id first); fewer when fewer have a finite logit.
  std::vector<TokenLogprob> top_logprobs(int32_t n);
  /// Records a generated token: what accept() does, plus the count that the
  /// presence/frequency penalties use (prompt tokens do not count there).
  void accept_generated(int32_t token);
  void reset();

 private:
  SamplerParams p_;
  std::mt19937_64 rng_;
  std::deque<int32_t> recent_;
  std::unordered_map<int32_t, int32_t> generated_;  ///< token -> times generated
  std::vector<float> work_;
  std::vector<int32_t> idx_;
  std::vector<double> w_;
  double lse_ = 0;          ///< log-sum-exp of work_, valid when lse_valid_
  bool lse_valid_ = false;
  void compute_lse();
  /// The chain up to the draw: idx_[0, n) the candidates, w_[0, n) their
  /// weights after temperature (unnormalized); returns n.
  size_t prepare(const float* logits, int32_t n_vocab);
  size_t prepare_unsorted(float mx);  ///< top_k off; work_ holds the logits
  int32_t draw(size_t n);             ///< from idx_/w_
};

}  // namespace kvad
