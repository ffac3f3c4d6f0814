// cpu::matmul (ops.h): y = x · Wᵀ for weights in any format with CPU kernels.
//
// The activations are quantized once to W's vec_dot_type (as ggml does), in
// parallel over tokens. Then:
// - formats with a tiled gemm (kernels.h; Q4_0, Q4_1, Q8_0 on AVX2) pack the
//   quantized rows for it and hand each thread chunks of weight rows times
//   all tokens: the gemm unpacks a weight block once per few tokens instead
//   of once per (row, token) pair;
// - the others do one vec_dot per (row, token) pair, rows split over threads,
//   tokens in tiles that stay in cache.
#include <algorithm>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/ops.h"

namespace kvad::cpu {

namespace gemm {
size_t packed_bytes_q8_1x4(int64_t n) { return static_cast<size_t>((n / 32 + 3) / 4) * sizeof(q8_1x4); }
size_t packed_bytes_q8_0x4(int64_t n) { return static_cast<size_t>((n / 32 + 3) / 4) * sizeof(q8_0x4); }
}  // namespace gemm

namespace {
MatmulOffloadFn g_offload = nullptr;
}  // namespace

void set_matmul_offload(MatmulOffloadFn fn) { g_offload = fn; }

void matmul(ThreadPool& pool, const Tensor& w, const float* x, int64_t n_tok, float* y) {
  if (g_offload && g_offload(w, x, n_tok, y)) return;
  const CpuKernels& k = cpu_kernels(w.type);
  const DType vt = dtype_info(w.type).vec_dot_type;
  const int64_t n_in = w.ne[0];
  const int64_t n_out = w.n_rows();
  const size_t xrb = row_bytes(vt, n_in);
  const int nth = pool.size();

  // Activations in the weight format's dot partner, converted once (and
  // packed for the gemm when it reads its own layout).
  thread_local std::vector<uint8_t> xq_buf;
  const uint8_t* xq;
  size_t ldq = xrb;
  if (vt == DType::F32) {
    xq = reinterpret_cast<const uint8_t*>(x);
  } else {
    const CpuKernels& kv = cpu_kernels(vt);
    const bool pack = k.gemm && k.gemm_pack;
    if (pack) ldq = k.gemm_packed_bytes(n_in);
    xq_buf.resize(ldq * static_cast<size_t>(n_tok));
    uint8_t* dst = xq_buf.data();
    auto convert = [&](int64_t b, int64_t e) {
      if (!pack) {
        for (int64_t t = b; t < e; ++t) kv.from_float(x + t * n_in, dst + t * xrb, n_in);
        return;
      }
      thread_local std::vector<uint8_t> row;
      row.resize(xrb);
      for (int64_t t = b; t < e; ++t) {
        kv.from_float(x + t * n_in, row.data(), n_in);
        k.gemm_pack(n_in, row.data(), xrb, 1, dst + t * ldq, ldq);
      }
    };
    if (n_tok == 1 || nth == 1) {
      convert(0, n_tok);
    } else {
      pool.parallel_for(n_tok, 4, [&](int64_t b, int64_t e, int) { convert(b, e); });
    }
    xq = dst;
  }

  if (k.gemm) {
    // Chunks of rows times all tokens; each chunk's weights stay in cache
    // while the tokens stream past in tiles of a few.
    int64_t grain = std::max<int64_t>(1, n_out / (nth * 8));
    if (n_tok > 1) grain = std::max<int64_t>(grain, 16);
    pool.parallel_for(n_out, grain, [&](int64_t b, int64_t e, int) {
      k.gemm(n_in, w.row(b), w.row_size(), e - b, xq, ldq, n_tok, y + b, n_out);
    });
    return;
  }

  const VecDotFn dot = k.vec_dot;
  // Enough chunks per thread to balance, few enough to keep overhead low.
  int64_t grain = std::max<int64_t>(1, n_out / (nth * 8));
  if (n_tok > 1) grain = std::max<int64_t>(grain, 16);
  constexpr int64_t kTokTile = 64;
  pool.parallel_for(n_out, grain, [&](int64_t b, int64_t e, int) {
    for (int64_t t0 = 0; t0 < n_tok; t0 += kTokTile) {
      const int64_t t1 = std::min(n_tok, t0 + kTokTile);
      for (int64_t o = b; o < e; ++o) {
        const uint8_t* wr = w.row(o);
        for (int64_t t = t0; t < t1; ++t) y[t * n_out + o] = dot(n_in, wr, xq + t * xrb);
      }
    }
  });
}

}  // namespace kvad::cpu
