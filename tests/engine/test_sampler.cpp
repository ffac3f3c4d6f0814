#include <gtest/gtest.h>

#include <map>
#include <vector>

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
