#include "reference_check.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>

#include "engine/session.h"
#include "model/registry.h"
#include "model_path.h"

using nlohmann::json;

namespace kvad::test {

namespace {

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

double margin_of(const json& top10) { return top10[0][1].get<double>() - top10[1][1].get<double>(); }

// Evaluates ids as one batch on a fresh sequence 0 of s; logits of the last.
std::vector<float> prefill_last(Session& s, const std::vector<int32_t>& ids) {
  Batch b;
  for (size_t i = 0; i < ids.size(); ++i) b.add(ids[i], static_cast<int32_t>(i), 0, i + 1 == ids.size());
  return s.forward(b);
}

std::vector<float> step(Session& s, int32_t tok) {
  Batch b;
  b.add(tok, s.cached(0), 0, true);
  return s.forward(b);
}

void check_prompt(ReferenceModel& r, const Tolerances& tol, const json& p, int* exact, double* worst) {
  const std::string text = p.at("text");
  SCOPED_TRACE(text.substr(0, 60));
  const int nv = static_cast<int>(r.model->hparams().n_vocab);
  const auto ids = r.tok->encode(text, /*add_special=*/r.add_bos, /*parse_special=*/false);
  ASSERT_EQ(ids, p.at("prompt_ids").get<std::vector<int32_t>>()) << "tokenization differs";
  const auto greedy = p.at("greedy_ids").get<std::vector<int32_t>>();
  const auto& steps = p.at("steps");
  ASSERT_EQ(steps.size(), greedy.size());
  ASSERT_GE(greedy.size(), 32u);
  // First step where llama.cpp's own choice is a near-tie.
  size_t first_tie = greedy.size();
  for (size_t k = 0; k < steps.size(); ++k)
    if (margin_of(steps[k]) < tol.margin) { first_tie = k; break; }

  // Teacher-forced: follow the reference's tokens, compare every step's logits.
  double prompt_worst = 0;
  {
    Session s(r.model, r.n_ctx, 1, 2);
    std::vector<float> logits = prefill_last(s, ids);
    for (size_t k = 0; k < greedy.size(); ++k) {
      const double d = max_diff(logits.data(), steps[k]);
      prompt_worst = std::max(prompt_worst, d);
      EXPECT_LE(d, tol.logit_tol) << "step " << k;
      if (margin_of(steps[k]) >= tol.margin) {
        EXPECT_EQ(argmax(logits.data(), nv), greedy[k]) << "step " << k;
      }
      logits = step(s, greedy[k]);
    }
  }
  *worst = std::max(*worst, prompt_worst);
  // Free-running greedy continuation.
  Session s(r.model, r.n_ctx, 1, 2);
  std::vector<float> logits = prefill_last(s, ids);
  std::vector<int32_t> ours;
  for (size_t k = 0; k < greedy.size(); ++k) {
    ours.push_back(argmax(logits.data(), nv));
    logits = step(s, ours.back());
  }
  for (size_t k = 0; k < first_tie; ++k) ASSERT_EQ(ours[k], greedy[k]) << "step " << k << " (before any near-tie)";
  if (ours == greedy) ++*exact;
  std::string shown = text.substr(0, 32);
  for (char& c : shown)
    if (c == '\n' || c == '\t') c = ' ';
  std::printf("prompt %-32.32s %4zu tokens, first near-tie at step %2zu, max diff %.4f, continuation %s\n",
              shown.c_str(), ids.size(), first_tie, prompt_worst,
              ours == greedy ? "equal" : "differs after the near-tie");
}

}  // namespace

ReferenceModel* load_reference(const std::string& name) {
  static std::map<std::string, std::unique_ptr<ReferenceModel>> loaded;
  auto it = loaded.find(name);
  if (it != loaded.end()) return it->second.get();
  const std::string path = find_model(name);
  if (path.empty()) return nullptr;
  auto r = std::make_unique<ReferenceModel>();
  r->name = name;
  std::ifstream in(std::string(KVAD_SOURCE_DIR) + "/tests/fixtures/reference/" + name + ".json");
  r->j = json::parse(in);
  const auto& settings = r->j.at("settings");
  r->add_bos = settings.value("add_bos", false);
  r->n_ctx = settings.value("n_ctx", 512);
  r->file = gguf::File::open(path);
  r->model = load_model(r->file);
  r->tok = Tokenizer::from_gguf(*r->file);
  return (loaded[name] = std::move(r)).get();
}

void check_greedy_continuations(ReferenceModel& r, const Tolerances& tol) {
  const auto& prompts = r.j.at("prompts");
  ASSERT_GE(prompts.size(), 5u);
  double worst = 0;
  int exact = 0;
  for (const auto& p : prompts) {
    check_prompt(r, tol, p, &exact, &worst);
    if (::testing::Test::HasFatalFailure()) return;
  }
  EXPECT_GE(exact, tol.min_exact);
  std::printf("%s: %d of %zu continuations equal; max |logit diff| vs llama.cpp (top-10, all steps): %.4f\n",
              r.name.c_str(), exact, prompts.size(), worst);
}

void check_batched_prefill(ReferenceModel& r, const Tolerances& tol) {
  const auto& p = r.j.at("prompts")[0];
  if (!p.contains("prefill_top10")) GTEST_SKIP() << "fixture has no per-position logits";
  const auto ids = p.at("prompt_ids").get<std::vector<int32_t>>();
  const auto& per_pos = p.at("prefill_top10");
  ASSERT_EQ(per_pos.size(), ids.size());
  Session s(r.model, r.n_ctx, 1, 2);
  Batch b;
  for (size_t i = 0; i < ids.size(); ++i) b.add(ids[i], static_cast<int32_t>(i), 0, true);
  const auto& logits = s.forward(b);
  const int nv = s.n_vocab();
  double worst = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    const float* l = logits.data() + i * nv;
    if (margin_of(per_pos[i]) >= tol.margin) {
      EXPECT_EQ(argmax(l, nv), per_pos[i][0][0].get<int>()) << "position " << i;
    }
    worst = std::max(worst, max_diff(l, per_pos[i]));
  }
  EXPECT_LE(worst, tol.logit_tol);
  std::printf("%s: max |logit diff| over prompt positions: %.4f\n", r.name.c_str(), worst);
}

void check_two_sequences_in_one_batch(ReferenceModel& r) {
  const auto a = r.j.at("prompts")[0].at("prompt_ids").get<std::vector<int32_t>>();
  const auto c = r.j.at("prompts")[1].at("prompt_ids").get<std::vector<int32_t>>();
  const int nv = static_cast<int>(r.model->hparams().n_vocab);
  auto last_logits = [&](const std::vector<int32_t>& ids) {
    Session s(r.model, 256, 1, 2);
    return prefill_last(s, ids);
  };
  const auto la = last_logits(a), lc = last_logits(c);
  Session s(r.model, 256, 2, 2);
  Batch b;
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

}  // namespace kvad::test
