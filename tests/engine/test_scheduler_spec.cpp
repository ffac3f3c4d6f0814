// Speculative decoding inside the continuous-batching scheduler
// (SchedulerOptions::spec_*, engine/scheduler_spec.cpp): greedy output of
// every slot equals a scheduler that does not speculate, with prompts
// chunked next to decoders, on the real SmolLM2-135M and on a tiny random
// Qwen3-Next (recurrent layers: rejected guesses rewind through snapshots,
// with and without periodic ones); the row threshold turns speculation off;
// bad options are errors.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "engine/scheduler.h"
#include "io/gguf.h"
#include "model/model.h"
#include "model/registry.h"
#include "model_path.h"
#include "tokenizer/tokenizer.h"

using namespace kvad;

namespace {

struct Loaded {
  std::shared_ptr<Model> model;
  std::shared_ptr<Tokenizer> tok;
};

Loaded load(const std::string& path, int32_t snapshot_every = -1) {
  Loaded l;
  std::shared_ptr<const gguf::File> f = gguf::File::open(path);
  DeviceOptions o;
  if (snapshot_every >= 0) o.state_snapshot_every = snapshot_every;
  l.model = load_model(f, o);
  l.tok = Tokenizer::from_gguf(*f);
  return l;
}

GenEvent drain(Job& job) {
  GenEvent all;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline) {
    auto ev = job.wait(std::chrono::milliseconds(100));
    if (!ev) continue;
    all.text += ev->text;
    all.usage = ev->usage;
    if (ev->done) {
      all.done = true;
      all.finish_reason = ev->finish_reason;
      all.error = ev->error;
      break;
    }
  }
  return all;
}

struct Outcome {
  std::vector<GenEvent> out;
  SchedulerMetrics m;
};

// All prompts submitted at once to a scheduler with these options, greedy.
Outcome run(const Loaded& l, const SchedulerOptions& o, const std::vector<std::vector<int32_t>>& prompts,
        int32_t max_tokens) {
  Scheduler sched(l.model, l.tok, o);
  std::vector<std::shared_ptr<Job>> jobs;
  GenParams g;
  g.sampling.temp = 0;
  g.max_tokens = max_tokens;
  for (const auto& p : prompts) jobs.push_back(sched.submit(p, g));
  Outcome r;
  for (auto& j : jobs) r.out.push_back(drain(*j));
  r.m = sched.metrics();
  return r;
}

SchedulerOptions opts(int slots, int32_t per_step) {
  SchedulerOptions o;
  o.n_slots = slots;
  o.n_ctx = 256;
  o.n_threads = 2;
  o.max_prompt_per_step = per_step;
  return o;
}

void expect_same(const Outcome& plain, const Outcome& spec) {
  ASSERT_EQ(plain.out.size(), spec.out.size());
  for (size_t i = 0; i < plain.out.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    ASSERT_TRUE(spec.out[i].done);
    EXPECT_EQ(spec.out[i].error, "");
    EXPECT_EQ(spec.out[i].finish_reason, plain.out[i].finish_reason);
    EXPECT_EQ(spec.out[i].text, plain.out[i].text);
    EXPECT_EQ(spec.out[i].usage.completion_tokens, plain.out[i].usage.completion_tokens);
  }
  EXPECT_EQ(spec.m.generated_tokens_total, plain.m.generated_tokens_total);
  EXPECT_EQ(spec.m.active_slots, 0);
}

}  // namespace

TEST(SchedulerSpec, NgramGreedyEqualsPlainOnSmolLM2) {
  const std::string path = kvad::test::find_model("smollm2-135m");
  if (path.empty()) GTEST_SKIP() << "model smollm2-135m not installed (run scripts/setup)";
  const Loaded l = load(path);
  std::vector<std::vector<int32_t>> prompts;
  for (const char* p : {"1, 2, 3, 4, 5, 6, 7, 8, 9, 10,",
                        "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n",
                        "The quick brown fox jumps over the lazy dog. The quick brown fox", "Once upon a time"})
    prompts.push_back(l.tok->encode(p, true, false));
  // 3 slots for 4 requests, 7 prompt tokens per step: the last joins
  // mid-flight and prompts are chunked next to speculating decoders.
  const Outcome plain = run(l, opts(3, 7), prompts, 24);
  SchedulerOptions o = opts(3, 7);
  o.spec_ngram = 3;
  o.spec.draft_max = 6;
  const Outcome spec = run(l, o, prompts, 24);
  expect_same(plain, spec);
  EXPECT_TRUE(spec.m.spec_on);
  EXPECT_FALSE(plain.m.spec_on);
  EXPECT_GT(spec.m.spec_accepted_tokens_total, 0u);
  EXPECT_LE(spec.m.spec_accepted_tokens_total, spec.m.spec_draft_tokens_total);
  // Verification takes fewer forward calls than one per token.
  EXPECT_LT(spec.m.steps_total, plain.m.steps_total);
  uint64_t drafted = 0, accepted = 0;
  for (const GenEvent& e : spec.out) drafted += e.usage.draft_tokens, accepted += e.usage.draft_accepted;
  EXPECT_EQ(drafted, spec.m.spec_draft_tokens_total);
  EXPECT_EQ(accepted, spec.m.spec_accepted_tokens_total);

  // A threshold of one row: a step's first decode row reaches it, so
  // nothing is ever proposed.
  o.spec_max_rows = 1;
  const Outcome off = run(l, o, prompts, 24);
  expect_same(plain, off);
  EXPECT_EQ(off.m.spec_draft_tokens_total, 0u);
}

