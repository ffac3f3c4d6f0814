// kvad's llama forward pass against llama.cpp on the real SmolLM2-135M-Instruct
// Q4_1 file. Fixture: tests/fixtures/reference/smollm2-135m.json, made by
// tools/make_reference.py with llama-cpp-python (see the fixture for its version).
//
// Tolerances. Both engines use the same quantized weights, quantize
// activations to the same Q8_1/Q8_0 blocks and keep K/V in f16; what differs
// is summation order, exp/softmax code and f16 rounding. The model amplifies
// such noise: re-quantizing activations to int8 in every layer turns a 1-ulp
// difference into a whole quantization step now and then. Measured on this
// fixture: kvad's own AVX2 and scalar-reference kernels (each dot exact to a
// few ulp) differ from each other by up to 0.53 in these logits, and each
// differs from llama.cpp by up to ~0.75. So:
//  - kLogitTol = 1.0 bounds |logit_kvad - logit_llama.cpp| for the
//    reference's top-10 tokens at every step: above the measured noise,
//    and far below what a real error does (pairing RoPE dims the NeoX way
//    instead moves logits by 1.7-3.1 and flips top-1 within 4 tokens; a wrong
//    norm or scale moves them by whole units everywhere).
//  - kMargin = 0.5: where llama.cpp's own top-1/top-2 gap is below this, the
//    two engines may legitimately pick different tokens; top-1 must agree at
//    every other step, and free-running greedy continuations must agree up
//    to the first such near-tie. At least kMinExact prompts must agree on
//    all 32 tokens free-running (7 of 16 do on an AVX2 machine, 5 is the
//    bar the engine-core issue set).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/session.h"
#include "io/gguf.h"
#include "model/registry.h"
#include "model_path.h"
#include "tokenizer/tokenizer.h"

using nlohmann::json;

namespace {

constexpr double kLogitTol = 1.0;
constexpr double kMargin = 0.5;
constexpr int kMinExact = 5;

struct Fixture {
  json j;
  std::shared_ptr<const kvad::gguf::File> file;
  std::shared_ptr<kvad::Model> model;
  std::unique_ptr<kvad::Tokenizer> tok;
};

Fixture* load() {
  static Fixture* fx = [] () -> Fixture* {
    const std::string path = kvad::test::find_model("smollm2-135m");
    if (path.empty()) return nullptr;
    auto* f = new Fixture;
    std::ifstream in(std::string(KVAD_SOURCE_DIR) + "/tests/fixtures/reference/smollm2-135m.json");
    f->j = json::parse(in);
    f->file = kvad::gguf::File::open(path);
    f->model = kvad::load_model(f->file);
    f->tok = kvad::Tokenizer::from_gguf(*f->file);
    return f;
  }();
  return fx;
}

int argmax(const float* l, int n) {
  int b = 0;
  for (int i = 1; i < n; ++i)
    if (l[i] > l[b]) b = i;
  return b;
}

// Max |ours - ref| over the reference's top-10 (id, logit) pairs.
double max_diff(const float* ours, const json& top10) {
  double d = 0;
  for (const auto& pair : top10) d = std::max(d, std::fabs(ours[pair[0].get<int>()] - pair[1].get<double>()));
  return d;
}

}  // namespace

TEST(Reference, GreedyContinuationsMatchLlamaCpp) {
  Fixture* fx = load();
  if (!fx) GTEST_SKIP() << "model smollm2-135m not installed (run scripts/setup)";
  const auto& prompts = fx->j.at("prompts");
  ASSERT_GE(prompts.size(), 5u);
  const int nv = static_cast<int>(fx->model->hparams().n_vocab);
  double worst = 0;
  int exact = 0;
  for (const auto& p : prompts) {
    const std::string text = p.at("text");
    SCOPED_TRACE(text);
    const auto ids = fx->tok->encode(text, false, false);
    ASSERT_EQ(ids, p.at("prompt_ids").get<std::vector<int32_t>>()) << "tokenization differs";
    const auto greedy = p.at("greedy_ids").get<std::vector<int32_t>>();
    const auto& steps = p.at("steps");
    ASSERT_EQ(steps.size(), greedy.size());
    ASSERT_GE(greedy.size(), 32u);
    // First step where llama.cpp's own choice is a near-tie.
    size_t first_tie = greedy.size();
    for (size_t k = 0; k < steps.size(); ++k)
      if (steps[k][0][1].get<double>() - steps[k][1][1].get<double>() < kMargin) { first_tie = k; break; }

    // Teacher-forced: follow the reference's tokens, compare every step's logits.
    {
      kvad::Session s(fx->model, 512, 1, 2);
      kvad::Batch b;
      for (size_t i = 0; i < ids.size(); ++i) b.add(ids[i], static_cast<int32_t>(i), 0, i + 1 == ids.size());
      std::vector<float> logits = s.forward(b);
      for (size_t k = 0; k < greedy.size(); ++k) {
        const double d = max_diff(logits.data(), steps[k]);
        worst = std::max(worst, d);
        EXPECT_LE(d, kLogitTol) << "step " << k;
        const double margin = steps[k][0][1].get<double>() - steps[k][1][1].get<double>();
        if (margin >= kMargin) {
          EXPECT_EQ(argmax(logits.data(), nv), greedy[k]) << "step " << k;
        }
        b.clear();
        b.add(greedy[k], s.cached(0), 0, true);
        logits = s.forward(b);
      }
    }
    // Free-running greedy continuation.
    kvad::Session s(fx->model, 512, 1, 2);
    kvad::Batch b;
    for (size_t i = 0; i < ids.size(); ++i) b.add(ids[i], static_cast<int32_t>(i), 0, i + 1 == ids.size());
    std::vector<float> logits = s.forward(b);
    std::vector<int32_t> ours;
    for (size_t k = 0; k < greedy.size(); ++k) {
      ours.push_back(argmax(logits.data(), nv));
      b.clear();
      b.add(ours.back(), s.cached(0), 0, true);
      logits = s.forward(b);
    }
    for (size_t k = 0; k < first_tie; ++k) ASSERT_EQ(ours[k], greedy[k]) << "step " << k << " (before any near-tie)";
    if (ours == greedy) ++exact;
    std::printf("prompt %-32.32s first near-tie at step %2zu, 32-token continuation %s\n", text.c_str(), first_tie,
                ours == greedy ? "equal" : "differs after the near-tie");
  }
  EXPECT_GE(exact, kMinExact);
  std::printf("%d of %zu continuations equal; max |logit diff| vs llama.cpp (top-10, all steps): %.4f\n", exact,
              prompts.size(), worst);
}

