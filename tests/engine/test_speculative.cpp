// Speculative decoding (engine/speculative.h, engine/proposers.h): at
// temperature 0 the tokens equal plain decoding's, token for token, for
// n-gram lookup, a draft model and a proposer of random guesses, on the tiny
// random checkpoints of several architectures (tools/make_tiny_hf.py) on cpu
// and sim, recurrent layers (qwen3next) included; at temperature 1 the first
// token's distribution over many seeds is the target's (chi-square), not
// the draft's; bad options are errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <random>

#include "base/error.h"
#include "engine/generate.h"
#include "engine/proposers.h"
#include "engine/sampler.h"
#include "engine/session.h"
#include "engine/speculative.h"
#include "model/hf.h"
#include "model/registry.h"

namespace {

namespace fs = std::filesystem;

std::shared_ptr<kvad::Model> tiny(const std::string& name, const char* device = "cpu", int32_t snapshot_every = -1) {
  kvad::DeviceOptions o;
  o.device = device;
  if (snapshot_every >= 0) o.state_snapshot_every = snapshot_every;
  const fs::path dir = fs::path(KVAD_SOURCE_DIR) / "tests" / "fixtures" / "hf_tiny" / name;
  return kvad::load_model(kvad::open_hf_checkpoint(dir.string()), o);
}

std::vector<int32_t> random_prompt(uint32_t seed, int n, int32_t vocab) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> d(0, vocab - 1);
  std::vector<int32_t> p(n);
  for (auto& t : p) t = d(rng);
  return p;
}

// Plain greedy decoding, one forward call per token: the reference.
std::vector<int32_t> plain(std::shared_ptr<const kvad::Model> m, const std::vector<int32_t>& prompt, int n) {
  kvad::Session s(m, 256, 1, 1);
  kvad::SamplerParams sp;
  sp.temp = 0;
  kvad::Sampler sampler(sp);
  std::vector<float> last = kvad::prefill(s, prompt, 0, 512);
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    const int32_t id = sampler.sample(last.data(), s.n_vocab());
    out.push_back(id);
    kvad::Batch b;
    b.add(id, s.cached(0), 0, true);
    last = s.forward(b);
  }
  return out;
}

// Proposes random tokens: nearly every guess is rejected, so every step
// rewinds.
class RandomProposer final : public kvad::Proposer {
 public:
  explicit RandomProposer(int32_t vocab) : d_(0, vocab - 1) {}
  void propose(const std::vector<int32_t>&, int32_t max_k, kvad::Proposal& out) override {
    out.clear();
    for (int32_t i = 0; i < max_k; ++i) out.tokens.push_back(d_(rng_));
  }
  std::string name() const override { return "random"; }

 private:
  std::mt19937 rng_{7};
  std::uniform_int_distribution<int32_t> d_;
};

// Speculative greedy decoding of n tokens; the session's landing after
// every step is checked by SpecDecoder (it throws otherwise) and here.
std::vector<int32_t> speculative(kvad::Session& s, kvad::Proposer& p, const std::vector<int32_t>& prompt, int n,
                                 int32_t k, kvad::SpecStats* stats = nullptr) {
  kvad::SamplerParams sp;
  sp.temp = 0;
  kvad::Sampler sampler(sp);
  s.truncate(0, 0);
  std::vector<int32_t> head(prompt.begin(), prompt.end() - 1);
  if (!head.empty()) kvad::prefill(s, head, 0, 512);
  std::vector<int32_t> ctx = prompt;
  kvad::SpecOptions o;
  o.draft_max = k;
  o.adaptive = false;
  kvad::SpecDecoder dec(s, 0, &p, o);
  std::vector<int32_t> out;
  while (static_cast<int>(out.size()) < n) {
    dec.step(ctx, sampler, nullptr, n - static_cast<int32_t>(out.size()), [&](int32_t id) {
      out.push_back(id);
      return true;
    });
    EXPECT_EQ(s.cached(0), static_cast<int32_t>(ctx.size()) - 1);
  }
  if (stats) *stats = dec.stats();
  return out;
}

