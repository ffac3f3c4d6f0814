// The MTP proposer (engine/proposers.h MtpProposer) through generate() on
// the tiny checkpoints with a multi-token prediction layer (DeepSeek V3 from
// an HF folder, Qwen3-Next from llama.cpp's GGUF, recurrent layers and all):
// at temperature 0 the tokens equal plain decoding's, and every first guess
// equals the one a fresh MTP cache computes from a fresh prefill of the
// whole context (the incremental cache, the kept hidden states and the
// rewinds after rejections lose nothing). Random weights: the acceptance
// figures printed mean little.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <random>

#include "base/error.h"
#include "base/thread_pool.h"
#include "engine/generate.h"
#include "engine/proposers.h"
#include "engine/sampler.h"
#include "engine/session.h"
#include "io/gguf.h"
#include "model/hf.h"
#include "model/registry.h"
#include "tokenizer/tokenizer.h"

namespace {

namespace fs = std::filesystem;
const fs::path kTiny = fs::path(KVAD_SOURCE_DIR) / "tests" / "fixtures" / "hf_tiny";

struct Tiny {
  std::shared_ptr<kvad::Model> m;
  std::unique_ptr<kvad::Tokenizer> tok;
};

Tiny load(const std::string& what) {
  Tiny t;
  if (what.ends_with(".gguf")) {
    std::shared_ptr<const kvad::gguf::File> f = kvad::gguf::File::open((kTiny / what).string());
    t.m = kvad::load_model(f, kvad::DeviceOptions{});
    t.tok = kvad::Tokenizer::from_gguf(*f);
  } else {
    t.m = kvad::load_model(kvad::open_hf_checkpoint((kTiny / what).string()), kvad::DeviceOptions{});
    t.tok = kvad::Tokenizer::from_tokenizer_json((kTiny / what / "tokenizer.json").string());
  }
  return t;
}

// Each proposal's first guess against a from-scratch computation: the main
// model over context[0, P) with its pre-norm states, then a fresh MTP cache
// over positions 0 .. P-1.
class Checked final : public kvad::Proposer {
 public:
  Checked(kvad::MtpProposer& inner, const kvad::Model& m) : inner_(inner), m_(m), pool_(2) {}
  void propose(const std::vector<int32_t>& ctx, int32_t max_k, kvad::Proposal& out) override {
    inner_.propose(ctx, max_k, out);
    if (out.tokens.empty()) return;
    const int32_t P = static_cast<int32_t>(ctx.size()) - 1;
    const int64_t E = m_.hparams().n_embd, V = m_.hparams().n_vocab;
    const kvad::KVTypes f32{kvad::DType::F32, kvad::DType::F32};
    std::unique_ptr<kvad::Cache> c = m_.new_cache(256, 1, 64, f32), mc = m_.new_mtp_cache(256, 1, 64, f32);
    std::vector<int32_t> pos(P), seq(P, 0), last{P - 1};
    for (int32_t i = 0; i < P; ++i) pos[i] = i;
    std::vector<float> h(static_cast<size_t>(P * E)), logits(static_cast<size_t>(V));
    m_.forward(pool_, *c, {ctx.data(), pos.data(), seq.data(), P, last.data(), 1}, logits.data(), h.data());
    m_.forward_mtp(pool_, *mc, {ctx.data() + 1, pos.data(), seq.data(), P, last.data(), 1}, h.data(), logits.data(),
                   nullptr);
    const int32_t fresh = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    ++checks;
    if (fresh == out.tokens[0]) ++agree;
  }
  void accepted(int32_t n) override { inner_.accepted(n); }
  double catch_up_s() const override { return inner_.catch_up_s(); }
  std::string name() const override { return "mtp (checked)"; }
  int checks = 0, agree = 0;

 private:
  kvad::MtpProposer& inner_;
  const kvad::Model& m_;
  kvad::ThreadPool pool_;
};

std::vector<int32_t> run(const Tiny& t, kvad::Session& s, const std::vector<int32_t>& prompt, kvad::Proposer* prop,
                         int32_t draft_max, kvad::GenerateStats& st) {
  kvad::SamplerParams sp;
  sp.temp = 0;
  kvad::Sampler sampler(sp);
  kvad::GenerateOptions go;
  go.max_tokens = 40;
  go.proposer = prop;
  go.spec.draft_max = draft_max;
  go.spec.adaptive = false;
  std::vector<int32_t> held;
  go.held = &held;
  s.truncate(0, 0);
  st = kvad::generate(s, *t.tok, sampler, prompt, go, [](const std::string&) { return true; });
  return std::vector<int32_t>(held.begin() + static_cast<std::ptrdiff_t>(prompt.size()), held.end());
}

void greedy_equals_plain(const std::string& what) {
  SCOPED_TRACE(what);
  const Tiny t = load(what);
  ASSERT_EQ(t.m->n_mtp(), 1);
  kvad::Session s(t.m, 256, 1, 2, {kvad::DType::F32, kvad::DType::F32});
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> d(0, t.tok->n_vocab() - 1);
  for (int32_t k : {1, 3}) {
    kvad::MtpProposer mtp(s, t.tok->n_vocab());
    Checked checked(mtp, *t.m);
    int64_t proposed = 0, accepted = 0;
    for (int i = 0; i < 3; ++i) {
      std::vector<int32_t> prompt(6 + 5 * i);
      for (int32_t& x : prompt) x = d(rng);
      kvad::GenerateStats plain_st, st;
      const std::vector<int32_t> want = run(t, s, prompt, nullptr, k, plain_st);
      EXPECT_EQ(run(t, s, prompt, &checked, k, st), want) << "k " << k << " prompt " << i;
      EXPECT_EQ(st.n_generated, plain_st.n_generated);
      EXPECT_GT(st.spec.n_proposed, 0);
      proposed += st.spec.n_proposed;
      accepted += st.spec.n_accepted;
    }
    EXPECT_GT(checked.checks, 0);
    EXPECT_EQ(checked.agree, checked.checks) << "k " << k;
    std::printf("[spec mtp] %s --draft-max %d: proposed %lld, accepted %lld (%.1f%%, random weights)\n",
                what.c_str(), k, static_cast<long long>(proposed), static_cast<long long>(accepted),
                proposed ? 100.0 * accepted / proposed : 0.0);
  }
}

TEST(SpecMtp, GreedyEqualsPlainDeepseekV3) { greedy_equals_plain("deepseek_v3_mtp"); }
TEST(SpecMtp, GreedyEqualsPlainQwen3Next) { greedy_equals_plain("qwen3next/llama.cpp-mtp-f32.gguf"); }

TEST(SpecMtp, AModelWithoutTheLayerIsRefused) {
  const Tiny t = load("qwen3next/llama.cpp-f32.gguf");
  kvad::Session s(t.m, 64, 1, 1);
  EXPECT_THROW(kvad::MtpProposer(s, t.tok->n_vocab()), kvad::Error);
}

}  // namespace
