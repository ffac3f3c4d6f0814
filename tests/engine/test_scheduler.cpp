// The continuous-batching scheduler on the real model: batched results equal
// one-at-a-time results (engine/generate.h, the reference path), prefix
// reuse, cancellation, limits, stop strings; plus StopText and the sampler's
// OpenAI penalties on their own.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/generate.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "engine/session.h"
#include "io/gguf.h"
#include "model/model.h"
#include "model/registry.h"
#include "model_path.h"
#include "tokenizer/tokenizer.h"

using namespace kvad;

// ------------------------------------------------------------------ StopText

TEST(StopText, NoStopsPassesThrough) {
  StopText s({});
  EXPECT_EQ(s.push("abc"), "abc");
  EXPECT_EQ(s.flush(), "");
}

TEST(StopText, StopInsideOnePiece) {
  StopText s({"END"});
  EXPECT_EQ(s.push("hello END world"), "hello ");
  EXPECT_TRUE(s.stopped());
  EXPECT_EQ(s.push("more"), "");
  EXPECT_EQ(s.flush(), "");
}

TEST(StopText, StopSpanningPiecesIsNeverEmitted) {
  StopText s({"<stop>"});
  std::string out;
  for (const char* piece : {"one <", "st", "op", "> two"}) out += s.push(piece);
  EXPECT_EQ(out, "one ");
  EXPECT_TRUE(s.stopped());
}

TEST(StopText, HeldPrefixIsReleasedWhenItDoesNotMatch) {
  StopText s({"abc"});
  EXPECT_EQ(s.push("xa"), "x");   // "a" may start "abc"
  EXPECT_EQ(s.push("b"), "");     // "ab" still may
  EXPECT_EQ(s.push("d"), "abd");  // no longer
  EXPECT_EQ(s.push("ab"), "");
  EXPECT_EQ(s.flush(), "ab");     // end of generation: nothing can follow
  EXPECT_FALSE(s.stopped());
}

TEST(StopText, EarliestOfSeveralStopsWins) {
  StopText s({"world", "lo"});
  EXPECT_EQ(s.push("hello world"), "hel");
}

TEST(StopText, MultibyteStop) {
  StopText s({"\xC3\xA9t\xC3\xA9"});  // "été"
  std::string out = s.push("un \xC3\xA9");
  out += s.push("t");
  out += s.push("\xC3\xA9 chaud");
  EXPECT_EQ(out, "un ");
}

// ---------------------------------------------------------- Sampler penalties

TEST(SamplerPenalties, PresenceAndFrequencyFollowOpenAI) {
  SamplerParams p;
  p.temp = 0;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  Sampler s(p);
  // Token 0 leads by 1.0; after it is generated twice it loses
  // 0.5 + 2 * 0.25 = 1.0 plus a little more once the third count lands.
  std::vector<float> l = {2.0f, 1.0f, 0.0f};
  EXPECT_EQ(s.sample(l.data(), 3), 0);
  s.accept_generated(0);
  EXPECT_EQ(s.sample(l.data(), 3), 0);  // 2 - 0.75 = 1.25 > 1
  s.accept_generated(0);
  s.accept_generated(0);
  EXPECT_EQ(s.sample(l.data(), 3), 1);  // 2 - 1.25 = 0.75 < 1
  // Prompt tokens (accept) do not count.
  Sampler t(p);
  for (int i = 0; i < 10; ++i) t.accept(0);
  EXPECT_EQ(t.sample(l.data(), 3), 0);
  // reset() forgets the counts.
  s.reset();
  EXPECT_EQ(s.sample(l.data(), 3), 0);
}

TEST(SamplerPenalties, NegativePenaltyEncouragesRepeats) {
  SamplerParams p;
  p.temp = 0;
  p.frequency_penalty = -2.0f;
  Sampler s(p);
  std::vector<float> l = {1.0f, 2.0f};
  s.accept_generated(0);
  EXPECT_EQ(s.sample(l.data(), 2), 0);  // 1 + 2 > 2
}

