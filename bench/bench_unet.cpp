// One UNet2DCondition call (model/image/unet.h) at SD 1.5's or SDXL's real
// size: the UNet of kvad's base SD 1.5 config (859.5 M parameters) or SDXL
// base config (2567.5 M) with random f16 weights, or those weights in q8_0
// through the pipeline quantize-once cache (model/image/quantize_pipeline.h:
// linears and convolutions; written once into
// ~/.cache/kvad/bench-models/cache, mapped by later runs), batch 2
// (classifier-free guidance), 77 text tokens of 768 (SD 1.5) or 2048 (SDXL,
// with its pooled text_embeds and time_ids). A plain program; it prints
// numbers and asserts nothing.
//
// The tensor list and the call's FLOPs come from bench/unet_sd15_tensors.txt
// (tools/make_unet_fixtures.py) and bench/unet_sdxl_tensors.txt
// (tools/make_unet_bench_shapes.py): diffusers' UNet2DConditionModel on
// torch's meta device, FLOPs by torch's FlopCounterMode, 2 a multiply-add.
// The FP32 peak is measured here: each thread runs independent chains of
// 8-wide FMAs (AVX2) for about 0.3 s, so it is what these cores reach now,
// under whatever load the machine has.
// Run: build/bench/bench_unet [threads=2] [steps=1] [latent=64] [sd15|sdxl] [f16|q8_0]
// latent: the latent's side (64: a 512 x 512 picture, 32: 256 x 256); the
// FLOP rate is printed for the sides the list has a count for.
#include <immintrin.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/thread_pool.h"
#include "io/tensor_source.h"
#include "kernels/cpu/kernels.h"
#include "model/image/configs.h"
#include "model/image/pipeline.h"
#include "model/image/quantize_pipeline.h"
#include "model/image/unet.h"
#include "model/registry.h"
#include "model/weights.h"
#include "tensor/half.h"
#include "tensor/ops.h"

using namespace kvad;

namespace {

// Random f16 tensors of the listed torch shapes: matrices uniform in ±1/√fan_in
// (torch's default init's scale), norm weights near 1, biases near 0.
class RandomSource final : public TensorSource {
 public:
  /// values false: the names and shapes only (data null), for a cache lookup.
  RandomSource(const std::string& list, bool values) : path_(list) {
    std::ifstream in(list);
    if (!in) throw Error("cannot read " + list);
    std::string line;
    size_t total = 0;
    std::vector<std::pair<std::string, std::vector<int64_t>>> shapes;
    while (std::getline(in, line)) {
      if (line.rfind("# flops ", 0) == 0) flops_[64] = std::stod(line.substr(8));  // unet_sd15_tensors.txt: side 64
      if (line.rfind("# flops_at ", 0) == 0) {
        std::istringstream fs(line.substr(11));
        int64_t at = 0;
        double n = 0;
        fs >> at >> n;
        flops_[at] = n;
      }
      if (line.empty() || line[0] == '#') continue;
      std::istringstream ss(line);
      std::string name;
      ss >> name;
      std::vector<int64_t> dims;
      for (int64_t d; ss >> d;) dims.push_back(d);
      int64_t n = 1;
      for (int64_t d : dims) n *= d;
      total += static_cast<size_t>(n);
      shapes.emplace_back(name, dims);
    }
    if (values) buf_ = std::shared_ptr<uint16_t[]>(new uint16_t[total]);
    const auto to_f16 = cpu::cpu_kernels(DType::F16).from_float;
    size_t at = 0;
    uint32_t state = 1;  // xorshift32: a uniform draw a value, cheap for 860 M of them
    for (const auto& [name, dims] : shapes) {
      SourceTensor t;
      t.name = "unet." + name;
      t.type = DType::F16;
      t.n_dims = static_cast<int>(dims.size());
      for (size_t i = 0; i < dims.size(); ++i) t.ne[i] = dims[dims.size() - 1 - i];  // torch → ggml order
      const int64_t n = t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3];
      const bool vec = dims.size() == 1, bias = name.ends_with("bias");
      const float bound = vec ? 0.1f : 1.0f / std::sqrt(static_cast<float>(n / dims[0]));
      const float base = vec && !bias ? 1.0f : 0.0f;
      // Drawn as floats a chunk at a time, rounded to f16 by the CPU kernels' converter.
      constexpr int64_t kChunk = 4096;
      float f[kChunk];
      for (int64_t i0 = 0; values && i0 < n; i0 += kChunk) {
        const int64_t m = std::min(kChunk, n - i0);
        for (int64_t i = 0; i < m; ++i) {
          state ^= state << 13, state ^= state >> 17, state ^= state << 5;
          const float u = static_cast<float>(state >> 8) * (2.0f / 16777216.0f) - 1.0f;  // [-1, 1)
          f[i] = base + bound * u;
        }
        to_f16(f, buf_.get() + at + i0, m);
      }
      t.data = values ? buf_.get() + at : nullptr;
      t.n_bytes = static_cast<size_t>(n) * 2;
      t.origin = list;
      t.stored_dtype = "F16";
      at += static_cast<size_t>(n);
      tensors_.push_back(std::move(t));
    }
    n_params_ = total;
  }
  /// FLOPs of one call at latent side `side` (0: the list has no count for it).
  double flops(int64_t side) const { return flops_.count(side) ? flops_.at(side) : 0; }
  size_t n_params() const { return n_params_; }