struct Arch {
  const char* name;
  const char* draft;  // another tiny model with the same vocabulary
};

class SpecExact : public ::testing::TestWithParam<std::tuple<Arch, const char*>> {};

TEST_P(SpecExact, GreedyTokensEqualPlainDecoding) {
  const auto [arch, device] = GetParam();
  std::shared_ptr<kvad::Model> m = tiny(arch.name, device);
  std::shared_ptr<kvad::Model> other = tiny(arch.draft, device);
  const int32_t V = static_cast<int32_t>(m->hparams().n_vocab);
  const int n = 64;
  for (uint32_t seed : {1u, 2u, 3u}) {
    SCOPED_TRACE("prompt seed " + std::to_string(seed));
    const std::vector<int32_t> prompt = random_prompt(seed, 12 + static_cast<int>(seed) * 5, V);
    const std::vector<int32_t> want = plain(m, prompt, n);
    kvad::Session s(m, 256, 1, 1);
    kvad::SpecStats st;
    {
      kvad::NgramProposer ng(3);
      EXPECT_EQ(speculative(s, ng, prompt, n, 5, &st), want) << "ngram";
      EXPECT_GT(st.n_proposed, 0);
    }
    {
      // The same model as its own draft accepts every guess...
      kvad::Session ds(m, 256, 1, 1);
      kvad::SamplerParams sp;
      sp.temp = 0;
      kvad::DraftProposer dp(ds, sp, V);
      EXPECT_EQ(speculative(s, dp, prompt, n, 4, &st), want) << "draft: the same model";
      EXPECT_EQ(st.n_accepted, st.n_proposed);
    }
    {
      // ...another model rejects most, and every rejection rewinds.
      kvad::Session ds(other, 256, 1, 1);
      kvad::SamplerParams sp;
      sp.temp = 0;
      kvad::DraftProposer dp(ds, sp, V);
      EXPECT_EQ(speculative(s, dp, prompt, n, 3, &st), want) << "draft: " << arch.draft;
      EXPECT_LT(st.n_accepted, st.n_proposed);
    }
    {
      RandomProposer rp(V);
      EXPECT_EQ(speculative(s, rp, prompt, n, 6, &st), want) << "random";
      EXPECT_GT(st.n_proposed - st.n_accepted, 10);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Tiny, SpecExact,
                         ::testing::Combine(::testing::Values(Arch{"llama", "qwen2"}, Arch{"qwen2", "llama"},
                                                              Arch{"gemma3", "llama"}, Arch{"qwen3moe", "qwen2"},
                                                              Arch{"qwen3next", "llama"}),
                                            ::testing::Values("cpu", "sim")),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param).name) + "_" + std::get<1>(info.param);
                         });

// Recurrent layers with and without periodic snapshots: a rejected guess
// lands on the step's own snapshot and re-evaluates the accepted tokens.
TEST(SpecRecurrent, LandsExactlyWithAnySnapshotInterval) {
  for (int32_t every : {0, 4}) {
    SCOPED_TRACE("snapshot every " + std::to_string(every));
    std::shared_ptr<kvad::Model> m = tiny("qwen3next", "cpu", every);
    const int32_t V = static_cast<int32_t>(m->hparams().n_vocab);
    const std::vector<int32_t> prompt = random_prompt(9, 21, V);
    const std::vector<int32_t> want = plain(m, prompt, 64);
    kvad::Session s(m, 256, 1, 1);
    RandomProposer rp(V);
    kvad::SpecStats st;
    EXPECT_EQ(speculative(s, rp, prompt, 64, 5, &st), want);
    EXPECT_GT(st.n_reeval, 0);
    // At most one step's copy is held beyond the periodic snapshots.
    const int64_t periodic = every ? s.cached(0) / every : 0;
    EXPECT_LE(s.cache().n_snapshots(), periodic + 1);
  }
}