// Random weights reject nearly every guess: each verification rewinds the
// recurrent states (Cache::snapshot before the forward), and the text
// stays plain decoding's.
TEST(SchedulerSpec, RecurrentLayersRewindExactly) {
  const std::string path =
      (std::filesystem::path(KVAD_SOURCE_DIR) / "tests/fixtures/hf_tiny/qwen3next/llama.cpp-f32.gguf").string();
  for (int32_t every : {0, 4}) {
    SCOPED_TRACE("snapshot every " + std::to_string(every));
    const Loaded l = load(path, every);
    const int32_t V = l.tok->n_vocab();
    std::mt19937 rng(5);
    std::uniform_int_distribution<int32_t> d(0, V - 1);
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < 3; ++i) {
      std::vector<int32_t> unit(6);
      for (auto& t : unit) t = d(rng);
      std::vector<int32_t> p;
      for (int r = 0; r < 4; ++r) p.insert(p.end(), unit.begin(), unit.end());  // lookup always finds a guess
      prompts.push_back(p);
    }
    const Outcome plain = run(l, opts(2, 5), prompts, 20);
    SchedulerOptions o = opts(2, 5);
    o.spec_ngram = 2;
    o.spec.draft_max = 4;
    o.spec.adaptive = false;
    const Outcome spec = run(l, o, prompts, 20);
    expect_same(plain, spec);
    EXPECT_GT(spec.m.spec_draft_tokens_total, spec.m.spec_accepted_tokens_total);
  }
}

// The model's own MTP layer as every slot's proposer (--spec-mtp): each
// slot's MtpProposer reads the session's kept hidden states, rows of all
// slots in one batch; the recurrent layers rewind after rejections.
TEST(SchedulerSpec, MtpGreedyEqualsPlain) {
  const std::string path =
      (std::filesystem::path(KVAD_SOURCE_DIR) / "tests/fixtures/hf_tiny/qwen3next/llama.cpp-mtp-f32.gguf").string();
  const Loaded l = load(path, 4);
  std::mt19937 rng(9);
  std::uniform_int_distribution<int32_t> d(0, l.tok->n_vocab() - 1);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 3; ++i) {
    std::vector<int32_t> p(7 + 3 * i);
    for (auto& t : p) t = d(rng);
    prompts.push_back(p);
  }
  const Outcome plain = run(l, opts(2, 5), prompts, 20);
  SchedulerOptions o = opts(2, 5);
  o.spec_mtp = true;
  o.spec.draft_max = 3;
  o.spec.adaptive = false;
  const Outcome spec = run(l, o, prompts, 20);
  expect_same(plain, spec);
  EXPECT_GT(spec.m.spec_draft_tokens_total, 0u);
  std::printf("[scheduler mtp] proposed %llu, accepted %llu (random weights)\n",
              static_cast<unsigned long long>(spec.m.spec_draft_tokens_total),
              static_cast<unsigned long long>(spec.m.spec_accepted_tokens_total));
}

TEST(SchedulerSpec, BadOptionsAreErrors) {
  const std::string path =
      (std::filesystem::path(KVAD_SOURCE_DIR) / "tests/fixtures/hf_tiny/qwen3next/llama.cpp-f32.gguf").string();
  const Loaded l = load(path);
  SchedulerOptions o = opts(1, 8);
  o.spec_ngram = 65;
  EXPECT_THROW(Scheduler(l.model, l.tok, o), Error);
  o.spec_ngram = 2;
  o.spec.draft_max = 0;
  EXPECT_THROW(Scheduler(l.model, l.tok, o), Error);
  o.spec.draft_max = 4;
  o.spec_draft = l.model;
  EXPECT_THROW(Scheduler(l.model, l.tok, o), Error);  // both proposers
  o.spec_draft = nullptr;
  o.spec_mtp = true;
  EXPECT_THROW(Scheduler(l.model, l.tok, o), Error);  // ngram and mtp
  o.spec_ngram = 0;
  EXPECT_THROW(Scheduler(l.model, l.tok, o), Error);  // a model without an MTP layer
  o.spec_mtp = false;
  o.spec_ngram = 2;
  o.spec_max_rows = -1;
  EXPECT_THROW(Scheduler(l.model, l.tok, o), Error);
}
