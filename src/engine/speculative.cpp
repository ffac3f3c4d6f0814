#include "engine/speculative.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <unordered_map>

#include "base/error.h"
#include "engine/grammar/grammar.h"
#include "engine/session.h"

namespace kvad {

namespace {
double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

double prob_of(const std::vector<TokenProb>& d, int32_t id) {
  for (const TokenProb& t : d)
    if (t.id == id) return t.p;
  return 0.0;
}

// Exponential moving average; a negative `avg` is "not measured yet".
void ema(double& avg, double x, double w = 0.25) { avg = avg < 0 ? x : (1 - w) * avg + w * x; }
}  // namespace

void SpecOptions::check() const {
  if (draft_max < 1 || draft_max > kDraftMaxLimit)
    throw Error("--draft-max must be in 1.." + std::to_string(kDraftMaxLimit) + " (tokens proposed per step), got " +
                std::to_string(draft_max));
  if (draft_min < 0 || draft_min > draft_max)
    throw Error("--draft-min must be in 0..--draft-max (" + std::to_string(draft_max) + "), got " +
                std::to_string(draft_min));
}

bool spec_accept(int32_t x, const std::vector<TokenProb>& p, const std::vector<TokenProb>& q, Sampler& sampler,
                 std::vector<TokenProb>& resample) {
  const double px = prob_of(p, x);
  const double qx = q.empty() ? 1.0 : prob_of(q, x);
  if (qx > 0 && px >= qx) return true;
  if (qx > 0 && px > 0 && sampler.uniform() < px / qx) return true;
  // Rejected: the replacement comes from norm(max(0, p - q)), which is
  // zero outside p's support.
  resample.clear();
  double sum = 0;
  if (q.empty()) {
    for (const TokenProb& t : p)
      if (t.id != x && t.p > 0) resample.push_back(t), sum += t.p;
  } else {
    std::unordered_map<int32_t, double> qm;
    qm.reserve(q.size());
    for (const TokenProb& t : q) qm[t.id] += t.p;
    for (const TokenProb& t : p) {
      const auto it = qm.find(t.id);
      const double r = t.p - (it == qm.end() ? 0.0 : it->second);
      if (r > 0) resample.push_back({t.id, r}), sum += r;
    }
  }
  if (sum <= 0) {  // p == q up to rounding: then any draw from p is right
    resample = p;
    return false;
  }
  for (TokenProb& t : resample) t.p /= sum;
  return false;
}

SpecDecoder::SpecDecoder(Session& s, int seq, Proposer* proposer, const SpecOptions& o)
    : s_(s), seq_(seq), proposer_(proposer), o_(o) {
  o_.check();
}

// Tokens per step with k proposed and per-token acceptance a (independent
// positions, Leviathan et al. eq. 1): (1 - a^(k+1)) / (1 - a); the cost of
// the step: a plain step, the extra verified tokens and the proposer's.
int32_t SpecDecoder::next_k() const {
  if (!proposer_) return 0;
  if (!o_.adaptive) return o_.draft_max;
  if (t_plain_ < 0) return 0;  // measure a plain step first
  if (off_ && off_steps_ < off_interval_) return 0;
  const int32_t lo = std::max(1, o_.draft_min);
  if (t_extra_ < 0 || t_draft_ < 0) return std::max(lo, std::min(o_.draft_max, 4));
  const double a = std::clamp(alpha_, 0.0, 0.999);
  int32_t best = 0;
  double best_rate = 1.0 / t_plain_;  // plain decoding
  double an = a;
  for (int32_t k = 1; k <= o_.draft_max; ++k) {
    an *= a;  // a^(k+1)
    const double tokens = (1 - an) / (1 - a);
    const double rate = tokens / (t_plain_ + k * (t_extra_ + t_draft_));
    if (k >= lo && rate > best_rate * 1.02) best = k, best_rate = rate;
  }
  // Off: probe with the smallest k now and then (after off_interval_ plain
  // steps), so that a change in acceptance is seen.
  return best > 0 ? best : (off_ ? lo : 0);
}

void SpecDecoder::observe(int32_t k, int32_t accepted, double verify_s, double propose_s) {
  if (k == 0) {
    ema(t_plain_, verify_s);
    if (off_) ++off_steps_;
    return;
  }
  // Each position is a trial until the first rejection: accepted
  // successes out of accepted (+ 1 when one was rejected) trials.
  ema(alpha_, static_cast<double>(accepted) / (accepted + (accepted < k ? 1 : 0)), 0.2);
  if (t_plain_ > 0) ema(t_extra_, std::max(0.0, (verify_s - t_plain_) / k));
  ema(t_draft_, propose_s / k);
  // Whether the next step would still speculate decides on/off; each
  // failed probe doubles the wait before the next (32 .. 1024 plain steps),
  // since a probe costs a draft its catch-up on the skipped tokens.
  const bool was_off = off_;
  off_ = false;
  off_ = next_k() == 0;
  off_steps_ = 0;
  if (!off_) off_interval_ = 32;
  else if (was_off) off_interval_ = std::min(2 * off_interval_, 1024);
}

bool SpecDecoder::step(std::vector<int32_t>& context, Sampler& sampler, TokenGrammar* grammar, int32_t max_new,
                       const Emit& emit) {
  if (context.empty()) throw Error("speculative step: empty context");
  const int32_t P = static_cast<int32_t>(context.size()) - 1;  // position of the pending token
  if (s_.cached(seq_) != P)
    throw Error("speculative step: the session holds " + std::to_string(s_.cached(seq_)) + " positions, the context " +
                std::to_string(P) + " before its last token");
  int32_t k = std::min(next_k(), std::max(0, max_new - 1));
  k = std::min(k, s_.n_ctx() - 1 - P);
  const double t0 = now_s();
  prop_.clear();
  if (k > 0) {
    proposer_->propose(context, k, prop_);
    if (prop_.tokens.size() > static_cast<size_t>(k)) prop_.tokens.resize(k);
    if (!prop_.q.empty() && prop_.q.size() < prop_.tokens.size())
      throw Error("proposer " + proposer_->name() + ": fewer distributions than tokens");
    if (static_cast<int32_t>(prop_.tokens.size()) < std::max(1, o_.draft_min)) prop_.clear();
    for (int32_t t : prop_.tokens)
      if (t < 0 || t >= s_.n_vocab())
        throw Error("proposer " + proposer_->name() + ": token id " + std::to_string(t) + " outside the vocabulary");
  }
  const int32_t n_prop = static_cast<int32_t>(prop_.tokens.size());
  const double t1 = now_s();
  if (n_prop > 0) s_.snapshot(seq_);
  Batch b;
  b.add(context.back(), P, seq_, true);
  for (int32_t i = 0; i < n_prop; ++i) b.add(prop_.tokens[i], P + 1 + i, seq_, true);
  const std::vector<float>& logits = s_.forward(b);
  const double t2 = now_s();
  ++st_.n_steps;
  const int nv = s_.n_vocab();

  // Walk the positions: row i holds the logits after context + proposed[0, i).
  int32_t n_acc = 0;
  bool go_on = true;
  for (int32_t i = 0; i <= n_prop; ++i) {
    row_.assign(logits.begin() + static_cast<size_t>(i) * nv, logits.begin() + static_cast<size_t>(i + 1) * nv);
    if (grammar) grammar->apply(row_.data(), nv);
    int32_t id;
    bool accepted = false;
    if (i < n_prop) {
      sampler.distribution(row_.data(), nv, p_);
      static const std::vector<TokenProb> kCertain;
      accepted = spec_accept(prop_.tokens[i], p_, prop_.q.empty() ? kCertain : prop_.q[i], sampler, resample_);
      id = accepted ? prop_.tokens[i] : sampler.draw(resample_);
    } else {
      id = sampler.sample(row_.data(), nv);  // every proposal accepted (or none made): the target's own token
    }
    if (accepted) ++n_acc;
    context.push_back(id);
    if (!emit(id)) { go_on = false; break; }
    if (!accepted) break;
  }
  if (n_prop > 0) {
    ++st_.n_verify;
    st_.n_proposed += n_prop;
    st_.n_accepted += n_acc;
    proposer_->accepted(n_acc);
  }
  observe(n_prop, n_acc, t2 - t1, std::max(0.0, t1 - t0 - (k > 0 ? proposer_->catch_up_s() : 0.0)));

  // The session must hold context minus its (new) last token: the pending
  // token and the accepted proposals before the last chosen one.
  const int32_t want = static_cast<int32_t>(context.size()) - 1;
  if (s_.cached(seq_) != want) {
    const int32_t land = s_.truncate(seq_, want);
    if (land > want) throw Error("speculative step: truncate landed past " + std::to_string(want));
    if (land < want) {
      Batch r;
      for (int32_t p = land; p < want; ++p) r.add(context[p], p, seq_, false);
      s_.forward(r);
      st_.n_reeval += want - land;
    }
    if (s_.cached(seq_) != want)
      throw Error("speculative step: the session holds " + std::to_string(s_.cached(seq_)) + " positions after the rewind, not " +
                  std::to_string(want));
  }
  return go_on;
}

}  // namespace kvad
