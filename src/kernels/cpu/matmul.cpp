// cpu::matmul (host_kernels.h): y = x · Wᵀ for weights in any format with CPU kernels.
//
// The activations are quantized once to W's vec_dot_type (as ggml does), in
// parallel over tokens. Then:
// - formats with a tiled gemm (kernels.h; Q4_0, Q4_1, Q5_0, Q8_0, Q4_K, Q6_K,
//   F16 (its f16 activations widened to f32) and, unpacked, F32 on AVX2) pack the
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
#include "kernels/cpu/host_kernels.h"

namespace kvad::cpu {

namespace gemm {
size_t packed_bytes_q8_1x4(int64_t n) { return static_cast<size_t>((n / 32 + 3) / 4) * sizeof(q8_1x4); }
size_t packed_bytes_q8_0x4(int64_t n) { return static_cast<size_t>((n / 32 + 3) / 4) * sizeof(q8_0x4); }
size_t packed_bytes_q8_Kx(int64_t n) { return static_cast<size_t>(n / QK_K) * sizeof(q8_Kx); }
size_t packed_bytes_f32(int64_t n) { return static_cast<size_t>(n) * sizeof(float); }
}  // namespace gemm

namespace {

// Activations in the weight format's dot partner, converted once (and packed
// for the gemm when it reads its own layout). Returns the rows and sets ldq
// to their stride in bytes.
const uint8_t* quantize_activations(ThreadPool& pool, const CpuKernels& k, DType vt, const float* x, int64_t n_in,
                                    int64_t n_tok, size_t& ldq) {
  const size_t xrb = row_bytes(vt, n_in);
  ldq = xrb;
  if (vt == DType::F32) return reinterpret_cast<const uint8_t*>(x);
  thread_local std::vector<uint8_t> xq_buf;
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
  if (n_tok == 1 || pool.size() == 1) {
    convert(0, n_tok);
  } else {
    pool.parallel_for(n_tok, 4, [&](int64_t b, int64_t e, int) { convert(b, e); });
  }
  return dst;
}

// Output rows [r0, r1) of y = x · Wᵀ from the converted activations xq.
void rows_product(const Tensor& w, const CpuKernels& k, const uint8_t* xq, size_t ldq, int64_t n_tok, float* y,
                  int64_t r0, int64_t r1) {
  const int64_t n_in = w.ne[0], n_out = w.n_rows();
  if (k.gemm) {
    // All tokens against these rows, a tile of them at a time: the rows'
    // weights stay in L1 while the tokens stream past in groups of a few,
    // and a tile's tokens (at most kGemmTileBytes) stay in L2 for the next
    // rows of the gemm. Each output is one gemm output whatever the tile
    // (its own dot product), so the tiling changes no result.
    constexpr size_t kGemmTileBytes = size_t{256} << 10;
    const int64_t tile = std::max<int64_t>(12, static_cast<int64_t>(kGemmTileBytes / ldq) / 12 * 12);
    for (int64_t t0 = 0; t0 < n_tok; t0 += tile)
      k.gemm(n_in, w.row(r0), w.row_size(), r1 - r0, xq + static_cast<size_t>(t0) * ldq, ldq,
             std::min(tile, n_tok - t0), y + t0 * n_out + r0, n_out);
    return;
  }
  constexpr int64_t kTokTile = 64;  // tokens that stay in cache per pass over the rows
  for (int64_t t0 = 0; t0 < n_tok; t0 += kTokTile) {
    const int64_t t1 = std::min(n_tok, t0 + kTokTile);
    for (int64_t o = r0; o < r1; ++o) {
      const uint8_t* wr = w.row(o);
      for (int64_t t = t0; t < t1; ++t) y[t * n_out + o] = k.vec_dot(n_in, wr, xq + t * ldq);
    }
  }
}

// Rows per work item: enough items per thread to balance, few enough to
// keep the overhead low; a gemm wants a few rows per call.
int64_t row_grain(int64_t n_out, int nth, int64_t n_tok) {
  int64_t grain = std::max<int64_t>(1, n_out / (nth * 8));
  if (n_tok > 1) grain = std::max<int64_t>(grain, 16);
  return grain;
}

}  // namespace

void matmul(ThreadPool& pool, const Tensor& w, const float* x, int64_t n_tok, float* y) {
  const CpuKernels& k = cpu_kernels(w.type);
  size_t ldq;
  const uint8_t* xq = quantize_activations(pool, k, dtype_info(w.type).vec_dot_type, x, w.ne[0], n_tok, ldq);
  const int64_t n_out = w.n_rows();
  pool.parallel_for(n_out, row_grain(n_out, pool.size(), n_tok),
                    [&](int64_t b, int64_t e, int) { rows_product(w, k, xq, ldq, n_tok, y, b, e); });
}

void matmul_multi(ThreadPool& pool, std::initializer_list<MatmulTarget> targets, const float* x, int64_t n_tok) {
  matmul_multi(pool, targets.begin(), static_cast<int>(targets.size()), x, n_tok);
}

void matmul_multi(ThreadPool& pool, const MatmulTarget* t, int n_w, const float* x, int64_t n_tok) {
  if (n_w == 0) return;
  // One conversion serves all when the weights take the same activation rows.
  // The layout of the converted rows: plain, or packed by this function.
  auto packer = [](const CpuKernels& k) { return k.gemm ? k.gemm_pack : nullptr; };
  const CpuKernels& k0 = cpu_kernels(t[0].w->type);
  const DType vt = dtype_info(t[0].w->type).vec_dot_type;
  bool shared = true;
  for (int i = 1; i < n_w; ++i)
    shared = shared && t[i].w->ne[0] == t[0].w->ne[0] && dtype_info(t[i].w->type).vec_dot_type == vt &&
             packer(cpu_kernels(t[i].w->type)) == packer(k0);
  if (!shared) {
    for (int i = 0; i < n_w; ++i) matmul(pool, *t[i].w, x, n_tok, t[i].y);
    return;
  }
  size_t ldq;
  const uint8_t* xq = quantize_activations(pool, k0, vt, x, t[0].w->ne[0], n_tok, ldq);
  // Work items: row ranges of every weight, one parallel loop over all.
  struct Item {
    int w;
    int64_t r0, r1;
  };
  thread_local std::vector<Item> items_buf;  // the caller's; workers read it through `items`
  std::vector<Item>& items = items_buf;
  items.clear();
  for (int i = 0; i < n_w; ++i) {
    const int64_t n_out = t[i].w->n_rows();
    const int64_t grain = row_grain(n_out, pool.size(), n_tok);
    for (int64_t r = 0; r < n_out; r += grain) items.push_back({i, r, std::min(n_out, r + grain)});
  }
  pool.parallel_for(static_cast<int64_t>(items.size()), 1, [&](int64_t b, int64_t e, int) {
    for (int64_t j = b; j < e; ++j) {
      const Item& it = items[j];
      rows_product(*t[it.w].w, cpu_kernels(t[it.w].w->type), xq, ldq, n_tok, t[it.w].y, it.r0, it.r1);
    }
  });
}

}  // namespace kvad::cpu
