#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <unordered_set>

#include "base/error.h"
#include "io/generation_config.h"

namespace kvad {

SamplerParams with_generation_config(SamplerParams p, const GenerationConfig& gc) {
  if (gc.temperature) p.temp = *gc.temperature;
  if (gc.top_k) p.top_k = *gc.top_k;
  if (gc.top_p) p.top_p = *gc.top_p;
  if (gc.min_p) p.min_p = *gc.min_p;
  if (gc.repetition_penalty) p.repeat_penalty = *gc.repetition_penalty;
  if (gc.do_sample && !*gc.do_sample) p.temp = 0.0f;
  return p;
}

Sampler::Sampler(const SamplerParams& p) : p_(p), rng_(p.seed) {}

void Sampler::reset() {
  rng_.seed(p_.seed);
  recent_.clear();
  generated_.clear();
}

void Sampler::accept(int32_t token) {
  if (p_.repeat_last_n <= 0) return;
  recent_.push_back(token);
  while (static_cast<int32_t>(recent_.size()) > p_.repeat_last_n) recent_.pop_front();
}

void Sampler::accept_generated(int32_t token) {
  accept(token);
  if (p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f) ++generated_[token];
}

void Sampler::compute_lse() {
  if (lse_valid_) return;
  if (work_.empty()) throw Error("sampler: logprobs asked for before any token was sampled");
  const float mx = *std::max_element(work_.begin(), work_.end());
  double sum = 0;
  for (float l : work_) sum += std::exp(static_cast<double>(l - mx));
  lse_ = static_cast<double>(mx) + std::log(sum);
  lse_valid_ = true;
}

float Sampler::logprob(int32_t id) {
  compute_lse();
  if (id < 0 || id >= static_cast<int32_t>(work_.size()))
    throw Error("sampler: logprob of token " + std::to_string(id) + " outside the vocabulary");
  return static_cast<float>(static_cast<double>(work_[id]) - lse_);
}

std::vector<TokenLogprob> Sampler::top_logprobs(int32_t n) {
  compute_lse();
  std::vector<TokenLogprob> out;
  if (n <= 0) return out;
  const int32_t nv = static_cast<int32_t>(work_.size());
  std::vector<int32_t> idx;
  for (int32_t i = 0; i < nv; ++i)
    if (work_[i] != -std::numeric_limits<float>::infinity()) idx.push_back(i);
  const size_t k = std::min<size_t>(static_cast<size_t>(n), idx.size());
  std::partial_sort(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(k), idx.end(), [&](int32_t a, int32_t b) {
    return work_[a] > work_[b] || (work_[a] == work_[b] && a < b);
  });
  for (size_t i = 0; i < k; ++i)
    out.push_back({idx[i], static_cast<float>(static_cast<double>(work_[idx[i]]) - lse_)});
  return out;
}

size_t Sampler::prepare(const float* logits, int32_t n_vocab) {
  lse_valid_ = false;
  work_.assign(logits, logits + n_vocab);
  for (const auto& [t, bias] : p_.logit_bias)
    if (t >= 0 && t < n_vocab) work_[t] += bias;
  if (p_.repeat_penalty != 1.0f && !recent_.empty()) {
    std::unordered_set<int32_t> seen(recent_.begin(), recent_.end());
    for (int32_t t : seen) {
      if (t < 0 || t >= n_vocab) continue;
      float& l = work_[t];
      l = l > 0 ? l / p_.repeat_penalty : l * p_.repeat_penalty;
    }
  }
  for (const auto& [t, count] : generated_) {
    if (t < 0 || t >= n_vocab) continue;
    work_[t] -= p_.presence_penalty * (count > 0 ? 1.0f : 0.0f) + p_.frequency_penalty * static_cast<float>(count);
  }
  // NaN or +inf logits are a fault of the model's output, not a choice: they
  // would break the ordering below and make every probability NaN. -inf is a
  // masked token (logit_bias, grammars) and stays.
  float mx = -std::numeric_limits<float>::infinity();
  int32_t arg = -1;
  for (int32_t i = 0; i < n_vocab; ++i) {
    const float l = work_[i];
    if (std::isnan(l) || l == std::numeric_limits<float>::infinity())
      throw Error("sampler: logit of token " + std::to_string(i) + " is " + (std::isnan(l) ? "NaN" : "+inf"));
    if (l > mx) { mx = l; arg = i; }
  }
  if (arg < 0) throw Error("sampler: no token has a finite logit (n_vocab " + std::to_string(n_vocab) + ")");
  if (p_.temp <= 0.0f) {
    idx_.assign(1, arg);
    w_.assign(1, 1.0);
    return 1;
  }
  if (p_.top_k <= 0 || p_.top_k >= n_vocab) return prepare_unsorted(mx);
  // Candidates sorted by logit, highest first (the top k).
  idx_.resize(n_vocab);
  for (int32_t i = 0; i < n_vocab; ++i) idx_[i] = i;
  int32_t n = p_.top_k;
  auto by_logit = [&](int32_t a, int32_t b) { return work_[a] > work_[b] || (work_[a] == work_[b] && a < b); };
  std::partial_sort(idx_.begin(), idx_.begin() + n, idx_.end(), by_logit);
  // Probabilities at temperature 1 for top-p / min-p.
  std::vector<double> prob(n);
  double sum = 0;
  for (int32_t i = 0; i < n; ++i) sum += prob[i] = std::exp(static_cast<double>(work_[idx_[i]] - mx));
  for (auto& q : prob) q /= sum;
  if (p_.top_p < 1.0f) {
    double cum = 0;
    int32_t keep = n;
    for (int32_t i = 0; i < n; ++i) {
      cum += prob[i];
      if (cum >= p_.top_p) { keep = i + 1; break; }
    }
    n = std::max<int32_t>(1, keep);
  }
  if (p_.min_p > 0.0f) {
    const double floor_p = p_.min_p * prob[0];
    int32_t keep = 1;
    while (keep < n && prob[keep] >= floor_p) ++keep;
    n = keep;
  }
  // Temperature.
  w_.resize(n);
  for (int32_t i = 0; i < n; ++i) w_[i] = std::exp(static_cast<double>(work_[idx_[i]] - mx) / p_.temp);
  return static_cast<size_t>(n);
}

int32_t Sampler::draw(size_t n) {
  double wsum = 0;
  for (size_t i = 0; i < n; ++i) wsum += w_[i];
  std::uniform_real_distribution<double> u(0.0, wsum);
  double r = u(rng_);
  for (size_t i = 0; i < n; ++i) {
    r -= w_[i];
    if (r <= 0) return idx_[i];
  }
  return idx_[n - 1];
}

int32_t Sampler::sample(const float* logits, int32_t n_vocab) {
  const size_t n = prepare(logits, n_vocab);
  if (p_.temp <= 0.0f) return idx_[0];
  return draw(n);
}

void Sampler::distribution(const float* logits, int32_t n_vocab, std::vector<TokenProb>& out) {
  const size_t n = prepare(logits, n_vocab);
  double wsum = 0;
  for (size_t i = 0; i < n; ++i) wsum += w_[i];
  out.resize(n);
  for (size_t i = 0; i < n; ++i) out[i] = {idx_[i], w_[i] / wsum};
}

int32_t Sampler::draw(const std::vector<TokenProb>& dist) {
  if (dist.empty()) throw Error("sampler: draw from an empty distribution");
  double sum = 0;
  for (const TokenProb& t : dist) sum += t.p;
  std::uniform_real_distribution<double> u(0.0, sum);
  double r = u(rng_);
  for (const TokenProb& t : dist) {
    r -= t.p;
    if (r <= 0) return t.id;
  }
  return dist.back().id;
}

double Sampler::uniform() { return std::uniform_real_distribution<double>(0.0, 1.0)(rng_); }

size_t Sampler::prepare_unsorted(float mx) {
  // top_k off: no sort of the whole vocabulary. min_p is a threshold on the
  // weight relative to the best token; top-p keeps the smallest set of the
  // most likely tokens reaching p, found by selecting a growing number of
  // the best candidates (nth_element + sort of those only) until their mass
  // reaches p, which is a few hundred tokens for a trained model's
  // distribution. The kept set is the same as sorting everything would give
  // (ties by lower id first).
  const int32_t n_vocab = static_cast<int32_t>(work_.size());
  idx_.clear();
  double sum = 0;  // weights at temperature 1 over all tokens
  const double floor_w = p_.min_p > 0.0f ? static_cast<double>(p_.min_p) : 0.0;
  if (p_.top_p >= 1.0f && floor_w <= 0) {
    // Nothing to cut: every token with a finite logit is a candidate.
    for (int32_t i = 0; i < n_vocab; ++i)
      if (work_[i] != -std::numeric_limits<float>::infinity()) idx_.push_back(i);
  } else {
    for (int32_t i = 0; i < n_vocab; ++i) {
      const double w = std::exp(static_cast<double>(work_[i] - mx));
      sum += w;
      if (w > 0 && w >= floor_w) idx_.push_back(i);
    }
  }
  auto by_logit = [&](int32_t a, int32_t b) { return work_[a] > work_[b] || (work_[a] == work_[b] && a < b); };
  size_t n = idx_.size();
  if (p_.top_p < 1.0f) {
    const double target = static_cast<double>(p_.top_p) * sum;
    size_t k = std::min<size_t>(n, 256);
    size_t sorted = 0;  // idx_[0, sorted) holds the best `sorted` candidates in order
    for (;;) {
      if (k < n) std::nth_element(idx_.begin() + sorted, idx_.begin() + k, idx_.begin() + n, by_logit);
      std::sort(idx_.begin() + sorted, idx_.begin() + k, by_logit);
      sorted = k;
      double cum = 0;
      size_t keep = 0;
      while (keep < k && cum < target) cum += std::exp(static_cast<double>(work_[idx_[keep++]] - mx));
      if (cum >= target || k == n) { n = std::max<size_t>(1, keep); break; }
      k = std::min(n, k * 8);
    }
  }
  // Temperature (drawn in index order when nothing was sorted: the
  // distribution is the same).
  w_.resize(n);
  for (size_t i = 0; i < n; ++i) w_[i] = std::exp(static_cast<double>(work_[idx_[i]] - mx) / p_.temp);
  return n;
}

}  // namespace kvad