// ------------------------------------------------------ Scheduler on a model

namespace {

struct Loaded {
  std::shared_ptr<const gguf::File> file;
  std::shared_ptr<Model> model;
  std::shared_ptr<Tokenizer> tok;
};

class SchedulerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string path = kvad::test::find_model("smollm2-135m");
    if (path.empty()) return;
    m_ = new Loaded;
    m_->file = gguf::File::open(path);
    m_->model = load_model(m_->file, "cpu");
    m_->tok = Tokenizer::from_gguf(*m_->file);
  }
  static void TearDownTestSuite() {
    delete m_;
    m_ = nullptr;
  }
  void SetUp() override {
    if (!m_) GTEST_SKIP() << "model smollm2-135m not installed (run scripts/setup)";
  }

  std::vector<int32_t> ids(const std::string& text) const { return m_->tok->encode(text, true, false); }

  // The reference: engine/generate.h on its own Session, greedy.
  std::string reference(const std::vector<int32_t>& prompt, int32_t max_tokens) const {
    Session s(m_->model, 512, 1, 2);
    SamplerParams sp;
    sp.temp = 0;
    Sampler sampler(sp);
    GenerateOptions go;
    go.max_tokens = max_tokens;
    std::string out;
    generate(s, *m_->tok, sampler, prompt, go, [&](const std::string& t) {
      out += t;
      return true;
    });
    return out;
  }

  static GenParams greedy(int32_t max_tokens) {
    GenParams g;
    g.sampling.temp = 0;
    g.max_tokens = max_tokens;
    return g;
  }

  // Collects a job's whole output.
  static GenEvent drain(Job& job) {
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

  static Loaded* m_;
};
Loaded* SchedulerTest::m_ = nullptr;

// Greedy continues this for a long time without an end-of-generation token.
const char* kCounting = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10,";

SchedulerOptions opts(int slots, int32_t n_ctx = 512, int32_t per_step = 256) {
  SchedulerOptions o;
  o.n_slots = slots;
  o.n_ctx = n_ctx;
  o.n_threads = 2;
  o.max_prompt_per_step = per_step;
  return o;
}

}  // namespace

TEST_F(SchedulerTest, BatchedEqualsOneAtATime) {
  const std::vector<std::string> prompts = {
      "The capital of France is", "Once upon a time", "1, 2, 3, 4,", "The quick brown fox",
      "In 1492, Columbus",
  };
  const int32_t n = 6;
  std::vector<std::string> want;
  for (const auto& p : prompts) want.push_back(reference(ids(p), n));

  // 3 slots for 5 requests: two wait in the queue and join mid-flight; a
  // small prompt budget splits prompts across steps next to decoders.
  Scheduler sched(m_->model, m_->tok, opts(3, 512, 5));
  std::vector<std::shared_ptr<Job>> jobs;
  for (const auto& p : prompts) jobs.push_back(sched.submit(ids(p), greedy(n)));
  for (size_t i = 0; i < jobs.size(); ++i) {
    GenEvent ev = drain(*jobs[i]);
    ASSERT_TRUE(ev.done);
    EXPECT_EQ(ev.finish_reason, "length");
    EXPECT_EQ(ev.text, want[i]) << prompts[i];
    EXPECT_EQ(ev.usage.completion_tokens, n);
    EXPECT_EQ(ev.usage.prompt_tokens, static_cast<int32_t>(ids(prompts[i]).size()));
  }
  const SchedulerMetrics m = sched.metrics();
  EXPECT_EQ(m.active_slots, 0);
  EXPECT_EQ(m.requests_total, prompts.size());
  EXPECT_GT(m.kv_bytes_per_token, 0u);
}

