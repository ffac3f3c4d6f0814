// Speculative decoding through generate() on the real SmolLM2-135M: at
// temperature 0 the text equals plain decoding's over 64 tokens for several
// prompts, with n-gram lookup and with a draft (the same file in its own
// Session); draft_vocab_mismatch refuses Gemma 3's vocabulary for SmolLM2's.
#include <gtest/gtest.h>

#include "engine/generate.h"
#include "engine/grammar/grammar.h"
#include "engine/proposers.h"
#include "engine/sampler.h"
#include "engine/session.h"
#include "io/gguf.h"
#include "model/registry.h"
#include "model_path.h"
#include "tokenizer/tokenizer.h"

namespace {

struct Loaded {
  std::shared_ptr<const kvad::gguf::File> f;
  std::shared_ptr<kvad::Model> m;
  std::unique_ptr<kvad::Tokenizer> tok;
};

Loaded load(const std::string& name, const char* device = "cpu") {
  Loaded l;
  const std::string path = kvad::test::find_model(name);
  if (path.empty()) return l;
  l.f = kvad::gguf::File::open(path);
  kvad::DeviceOptions o;
  o.device = device;
  l.m = kvad::load_model(l.f, o);
  l.tok = kvad::Tokenizer::from_gguf(*l.f);
  return l;
}

// Generated token ids (the text's, re-encoded is not enough: ids are kept
// through a greedy sampler that records them).
std::vector<int32_t> run(const Loaded& l, kvad::Session& s, const std::vector<int32_t>& prompt,
                         kvad::Proposer* prop, kvad::GenerateStats* st_out, kvad::SamplerParams sp = {},
                         kvad::TokenGrammar* grammar = nullptr) {
  sp.temp = 0;
  kvad::Sampler sampler(sp);
  kvad::GenerateOptions go;
  go.grammar = grammar;
  go.max_tokens = 64;
  go.proposer = prop;
  go.spec.draft_max = 6;
  go.spec.adaptive = false;
  std::vector<int32_t> held;
  go.held = &held;
  s.truncate(0, 0);
  const kvad::GenerateStats st = kvad::generate(s, *l.tok, sampler, prompt, go, [](const std::string&) { return true; });
  if (st_out) *st_out = st;
  EXPECT_EQ(static_cast<int32_t>(held.size()), s.cached(0));
  // held = prompt + generated tokens but the last (never evaluated).
  std::vector<int32_t> gen(held.begin() + static_cast<std::ptrdiff_t>(prompt.size()), held.end());
  return gen;
}

void exact_on(const char* device, int n_prompts) {
  const Loaded l = load("smollm2-135m", device);
  if (!l.m) GTEST_SKIP() << "model smollm2-135m not installed (run scripts/setup)";
  const char* prompts[] = {
      "The quick brown fox jumps over the lazy dog. The quick brown fox",
      "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n",
      "Once upon a time, in a land far away, there lived a",
  };
  kvad::Session s(l.m, 512, 1, 2);
  kvad::Session ds(l.m, 512, 1, 2);
  for (int i = 0; i < n_prompts; ++i) {
    SCOPED_TRACE(prompts[i]);
    const std::vector<int32_t> ids = l.tok->encode(prompts[i], true, false);
    kvad::GenerateStats st;
    const std::vector<int32_t> want = run(l, s, ids, nullptr, &st);
    ASSERT_GE(st.n_generated, 64) << "stopped early: " << st.stop;
    kvad::NgramProposer ng(3);
    EXPECT_EQ(run(l, s, ids, &ng, &st), want) << "ngram";
    EXPECT_EQ(st.n_generated, 64);
    EXPECT_GT(st.spec.n_proposed, 0);
    kvad::SamplerParams dsp;
    dsp.temp = 0;
    kvad::DraftProposer dp(ds, dsp, l.m->hparams().n_vocab);
    EXPECT_EQ(run(l, s, ids, &dp, &st), want) << "draft";
    EXPECT_EQ(st.spec.n_accepted, st.spec.n_proposed);
    // The decode steps' forward calls are counted, not their tokens: every
    // step is one forward, and with all proposals accepted far fewer than
    // the tokens chosen.
    EXPECT_EQ(st.n_decode_evals, st.spec.n_steps);
    EXPECT_EQ(st.n_decode_tokens, st.n_generated - 1);
    EXPECT_LT(2 * st.n_decode_evals, st.n_decode_tokens);
    std::printf("[spec] %s prompt %d: ngram/draft proposed %lld accepted %lld\n", device, i,
                static_cast<long long>(st.spec.n_proposed), static_cast<long long>(st.spec.n_accepted));
  }
}

TEST(SpecSmolLM2, GreedyEqualsPlainDecodingCpu) { exact_on("cpu", 3); }
TEST(SpecSmolLM2, GreedyEqualsPlainDecodingSim) { exact_on("sim", 1); }

// The sampler's chain and a grammar compose with speculation: each position
// is judged after the tokens before it were recorded (penalties) and
// accepted (the grammar's state).
TEST(SpecSmolLM2, PenaltiesAndGrammarGiveTheSameTokens) {
  const Loaded l = load("smollm2-135m");
  if (!l.m) GTEST_SKIP() << "model smollm2-135m not installed (run scripts/setup)";
  kvad::Session s(l.m, 512, 1, 2);
  kvad::Session ds(l.m, 512, 1, 2);
  const std::vector<int32_t> ids = l.tok->encode("A list of numbers: 1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2,", true, false);
  kvad::SamplerParams pen;
  pen.repeat_penalty = 1.3f;
  pen.presence_penalty = 0.5f;
  pen.logit_bias = {{17, -5.0f}};
  kvad::GenerateStats st;
  const std::vector<int32_t> want = run(l, s, ids, nullptr, &st, pen);
  kvad::NgramProposer ng(2);
  EXPECT_EQ(run(l, s, ids, &ng, &st, pen), want) << "ngram, penalties";
  EXPECT_GT(st.spec.n_proposed, 0);
  kvad::SamplerParams dsp;
  dsp.temp = 0;
  kvad::DraftProposer dp(ds, dsp, l.m->hparams().n_vocab);
  EXPECT_EQ(run(l, s, ids, &dp, &st, pen), want) << "draft, penalties";

  auto g = kvad::Grammar::parse("root ::= \" \" [0-9] (\", \" [0-9])*\n");
  auto trie = std::make_shared<kvad::TokenTrie>(*l.tok);
  std::vector<int32_t> gwant;
  {
    kvad::TokenGrammar tg(g, trie);
    gwant = run(l, s, ids, nullptr, &st, {}, &tg);
  }
  ASSERT_GT(gwant.size(), 16u);
  for (kvad::Proposer* p : {static_cast<kvad::Proposer*>(&ng), static_cast<kvad::Proposer*>(&dp)}) {
    kvad::TokenGrammar tg(g, trie);
    EXPECT_EQ(run(l, s, ids, p, &st, {}, &tg), gwant) << p->name() << ", grammar";
    EXPECT_GT(st.spec.n_proposed, 0) << p->name();
  }
}

TEST(SpecSmolLM2, DraftWithAnotherVocabularyIsRefused) {
  const Loaded a = load("smollm2-135m");
  const Loaded b = load("gemma3-270m");
  if (!a.m || !b.m) GTEST_SKIP() << "smollm2-135m or gemma3-270m not installed (run scripts/setup)";
  EXPECT_EQ(kvad::draft_vocab_mismatch(*a.tok, *a.tok), "");
  const std::string why = kvad::draft_vocab_mismatch(*a.tok, *b.tok);
  EXPECT_FALSE(why.empty());
  std::printf("[spec] smollm2 vs gemma3: %s\n", why.c_str());
}

}  // namespace
