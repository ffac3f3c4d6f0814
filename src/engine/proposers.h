// Proposers for speculative decoding (engine/speculative.h): n-gram lookup
// in the sequence itself, and a smaller draft model with its own Session.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "engine/speculative.h"

namespace kvad {

class Session;
class Tokenizer;

/// Prompt lookup (llama.cpp's lookup decoding, vLLM's `ngram` method,
/// Saxena 2023 "Prompt Lookup Decoding"): for n = n_max down to n_min, find
/// the most recent earlier occurrence of the context's last n tokens and
/// propose the tokens that followed it. No model: q = 1 on each token.
/// Good for edits of a file in the prompt, RAG answers, code.
class NgramProposer final : public Proposer {
 public:
  /// Throws kvad::Error ("--spec-ngram ...") for n_min < 1 or n_max < n_min
  /// or n_max > 64.
  explicit NgramProposer(int32_t n_max, int32_t n_min = 1);
  void propose(const std::vector<int32_t>& context, int32_t max_k, Proposal& out) override;
  std::string name() const override { return "ngram"; }

 private:
  int32_t n_max_, n_min_;
};

/// A draft model: `draft` (its own Session; any architecture, its own cache)
/// decodes k tokens one at a time after the context, sampling from `sp`'s
/// chain without the history-based penalties (q is the distribution each
/// token was drawn from; at temperature 0 the argmax, q = 1). Token ids at
/// or past `n_vocab` (those the target's and the draft's vocabularies
/// share, draft_vocab_mismatch) are masked out of the draft's logits. The
/// draft's cache follows the context by its longest common prefix with what
/// it holds (Session::truncate, checking where it lands). The session must
/// outlive the proposer.
class DraftProposer final : public Proposer {
 public:
  DraftProposer(Session& draft, const SamplerParams& sp, int32_t n_vocab, int seq = 0);
  /// Samples with `sp`'s chain from now on (a new request on the same
  /// sequence: the server's slots); what the draft's cache holds is kept.
  void set_sampling(const SamplerParams& sp);
  void propose(const std::vector<int32_t>& context, int32_t max_k, Proposal& out) override;
  void begin(const std::vector<int32_t>& prompt) override;
  double catch_up_s() const override { return catch_up_s_; }
  std::string name() const override { return "draft"; }

 private:
  /// Rewinds the draft to its longest common prefix with ctx (all of ctx
  /// but its last token at most); returns where it landed.
  size_t follow(const std::vector<int32_t>& ctx);
  double catch_up_s_ = 0;
  Session& s_;
  Sampler sampler_;
  int32_t n_vocab_;
  int seq_;
  std::vector<int32_t> held_;  // what the draft's cache holds
  std::vector<float> row_;
  std::vector<TokenProb> q_;
};

/// Why a draft's tokenizer cannot propose for the target's, or "" when it
/// can: the same tokenizer model, the same token texts for every id, the same
/// beginning/end and end-of-generation tokens (llama.cpp's
/// common_speculative_are_compatible asks about the same; kvad asks for
/// every id, not only the first ones).
std::string draft_vocab_mismatch(const Tokenizer& target, const Tokenizer& draft);

}  // namespace kvad
