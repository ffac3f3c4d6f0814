// Matrix products, prefill and decode shapes of SmolLM2-135M (n_embd 576,
// n_ff 1536, 3 kv heads of 64) and Gemma 3 270M (n_embd 640, n_ff 2048):
//   BM_kernel/<fmt>/<how>/<n_out>x<n_in>/<n_tok>   one thread, activations
//       already quantized (and packed): how = gemm (the tiled kernel,
//       kernels.h), vecdot (one dispatched vec_dot per row and token, tokens
//       in tiles of 64: matmul's path for formats without a gemm) or ref
//       (gemm_ref, the scalar definition; small shapes only).
//   BM_matmul/<fmt>/t<threads>/<n_out>x<n_in>/<n_tok>  cpu::matmul end to end
//       (quantizing the activations, the thread pool).
// items/s are multiply-adds x 2 (flop/s). Timings use CPU time, which a
// loaded machine disturbs less than wall time (for t2, wall time: the pool's
// threads spin).
// Run: build/bench/bench_matmul [--benchmark_filter=q4_1]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/ops.h"
#include "tensor/dtype.h"
#include "tensor/tensor.h"

using namespace kvad;

namespace {

const DType kFormats[] = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q8_0, DType::Q4_K, DType::Q6_K};

struct Shape {
  int64_t n_out, n_in;
};
// SmolLM2-135M (n_embd 576, n_ff 1536), Gemma 3 270M (n_embd 640, n_ff 2048).
const Shape kShapes[] = {{576, 576}, {192, 576}, {1536, 576}, {576, 1536}, {2048, 640}, {640, 2048}};

std::vector<float> randn(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> N(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = N(rng);
  return v;
}

std::vector<uint8_t> quantize(DType t, const std::vector<float>& x, int64_t n) {
  const int64_t rows = static_cast<int64_t>(x.size()) / n;
  std::vector<uint8_t> q(row_bytes(t, n) * rows);
  for (int64_t r = 0; r < rows; ++r)
    cpu::cpu_kernels(t).from_float(x.data() + r * n, q.data() + r * row_bytes(t, n), n);
  return q;
}

void kernel(benchmark::State& st, DType t, const std::string& how, Shape s, int64_t n_tok) {
  const cpu::CpuKernels& k = cpu::cpu_kernels(t);
  const DType vt = dtype_info(t).vec_dot_type;
  const auto w = quantize(t, randn(s.n_out * s.n_in, 1), s.n_in);
  const auto a = quantize(vt, randn(n_tok * s.n_in, 2), s.n_in);
  const size_t wrb = row_bytes(t, s.n_in), arb = row_bytes(vt, s.n_in);
  std::vector<float> out(static_cast<size_t>(n_tok * s.n_out));
  std::vector<uint8_t> packed;
  const uint8_t* y = a.data();
  size_t ldy = arb;
  if (how == "gemm" && k.gemm_pack) {
    ldy = k.gemm_packed_bytes(s.n_in);
    packed.resize(ldy * n_tok);
    k.gemm_pack(s.n_in, a.data(), arb, n_tok, packed.data(), ldy);
    y = packed.data();
  }
  for (auto _ : st) {
    if (how == "gemm") {
      k.gemm(s.n_in, w.data(), wrb, s.n_out, y, ldy, n_tok, out.data(), s.n_out);
    } else if (how == "ref") {
      k.gemm_ref(s.n_in, w.data(), wrb, s.n_out, y, ldy, n_tok, out.data(), s.n_out);
    } else {
      for (int64_t t0 = 0; t0 < n_tok; t0 += 64) {
        const int64_t t1 = std::min(n_tok, t0 + 64);
        for (int64_t o = 0; o < s.n_out; ++o)
          for (int64_t tk = t0; tk < t1; ++tk)
            out[tk * s.n_out + o] = k.vec_dot(s.n_in, w.data() + o * wrb, y + tk * ldy);
      }
    }
    benchmark::ClobberMemory();
  }
  st.SetItemsProcessed(st.iterations() * 2 * s.n_out * s.n_in * n_tok);
}

void matmul(benchmark::State& st, DType t, int threads, Shape s, int64_t n_tok) {
  ThreadPool pool(threads);
  const auto wq = quantize(t, randn(s.n_out * s.n_in, 1), s.n_in);
  Tensor w;
  w.name = "w";
  w.type = t;
  w.ne = {s.n_in, s.n_out, 1, 1};
  w.data = wq.data();
  const auto x = randn(n_tok * s.n_in, 2);
  std::vector<float> out(static_cast<size_t>(n_tok * s.n_out));
  for (auto _ : st) {
    cpu::matmul(pool, w, x.data(), n_tok, out.data());
    benchmark::ClobberMemory();
  }
  st.SetItemsProcessed(st.iterations() * 2 * s.n_out * s.n_in * n_tok);
}

const int registered = [] {
  for (DType t : kFormats) {
    const cpu::CpuKernels& k = cpu::cpu_kernels(t);
    const std::string f = dtype_name(t);
    const int64_t be = dtype_info(t).block_elems;
    for (Shape s : kShapes) {
      if (s.n_in % be) continue;  // 576 is not a whole number of 256-element super-blocks
      const std::string shape = std::to_string(s.n_out) + "x" + std::to_string(s.n_in);
      for (int64_t n_tok : {512, 1}) {
        std::vector<std::string> hows = {"vecdot"};
        if (k.gemm) hows.push_back("gemm");
        if (k.gemm_ref && n_tok == 1) hows.push_back("ref");
        for (const std::string& how : hows)
          benchmark::RegisterBenchmark(("BM_kernel/" + f + "/" + how + "/" + shape + "/" + std::to_string(n_tok)).c_str(),
                                       [=](benchmark::State& st) { kernel(st, t, how, s, n_tok); });
        for (int th : {1, 2}) {
          auto* b = benchmark::RegisterBenchmark(
              ("BM_matmul/" + f + "/t" + std::to_string(th) + "/" + shape + "/" + std::to_string(n_tok)).c_str(),
              [=](benchmark::State& st) { matmul(st, t, th, s, n_tok); });
          if (th > 1) b->UseRealTime();
        }
      }
    }
  }
  return 0;
}();

}  // namespace

BENCHMARK_MAIN();