// Chi-square statistic of counts against probabilities; cells expected
// below 5 are pooled. *df receives the degrees of freedom.
double chi_square(const std::map<int32_t, int>& counts, const std::vector<kvad::TokenProb>& p, int n, int* df) {
  double chi = 0, pool_e = 0, pool_o = 0;
  int cells = 0;
  std::map<int32_t, double> pm;
  for (const auto& t : p) pm[t.id] += t.p;
  for (const auto& [id, c] : counts)
    if (!pm.count(id)) pm[id] = 0;
  for (const auto& [id, pr] : pm) {
    const double e = pr * n;
    const auto it = counts.find(id);
    const double o = it == counts.end() ? 0 : it->second;
    if (e < 5) { pool_e += e; pool_o += o; continue; }
    chi += (o - e) * (o - e) / e;
    ++cells;
  }
  if (pool_e > 0) {
    chi += (pool_o - pool_e) * (pool_o - pool_e) / std::max(pool_e, 1e-9);
    ++cells;
  }
  *df = cells - 1;
  return chi;
}

// A fixed guess: q = 1 on it, as n-gram lookup's.
class FixedProposer final : public kvad::Proposer {
 public:
  explicit FixedProposer(std::vector<int32_t> t) : t_(std::move(t)) {}
  void propose(const std::vector<int32_t>&, int32_t max_k, kvad::Proposal& out) override {
    out.clear();
    out.tokens.assign(t_.begin(), t_.begin() + std::min<size_t>(t_.size(), max_k));
  }
  std::string name() const override { return "fixed"; }

 private:
  std::vector<int32_t> t_;
};

TEST(SpecDistribution, FirstTokenAtTemperatureOneIsTheTargets) {
  std::shared_ptr<kvad::Model> target = tiny("llama");
  std::shared_ptr<kvad::Model> draft = tiny("qwen2");
  const int32_t V = static_cast<int32_t>(target->hparams().n_vocab);
  const std::vector<int32_t> prompt = random_prompt(5, 16, V);
  kvad::SamplerParams sp;
  sp.temp = 1.0f;
  sp.top_k = 0;
  sp.top_p = 1.0f;
  sp.min_p = 0.0f;
  // The target's and the draft's distributions after the prompt.
  auto dist = [&](std::shared_ptr<const kvad::Model> m, const kvad::SamplerParams& p) {
    kvad::Session s(m, 64, 1, 1);
    std::vector<float> l = kvad::prefill(s, prompt, 0, 512);
    kvad::Sampler smp(p);
    std::vector<kvad::TokenProb> d;
    smp.distribution(l.data(), V, d);
    return d;
  };
  kvad::SamplerParams dsp = sp;
  dsp.temp = 0.25f;  // a sharp draft: q far from p
  const std::vector<kvad::TokenProb> p = dist(target, sp), q = dist(draft, dsp);

  kvad::Session s(target, 64, 1, 1);
  const std::vector<int32_t> head(prompt.begin(), prompt.end() - 1);
  kvad::Session ds(draft, 64, 1, 1);
  kvad::DraftProposer dp(ds, dsp, V);
  std::vector<int32_t> top3;
  {
    std::vector<kvad::TokenProb> qs = q;
    std::sort(qs.begin(), qs.end(), [](auto& a, auto& b) { return a.p > b.p; });
    for (int i = 0; i < 3; ++i) top3.push_back(qs[i].id);
  }
  FixedProposer fp(top3);
  kvad::SpecOptions o;
  o.draft_max = 3;
  o.adaptive = false;
  const int n = 6000;
  for (kvad::Proposer* prop : {static_cast<kvad::Proposer*>(&dp), static_cast<kvad::Proposer*>(&fp)}) {
    SCOPED_TRACE(prop->name());
    std::map<int32_t, int> counts;
    int64_t proposed = 0, accepted = 0;
    for (int i = 0; i < n; ++i) {
      kvad::SamplerParams tsp = sp;
      tsp.seed = 1000 + i;
      kvad::Sampler sampler(tsp);
      s.truncate(0, 0);
      kvad::prefill(s, head, 0, 512);
      std::vector<int32_t> ctx = prompt;
      kvad::SpecDecoder dec(s, 0, prop, o);
      dec.step(ctx, sampler, nullptr, 8, [&](int32_t id) {
        ++counts[id];
        return false;  // the first token only
      });
      proposed += dec.stats().n_proposed;
      accepted += dec.stats().n_accepted;
    }
    EXPECT_GT(proposed, 0);
    int df = 0;
    const double to_p = chi_square(counts, p, n, &df);
    // About p = 1e-4 for the chi-square distribution with df degrees of freedom.
    const double bound = df + 4.0 * std::sqrt(2.0 * df);
    EXPECT_LT(to_p, bound) << "df " << df;
    int df_q = 0;
    const double to_q = chi_square(counts, q, n, &df_q);
    EXPECT_GT(to_q, 10 * (df_q + 4.0 * std::sqrt(2.0 * df_q))) << "df " << df_q;
    std::printf("[spec] %s: chi2 to target %.1f (df %d, bound %.1f), to draft %.1f (df %d); accepted %lld of %lld\n",
                prop->name().c_str(), to_p, df, bound, to_q, df_q, static_cast<long long>(accepted),
                static_cast<long long>(proposed));
  }
}