  const std::string& path() const override { return path_; }
  const std::vector<SourceTensor>& tensors() const override { return tensors_; }
  const SourceTensor* find(std::string_view name) const override {
    for (const SourceTensor& t : tensors_)
      if (t.name == name) return &t;
    return nullptr;
  }
  std::shared_ptr<const void> keepalive() const override { return buf_; }
  bool has(std::string_view) const override { return false; }
  int64_t get_int(std::string_view, int64_t def) const override { return def; }
  int64_t require_int(std::string_view key) const override { throw Error(path_ + ": no key " + std::string(key)); }
  double get_float(std::string_view, double def) const override { return def; }
  std::string get_string(std::string_view, const std::string& def) const override { return def; }

 private:
  std::string path_;
  std::vector<SourceTensor> tensors_;
  std::shared_ptr<uint16_t[]> buf_;
  std::map<int64_t, double> flops_;
  size_t n_params_ = 0;
};

// CPU seconds of all the process's threads (on a loaded machine the wall
// time also counts the time other processes hold the cores).
double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// FLOPs one thread does in `seconds` of 8-wide f32 FMAs on 10 independent chains (FMA latency × ports).
__attribute__((target("avx2,fma"))) int64_t fma_chains(int ith, double seconds) {
  const auto t0 = std::chrono::steady_clock::now();
  __m256 a[10];
  for (int i = 0; i < 10; ++i) a[i] = _mm256_set1_ps(1.0f + 1e-3f * static_cast<float>(i + ith));
  const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
  int64_t iters = 0;
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < seconds) {
    for (int k = 0; k < 1000; ++k)
      for (int i = 0; i < 10; ++i) a[i] = _mm256_fmadd_ps(a[i], m, c);
    iters += 1000;
  }
  __m256 s = a[0];
  for (int i = 1; i < 10; ++i) s = _mm256_add_ps(s, a[i]);
  float sink[8];
  _mm256_storeu_ps(sink, s);
  return iters * 10 * 16 + (sink[0] == 12345.0f);  // 8 lanes × 2 FLOP
}