TEST(Reference, BatchedPrefillLogitsMatchEveryPosition) {
  Fixture* fx = load();
  if (!fx) GTEST_SKIP() << "model smollm2-135m not installed (run scripts/setup)";
  const auto& p = fx->j.at("prompts")[0];
  if (!p.contains("prefill_top10")) GTEST_SKIP() << "fixture has no per-position logits";
  const auto ids = p.at("prompt_ids").get<std::vector<int32_t>>();
  const auto& per_pos = p.at("prefill_top10");
  ASSERT_EQ(per_pos.size(), ids.size());
  kvad::Session s(fx->model, 512, 1, 2);
  kvad::Batch b;
  for (size_t i = 0; i < ids.size(); ++i) b.add(ids[i], static_cast<int32_t>(i), 0, true);
  const auto& logits = s.forward(b);
  const int nv = s.n_vocab();
  double worst = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    const float* l = logits.data() + i * nv;
    if (per_pos[i][0][1].get<double>() - per_pos[i][1][1].get<double>() >= kMargin) {
      EXPECT_EQ(argmax(l, nv), per_pos[i][0][0].get<int>()) << "position " << i;
    }
    worst = std::max(worst, max_diff(l, per_pos[i]));
  }
  EXPECT_LE(worst, kLogitTol);
  std::printf("max |logit diff| over prompt positions: %.4f\n", worst);
}

TEST(Reference, TwoSequencesInOneBatchMatchSeparateRuns) {
  Fixture* fx = load();
  if (!fx) GTEST_SKIP() << "model smollm2-135m not installed (run scripts/setup)";
  const auto a = fx->j.at("prompts")[0].at("prompt_ids").get<std::vector<int32_t>>();
  const auto c = fx->j.at("prompts")[1].at("prompt_ids").get<std::vector<int32_t>>();
  const int nv = static_cast<int>(fx->model->hparams().n_vocab);
  auto last_logits = [&](const std::vector<int32_t>& ids) {
    kvad::Session s(fx->model, 256, 1, 2);
    kvad::Batch b;
    for (size_t i = 0; i < ids.size(); ++i) b.add(ids[i], static_cast<int32_t>(i), 0, i + 1 == ids.size());
    return s.forward(b);
  };
  const auto la = last_logits(a), lc = last_logits(c);
  kvad::Session s(fx->model, 256, 2, 2);
  kvad::Batch b;
  for (size_t i = 0; i < a.size(); ++i) b.add(a[i], static_cast<int32_t>(i), 0, i + 1 == a.size());
  for (size_t i = 0; i < c.size(); ++i) b.add(c[i], static_cast<int32_t>(i), 1, i + 1 == c.size());
  const auto& l = s.forward(b);
  for (int v = 0; v < nv; ++v) {
    ASSERT_NEAR(l[v], la[v], 1e-3) << v;
    ASSERT_NEAR(l[nv + v], lc[v], 1e-3) << v;
  }
  EXPECT_EQ(s.cached(0), static_cast<int32_t>(a.size()));
  EXPECT_EQ(s.cached(1), static_cast<int32_t>(c.size()));
}

TEST(Session, TruncateReturnsLandingAndRejectsGaps) {
  Fixture* fx = load();
  if (!fx) GTEST_SKIP() << "model smollm2-135m not installed (run scripts/setup)";
  kvad::Session s(fx->model, 16, 1, 1);
  kvad::Batch b;
  for (int i = 0; i < 5; ++i) b.add(1 + i, i, 0, false);
  s.forward(b);
  EXPECT_EQ(s.cached(0), 5);
  EXPECT_EQ(s.truncate(0, 3), 3);
  EXPECT_EQ(s.truncate(0, 10), 3);  // cannot grow
  b.clear();
  b.add(1, 5, 0, true);  // gap: next position is 3
  EXPECT_THROW(s.forward(b), kvad::Error);
  b.clear();
  for (int i = 3; i < 17; ++i) b.add(1, i, 0, false);  // runs past ctx 16
  EXPECT_THROW(s.forward(b), kvad::Error);
  EXPECT_EQ(s.cached(0), 3);  // nothing lost
}
