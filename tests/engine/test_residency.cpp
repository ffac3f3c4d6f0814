// The residency contract (DESIGN.md seam 3) on the `sim` device, with the
// real store models: once a model's weights and caches live on a device, a
// forward call moves only the batch's ids to the device and the requested
// logits back, one transfer each, nothing per layer. And `sim` runs the CPU
// kernels, so its logits equal the CPU model's bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <vector>

#include "engine/session.h"
#include "io/gguf.h"
#include "model/registry.h"
#include "model_path.h"
#include "tensor/ops.h"

namespace {

void check_model(const char* name) {
  const std::string path = kvad::test::find_model(name);
  if (path.empty()) GTEST_SKIP() << "model " << name << " not installed (run scripts/setup)";
  std::shared_ptr<const kvad::gguf::File> f = kvad::gguf::File::open(path);
  std::shared_ptr<kvad::Model> cpu = kvad::load_model(f, "cpu");
  std::shared_ptr<kvad::Model> sim = kvad::load_model(f, "sim");
  EXPECT_EQ(sim->device(), kvad::Device::sim());
  kvad::Session sc(cpu, 256, 1, 2), ss(sim, 256, 1, 2);
  const int64_t V = sim->hparams().n_vocab;
  // Gemma 3's local layers keep a ring of window + n_batch rows: check the
  // cache reports what it stores and that it is less than a full cache.
  EXPECT_EQ(ss.cache().bytes(), sc.cache().bytes());

  // Prefill 40 tokens (logits of the last), then 6 decode steps.
  kvad::Batch b;
  for (int32_t i = 0; i < 40; ++i) b.add(1 + (i * 37) % 500, i, 0, i == 39);
  kvad::ops::reset_transfer_stats();
  const std::vector<float> lc = sc.forward(b);
  const std::vector<float> ls = ss.forward(b);
  EXPECT_EQ(lc, ls) << "sim logits differ from the CPU's";
  kvad::ops::TransferStats st = kvad::ops::transfer_stats(kvad::DeviceType::Sim);
  EXPECT_EQ(st.to_device, 1);
  EXPECT_EQ(st.to_device_bytes, 4 * (3 * 40 + 1));
  EXPECT_EQ(st.to_host, 1);
  EXPECT_EQ(st.to_host_bytes, 4 * V);

  int32_t tok = 42;
  for (int32_t step = 0; step < 6; ++step) {
    kvad::Batch d;
    d.add(tok, 40 + step, 0, true);
    kvad::ops::reset_transfer_stats();
    const std::vector<float> a = sc.forward(d);
    const std::vector<float> s = ss.forward(d);
    st = kvad::ops::transfer_stats(kvad::DeviceType::Sim);
    // Per decode step: the ids in (token, position, sequence, output row:
    // 16 bytes), the logits out. Nothing per layer.
    EXPECT_EQ(st.to_device, 1) << "step " << step;
    EXPECT_EQ(st.to_device_bytes, 16) << "step " << step;
    EXPECT_EQ(st.to_host, 1) << "step " << step;
    EXPECT_EQ(st.to_host_bytes, 4 * V) << "step " << step;
    ASSERT_EQ(a, s) << "step " << step;
    tok = static_cast<int32_t>(std::max_element(a.begin(), a.end()) - a.begin());
  }
  std::printf("%s on sim: per decode step %lld transfer in (%lld B), %lld out (%lld B); logits equal the CPU's\n", name,
              static_cast<long long>(st.to_device), static_cast<long long>(st.to_device_bytes),
              static_cast<long long>(st.to_host), static_cast<long long>(st.to_host_bytes));
}

TEST(Residency, SmolLM2OnSim) { check_model("smollm2-135m"); }
TEST(Residency, Gemma3OnSim) { check_model("gemma3-270m"); }

// Gemma 3's sliding-window layers keep only window + n_batch positions: the
// cache's bytes per token fall well below a full cache's at long contexts,
// and a rewind the ring cannot honour lands on 0.
TEST(Residency, Gemma3SlidingWindowRing) {
  const std::string path = kvad::test::find_model("gemma3-270m");
  if (path.empty()) GTEST_SKIP() << "model gemma3-270m not installed (run scripts/setup)";
  std::shared_ptr<const kvad::gguf::File> f = kvad::gguf::File::open(path);
  std::shared_ptr<kvad::Model> m = kvad::load_model(f, "cpu");
  const auto& hp = m->hparams();
  const size_t full = static_cast<size_t>(hp.n_layer) * 2 * hp.n_head_kv * hp.head_dim * 2;  // f16 K and V
  for (int32_t n_ctx : {4096, 32768}) {
    kvad::Session s(m, n_ctx, 1, 1);
    std::printf("gemma3-270m -c %d: KV %zu bytes/token stored (a full cache: %zu)\n", n_ctx, s.cache().bytes_per_token(),
                full);
    EXPECT_LT(s.cache().bytes_per_token(), full / 2);
  }
  // A ring of 512 + n_batch rows: rewinding 1200 tokens lands on 0 (the local
  // layers no longer hold what position 100 needs); rewinding a few tokens is exact.
  kvad::Session s(m, 4096, 1, 1);
  for (int32_t p0 = 0; p0 < 1300; p0 += 100) {
    kvad::Batch b;
    for (int32_t i = p0; i < p0 + 100; ++i) b.add(2 + i % 300, i, 0, false);
    s.forward(b);
  }
  EXPECT_EQ(s.truncate(0, 1295), 1295);
  EXPECT_EQ(s.truncate(0, 100), 0);
}

}  // namespace
