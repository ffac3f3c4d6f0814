// The GPU-resident model (model/cuda_decoder.cpp) against the CPU model on
// the same GGUF: logits of a prefill and a greedy continuation.
//
// Models: the paths in $KVAD_CUDA_TEST_MODELS (colon-separated), which
// scripts/device-check fills with random-weight GGUFs it makes on the spot
// (tiny llama, tiny Gemma 3, Qwen2.5-0.5B and Llama-3.2-1B shapes, bf16).
// The GPU loads them with the weights as stored (bf16 → bf16 on the device),
// so only summation order, the bf16 rounding of activations in the prefill
// GEMMs, and f32 vs double norms differ.
//
// Pass: the prefill logits' max abs difference is <= 5% of the CPU logits'
// max abs (bf16 activations in the prefill GEMMs); the 16-token greedy
// continuations are equal, or at the first divergence the CPU's margin
// between its top two logits is below 1% of that max (a near tie that
// either order may break). The test prints the first divergence and the
// margin. Skips "no CUDA device: ..." without a GPU.
// Status: UNVERIFIED ON A GPU in this build.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "engine/session.h"
#include "io/gguf.h"
#include "kernels/cuda/context.h"
#include "model/registry.h"

namespace {

std::vector<std::string> model_paths() {
  std::vector<std::string> v;
  const char* e = std::getenv("KVAD_CUDA_TEST_MODELS");
  if (!e) return v;
  std::stringstream ss(e);
  std::string p;
  while (std::getline(ss, p, ':'))
    if (!p.empty()) v.push_back(p);
  return v;
}

int argmax(const float* x, int n) { return static_cast<int>(std::max_element(x, x + n) - x); }

float margin(const float* x, int n) {
  float a = -INFINITY, b = -INFINITY;
  for (int i = 0; i < n; ++i) {
    if (x[i] > a) { b = a; a = x[i]; }
    else if (x[i] > b) b = x[i];
  }
  return a - b;
}

TEST(CudaModel, GreedyMatchesCpu) {
  std::string why;
  if (!kvad::cuda::available(&why)) GTEST_SKIP() << why;
  const auto paths = model_paths();
  if (paths.empty()) GTEST_SKIP() << "KVAD_CUDA_TEST_MODELS is not set (scripts/device-check sets it)";
  for (const std::string& path : paths) {
    SCOPED_TRACE(path);
    std::shared_ptr<const kvad::gguf::File> f = kvad::gguf::File::open(path);
    std::shared_ptr<kvad::Model> cpu = kvad::load_model(f, "cpu");
    kvad::DeviceOptions o;
    o.device = "cuda";
    std::shared_ptr<kvad::Model> gpu = kvad::load_model(f, o);
    const int n_ctx = 64;
    kvad::Session sc(cpu, n_ctx, 1, 0), sg(gpu, n_ctx, 1, 0);
    const int V = sc.n_vocab();
    std::vector<int32_t> prompt;
    for (int i = 0; i < 12; ++i) prompt.push_back((1 + 37 * i * i + 11 * i) % V);

    kvad::Batch b;
    for (size_t i = 0; i < prompt.size(); ++i) b.add(prompt[i], static_cast<int32_t>(i), 0, true);
    const std::vector<float> lc = sc.forward(b);
    const std::vector<float> lg = sg.forward(b);
    float max_ref = 0, max_diff = 0;
    for (size_t i = 0; i < lc.size(); ++i) {
      max_ref = std::max(max_ref, std::fabs(lc[i]));
      max_diff = std::max(max_diff, std::fabs(lc[i] - lg[i]));
    }
    std::printf("%s: prefill logits max |cpu| %.4g, max |gpu - cpu| %.4g\n", path.c_str(), max_ref, max_diff);
    EXPECT_LE(max_diff, 0.05f * max_ref);

    int tc = argmax(&lc[lc.size() - V], V), tg = argmax(&lg[lg.size() - V], V);
    float div_margin = tc != tg ? margin(&lc[lc.size() - V], V) : 0.0f;
    int pos = static_cast<int>(prompt.size());
    int step = 0, first_div = -1;
    for (; step < 16; ++step) {
      if (tc != tg) {
        first_div = step;
        break;
      }
      kvad::Batch d;
      d.add(tc, pos, 0, true);
      const std::vector<float>& c = sc.forward(d);
      const std::vector<float>& g = sg.forward(d);
      ++pos;
      const int nc = argmax(c.data(), V), ng = argmax(g.data(), V);
      if (nc != ng) div_margin = margin(c.data(), V);
      tc = nc;
      tg = ng;
    }
    if (first_div < 0) {
      std::printf("%s: 16-token greedy continuation equal on GPU and CPU\n", path.c_str());
    } else {
      std::printf("%s: greedy continuation diverges at step %d; CPU top-2 margin there %.4g (max |logit| %.4g)\n",
                  path.c_str(), first_div, div_margin, max_ref);
      EXPECT_LT(div_margin, 0.01f * max_ref) << "divergence at a clear (non-tied) argmax";
    }
  }
}

// The two prefill paths for quantized weights (KVAD_CUDA_GEMM, read when the
// model loads): the same file requantized to q4_k on load (rows that are not
// whole super-blocks fall back to q8_0, so both formats run), loaded once
// with the tensor-core MMA GEMM and once with dequantize + cuBLAS. Both
// multiply the same bf16-rounded operands with f32 accumulation; only the
// summation order differs, so the 12-token prefill logits must agree within
// 1% of their max abs (float differences amplified through the layers stay
// far below that), and the greedy next token must be the same unless the
// top-2 margin is under 1% (a near tie).
TEST(CudaModel, QuantizedPrefillMmaMatchesCublas) {
  std::string why;
  if (!kvad::cuda::available(&why)) GTEST_SKIP() << why;
  const auto paths = model_paths();
  if (paths.empty()) GTEST_SKIP() << "KVAD_CUDA_TEST_MODELS is not set (scripts/device-check sets it)";
  const char* saved = std::getenv("KVAD_CUDA_GEMM");
  const std::string saved_value = saved ? saved : "";
  for (const std::string& path : paths) {
    SCOPED_TRACE(path);
    std::shared_ptr<const kvad::gguf::File> f = kvad::gguf::File::open(path);
    kvad::DeviceOptions o;
    o.device = "cuda";
    o.quant = "q4_k";
    setenv("KVAD_CUDA_GEMM", "mma", 1);
    std::shared_ptr<kvad::Model> mma = kvad::load_model(f, o);
    setenv("KVAD_CUDA_GEMM", "cublas", 1);
    std::shared_ptr<kvad::Model> blas = kvad::load_model(f, o);
    const int n_ctx = 32;
    kvad::Session sm(mma, n_ctx, 1, 0), sb(blas, n_ctx, 1, 0);
    const int V = sm.n_vocab();
    kvad::Batch b;
    for (int i = 0; i < 12; ++i) b.add((3 + 41 * i * i + 7 * i) % V, i, 0, true);
    const std::vector<float> lm = sm.forward(b);
    const std::vector<float> lb = sb.forward(b);
    float max_ref = 0, max_diff = 0;
    for (size_t i = 0; i < lb.size(); ++i) {
      max_ref = std::max(max_ref, std::fabs(lb[i]));
      max_diff = std::max(max_diff, std::fabs(lb[i] - lm[i]));
    }
    std::printf("%s: q4_k prefill logits, mma vs cublas GEMM: max |cublas| %.4g, max |mma - cublas| %.4g\n",
                path.c_str(), max_ref, max_diff);
    EXPECT_LE(max_diff, 0.01f * max_ref);
    const float* last_m = &lm[lm.size() - V];
    const float* last_b = &lb[lb.size() - V];
    if (argmax(last_m, V) != argmax(last_b, V)) {
      EXPECT_LT(margin(last_b, V), 0.01f * max_ref) << "next token differs at a clear argmax";
    }
  }
  if (saved) setenv("KVAD_CUDA_GEMM", saved_value.c_str(), 1);
  else unsetenv("KVAD_CUDA_GEMM");
}

// --device cuda without a GPU is a clear error, not a crash.
TEST(CudaModel, NoDeviceErrorNamesTheReason) {
  std::string why;
  if (kvad::cuda::available(&why)) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_EQ(kvad::backend_unavailable("cuda").rfind("no CUDA device", 0), 0u);
}

}  // namespace