TEST_F(SchedulerTest, PrefixReuseReportsCachedTokensAndKeepsResults) {
  Scheduler sched(m_->model, m_->tok, opts(2));
  const std::string base = "The history of the Roman Empire begins with";
  const std::vector<int32_t> p1 = ids(base);
  GenEvent a = drain(*sched.submit(p1, greedy(4)));
  ASSERT_EQ(a.finish_reason, "length");
  EXPECT_EQ(a.usage.cached_tokens, 0);
  // The same prompt again: all but the last token come from the cache.
  GenEvent b = drain(*sched.submit(p1, greedy(4)));
  EXPECT_EQ(b.usage.cached_tokens, static_cast<int32_t>(p1.size()) - 1);
  EXPECT_EQ(b.text, a.text);
  // A longer prompt sharing the prefix reuses it, and matches a fresh run.
  const std::vector<int32_t> p2 = ids(base + " the founding of Rome");
  GenEvent c = drain(*sched.submit(p2, greedy(4)));
  EXPECT_GE(c.usage.cached_tokens, static_cast<int32_t>(p1.size()) - 1);
  EXPECT_EQ(c.text, reference(p2, 4));
  EXPECT_GT(sched.metrics().cached_tokens_total, 0u);
}

TEST_F(SchedulerTest, CancelFreesTheSlot) {
  Scheduler sched(m_->model, m_->tok, opts(1));
  auto job = sched.submit(ids(kCounting), greedy(-1));
  // Wait for some output, then cancel.
  std::string got;
  while (got.size() < 10) {
    auto ev = job->wait(std::chrono::milliseconds(100));
    if (ev) got += ev->text;
    ASSERT_FALSE(ev && ev->done);
  }
  job->cancel();
  GenEvent end = drain(*job);
  EXPECT_EQ(end.finish_reason, "cancelled");
  // The one slot serves the next request.
  GenEvent next = drain(*sched.submit(ids("Hello"), greedy(3)));
  EXPECT_EQ(next.finish_reason, "length");
  EXPECT_EQ(sched.metrics().active_slots, 0);
}

TEST_F(SchedulerTest, CancelWhileQueued) {
  Scheduler sched(m_->model, m_->tok, opts(1));
  auto running = sched.submit(ids(kCounting), greedy(8));
  auto queued = sched.submit(ids("Hello"), greedy(5));
  queued->cancel();
  EXPECT_EQ(drain(*queued).finish_reason, "cancelled");
  EXPECT_EQ(drain(*running).finish_reason, "length");
}

TEST_F(SchedulerTest, StopStringEndsGeneration) {
  const std::vector<int32_t> p = ids("1, 2, 3, 4, 5,");
  const std::string free_run = reference(p, 8);
  ASSERT_NE(free_run.find(" 8"), std::string::npos) << free_run;
  Scheduler sched(m_->model, m_->tok, opts(1));
  GenParams g = greedy(8);
  g.stop = {", 7", "never"};  // spans three tokens
  GenEvent ev = drain(*sched.submit(p, g));
  EXPECT_EQ(ev.finish_reason, "stop");
  EXPECT_EQ(ev.text, free_run.substr(0, free_run.find(", 7")));
  EXPECT_LT(ev.usage.completion_tokens, 8);
}

TEST_F(SchedulerTest, ContextFullEndsWithLength) {
  Scheduler sched(m_->model, m_->tok, opts(1, 40));
  const std::vector<int32_t> p = ids(kCounting);
  ASSERT_LT(p.size(), 40u);
  GenEvent ev = drain(*sched.submit(p, greedy(-1)));
  EXPECT_EQ(ev.finish_reason, "length");
  // Positions p.size() .. 39 take generated tokens, plus the last one sampled.
  EXPECT_EQ(ev.usage.completion_tokens, 40 - static_cast<int32_t>(p.size()) + 1);
}

