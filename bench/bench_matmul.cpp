// Matrix products, prefill and decode shapes of SmolLM2-135M (n_embd 576,
// n_ff 1536, 3 kv heads of 64) and Gemma 3 270M (n_embd 640, n_ff 2048):
//   BM_kernel/<fmt>/<how>/<n_out>x<n_in>/<n_tok>   one thread, activations
//       already quantized (and packed): how = gemm (the tiled kernel,
//       kernels.h), vecdot (one dispatched vec_dot per row and token, tokens
//       in tiles of 64: matmul's path for formats without a gemm) or ref
//       (gemm_ref, the scalar definition; small shapes only).
//   BM_matmul/<fmt>/t<threads>/<n_out>x<n_in>/<n_tok>  cpu::matmul end to end
//       (quantizing the activations, the thread pool).
//   BM_matmul_id/<fmt>/t<threads>/<n_out>x<n_in>/<n_tok>  cpu::matmul_id (moe.h)
//       of Qwen3-30B-A3B's expert shapes (128 experts of 768 x 2048 gate/up,
//       2048 x 768 down, top-8), random routing: a prefill batch and one
//       decoded token; items/s count the chosen experts' products only.
//   BM_kernel/<fmt>/gemm/768x2048/32: one expert's gate rows against the 32
//       rows that choose it on average in a 512-token batch.
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
#include "base/cpu_features.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/moe.h"
#include "kernels/cpu/host_kernels.h"
#include "tensor/dtype.h"
#include "tensor/ops.h"
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
  cpu::GemmFn isa = nullptr;  // gemm-avx2 / gemm-avx512vnni: that build of the K-quant gemm, not the dispatched one
  if (how == "gemm-avx2") isa = t == DType::Q4_K ? cpu::gemm::avx2::gemm_q4_K : cpu::gemm::avx2::gemm_q6_K;
  if (how == "gemm-avx512vnni")
    isa = t == DType::Q4_K ? cpu::gemm::avx512vnni::gemm_q4_K : cpu::gemm::avx512vnni::gemm_q6_K;
  if (isa) {
    ldy = k.gemm_packed_bytes(s.n_in);
    packed.resize(ldy * n_tok);
    k.gemm_pack(s.n_in, a.data(), arb, n_tok, packed.data(), ldy);
    y = packed.data();
  }
  for (auto _ : st) {
    if (isa) {
      isa(s.n_in, w.data(), wrb, s.n_out, y, ldy, n_tok, out.data(), s.n_out);
    } else if (how == "gemm") {
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
  w.set_contiguous_strides();
  w.data = wq.data();
  const auto x = randn(n_tok * s.n_in, 2);
  std::vector<float> out(static_cast<size_t>(n_tok * s.n_out));
  for (auto _ : st) {
    cpu::matmul(pool, w, x.data(), n_tok, out.data());
    benchmark::ClobberMemory();
  }
  st.SetItemsProcessed(st.iterations() * 2 * s.n_out * s.n_in * n_tok);
}

// Qwen3-30B-A3B: n_embd 2048, expert_feed_forward_length 768, 128 experts, top-8.
constexpr int64_t kExperts = 128, kTopK = 8;

void matmul_id(benchmark::State& st, DType t, int threads, Shape s, int64_t n_tok) {
  ThreadPool pool(threads);
  ops::PoolScope scope(pool);
  // One expert's random matrix, copied to all (the setup stays fast; the
  // bytes streamed are the same).
  const auto w1 = quantize(t, randn(s.n_out * s.n_in, 1), s.n_in);
  std::vector<uint8_t> wq(w1.size() * kExperts);
  for (int64_t e = 0; e < kExperts; ++e) std::copy(w1.begin(), w1.end(), wq.begin() + e * w1.size());
  Tensor w;
  w.type = t;
  w.ne = {s.n_in, s.n_out, kExperts, 1};
  w.set_contiguous_strides();
  w.data = wq.data();
  std::mt19937 rng(3);
  std::vector<int32_t> ids(static_cast<size_t>(n_tok * kTopK));
  std::vector<int32_t> e(kExperts);
  for (int64_t i = 0; i < n_tok; ++i) {
    for (int64_t j = 0; j < kExperts; ++j) e[j] = static_cast<int32_t>(j);
    std::shuffle(e.begin(), e.end(), rng);
    std::copy(e.begin(), e.begin() + kTopK, ids.begin() + i * kTopK);
  }
  Tensor id;
  id.type = DType::I32;
  id.ne = {kTopK, n_tok, 1, 1};
  id.set_contiguous_strides();
  id.data = ids.data();
  const auto xv = randn(n_tok * s.n_in, 2);
  Tensor x;
  x.ne = {s.n_in, 1, n_tok, 1};
  x.set_contiguous_strides();
  x.data = xv.data();
  std::vector<float> ov(static_cast<size_t>(n_tok * kTopK * s.n_out));
  Tensor o;
  o.ne = {s.n_out, kTopK, n_tok, 1};
  o.set_contiguous_strides();
  o.data = ov.data();
  for (auto _ : st) {
    cpu::matmul_id(x, w, id, o);
    benchmark::ClobberMemory();
  }
  st.SetItemsProcessed(st.iterations() * 2 * s.n_out * s.n_in * n_tok * kTopK);
}

const int registered_moe = [] {
  for (DType t : {DType::Q4_K, DType::Q6_K, DType::Q8_0, DType::Q4_0}) {
    const std::string f = dtype_name(t);
    std::vector<std::string> hows = {"gemm"};
    if ((t == DType::Q4_K || t == DType::Q6_K) && cpu_features().has_avx2_fma()) hows.push_back("gemm-avx2");
    if ((t == DType::Q4_K || t == DType::Q6_K) && cpu_features().has_avx512_vnni()) hows.push_back("gemm-avx512vnni");
    for (const std::string& how : hows)
      benchmark::RegisterBenchmark(("BM_kernel/" + f + "/" + how + "/768x2048/32").c_str(),
                                   [=](benchmark::State& st) { kernel(st, t, how, {768, 2048}, 32); });
    for (Shape s : {Shape{768, 2048}, Shape{2048, 768}}) {
      if (s.n_in % dtype_info(t).block_elems) continue;
      for (int64_t n_tok : {512, 1})
        for (int th : {1, 2}) {
          auto* b = benchmark::RegisterBenchmark(("BM_matmul_id/" + f + "/t" + std::to_string(th) + "/" +
                                                  std::to_string(s.n_out) + "x" + std::to_string(s.n_in) + "/" +
                                                  std::to_string(n_tok)).c_str(),
                                                 [=](benchmark::State& st) { matmul_id(st, t, th, s, n_tok); });
          if (th > 1) b->UseRealTime();
        }
    }
  }
  return 0;
}();

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
