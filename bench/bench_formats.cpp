// Format kernels, SIMD (dispatched) vs scalar reference:
//   BM_vec_dot/<fmt>/<simd>/<n>   one dot of n elements (x: weight row, y: activation row)
//   BM_matvec/<fmt>/<simd>/<k>    rows x k weights times one activation row, the
//                                 decode-step shape (rows = 1536 for k = 576 and
//                                 576 for k = 1536, SmolLM2-135M's MLP); bytes/s
//                                 counts the weight bytes read. Sizes that are
//                                 not whole blocks (576 for the 256-element
//                                 K-quants and TQ) are skipped.
//   BM_from_float/<fmt>/<simd>    quantize one 4096-element activation row
//   BM_to_float/<fmt>/<simd>      dequantize one 4096-element row
// Run: build/bench/bench_formats [--benchmark_filter=q4_1]
#include <benchmark/benchmark.h>

#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/kernels.h"
#include "tensor/dtype.h"

using namespace kvad;

namespace {

const DType kWeights[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q4_0,   DType::Q4_1,
                          DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::Q2_K,   DType::Q3_K,
                          DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_NL, DType::TQ1_0,
                          DType::TQ2_0};

std::vector<float> randn(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> N(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = N(rng);
  return v;
}

std::vector<uint8_t> quantize(DType t, const std::vector<float>& x) {
  std::vector<uint8_t> q(row_bytes(t, static_cast<int64_t>(x.size())));
  cpu::cpu_kernels(t).from_float_ref(x.data(), q.data(), static_cast<int64_t>(x.size()));
  return q;
}

void vec_dot(benchmark::State& st, DType t, bool simd, int64_t n) {
  const cpu::CpuKernels& k = cpu::cpu_kernels(t);
  const DType ty = dtype_info(t).vec_dot_type;
  const auto qx = quantize(t, randn(n, 1)), qy = quantize(ty, randn(n, 2));
  const cpu::VecDotFn f = simd ? k.vec_dot : k.vec_dot_ref;
  for (auto _ : st) {
    float r = f(n, qx.data(), qy.data());
    benchmark::DoNotOptimize(r);
  }
  st.SetItemsProcessed(st.iterations() * n);
  st.SetBytesProcessed(st.iterations() * static_cast<int64_t>(qx.size()));
}

void matvec(benchmark::State& st, DType t, bool simd, int64_t k_dim) {
  const int64_t rows = k_dim == 576 ? 1536 : 576;
  const cpu::CpuKernels& k = cpu::cpu_kernels(t);
  const DType ty = dtype_info(t).vec_dot_type;
  const auto w = quantize(t, randn(rows * k_dim, 3));
  const auto a = quantize(ty, randn(k_dim, 4));
  const size_t rb = row_bytes(t, k_dim);
  const cpu::VecDotFn f = simd ? k.vec_dot : k.vec_dot_ref;
  std::vector<float> out(static_cast<size_t>(rows));
  for (auto _ : st) {
    for (int64_t r = 0; r < rows; ++r) out[r] = f(k_dim, w.data() + r * rb, a.data());
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(st.iterations() * static_cast<int64_t>(w.size()));
  st.SetItemsProcessed(st.iterations() * rows * k_dim);
}

void from_float(benchmark::State& st, DType t, bool simd) {
  const int64_t n = 4096;
  const cpu::CpuKernels& k = cpu::cpu_kernels(t);
  const auto x = randn(n, 5);
  std::vector<uint8_t> q(row_bytes(t, n));
  const cpu::FromFloatFn f = simd ? k.from_float : k.from_float_ref;
  for (auto _ : st) {
    f(x.data(), q.data(), n);
    benchmark::ClobberMemory();
  }
  st.SetItemsProcessed(st.iterations() * n);
}

void to_float(benchmark::State& st, DType t, bool simd) {
  const int64_t n = 4096;
  const cpu::CpuKernels& k = cpu::cpu_kernels(t);
  const auto q = quantize(t, randn(n, 6));
  std::vector<float> y(static_cast<size_t>(n));
  const cpu::ToFloatFn f = simd ? k.to_float : k.to_float_ref;
  for (auto _ : st) {
    f(q.data(), y.data(), n);
    benchmark::ClobberMemory();
  }
  st.SetItemsProcessed(st.iterations() * n);
}

const int registered = [] {
  for (bool simd : {true, false}) {
    const std::string s = simd ? "simd" : "ref";
    for (DType t : kWeights) {
      const std::string f = dtype_name(t);
      const int64_t be = dtype_info(t).block_elems;
      for (int64_t n : {576, 1536, 4096}) {
        if (n % be) continue;  // 576 is not a whole number of 256-element super-blocks
        benchmark::RegisterBenchmark(("BM_vec_dot/" + f + "/" + s + "/" + std::to_string(n)).c_str(),
                                     [=](benchmark::State& st) { vec_dot(st, t, simd, n); });
      }
      for (int64_t kd : {576, 1536}) {
        if (kd % be) continue;
        benchmark::RegisterBenchmark(("BM_matvec/" + f + "/" + s + "/" + std::to_string(kd)).c_str(),
                                     [=](benchmark::State& st) { matvec(st, t, simd, kd); });
      }
      benchmark::RegisterBenchmark(("BM_to_float/" + f + "/" + s).c_str(),
                                   [=](benchmark::State& st) { to_float(st, t, simd); });
    }
    for (DType t : {DType::Q8_0, DType::Q8_1, DType::Q8_K, DType::F16, DType::BF16}) {
      benchmark::RegisterBenchmark(("BM_from_float/" + std::string(dtype_name(t)) + "/" + s).c_str(),
                                   [=](benchmark::State& st) { from_float(st, t, simd); });
    }
  }
  return 0;
}();

}  // namespace

BENCHMARK_MAIN();