TEST_F(SchedulerTest, SubmitRejectsBadPrompts) {
  SchedulerOptions o = opts(1, 8);
  o.max_queue = 1;
  Scheduler sched(m_->model, m_->tok, o);
  EXPECT_THROW(sched.submit({}, greedy(1)), Error);
  EXPECT_THROW(sched.submit(std::vector<int32_t>(8, 1), greedy(1)), Error);   // no room to generate
  EXPECT_THROW(sched.submit({1, -5}, greedy(1)), Error);
  EXPECT_THROW(sched.submit({1, 1 << 30}, greedy(1)), Error);
  // max_tokens 0: done at once, no slot.
  GenEvent z = drain(*sched.submit({1, 2}, greedy(0)));
  EXPECT_EQ(z.finish_reason, "length");
  EXPECT_EQ(z.usage.completion_tokens, 0);
}

TEST_F(SchedulerTest, QueueBoundAndShutdown) {
  SchedulerOptions o = opts(1);
  o.max_queue = 1;
  Scheduler sched(m_->model, m_->tok, o);
  auto a = sched.submit(ids(kCounting), greedy(-1));
  // Wait until `a` holds the slot, so the queue is empty.
  while (sched.metrics().active_slots == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  auto b = sched.submit(ids("Hello"), greedy(4));
  EXPECT_THROW(sched.submit(ids("Hi"), greedy(4)), QueueFullError);
  sched.shutdown();
  EXPECT_THROW(sched.submit(ids("Hi"), greedy(4)), ShuttingDownError);
  GenEvent ea = drain(*a), eb = drain(*b);
  EXPECT_EQ(ea.finish_reason, "error");
  EXPECT_NE(ea.error.find("shutting down"), std::string::npos);
  EXPECT_EQ(eb.finish_reason, "error");
}

TEST_F(SchedulerTest, SeededSamplingIsReproducibleUnderBatching) {
  GenParams g;
  g.sampling.temp = 1.0f;
  g.sampling.top_k = 0;
  g.sampling.top_p = 1.0f;
  g.sampling.min_p = 0;
  g.sampling.seed = 42;
  g.max_tokens = 6;
  Scheduler one(m_->model, m_->tok, opts(1));
  const std::string alone = drain(*one.submit(ids("Tell me a story"), g)).text;
  Scheduler many(m_->model, m_->tok, opts(3));
  auto x = many.submit(ids("Something else entirely"), greedy(6));
  auto y = many.submit(ids("Tell me a story"), g);
  auto z = many.submit(ids("A third prompt here"), greedy(6));
  EXPECT_EQ(drain(*y).text, alone);
  drain(*x);
  drain(*z);
}

// A request whose sampling fails (here NaN logits from
// a NaN penalty) ends alone; the request batched next to it is untouched.
TEST_F(SchedulerTest, AFailingRequestEndsOnlyItself) {
  Scheduler sched(m_->model, m_->tok, opts(2));
  const std::vector<int32_t> good = ids("The capital of France is");
  const std::string want = reference(good, 8);
  GenParams bad = greedy(8);
  bad.sampling.temp = 0.8f;
  bad.sampling.frequency_penalty = std::nanf("");
  auto jb = sched.submit(ids(kCounting), bad);
  auto jg = sched.submit(good, greedy(8));
  GenEvent eb = drain(*jb), eg = drain(*jg);
  EXPECT_EQ(eb.finish_reason, "error");
  EXPECT_NE(eb.error.find("NaN"), std::string::npos) << eb.error;
  EXPECT_EQ(eg.finish_reason, "length");
  EXPECT_EQ(eg.text, want);
  // Both slots serve again.
  EXPECT_EQ(drain(*sched.submit(good, greedy(8))).text, want);
  EXPECT_EQ(sched.metrics().active_slots, 0);
}

// A cached prefix is reused only by the same tenant.
TEST_F(SchedulerTest, PrefixCacheIsPerTenant) {
  const std::vector<int32_t> p = ids("The history of the Roman Empire begins with the founding of Rome");
  for (bool reuse_all : {false, true}) {
    SchedulerOptions o = opts(2);
    o.cache_reuse_all = reuse_all;
    Scheduler sched(m_->model, m_->tok, o);
    GenParams a = greedy(4), b = greedy(4);
    a.tenant = "key-a";
    b.tenant = "key-b";
    GenEvent a1 = drain(*sched.submit(p, a));
    EXPECT_EQ(a1.usage.cached_tokens, 0);
    GenEvent b1 = drain(*sched.submit(p, b));
    EXPECT_EQ(b1.usage.cached_tokens, reuse_all ? static_cast<int32_t>(p.size()) - 1 : 0) << reuse_all;
    EXPECT_EQ(b1.text, a1.text);
    // The owner still finds its prefix (the other tenant took the other slot).
    GenEvent a2 = drain(*sched.submit(p, a));
    EXPECT_EQ(a2.usage.cached_tokens, static_cast<int32_t>(p.size()) - 1);
    EXPECT_EQ(sched.metrics().cached_tokens_total, static_cast<uint64_t>(p.size() - 1) * (reuse_all ? 2 : 1));
  }
}

// cancel() ends a request within one step, while it
// decodes and while its prompt is still being evaluated in chunks.
TEST_F(SchedulerTest, CancelTakesEffectWithinOneStep) {
  {
    Scheduler sched(m_->model, m_->tok, opts(1));
    auto job = sched.submit(ids(kCounting), greedy(-1));
    std::string got;
    while (got.size() < 10) {
      auto ev = job->wait(std::chrono::milliseconds(100));
      if (ev) got += ev->text;
      ASSERT_FALSE(ev && ev->done);
    }
    const uint64_t steps0 = sched.metrics().steps_total;
    job->cancel();
    EXPECT_EQ(drain(*job).finish_reason, "cancelled");
    const uint64_t steps1 = sched.metrics().steps_total;
    std::printf("decoding: %llu step(s) after cancel()\n", static_cast<unsigned long long>(steps1 - steps0));
    EXPECT_LE(steps1 - steps0, 1u);
  }
  {
    // 8 prompt tokens a step: a long prompt takes many steps.
    Scheduler sched(m_->model, m_->tok, opts(1, 512, 8));
    std::string text;
    for (int i = 0; i < 12; ++i) text += kCounting;
    const std::vector<int32_t> p = ids(text);
    ASSERT_GT(p.size(), 100u);
    auto job = sched.submit(p, greedy(4));
    while (sched.metrics().steps_total < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const uint64_t eval0 = sched.metrics().prompt_eval_tokens_total;
    job->cancel();
    GenEvent end = drain(*job);
    EXPECT_EQ(end.finish_reason, "cancelled");
    EXPECT_EQ(end.usage.completion_tokens, 0);
    const uint64_t eval1 = sched.metrics().prompt_eval_tokens_total;
    std::printf("prefilling: %llu prompt tokens evaluated after cancel() of %zu\n",
                static_cast<unsigned long long>(eval1 - eval0), p.size());
    EXPECT_LE(eval1 - eval0, 8u);
  }
}

namespace {

// A BPE tokenizer of n plain tokens "t0".."t{n-1}".
std::shared_ptr<Tokenizer> plain_tokenizer(int n) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int i = 0; i < n; ++i) vocab["t" + std::to_string(i)] = i;
  const nlohmann::json j = {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}}};
  return std::shared_ptr<Tokenizer>(Tokenizer::from_tokenizer_json_text(j.dump(), "plain.json"));
}

}  // namespace