// FLOP/s of all the pool's threads running fma_chains at once.
double fma_peak(ThreadPool& pool) {
  std::atomic<int64_t> total{0};
  const auto t0 = std::chrono::steady_clock::now();
  pool.run([&](int ith, int) { total += fma_chains(ith, 0.3); });
  return static_cast<double>(total) / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) try {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2, steps = argc > 2 ? std::atoi(argv[2]) : 1;
  const int64_t side = argc > 3 ? std::atoi(argv[3]) : 64;
  const std::string shape = argc > 4 ? argv[4] : "sd15", quant = argc > 5 ? argv[5] : "f16";
  if (threads < 1 || steps < 1 || side < 8 || side > 256 || side % 8 != 0 || (shape != "sd15" && shape != "sdxl") ||
      (quant != "f16" && quant != "q8_0"))
    throw Error("usage: bench_unet [threads >= 1] [steps >= 1] [latent side: a multiple of 8 in 8..256] [sd15|sdxl] "
                "[f16|q8_0]");
  ThreadPool pool(threads);
  ops::PoolScope scope(pool);
  const std::string list = std::string(KVAD_SOURCE_DIR) + "/bench/unet_" + shape + "_tensors.txt";
  const auto t0 = std::chrono::steady_clock::now();
  const image::LdmLayout layout = shape == "sdxl" ? image::LdmLayout::SDXL : image::LdmLayout::SD15;
  const image::UNet2DConditionConfig c =
      image::parse_unet_config(nlohmann::json::parse(image::base_configs(layout))["unet"], shape + " unet");
  std::shared_ptr<const TensorSource> weights;
  double flops = 0;
  size_t n_params = 0;
  bool hit = false;
  if (quant == "f16") {
    auto src = std::make_shared<RandomSource>(list, true);
    weights = src;
    flops = src->flops(side), n_params = src->n_params();
  } else {
    // The random values are the same every run (a fixed xorshift seed), so the
    // entry, stamped with the list file, is reused; a hit reads no values.
    image::Pipeline pl;
    pl.path = shape + "-random-unet";
    pl.weight_files = {list};
    const std::string cache = std::string(std::getenv("HOME") ? std::getenv("HOME") : "/tmp") +
                              "/.cache/kvad/bench-models/cache";
    auto names = std::make_shared<RandomSource>(list, false);
    flops = names->flops(side), n_params = names->n_params();
    pl.weights = names;
    if (!std::filesystem::exists(image::quantize_pipeline_path(pl, quant, cache)))
      pl.weights = std::make_shared<RandomSource>(list, true);
    weights = image::quantize_pipeline_once(pl, quant, cache, &hit);
  }
  WeightLoader wl(weights, DeviceOptions{});
  const image::UNet2DCondition unet(wl.root().sub("unet"), c);
  wl.finish();
  std::printf("bench_unet: %s UNet, %.1f M %s parameters, random%s; made in %.1f s; %d threads\n", shape.c_str(),
              n_params / 1e6, quant.c_str(), quant == "f16" ? "" : hit ? " (mapped from the cache)" : " (quantized now)",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), threads);
  std::fflush(stdout);
  std::mt19937 rng(2);
  std::normal_distribution<float> nd;
  const int64_t E = c.cross_attention_dim;
  std::vector<float> x(static_cast<size_t>(4 * side * side * 2)), ctx(static_cast<size_t>(E * 77 * 2)), pooled(1280 * 2);
  for (float& v : x) v = nd(rng);
  for (float& v : ctx) v = nd(rng);
  for (float& v : pooled) v = nd(rng);
  const Tensor xs = ops::from_host(x.data(), DType::F32, {4, side, side, 2}, Device::cpu());
  const Tensor cs = ops::from_host(ctx.data(), DType::F32, {E, 77, 2, 1}, Device::cpu());
  image::UNetAddedCond added;  // SDXL: pooled text_embeds and (h, w, 0, 0, h, w)
  const float px = static_cast<float>(side * 8);
  const std::vector<float> ids{px, px, 0, 0, px, px, px, px, 0, 0, px, px};
  if (shape == "sdxl") {
    added.text_embeds = ops::from_host(pooled.data(), DType::F32, {1280, 2, 1, 1}, Device::cpu());
    added.time_ids = ops::from_host(ids.data(), DType::F32, {6, 2, 1, 1}, Device::cpu());
  }
  const double peak = fma_peak(pool);
  for (int s = 0; s < steps; ++s) {
    const auto a = std::chrono::steady_clock::now();
    const double cpu0 = process_cpu_seconds();
    const Tensor y = unet.forward(xs, 999.0f - 50.0f * s, cs, shape == "sdxl" ? &added : nullptr);
    std::vector<float> out(static_cast<size_t>(y.n_elements()));
    ops::to_host(y, out.data());
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
    const double cpu = process_cpu_seconds() - cpu0;
    double sum = 0;
    for (float v : out) sum += std::fabs(v);
    if (flops <= 0) {
      std::printf("step %d: %.2f s (latent %lld x %lld, batch 2), %.2f CPU s; mean |y| %.3f\n", s, sec,
                  static_cast<long long>(side), static_cast<long long>(side), cpu, sum / out.size());
      std::fflush(stdout);
      continue;
    }
    std::printf("step %d: %.2f s, %.1f GFLOP/s (%.2f TFLOP a call) = %.1f%% of the measured FP32 FMA peak %.1f GFLOP/s; "
                "%.2f CPU s; mean |y| %.3f\n",
                s, sec, flops / sec / 1e9, flops / 1e12, 100 * flops / sec / peak, peak / 1e9,
                cpu, sum / out.size());
    std::fflush(stdout);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_unet: %s\n", e.what());
  return 1;
}
