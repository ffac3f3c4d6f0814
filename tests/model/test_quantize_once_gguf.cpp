// The quantize-once cache with a GGUF as its source (model/quantize_once.h
// quantize_once_gguf) on SmolLM2-135M as the model store keeps it (a
// quantized GGUF): dequantized to f32 it holds exactly the floats the stored
// blocks decode to and gives the stored run's logits; requantized to q8_0 it
// runs, and the second load maps the entry without converting again.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

#include "base/error.h"
#include "engine/session.h"
#include "io/gguf.h"
#include "io/quantize.h"
#include "io/tensor_source.h"
#include "kernels/cpu/kernels.h"
#include "model/quantize_once.h"
#include "model/registry.h"

namespace {

namespace fs = std::filesystem;

std::string smollm2_path() {
  if (const char* p = std::getenv("KVAD_MODEL_SMOLLM2")) return p;
  const char* home = std::getenv("HOME");
  const fs::path d = fs::path(home ? home : "") / ".cache/kvad/models/smollm2-135m.gguf";
  return home && fs::exists(d) ? d.string() : "";
}

// Every position's logits for a fixed token list (ids of SmolLM2's vocabulary).
std::vector<float> logits(std::shared_ptr<const kvad::TensorSource> src, int32_t* n_vocab) {
  std::shared_ptr<kvad::Model> m = kvad::load_model(std::move(src), kvad::DeviceOptions{});
  const std::vector<int32_t> tokens = {1, 504, 3458, 282, 4649, 314, 2, 28, 1096, 3215, 30};
  kvad::Session s(m, 64, 1, 0);
  kvad::Batch b;
  for (size_t i = 0; i < tokens.size(); ++i) b.add(tokens[i], static_cast<int32_t>(i), 0, true);
  *n_vocab = m->hparams().n_vocab;
  return s.forward(b);
}

// max |a - b| / max |a|.
double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, static_cast<double>(std::fabs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(a[i])));
  }
  return worst / scale;
}

class QuantizeOnceGguf : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = smollm2_path();
    if (path_.empty())
      GTEST_SKIP() << "set KVAD_MODEL_SMOLLM2 to a SmolLM2-135M GGUF (or put it at "
                      "~/.cache/kvad/models/smollm2-135m.gguf)";
    cache_ = fs::temp_directory_path() / ("kvad-qgguf-" + std::to_string(::getpid()));
    fs::remove_all(cache_);
  }
  void TearDown() override {
    if (!cache_.empty()) fs::remove_all(cache_);
  }
  std::string path_;
  fs::path cache_;
};