// n_vocab against the tokenizer at load. More
// tokenizer ids than logits is refused; more logits than ids (padded
// embeddings) never samples an id the tokenizer lacks.
TEST_F(SchedulerTest, VocabularySizesCheckedAtLoad) {
  const int nv = static_cast<int>(m_->model->hparams().n_vocab);
  EXPECT_THROW(Scheduler(m_->model, plain_tokenizer(nv + 1), opts(1)), kvad::Error);
  Scheduler sched(m_->model, plain_tokenizer(100), opts(1));
  GenParams g = greedy(16);
  g.sampling.temp = 1.0f;  // sampling, not argmax: any id could come up
  g.sampling.top_k = 0;
  g.sampling.top_p = 1.0f;
  g.sampling.min_p = 0.0f;
  GenEvent ev = drain(*sched.submit({1, 2, 3, 4}, g));
  EXPECT_EQ(ev.finish_reason, "length") << ev.error;
  EXPECT_EQ(ev.usage.completion_tokens, 16);
}

// OpenAI's n: one prompt evaluated once, the other choices copy it from the
// first's slot (Session::copy_prefix) and evaluate only its last token.
TEST_F(SchedulerTest, SubmitNEvaluatesThePromptOnce) {
  const std::vector<int32_t> p = ids("The history of the Roman Empire begins with the founding of Rome");
  const std::string want = reference(p, 6);
  Scheduler sched(m_->model, m_->tok, opts(3));
  std::vector<std::shared_ptr<Job>> jobs = sched.submit_n(p, greedy(6), 3);
  ASSERT_EQ(jobs.size(), 3u);
  for (size_t i = 0; i < jobs.size(); ++i) {
    GenEvent ev = drain(*jobs[i]);
    ASSERT_EQ(ev.finish_reason, "length") << i << " " << ev.error;
    EXPECT_EQ(ev.text, want) << i;
    EXPECT_EQ(ev.usage.cached_tokens, i == 0 ? 0 : static_cast<int32_t>(p.size()) - 1) << i;
  }
  EXPECT_EQ(sched.metrics().prompt_eval_tokens_total, p.size() + 2);
}

