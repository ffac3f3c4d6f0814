#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "base/error.h"
#include "engine/sampler.h"

using kvad::Sampler;
using kvad::SamplerParams;

TEST(Sampler, GreedyPicksArgmax) {
  SamplerParams p;
  p.temp = 0;
  Sampler s(p);
  std::vector<float> l = {0.1f, 3.0f, -1.0f, 2.9f};
  EXPECT_EQ(s.sample(l.data(), 4), 1);
}

TEST(Sampler, SameSeedSameDraws) {
  SamplerParams p;
  p.temp = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0;
  p.seed = 1234;
  std::vector<float> l(100);
  for (int i = 0; i < 100; ++i) l[i] = 0.01f * i;
  Sampler a(p), b(p);
  std::vector<int> da, db;
  for (int i = 0; i < 50; ++i) {
    da.push_back(a.sample(l.data(), 100));
    db.push_back(b.sample(l.data(), 100));
  }
  EXPECT_EQ(da, db);
  p.seed = 99;
  Sampler c(p);
  std::vector<int> dc;
  for (int i = 0; i < 50; ++i) dc.push_back(c.sample(l.data(), 100));
  EXPECT_NE(da, dc);
}

TEST(Sampler, TopKRestrictsCandidates) {
  SamplerParams p;
  p.temp = 5.0f;  // flat: without top-k every token would show up
  p.top_k = 2;
  p.top_p = 1.0f;
  p.min_p = 0;
  Sampler s(p);
  std::vector<float> l = {1.0f, 0.0f, 0.9f, 0.5f};
  for (int i = 0; i < 200; ++i) {
    int t = s.sample(l.data(), 4);
    EXPECT_TRUE(t == 0 || t == 2) << t;
  }
}

TEST(Sampler, TopPKeepsSmallestSetReachingP) {
  SamplerParams p;
  p.temp = 1.0f;
  p.top_k = 0;
  p.top_p = 0.5f;
  p.min_p = 0;
  Sampler s(p);
  // probs ~ 0.64, 0.24, 0.09, 0.03: top-p 0.5 keeps only the first
  std::vector<float> l = {3.0f, 2.0f, 1.0f, 0.0f};
  for (int i = 0; i < 100; ++i) EXPECT_EQ(s.sample(l.data(), 4), 0);
}

TEST(Sampler, MinPDropsUnlikely) {
  SamplerParams p;
  p.temp = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.3f;  // keeps tokens with prob >= 0.3 * p_max
  Sampler s(p);
  std::vector<float> l = {2.0f, 1.5f, -3.0f, -4.0f};
  std::map<int, int> seen;
  for (int i = 0; i < 300; ++i) seen[s.sample(l.data(), 4)]++;
  EXPECT_EQ(seen.count(2) + seen.count(3), 0u);
  EXPECT_GT(seen[1], 0);
}

TEST(Sampler, RepeatPenaltyDemotesSeenTokens) {
  SamplerParams p;
  p.temp = 0;
  p.repeat_penalty = 2.0f;
  Sampler s(p);
  std::vector<float> l = {2.0f, 1.5f, -1.0f};
  s.accept(0);  // 2.0 / 2 = 1.0 < 1.5
  EXPECT_EQ(s.sample(l.data(), 3), 1);
}

// NaN / +inf logits are an error for the request that
// sampled them (the scheduler ends only that request); -inf is a masked token.
TEST(Sampler, NanAndInfLogitsThrow) {
  for (int32_t top_k : {0, 2}) {
    for (float temp : {0.0f, 0.8f}) {
      SamplerParams p;
      p.top_k = top_k;
      p.temp = temp;
      Sampler s(p);
      std::vector<float> nan_l = {1.0f, std::nanf(""), 0.5f};
      EXPECT_THROW(s.sample(nan_l.data(), 3), kvad::Error);
      std::vector<float> inf_l = {1.0f, std::numeric_limits<float>::infinity(), 0.5f};
      EXPECT_THROW(s.sample(inf_l.data(), 3), kvad::Error);
      const float ninf = -std::numeric_limits<float>::infinity();
      std::vector<float> none = {ninf, ninf};
      EXPECT_THROW(s.sample(none.data(), 2), kvad::Error);
      std::vector<float> masked = {ninf, 0.0f, ninf};
      for (int i = 0; i < 20; ++i) EXPECT_EQ(s.sample(masked.data(), 3), 1);
    }
  }
}

// top_k = 0 selects without sorting the whole vocabulary; what top-p and
// min-p keep must be exactly the set a full sort keeps (the reference below).
TEST(Sampler, TopKOffKeepsTheSortedReferenceSet) {
  const int32_t nv = 262144;  // Gemma 3's vocabulary
  std::mt19937 g(7);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<float> l(nv);
  for (auto& x : l) x = nd(g);
  for (float top_p : {0.3f, 0.9f, 1.0f}) {
    for (float min_p : {0.0f, 0.2f}) {
      std::vector<int32_t> idx(nv);
      for (int32_t i = 0; i < nv; ++i) idx[i] = i;
      std::sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
      const float mx = l[idx[0]];
      double sum = 0;
      for (float x : l) sum += std::exp(static_cast<double>(x - mx));
      size_t n = nv;
      if (top_p < 1.0f) {
        double cum = 0;
        for (size_t i = 0; i < static_cast<size_t>(nv); ++i) {
          cum += std::exp(static_cast<double>(l[idx[i]] - mx)) / sum;
          if (cum >= top_p) { n = i + 1; break; }
        }
      }
      if (min_p > 0) {
        size_t keep = 1;
        while (keep < n && std::exp(static_cast<double>(l[idx[keep]] - mx)) >= min_p) ++keep;
        n = keep;
      }
      std::set<int32_t> ref(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(n));
      SamplerParams p;
      p.top_k = 0;
      p.top_p = top_p;
      p.min_p = min_p;
      p.temp = 1.0f;
      p.seed = 3;
      Sampler s(p);
      std::set<int32_t> seen;
      const auto t0 = std::chrono::steady_clock::now();
      const int draws = 200;
      for (int i = 0; i < draws; ++i) {
        const int32_t t = s.sample(l.data(), nv);
        ASSERT_TRUE(ref.count(t)) << "top_p " << top_p << " min_p " << min_p << ": token " << t << " outside the "
                                  << n << " the sorted reference keeps";
        seen.insert(t);
      }
      const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / draws;
      std::printf("top_k 0, top_p %.1f, min_p %.1f: kept %zu of %d, %.0f us per token, %zu distinct drawn\n", top_p,
                  min_p, n, nv, us, seen.size());
      if (n > 1) {
        EXPECT_GT(seen.size(), 1u);
      }
    }
  }
}
