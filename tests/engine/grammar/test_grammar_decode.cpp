// Grammar-constrained generation through the Scheduler on SmolLM2: outputs
// at a high temperature are sentences of the grammar, generation stops when
// nothing can follow, and decode speed with and without a grammar is
// printed (never asserted).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>

#include "engine/grammar/json_schema.h"
#include "engine/scheduler.h"
#include "io/gguf.h"
#include "model/model.h"
#include "model/registry.h"
#include "model_path.h"
#include "tokenizer/tokenizer.h"

namespace kvad {
namespace {

using oj = nlohmann::ordered_json;

struct Loaded {
  std::shared_ptr<const gguf::File> file;
  std::shared_ptr<Model> model;
  std::shared_ptr<Tokenizer> tok;
};

class GrammarDecode : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string path = test::find_model("smollm2-135m");
    if (path.empty()) return;
    m_ = new Loaded;
    m_->file = gguf::File::open(path);
    m_->model = load_model(m_->file, "cpu");
    m_->tok = Tokenizer::from_gguf(*m_->file);
  }
  static void TearDownTestSuite() { delete m_; m_ = nullptr; }
  void SetUp() override {
    if (!m_) GTEST_SKIP() << "model smollm2-135m not installed (run scripts/setup)";
  }
  static std::unique_ptr<Scheduler> scheduler() {
    SchedulerOptions o;
    o.n_slots = 2;
    o.n_ctx = 512;
    o.n_threads = 2;
    return std::make_unique<Scheduler>(m_->model, m_->tok, o);
  }
  static GenEvent drain(Job& job) {
    GenEvent all;
    for (int i = 0; i < 1200; ++i) {
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
  std::vector<int32_t> prompt(const std::string& user) const {
    return m_->tok->encode("<|im_start|>user\n" + user + "<|im_end|>\n<|im_start|>assistant\n", false, true);
  }
  static Loaded* m_;
};
Loaded* GrammarDecode::m_ = nullptr;

const char* kSchema = R"({"type": "object", "properties": {
  "name": {"type": "string", "minLength": 1, "maxLength": 20},
  "age": {"type": "integer", "minimum": 0, "maximum": 120},
  "born": {"type": "string", "format": "date"},
  "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "maxItems": 3}},
  "required": ["name", "age", "tags"], "additionalProperties": false})";

TEST_F(GrammarDecode, HotSamplingStaysInTheSchema) {
  auto g = json_schema_grammar(oj::parse(kSchema));
  auto sched = scheduler();
  for (uint64_t seed : {1, 2, 3, 4}) {
    GenParams p;
    p.sampling.temp = 1.5f;
    p.sampling.top_k = 0;
    p.sampling.top_p = 1.0f;
    p.sampling.min_p = 0.0f;
    p.sampling.seed = seed;
    p.max_tokens = 200;
    p.grammar = g;
    auto job = sched->submit(prompt("Describe a person as JSON."), p);
    GenEvent ev = drain(*job);
    ASSERT_TRUE(ev.done);
    ASSERT_EQ(ev.finish_reason, "stop") << ev.error << " | " << ev.text;
    GrammarMatcher m(g);
    EXPECT_TRUE(m.accept(ev.text) && m.accepting()) << ev.text;
    const oj v = oj::parse(ev.text);  // throws if not JSON
    EXPECT_TRUE(v.contains("name") && v.contains("age") && v.contains("tags")) << ev.text;
    std::printf("seed %llu: %s\n", static_cast<unsigned long long>(seed), ev.text.c_str());
  }
}

TEST_F(GrammarDecode, GbnfChoiceAndEndOfGrammar) {
  auto g = Grammar::parse("root ::= \"yes\" | \"no\" | \"maybe so\"\n");
  auto sched = scheduler();
  GenParams p;
  p.sampling.temp = 1.0f;
  p.sampling.seed = 5;
  p.max_tokens = 50;
  p.grammar = g;
  GenEvent ev = drain(*sched->submit(prompt("Is the sky blue?"), p));
  ASSERT_EQ(ev.finish_reason, "stop") << ev.error;
  EXPECT_TRUE(ev.text == "yes" || ev.text == "no" || ev.text == "maybe so") << ev.text;
  EXPECT_LE(ev.usage.completion_tokens, 4);
}

// Decode tok/s (tokens after the first over the time after it) without a
// grammar, with any JSON object, and with kSchema; and the mask cost.
TEST_F(GrammarDecode, SpeedPrinted) {
  auto sched = scheduler();
  struct Case { const char* name; std::shared_ptr<const Grammar> g; };
  const Case cases[] = {{"none", nullptr},
                        {"json_object", Grammar::parse(json_any_gbnf(true))},
                        {"json_schema", json_schema_grammar(oj::parse(kSchema))}};
  for (const Case& c : cases) {
    int64_t tokens = 0;
    double seconds = 0, mask_s = 0;
    for (uint64_t seed : {11, 12, 13}) {
      GenParams p;
      p.sampling.temp = 1.0f;
      p.sampling.seed = seed;
      p.max_tokens = 64;
      p.grammar = c.g;
      GenEvent ev = drain(*sched->submit(prompt("Write a JSON object describing a cat."), p));
      ASSERT_TRUE(ev.done) << ev.error;
      if (ev.usage.completion_tokens < 2) continue;
      tokens += ev.usage.completion_tokens - 1;
      seconds += ev.usage.total_s - ev.usage.ttft_s;
      mask_s += ev.usage.grammar_s;
    }
    std::printf("grammar %-12s decode %6.1f tok/s over %lld tokens, mask %.1f us/token\n", c.name,
                seconds > 0 ? tokens / seconds : 0.0, static_cast<long long>(tokens),
                tokens > 0 ? 1e6 * mask_s / static_cast<double>(tokens) : 0.0);
  }
}

}  // namespace
}  // namespace kvad