TEST_F(SchedulerTest, SubmitNSeedsEachChoice) {
  GenParams g;
  g.sampling.temp = 1.0f;
  g.sampling.top_k = 0;
  g.sampling.top_p = 1.0f;
  g.sampling.min_p = 0;
  g.sampling.seed = 42;
  g.max_tokens = 8;
  const std::vector<int32_t> p = ids("Tell me a story about a dragon");
  Scheduler sched(m_->model, m_->tok, opts(2));  // the third choice waits for a slot
  std::vector<std::shared_ptr<Job>> jobs = sched.submit_n(p, g, 3);
  std::vector<std::string> got;
  for (auto& j : jobs) got.push_back(drain(*j).text);
  Scheduler one(m_->model, m_->tok, opts(1));
  for (int i = 0; i < 3; ++i) {
    GenParams gi = g;
    gi.sampling.seed = 42 + static_cast<uint64_t>(i);
    EXPECT_EQ(drain(*one.submit(p, gi)).text, got[static_cast<size_t>(i)]) << i;
  }
  // Too many for the queue at once: none is queued.
  SchedulerOptions o = opts(1);
  o.max_queue = 2;
  Scheduler small(m_->model, m_->tok, o);
  EXPECT_THROW(small.submit_n(p, g, 3), QueueFullError);
  EXPECT_EQ(small.metrics().queue_depth, 0u);
}

// A new request copies the prompt prefix a busy slot holds (here: one that
// is still decoding) instead of evaluating it again; its output is the same.
TEST_F(SchedulerTest, PrefixIsCopiedFromABusySlot) {
  const std::string base = "The history of the Roman Empire begins with the founding of Rome";
  const std::vector<int32_t> p1 = ids(base), p2 = ids(base + " and the kings who ruled");
  ASSERT_TRUE(std::equal(p1.begin(), p1.end(), p2.begin()));
  Scheduler sched(m_->model, m_->tok, opts(2));
  auto a = sched.submit(p1, greedy(40));
  // Wait until a decodes.
  std::string a_text;
  for (int i = 0; i < 600 && a_text.empty(); ++i)
    if (auto ev = a->wait(std::chrono::milliseconds(100))) a_text += ev->text;
  ASSERT_FALSE(a_text.empty());
  GenEvent b = drain(*sched.submit(p2, greedy(6)));
  EXPECT_EQ(b.usage.cached_tokens, static_cast<int32_t>(p1.size()));
  EXPECT_EQ(b.text, reference(p2, 6));
  drain(*a);
}
