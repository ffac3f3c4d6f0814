// One loaded model shared by two Sessions on two threads at once (DESIGN.md
// seam 4: forward never changes the model). Each thread decodes greedily
// from its own prompt and must get exactly the tokens it gets when it runs
// alone. Run under ThreadSanitizer (the tsan preset) this also shows that
// nothing the two calls touch is written by both: the model's members, the
// op layer's state, the kernels' scratch.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "engine/session.h"
#include "io/gguf.h"
#include "model/hf.h"
#include "model/registry.h"
#include "model_path.h"

namespace {

namespace fs = std::filesystem;

// A prompt of n ids in [0, n_vocab), different for each `salt`.
std::vector<int32_t> prompt(int64_t n_vocab, int n, int salt) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(static_cast<int32_t>((7 + 31 * i + 101 * salt) % n_vocab));
  return p;
}

// What one decode gives: the greedy tokens and every step's logits.
struct Decoded {
  std::vector<int32_t> tokens;
  std::vector<float> logits;
};

// Greedy decoding: the prompt in one forward call (cut by the cache into
// micro-batches and, for recurrent layers, at snapshots), then n_new tokens
// one by one; the argmax of each step's logits.
Decoded greedy(const std::shared_ptr<const kvad::Model>& m, const std::vector<int32_t>& p, int n_new) {
  kvad::Session s(m, 256, 1, 2);
  const int64_t V = m->hparams().n_vocab;
  kvad::Batch b;
  for (size_t i = 0; i < p.size(); ++i) b.add(p[i], static_cast<int32_t>(i), 0, i + 1 == p.size());
  Decoded d;
  int32_t pos = static_cast<int32_t>(p.size());
  for (int step = 0; step < n_new; ++step) {
    const std::vector<float>& l = s.forward(b);
    d.logits.insert(d.logits.end(), l.begin(), l.begin() + V);
    const int32_t next = static_cast<int32_t>(std::max_element(l.begin(), l.begin() + V) - l.begin());
    d.tokens.push_back(next);
    b.clear();
    b.add(next, pos++, 0, true);
  }
  return d;
}

// Two threads, each decoding its own prompt `rounds` times on the shared
// model, against each prompt decoded alone first: the same tokens, and the
// same logits bit for bit (the kernels split work over each session's own
// pool the same way every time).
void expect_shared_equals_alone(const std::shared_ptr<const kvad::Model>& m, int n_prompt, int n_new, int rounds = 2) {
  const int64_t V = m->hparams().n_vocab;
  const std::vector<int32_t> pa = prompt(V, n_prompt, 0), pb = prompt(V, n_prompt + 5, 1);
  const Decoded want_a = greedy(m, pa, n_new), want_b = greedy(m, pb, n_new);
  ASSERT_NE(want_a.logits, want_b.logits) << "the two prompts should decode differently, or the test shows nothing";
  std::vector<Decoded> got_a(rounds), got_b(rounds);
  std::string err_a, err_b;
  auto worker = [&](const std::vector<int32_t>& p, std::vector<Decoded>& got, std::string& err) {
    try {
      for (Decoded& g : got) g = greedy(m, p, n_new);
    } catch (const std::exception& e) {
      err = e.what();
    }
  };
  std::thread ta(worker, std::cref(pa), std::ref(got_a), std::ref(err_a));
  std::thread tb(worker, std::cref(pb), std::ref(got_b), std::ref(err_b));
  ta.join();
  tb.join();
  ASSERT_EQ(err_a, "");
  ASSERT_EQ(err_b, "");
  for (int r = 0; r < rounds; ++r) {
    EXPECT_EQ(got_a[r].tokens, want_a.tokens) << "thread a, round " << r;
    EXPECT_EQ(got_b[r].tokens, want_b.tokens) << "thread b, round " << r;
    EXPECT_EQ(got_a[r].logits, want_a.logits) << "thread a, round " << r;
    EXPECT_EQ(got_b[r].logits, want_b.logits) << "thread b, round " << r;
  }
}

std::shared_ptr<const kvad::Model> load_tiny(const std::string& name, int32_t snapshot_every = -1) {
  kvad::DeviceOptions o;
  o.state_snapshot_every = snapshot_every;
  const fs::path dir = fs::path(KVAD_SOURCE_DIR) / "tests" / "fixtures" / "hf_tiny" / name;
  return kvad::load_model(kvad::open_hf_checkpoint(dir.string()), o);
}

TEST(SharedModel, TwoSessionsOnTwoThreadsGetTheirTokensAlone) {
  const std::string path = kvad::test::find_model("smollm2-135m");
  if (path.empty()) GTEST_SKIP() << "model smollm2-135m not installed (run scripts/setup)";
  std::shared_ptr<const kvad::Model> m = kvad::load_model(kvad::gguf::File::open(path));
  expect_shared_equals_alone(m, 12, 6);
}

// Architectures with more per-call state: Qwen3-Next's recurrent layers
// (snapshots every 4 positions cut the prompt into pieces) and gated
// attention, DeepSeek's MLA (an expanded prefill, absorbed decode),
// Mistral's sliding window, Gemma 3's local and global layers, gpt-oss.
TEST(SharedModel, TinyArchitecturesWithStateGetTheirTokensAlone) {
  for (const char* name : {"qwen3next", "deepseek_v2", "mistral", "gemma3", "gpt_oss"}) {
    SCOPED_TRACE(name);
    expect_shared_equals_alone(load_tiny(name, 4), 14, 8);
  }
}

}  // namespace