// The rule itself on a small vocabulary, many draws: accept-or-resample
// gives p whatever q is.
TEST(SpecDistribution, AcceptRuleGivesTheTargetDistribution) {
  const std::vector<kvad::TokenProb> p = {{0, 0.5}, {1, 0.3}, {2, 0.15}, {3, 0.05}};
  const std::vector<kvad::TokenProb> q = {{0, 0.1}, {1, 0.1}, {2, 0.2}, {3, 0.4}, {4, 0.2}};
  kvad::SamplerParams sp;
  sp.temp = 1;
  sp.seed = 3;
  kvad::Sampler s(sp);
  std::map<int32_t, int> counts;
  std::vector<kvad::TokenProb> res;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const int32_t x = s.draw(q);
    const int32_t id = kvad::spec_accept(x, p, q, s, res) ? x : s.draw(res);
    ++counts[id];
  }
  EXPECT_EQ(counts.count(4), 0u);  // p(4) = 0: never
  int df = 0;
  const double chi = chi_square(counts, p, n, &df);
  EXPECT_EQ(df, 3);
  EXPECT_LT(chi, df + 4.0 * std::sqrt(2.0 * df));
}

TEST(SpecOptions, BadValuesAreErrors) {
  kvad::SpecOptions o;
  for (int32_t bad : {0, -1, 257, 1000000}) {
    o.draft_max = bad;
    try {
      o.check();
      ADD_FAILURE() << "draft_max " << bad;
    } catch (const kvad::Error& e) {
      EXPECT_NE(std::string(e.what()).find("--draft-max"), std::string::npos) << e.what();
    }
  }
  o.draft_max = 4;
  o.draft_min = 5;
  EXPECT_THROW(o.check(), kvad::Error);
  o.draft_min = -1;
  EXPECT_THROW(o.check(), kvad::Error);
  o.draft_min = 4;
  EXPECT_NO_THROW(o.check());
  EXPECT_THROW(kvad::NgramProposer(0), kvad::Error);
  EXPECT_THROW(kvad::NgramProposer(65), kvad::Error);
}

TEST(SpecNgram, ProposesWhatFollowedTheLatestMatch) {
  kvad::NgramProposer ng(3);
  kvad::Proposal out;
  // ... 7 8 9 | 1 2 ... 7 8 9 | 4 5 6 ... 7 8 9 -> the latest match continues 4 5 6.
  ng.propose({7, 8, 9, 1, 2, 3, 7, 8, 9, 4, 5, 6, 0, 7, 8, 9}, 2, out);
  EXPECT_EQ(out.tokens, (std::vector<int32_t>{4, 5}));
  ng.propose({1, 2, 3, 4}, 4, out);  // no earlier occurrence of any suffix
  EXPECT_TRUE(out.tokens.empty());
  ng.propose({5, 1, 2, 6, 2}, 4, out);  // only the last token matches: n = 1
  EXPECT_EQ(out.tokens, (std::vector<int32_t>{6, 2}));
}

}  // namespace
