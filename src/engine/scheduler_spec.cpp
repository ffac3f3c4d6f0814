// Speculative decoding inside continuous batching (engine/scheduler.h,
// SchedulerOptions::spec_*): each decoding slot that speculates puts its
// pending token and up to k proposed ones into the step's one batch, next
// to the plain rows of the other slots; after the forward each slot walks
// its rows with the rule of engine/speculative.h (Leviathan et al. 2023,
// Algorithm 1; Chen et al. 2023), the one SpecDecoder::step applies on the
// CLI path: greedy gives the tokens plain decoding gives, temperature > 0
// the target's distribution. vLLM and llama.cpp's server batch their
// verification the same way (one forward per step, all slots).
#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "engine/proposers.h"
#include "engine/scheduler.h"
#include "engine/scheduler_slot.h"
#include "engine/session.h"

namespace kvad {

void Scheduler::spec_admit(Slot& s) {
  s.alpha = 0.7;
  s.prop.clear();
  const GenParams& gp = s.job->params_;
  // Sampler::logprob describes the last sample() call; accepted proposals
  // are never sampled, so requests that want logprobs decode plainly.
  const bool plain = gp.logprobs >= 0;
  if (opts_.spec_ngram > 0) {
    if (!s.proposer) s.proposer = std::make_unique<NgramProposer>(opts_.spec_ngram);
  } else if (opts_.spec_mtp) {
    if (!s.proposer) s.proposer = std::make_unique<MtpProposer>(*session_, n_sample_, s.id);
  } else if (draft_session_) {
    if (!s.proposer) {
      auto d = std::make_unique<DraftProposer>(*draft_session_, gp.sampling, n_sample_, s.id);
      s.draft = d.get();
      s.proposer = std::move(d);
    } else {
      s.draft->set_sampling(gp.sampling);
    }
  }
  if (plain) s.alpha = -1;  // no speculation for this request
}

int32_t Scheduler::spec_k(const Slot& s, int32_t cap) const {
  if (!s.proposer || s.alpha < 0 || cap <= 0) return 0;
  int32_t k = opts_.spec.draft_max;
  if (opts_.spec.adaptive) {
    // The largest k whose last proposed position is still reached with
    // probability alpha^k >= kSpecMinUse (independent positions).
    const double a = std::clamp(s.alpha, 0.0, 0.999);
    k = a <= 0 ? 1 : static_cast<int32_t>(std::floor(std::log(SchedulerOptions::kSpecMinUse) / std::log(a)));
    k = std::clamp(k, std::max(1, opts_.spec.draft_min), opts_.spec.draft_max);
  }
  k = std::min(k, cap);
  // Proposed tokens sit at positions tokens.size() .. + k - 1 (the pending
  // token is already in `tokens`), all inside the context; and no more
  // than max_tokens can use.
  k = static_cast<int32_t>(
      std::min<int64_t>(k, static_cast<int64_t>(opts_.n_ctx) - static_cast<int64_t>(s.tokens.size())));
  const int32_t max_tokens = s.job->params_.max_tokens;
  if (max_tokens >= 0) k = std::min(k, max_tokens - s.usage.completion_tokens - 1);
  return k >= std::max(1, opts_.spec.draft_min) ? k : 0;
}

int32_t Scheduler::spec_propose(Slot& s, int32_t k, Batch& batch) {
  s.prop.clear();
  s.n_prop = 0;
  try {
    // slot.tokens ends with the pending token: the context the proposer
    // continues.
    s.proposer->propose(s.tokens, k, s.prop);
  } catch (const std::exception&) {
    // A draft that failed: this request decodes plainly; the next one on
    // the slot gets a new proposer (the draft's cache is rebuilt).
    s.prop.clear();
    s.alpha = -1;
    s.draft = nullptr;
    s.proposer.reset();
    return 0;
  }
  if (s.prop.tokens.size() > static_cast<size_t>(k)) s.prop.tokens.resize(static_cast<size_t>(k));
  const bool bad_q = !s.prop.q.empty() && s.prop.q.size() < s.prop.tokens.size();
  bool bad_id = false;
  for (int32_t t : s.prop.tokens) bad_id = bad_id || t < 0 || t >= n_sample_;
  if (bad_q || bad_id || static_cast<int32_t>(s.prop.tokens.size()) < std::max(1, opts_.spec.draft_min)) {
    s.prop.clear();
    return 0;
  }
  // Before the forward: a recurrent layer can come back to any length from
  // here on exactly (Session::snapshot).
  session_->snapshot(s.id);
  for (int32_t t : s.prop.tokens) {
    batch.add(t, static_cast<int32_t>(s.tokens.size()), s.id, true);
    batch.lora.push_back(s.lora.get());  // verified through the request's adapters, as its other rows
    s.tokens.push_back(t);
  }
  s.n_prop = static_cast<int32_t>(s.prop.tokens.size());
  return s.n_prop;
}

void Scheduler::spec_verify(Slot& s, const float* rows, size_t nv) {
  const int32_t n = s.n_prop;
  // Back to the context as chosen so far (the pending token last): each
  // accepted proposal is appended when it is taken.
  s.tokens.resize(s.tokens.size() - static_cast<size_t>(n));
  int32_t n_acc = 0;
  static const std::vector<TokenProb> kCertain;
  // Counted before any token is emitted: the request's last event (which
  // may come from this walk) carries them.
  s.usage.draft_tokens += n;
  ++unflushed_.verify;
  unflushed_.drafted += static_cast<uint64_t>(n);
  for (int32_t i = 0; i <= n; ++i) {
    // Row i: the logits after the context and proposals [0, i).
    const float* row = rows + static_cast<size_t>(i) * nv;
    bool accepted = false;
    int32_t id;
    if (i < n) {
      s.sampler->distribution(masked_row(s, row), n_sample_, s.p);
      const int32_t x = s.prop.tokens[static_cast<size_t>(i)];
      accepted = spec_accept(x, s.p, s.prop.q.empty() ? kCertain : s.prop.q[static_cast<size_t>(i)], *s.sampler,
                             s.resample);
      id = accepted ? x : s.sampler->draw(s.resample);
    } else {
      id = sample_row(s, row);  // all accepted: the target's own token after them
    }
    if (accepted) {
      ++n_acc;
      ++s.usage.draft_accepted;
      ++unflushed_.accepted;
    }
    emit_token(s, id);
    if (!s.job || !accepted) break;
    // Accepted and going on: it was evaluated at this position.
    s.pending = -1;
    s.tokens.push_back(id);
  }
  if (s.proposer) s.proposer->accepted(n_acc);
  // Each position is a trial until the first rejection (as SpecDecoder).
  if (s.alpha >= 0) {
    const double rate = static_cast<double>(n_acc) / (n_acc + (n_acc < n ? 1 : 0));
    s.alpha = 0.8 * s.alpha + 0.2 * rate;
  }
  spec_rewind(s);
}

void Scheduler::spec_rewind(Slot& s) {
  const int32_t want = static_cast<int32_t>(s.tokens.size());
  if (session_->cached(s.id) == want) return;
  const int32_t land = session_->truncate(s.id, want);
  if (land > want || land < 0) {
    if (s.job) finish(s, "error", "speculation: the cache rewound past " + std::to_string(want) + " positions");
    s.tokens.resize(static_cast<size_t>(session_->truncate(s.id, 0)));
    return;
  }
  if (land < want) {
    if (!s.job) {  // a free slot keeps what its cache holds
      s.tokens.resize(static_cast<size_t>(land));
      return;
    }
    // Short of the accepted length (a recurrent layer without a usable
    // snapshot): evaluate the tokens again, this slot alone.
    try {
      Batch r;
      for (int32_t p = land; p < want; ++p) r.add(s.tokens[static_cast<size_t>(p)], p, s.id, false);
      session_->forward(r);
    } catch (const std::exception& e) {
      finish(s, "error", e.what());
      s.tokens.resize(static_cast<size_t>(session_->truncate(s.id, 0)));
      return;
    }
  }
  if (session_->cached(s.id) != want) {
    if (s.job)
      finish(s, "error", "speculation: the cache holds " + std::to_string(session_->cached(s.id)) +
                             " positions after the rewind, not " + std::to_string(want));
    s.tokens.resize(static_cast<size_t>(session_->truncate(s.id, 0)));
  }
}

}  // namespace kvad