// f32: every tensor the stored file quantizes is F32 now, holding exactly
// what the stored blocks decode to (ggml's dequantize_row_*, kvad's
// to_float), and every other tensor is the same bytes. The logits match the
// stored run's to the bound below: the stored run's matmuls round their
// activations to 8 bits (ggml's vec_dot_type, Q8_0/Q8_1 for the 4-bit
// formats), the f32 run's do not, so the two are not bit-equal.
TEST_F(QuantizeOnceGguf, F32HoldsTheStoredBlocksDecodedAndGivesTheStoredLogits) {
  const std::shared_ptr<const kvad::TensorSource> stored = kvad::gguf_split_source(path_);
  bool hit = true;
  const std::shared_ptr<const kvad::TensorSource> f32 = kvad::quantize_once_gguf(path_, "f32", cache_.string(), &hit);
  EXPECT_FALSE(hit);
  EXPECT_EQ(kvad::gguf_file(*f32)->path(), kvad::quantize_once_gguf_path(path_, "f32", cache_.string()));
  ASSERT_EQ(f32->tensors().size(), stored->tensors().size());
  size_t n_dequantized = 0;
  std::vector<float> want;
  for (const kvad::SourceTensor& s : stored->tensors()) {
    SCOPED_TRACE(s.name);
    const kvad::SourceTensor* t = f32->find(s.name);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->ne, s.ne);
    if (kvad::is_float(s.type)) {
      ASSERT_EQ(t->type, s.type);
      ASSERT_EQ(t->n_bytes, s.n_bytes);
      EXPECT_EQ(std::memcmp(t->data, s.data, s.n_bytes), 0);
      continue;
    }
    ++n_dequantized;
    ASSERT_EQ(t->type, kvad::DType::F32);
    const int64_t n = s.ne[0] * s.ne[1] * s.ne[2] * s.ne[3];
    want.resize(static_cast<size_t>(n));
    kvad::cpu::cpu_kernels(s.type).to_float(s.data, want.data(), n);
    ASSERT_EQ(t->n_bytes, static_cast<size_t>(n) * 4);
    EXPECT_EQ(std::memcmp(t->data, want.data(), t->n_bytes), 0);  // bit for bit
  }
  EXPECT_GT(n_dequantized, 200u);  // the 30 layers' 7 matrices and the embedding
  EXPECT_EQ(f32->get_string(kvad::quantize_once_keys::kQuant, ""), "f32");
  EXPECT_FALSE(f32->get_string("tokenizer.chat_template", "").empty());  // every key kept

  int32_t n_vocab = 0;
  const std::vector<float> a = logits(stored, &n_vocab), b = logits(f32, &n_vocab);
  ASSERT_EQ(a.size(), b.size());
  const double d = rel_diff(a, b);
  std::printf("smollm2 stored vs f32 from the quantize-once cache: max |diff| / max |logit| %.2e\n", d);
  // Measured 4.9e-2 (30 layers of 8-bit activation rounding on the stored
  // side); wrong or misplaced weights give differences of order 1.
  EXPECT_LT(d, 1e-1);
  // The greedy next token agrees wherever the stored run's top two are not
  // a near-tie (within 2% of the largest logit).
  size_t n_clear = 0;
  for (size_t p = 0; p < a.size() / n_vocab; ++p) {
    std::vector<float> x(a.begin() + p * n_vocab, a.begin() + (p + 1) * n_vocab);
    const float* y = &b[p * n_vocab];
    const size_t top = std::max_element(x.begin(), x.end()) - x.begin();
    const float best = x[top];
    x[top] = -INFINITY;
    if (best - *std::max_element(x.begin(), x.end()) < 0.02f * std::fabs(best)) continue;
    ++n_clear;
    EXPECT_EQ(top, static_cast<size_t>(std::max_element(y, y + n_vocab) - y)) << "position " << p;
  }
  EXPECT_GE(n_clear, 5u);
}

// q8_0 from the quantized GGUF: written once (every matrix Q8_0, norms as
// stored), the second call maps the same file untouched, and it runs close
// to the stored model (q8_0 rounding on top of the stored format's).
TEST_F(QuantizeOnceGguf, Q8_0IsWrittenOnceAndReused) {
  bool hit = true;
  const std::shared_ptr<const kvad::TensorSource> q = kvad::quantize_once_gguf(path_, "q8_0", cache_.string(), &hit);
  EXPECT_FALSE(hit);
  const std::string file = kvad::quantize_once_gguf_path(path_, "q8_0", cache_.string());
  ASSERT_TRUE(fs::is_regular_file(file));
  EXPECT_EQ(q->find("blk.3.ffn_down.weight")->type, kvad::DType::Q8_0);
  EXPECT_EQ(q->find("blk.3.attn_norm.weight")->type, kvad::DType::F32);
  // A second conversion would write a new file over it (a .tmp renamed: a
  // new inode); a hit only touches its "last used" time.
  const auto ino = [&] {
    struct stat st{};
    ::stat(file.c_str(), &st);
    return st.st_ino;
  };
  const auto first_ino = ino();
  const std::shared_ptr<const kvad::TensorSource> again = kvad::quantize_once_gguf(path_, "q8_0", cache_.string(), &hit);
  EXPECT_TRUE(hit);
  EXPECT_EQ(ino(), first_ino);
  EXPECT_EQ(kvad::gguf_file(*again)->path(), file);
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(cache_)) n += e.path().extension() == ".gguf";
  EXPECT_EQ(n, 1u);

  int32_t n_vocab = 0;
  const std::vector<float> a = logits(kvad::gguf_split_source(path_), &n_vocab), b = logits(again, &n_vocab);
  const double d = rel_diff(a, b);
  std::printf("smollm2 stored vs q8_0 from the quantize-once cache: max |diff| / max |logit| %.2e\n", d);
  EXPECT_LT(d, 1e-1);
}

TEST_F(QuantizeOnceGguf, UnknownTargetIsAnErrorNamingTheTypes) {
  try {
    kvad::quantize_once_gguf(path_, "q9", cache_.string());
    FAIL() << "q9 accepted";
  } catch (const kvad::Error& e) {
    EXPECT_NE(std::string(e.what()).find("q8_0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("f32"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(cache_));  // refused before anything is written
}

}  // namespace
