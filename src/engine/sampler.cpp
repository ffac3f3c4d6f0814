#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <unordered_set>

namespace kvad {

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

int32_t Sampler::sample(const float* logits, int32_t n_vocab) {
  work_.assign(logits, logits + n_vocab);
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
  if (p_.temp <= 0.0f) {
    return static_cast<int32_t>(std::max_element(work_.begin(), work_.end()) - work_.begin());
  }
  // Candidates sorted by logit, highest first (only the top k when k is set).
  idx_.resize(n_vocab);
  for (int32_t i = 0; i < n_vocab; ++i) idx_[i] = i;
  int32_t n = n_vocab;
  auto by_logit = [&](int32_t a, int32_t b) { return work_[a] > work_[b] || (work_[a] == work_[b] && a < b); };
  if (p_.top_k > 0 && p_.top_k < n) {
    std::partial_sort(idx_.begin(), idx_.begin() + p_.top_k, idx_.end(), by_logit);
    n = p_.top_k;
  } else {
    std::sort(idx_.begin(), idx_.end(), by_logit);
  }
  // Probabilities at temperature 1 for top-p / min-p.
  const float mx = work_[idx_[0]];
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
  // Temperature, then draw.
  std::vector<double> w(n);
  double wsum = 0;
  for (int32_t i = 0; i < n; ++i)
    wsum += w[i] = std::exp(static_cast<double>(work_[idx_[i]] - mx) / p_.temp);
  std::uniform_real_distribution<double> u(0.0, wsum);
  double r = u(rng_);
  for (int32_t i = 0; i < n; ++i) {
    r -= w[i];
    if (r <= 0) return idx_[i];
  }
  return idx_[n - 1];
}

}  // namespace kvad
