// Speculative decoding (DESIGN.md, engine/): a cheap proposer guesses the
// next k tokens, the target model evaluates them in one forward call, and
// the speculative sampling rule keeps the guesses the target's own sampler
// would have made (Leviathan, Kalman, Matias 2023, "Fast Inference from
// Transformers via Speculative Decoding", Algorithm 1; Chen et al. 2023,
// "Accelerating Large Language Model Decoding with Speculative Sampling").
//
// The output distribution is the target's: at temperature 0 the tokens are
// the ones plain decoding picks, and at temperature > 0 each token is
// distributed as the target's sampler chain (logit bias, penalties, top-k,
// top-p, min-p, temperature, a grammar's mask) would draw it. Proposers live
// in engine/proposers.h.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/sampler.h"

namespace kvad {

class Session;
class TokenGrammar;

/// What a proposer guesses: tokens that may continue a sequence, and for
/// each the distribution q it was drawn from. `q` empty: every token was
/// chosen with certainty (q = 1 on it), as n-gram lookup and a greedy draft
/// choose; else one distribution per token (probabilities over token ids,
/// summing to 1; ids absent have q = 0).
struct Proposal {
  std::vector<int32_t> tokens;
  std::vector<std::vector<TokenProb>> q;
  void clear() { tokens.clear(); q.clear(); }
};

/// A source of guesses for one sequence.
class Proposer {
 public:
  virtual ~Proposer() = default;
  /// Up to max_k (>= 1) tokens that may follow `context`: every token of the
  /// sequence so far, the prompt's and the generated ones, the last of which
  /// the target has not evaluated yet. Fewer, or none, when it has no guess.
  virtual void propose(const std::vector<int32_t>& context, int32_t max_k, Proposal& out) = 0;
  /// How many tokens of the last proposal the target accepted (a prefix).
  virtual void accepted(int32_t n) { (void)n; }
  /// Called once before decoding with the prompt (generate() counts it as
  /// prefill): a draft model evaluates it here.
  virtual void begin(const std::vector<int32_t>& prompt) { (void)prompt; }
  /// Seconds of the last propose() spent catching up with context it had
  /// not seen (a draft evaluating tokens in one batch after speculation was
  /// off): left out of the per-token cost that adaptive k weighs.
  virtual double catch_up_s() const { return 0.0; }
  /// A short name for logs and stats ("ngram", "draft").
  virtual std::string name() const = 0;
};

/// Speculation's knobs (llama.cpp's --draft-max / --draft-min).
struct SpecOptions {
  /// Most tokens proposed per step (kDraftMaxLimit at most).
  int32_t draft_max = 16;
  /// Fewest tokens worth verifying: a shorter proposal runs a plain step,
  /// and adaptive k never goes below it while speculation is on.
  int32_t draft_min = 0;
  /// Choose k per step from the recent acceptance rate and the measured
  /// costs, and turn speculation off (probing now and then) when it does
  /// not pay; false: always ask for draft_max.
  bool adaptive = true;
  static constexpr int32_t kDraftMaxLimit = 256;
  /// Throws kvad::Error naming the flag for draft_max outside
  /// [1, kDraftMaxLimit] or draft_min outside [0, draft_max].
  void check() const;
};

/// Counters of one sequence's speculation.
struct SpecStats {
  int64_t n_steps = 0;     ///< target forward calls (plain steps included)
  int64_t n_verify = 0;    ///< steps that verified a proposal
  int64_t n_proposed = 0;  ///< proposed tokens verified
  int64_t n_accepted = 0;  ///< of those, accepted
  int64_t n_reeval = 0;    ///< tokens evaluated again after a rewind landed short (recurrent layers)
  double acceptance() const { return n_proposed ? static_cast<double>(n_accepted) / n_proposed : 0.0; }
};

/// Acceptance test of the speculative sampling rule for one position: the
/// proposed token `x`, the target's distribution `p` and the proposer's `q`
/// (empty: q = 1 at x). Accepts with probability min(1, p(x) / q(x)),
/// drawing from the sampler's random stream only when that is below 1 and
/// above 0. Returns true when accepted; else sets `resample` to the
/// normalized max(0, p - q), the distribution the replacement token is
/// drawn from.
bool spec_accept(int32_t x, const std::vector<TokenProb>& p, const std::vector<TokenProb>& q, Sampler& sampler,
                 std::vector<TokenProb>& resample);

/// Drives speculative decoding of one sequence of a Session.
class SpecDecoder {
 public:
  /// proposer: may be null (every step is plain). Throws as SpecOptions::check.
  SpecDecoder(Session& s, int seq, Proposer* proposer, const SpecOptions& o);

  /// Called with each chosen token in order; returns false to stop (an end
  /// of generation, a stop string, the token budget).
  using Emit = std::function<bool(int32_t)>;

  /// One step. `context`: every token of the sequence; its last one has
  /// been chosen but not evaluated, and the session holds the others
  /// (cached(seq) == context.size() - 1, else kvad::Error). Evaluates that
  /// token and up to k proposed ones in one forward call (logits at every
  /// position), then walks the positions in order: the grammar (may be
  /// null) masks the logits, the sampler gives the target's distribution,
  /// and a proposed token is accepted by spec_accept or replaced, after
  /// which the step ends; when all are accepted a bonus token is drawn from
  /// the last position. Each chosen token is appended to `context` and
  /// passed to `emit` (which records it with the sampler and the grammar)
  /// before the next position is looked at. k is at most max_new - 1 and
  /// what the context has room for. Rejected positions are dropped with
  /// Session::truncate; its landing is checked, and a landing short of the
  /// accepted length (a recurrent layer) is evaluated again from there
  /// (Session::snapshot before the forward keeps that to the step's own
  /// tokens). On return the session holds context.size() - 1 positions.
  /// Returns false when emit stopped.
  bool step(std::vector<int32_t>& context, Sampler& sampler, TokenGrammar* grammar, int32_t max_new, const Emit& emit);

  const SpecStats& stats() const { return st_; }
  /// The k the next step asks for (0: a plain step).
  int32_t next_k() const;

 private:
  void observe(int32_t k, int32_t accepted, double verify_s, double propose_s);
  Session& s_;
  int seq_;
  Proposer* proposer_;
  SpecOptions o_;
  SpecStats st_;
  Proposal prop_;
  std::vector<TokenProb> p_, resample_;
  std::vector<float> row_;
  // Adaptive k: acceptance rate per proposed token, seconds of a plain
  // step, extra seconds per verified token, proposer seconds per token
  // (exponential moving averages; < 0: not measured yet).
  double alpha_ = 0.7, t_plain_ = -1, t_extra_ = -1, t_draft_ = -1;
  int32_t off_steps_ = 0;  // plain steps in a row since speculation was turned off
  int32_t off_interval_ = 32;  // plain steps between probes while off
  bool off_ = false;
};

}  // namespace kvad
