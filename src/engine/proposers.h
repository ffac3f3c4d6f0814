// Proposers for speculative decoding (engine/speculative.h): n-gram lookup
// in the sequence itself, and a smaller draft model with its own Session.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "engine/speculative.h"
#include "model/model.h"

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

/// The target's own multi-token prediction layer (DeepSeek-V3 Technical
/// Report section 2.2; Qwen3-Next's MTP block; vLLM's `deepseek_mtp` /
/// `qwen3_next_mtp` methods): position j of the MTP layer's own cache takes
/// the target's pre-norm hidden state at j (Session::keep_hidden, which the
/// constructor turns on) and the token at j + 1, and its logits at the last
/// position give the first guess. Further guesses chain the layer on its own
/// output, as vLLM does for num_speculative_tokens > 1: position j + 1 takes
/// the previous step's state (Model::forward_mtp's hidden_out) and the
/// guess. Guesses are the argmax over ids below n_vocab (q = 1 on them,
/// which the speculative sampling rule also accepts at temperature > 0).
/// The chained positions are dropped from the MTP cache at the next call;
/// positions whose hidden state the target's session no longer keeps (a
/// prefix it copied from another sequence) enter with a zero state, which
/// changes the guesses, never the output. The session must outlive the
/// proposer. Throws kvad::Error when the model has no MTP layer.
class MtpProposer final : public Proposer {
 public:
  MtpProposer(Session& target, int32_t n_vocab, int seq = 0);
  ~MtpProposer() override;
  void propose(const std::vector<int32_t>& context, int32_t max_k, Proposal& out) override;
  double catch_up_s() const override { return catch_up_s_; }
  std::string name() const override { return "mtp"; }

 private:
  Session& s_;
  int32_t n_vocab_;
  int seq_;
  std::unique_ptr<Cache> cache_;  // the MTP layer's, one sequence
  std::vector<int32_t> held_;     // the context whose positions 0 .. size - 2 the MTP cache holds
  std::vector<int32_t> tok_, pos_, seq_ids_, out_;
  std::vector<float> hid_, logits_, h_next_;
  double catch_up_s_ = 0;
};

/// Why a draft's tokenizer cannot propose for the target's, or "" when it
/// can: the same tokenizer model, the same token texts for every id, the same
/// beginning/end and end-of-generation tokens (llama.cpp's
/// common_speculative_are_compatible asks about the same; kvad asks for
/// every id, not only the first ones).
std::string draft_vocab_mismatch(const Tokenizer& target, const Tokenizer& draft);

}  // namespace kvad
