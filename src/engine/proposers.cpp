#include "engine/proposers.h"

#include <algorithm>
#include <chrono>
#include <limits>

#include "base/error.h"
#include "engine/generate.h"
#include "engine/session.h"
#include "tokenizer/tokenizer.h"

namespace kvad {

NgramProposer::NgramProposer(int32_t n_max, int32_t n_min) : n_max_(n_max), n_min_(n_min) {
  if (n_min < 1 || n_max < n_min || n_max > 64)
    throw Error("--spec-ngram must be in 1..64 (the longest suffix to look up), got " + std::to_string(n_max));
}

void NgramProposer::propose(const std::vector<int32_t>& ctx, int32_t max_k, Proposal& out) {
  out.clear();
  const int64_t L = static_cast<int64_t>(ctx.size());
  for (int32_t n = std::min<int64_t>(n_max_, L - 1); n >= n_min_; --n) {
    const int32_t* suffix = ctx.data() + (L - n);
    // The most recent earlier occurrence that has at least one token after it.
    for (int64_t start = L - n - 1; start >= 0; --start) {
      if (!std::equal(suffix, suffix + n, ctx.data() + start)) continue;
      const int64_t from = start + n, to = std::min<int64_t>(L, from + max_k);
      out.tokens.assign(ctx.begin() + from, ctx.begin() + to);
      return;
    }
  }
}

namespace {
// The draft's chain: the target's without the history-based penalties (q
// needs no history: any q keeps the target's distribution), on its own
// random stream.
SamplerParams draft_params(const SamplerParams& sp) {
  SamplerParams d = sp;
  d.repeat_penalty = 1.0f;
  d.presence_penalty = d.frequency_penalty = 0.0f;
  d.seed = sp.seed ^ 0x9e3779b97f4a7c15ull;
  return d;
}
}  // namespace

DraftProposer::DraftProposer(Session& draft, const SamplerParams& sp, int32_t n_vocab, int seq)
    : s_(draft), sampler_(draft_params(sp)), n_vocab_(std::min<int32_t>(n_vocab, draft.n_vocab())), seq_(seq) {
  if (n_vocab_ <= 0) throw Error("draft: no shared vocabulary");
}

void DraftProposer::set_sampling(const SamplerParams& sp) { sampler_ = Sampler(draft_params(sp)); }

size_t DraftProposer::follow(const std::vector<int32_t>& ctx) {
  // Keep the common prefix with what the draft holds (at most all but the
  // last token, which is evaluated for the logits).
  const size_t keep = std::min(common_prefix(held_, ctx), ctx.size() - 1);
  const int32_t land = s_.truncate(seq_, static_cast<int32_t>(keep));
  if (land < 0 || static_cast<size_t>(land) > keep) throw Error("draft: truncate landed past the common prefix");
  held_.resize(land);
  return static_cast<size_t>(land);
}

void DraftProposer::begin(const std::vector<int32_t>& prompt) {
  if (prompt.size() < 2 || static_cast<int32_t>(prompt.size()) >= s_.n_ctx()) return;
  for (int32_t t : prompt)
    if (t >= n_vocab_) return;
  const size_t land = follow(prompt);
  if (land + 1 >= prompt.size()) return;
  const std::vector<int32_t> rest(prompt.begin() + static_cast<std::ptrdiff_t>(land), prompt.end() - 1);
  prefill(s_, rest, seq_, 512);
  held_.insert(held_.end(), rest.begin(), rest.end());
}

void DraftProposer::propose(const std::vector<int32_t>& ctx, int32_t max_k, Proposal& out) {
  out.clear();
  catch_up_s_ = 0;
  if (ctx.empty()) return;
  for (int32_t t : ctx)
    if (t >= n_vocab_) return;  // a token the draft does not know: no guess
  const int32_t room = s_.n_ctx() - static_cast<int32_t>(ctx.size());
  if (room <= 0) return;
  max_k = std::min(max_k, room);
  // After a step the draft lacks one or two tokens (the last accepted one it
  // never evaluated, the target's own); more is catching up.
  const auto t0 = std::chrono::steady_clock::now();
  const size_t land = follow(ctx);
  const std::vector<int32_t> rest(ctx.begin() + static_cast<std::ptrdiff_t>(land), ctx.end());
  const std::vector<float>* logits = &prefill(s_, rest, seq_, 512);
  held_.insert(held_.end(), rest.begin(), rest.end());
  if (rest.size() > 2) catch_up_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const bool greedy = sampler_.params().temp <= 0.0f;
  for (int32_t i = 0; i < max_k; ++i) {
    row_.assign(logits->end() - s_.n_vocab(), logits->end());
    for (size_t t = static_cast<size_t>(n_vocab_); t < row_.size(); ++t) row_[t] = -std::numeric_limits<float>::infinity();
    sampler_.distribution(row_.data(), static_cast<int32_t>(row_.size()), q_);
    const int32_t id = greedy ? q_[0].id : sampler_.draw(q_);
    out.tokens.push_back(id);
    if (!greedy) out.q.push_back(q_);
    if (i + 1 == max_k) break;
    Batch b;
    b.add(id, static_cast<int32_t>(held_.size()), seq_, true);
    logits = &s_.forward(b);
    held_.push_back(id);
  }
}

std::string draft_vocab_mismatch(const Tokenizer& t, const Tokenizer& d) {
  if (t.model() != d.model())
    return "the draft's tokenizer is " + d.model() + ", the target's " + t.model();
  if (t.n_vocab() != d.n_vocab())
    return "the draft's vocabulary has " + std::to_string(d.n_vocab()) + " tokens, the target's " +
           std::to_string(t.n_vocab());
  for (int32_t i = 0; i < t.n_vocab(); ++i)
    if (t.token_text(i) != d.token_text(i))
      return "token " + std::to_string(i) + " is '" + t.token_text(i) + "' in the target's vocabulary, '" +
             d.token_text(i) + "' in the draft's";
  if (t.bos() != d.bos() || t.eos() != d.eos())
    return "the special tokens differ (bos " + std::to_string(t.bos()) + "/" + std::to_string(d.bos()) + ", eos " +
           std::to_string(t.eos()) + "/" + std::to_string(d.eos()) + ")";
  std::vector<int32_t> a = t.eog_ids(), b = d.eog_ids();
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  if (a != b) return "the end-of-generation tokens differ";
  return "";
}

MtpProposer::MtpProposer(Session& target, int32_t n_vocab, int seq) : s_(target), n_vocab_(n_vocab), seq_(seq) {
  cache_ = s_.model().new_mtp_cache(s_.n_ctx(), 1, Session::ubatch_tokens(s_.hparams()));
  s_.keep_hidden(true);
}

MtpProposer::~MtpProposer() = default;

void MtpProposer::propose(const std::vector<int32_t>& ctx, int32_t max_k, Proposal& out) {
  out.clear();
  catch_up_s_ = 0;
  if (ctx.size() < 2 || max_k < 1) return;
  const auto t0 = std::chrono::steady_clock::now();
  const Model& m = s_.model();
  const int64_t E = m.hparams().n_embd, V = m.hparams().n_vocab;
  const int32_t P = static_cast<int32_t>(ctx.size()) - 1;  // the pending token's position
  // Keep the MTP positions whose hidden state and next token are still
  // the context's (the chained ones of the last call never are: they were
  // made from the layer's own state).
  const size_t same = common_prefix(held_, ctx);
  int32_t keep = static_cast<int32_t>(std::min<size_t>(same, held_.size()));
  keep = std::max(0, std::min(keep - 1, P - 1));  // at least the last position runs: its logits guess
  if (cache_->truncate(0, keep) != keep) throw Error("mtp: its cache did not rewind to " + std::to_string(keep));
  // Positions keep .. P - 1: the target's state there and the token after it.
  const int32_t n = P - keep;
  tok_.resize(static_cast<size_t>(n));
  pos_.resize(static_cast<size_t>(n));
  seq_ids_.assign(static_cast<size_t>(n), 0);
  hid_.assign(static_cast<size_t>(n) * E, 0.0f);
  for (int32_t j = keep; j < P; ++j) {
    tok_[j - keep] = ctx[static_cast<size_t>(j) + 1];
    pos_[j - keep] = j;
    if (const float* h = s_.hidden_at(seq_, j)) std::copy(h, h + E, hid_.begin() + static_cast<std::ptrdiff_t>((j - keep) * E));
  }
  out_.assign(1, n - 1);
  logits_.resize(static_cast<size_t>(V));
  h_next_.resize(static_cast<size_t>(E));
  auto run = [&](int32_t rows) {
    const BatchView v{tok_.data(), pos_.data(), seq_ids_.data(), rows, out_.data(), 1};
    m.forward_mtp(s_.pool(), *cache_, v, hid_.data(), logits_.data(), h_next_.data());
    const int32_t lim = static_cast<int32_t>(std::min<int64_t>(n_vocab_, V));
    return static_cast<int32_t>(std::max_element(logits_.begin(), logits_.begin() + lim) - logits_.begin());
  };
  int32_t guess = run(n);
  held_.assign(ctx.begin(), ctx.end());
  s_.drop_hidden(seq_, P);  // what comes after is evaluated with the next verification
  // More rows than one step can accept: the prompt, or tokens decoded while
  // speculation was off (left out of adaptive k's per-token cost).
  if (n > max_k + 1) catch_up_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out.tokens.push_back(guess);
  // Chained: the guess at position P + i with the layer's own state.
  for (int32_t i = 1; i < max_k && P + i < cache_->n_ctx(); ++i) {
    tok_.assign(1, guess);
    pos_.assign(1, P + i - 1);
    seq_ids_.assign(1, 0);
    hid_.assign(h_next_.begin(), h_next_.end());
    out_.assign(1, 0);
    guess = run(1);
    out.tokens.push_back(guess);
  }
}

}  // namespace kvad
