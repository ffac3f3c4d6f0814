// The CPU (and sim) row's conv2d (tensor/ops.h; image_ops.h): im2col over
// tiles of output pixels, each tile one product with the existing GEMMs.
//
// With images {C, W, H, N} (a pixel's channels contiguous) and weights
// {C, KW, KH, OC}, the im2col row of an output pixel is KH·KW runs of C
// contiguous input values (zeros where the kernel hangs over the border),
// in the order of a weight row: (ky, kx, c), c fastest. The product of a
// tile's rows [np, K] with the weight seen as [OC, K] is then the output
// tile [np, OC], already in the output's layout (no transpose). A tile's
// rows take at most kColBytes, so the scratch is bounded whatever the image
// size, and small enough to stay in L2 while every weight row passes by.
//
// Weights: f32 and the block formats with a tiled gemm (q8_0, q4_0, q4_K,
// ...) go through cpu::matmul (activations converted once per tile to the
// format's dot partner, work split over weight rows). f16 weights with the
// AVX2 gemm go straight to it on the f32 rows (gemm_f16 widens each weight
// in registers: gemm_f32's bits on the widened weights, with no f32 copy of
// the weights and no rounding of the activations to f16). bf16 (and f16
// without SIMD): each thread converts blocks of kRowBlock weight rows to f32
// and runs the f32 gemm on them (the vec_dot loop would convert every weight
// value once per pixel instead of once per tile).
#include <algorithm>
#include <cstring>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/cpu/host_kernels.h"
#include "kernels/cpu/image_ops.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/row_util.h"

namespace kvad::cpu {

using row::in;
using row::out;
using row::pool;

namespace {

constexpr size_t kColBytes = size_t{1} << 20;  // im2col rows per tile: at most 1 MiB (L2 is 2 MiB a core here)
constexpr int64_t kRowBlock = 16;              // f16/bf16 weight rows converted to f32 at a time

struct Geometry {
  int64_t C, W, H, N, KW, KH, OC, OW, OH, K;
  Conv2dParams p;
};

// im2col rows of output pixels [p0, p0 + np) (pixel index over N·OH·OW).
void im2col(const float* x, const Geometry& g, int64_t p0, int64_t np, float* col) {
  const size_t run = static_cast<size_t>(g.C) * sizeof(float);
  for (int64_t i = 0; i < np; ++i) {
    const int64_t q = p0 + i, ox = q % g.OW, oy = (q / g.OW) % g.OH, n = q / (g.OW * g.OH);
    float* dst = col + i * g.K;
    for (int64_t ky = 0; ky < g.KH; ++ky) {
      const int64_t iy = oy * g.p.stride_h + ky - g.p.pad_h;
      for (int64_t kx = 0; kx < g.KW; ++kx, dst += g.C) {
        const int64_t ix = ox * g.p.stride_w + kx - g.p.pad_w;
        if (iy < 0 || iy >= g.H || ix < 0 || ix >= g.W) std::memset(dst, 0, run);
        else std::memcpy(dst, x + ((n * g.H + iy) * g.W + ix) * g.C, run);
      }
    }
  }
}

// y [np, OC] = col [np, K] · wᵀ for f16/bf16 weights (format wt; w: OC rows
// of K values at host address wp, row stride rs bytes).
void product_half(ThreadPool& tp, DType wt, const CpuKernels& kw, const uint8_t* wp, size_t rs, const float* col, int64_t np,
                  const Geometry& g, float* y) {
  const CpuKernels& k32 = cpu_kernels(DType::F32);
  const size_t ld = static_cast<size_t>(g.K) * sizeof(float);
  if (wt == DType::F16 && kw.gemm) {
    tp.parallel_for((g.OC + kRowBlock - 1) / kRowBlock, 1, [&](int64_t b0, int64_t b1, int) {
      const int64_t r0 = b0 * kRowBlock, nr = std::min(b1 * kRowBlock, g.OC) - r0;
      kw.gemm(g.K, wp + r0 * rs, rs, nr, col, ld, np, y + r0, g.OC);
    });
    return;
  }
  tp.parallel_for((g.OC + kRowBlock - 1) / kRowBlock, 1, [&](int64_t b0, int64_t b1, int) {
    thread_local std::vector<float> wf;
    wf.resize(static_cast<size_t>(kRowBlock * g.K));
    for (int64_t blk = b0; blk < b1; ++blk) {
      const int64_t r0 = blk * kRowBlock, nr = std::min(kRowBlock, g.OC - r0);
      for (int64_t r = 0; r < nr; ++r) kw.to_float(wp + (r0 + r) * rs, wf.data() + r * g.K, g.K);
      if (k32.gemm) {
        k32.gemm(g.K, wf.data(), ld, nr, col, ld, np, y + r0, g.OC);
      } else {
        for (int64_t t = 0; t < np; ++t)
          for (int64_t r = 0; r < nr; ++r) y[t * g.OC + r0 + r] = k32.vec_dot(g.K, wf.data() + r * g.K, col + t * g.K);
      }
    }
  });
}

}  // namespace

void conv2d(const Tensor& x, const Tensor& w, const Tensor* bias, const Conv2dParams& p, const Tensor& o) {
  Geometry g{x.ne[0], x.ne[1], x.ne[2], x.ne[3], w.ne[1], w.ne[2], w.ne[3], o.ne[1], o.ne[2], 0, p};
  g.K = g.C * g.KW * g.KH;
  ThreadPool& tp = pool();
  // The weight as a host matrix [OC, K] (sim tensors have no Tensor::data).
  Tensor w2 = w;
  w2.ne = {g.K, g.OC, 1, 1};
  w2.set_contiguous_strides();
  w2.data = w.raw();
  const float* px = in(x);
  float* py = out(o);
  const bool half = w.type == DType::F16 || w.type == DType::BF16;
  const CpuKernels& kw = cpu_kernels(w.type);
  auto product = [&](const float* rows, int64_t np, float* y) {
    if (half) product_half(tp, w.type, kw, static_cast<const uint8_t*>(w2.data), w2.row_size(), rows, np, g, y);
    else cpu::matmul(tp, w2, rows, np, y);
  };
  const int64_t n_pix = g.N * g.OH * g.OW;
  const bool pointwise = g.KW == 1 && g.KH == 1 && p.stride_w == 1 && p.stride_h == 1 && p.pad_w == 0 && p.pad_h == 0;
  if (pointwise) {
    // A 1×1 convolution is a matmul over pixels, in tiles (whose pixel rows
    // the gemm then reads from cache).
    const int64_t tile = std::max<int64_t>(16, static_cast<int64_t>(kColBytes / (g.K * sizeof(float))));
    for (int64_t p0 = 0; p0 < n_pix; p0 += tile) {
      const int64_t np = std::min(tile, n_pix - p0);
      product(px + p0 * g.K, np, py + p0 * g.OC);
    }
  } else {
    const int64_t tile = std::max<int64_t>(8, static_cast<int64_t>(kColBytes / (g.K * sizeof(float))));
    std::vector<float> col(static_cast<size_t>(std::min(tile, n_pix) * g.K));
    for (int64_t p0 = 0; p0 < n_pix; p0 += tile) {
      const int64_t np = std::min(tile, n_pix - p0);
      tp.parallel_for(np, 4, [&](int64_t i0, int64_t i1, int) { im2col(px, g, p0 + i0, i1 - i0, col.data() + i0 * g.K); });
      product(col.data(), np, py + p0 * g.OC);
    }
  }
  if (bias) {
    const float* pb = in(*bias);
    tp.parallel_for(n_pix, 64, [&](int64_t q0, int64_t q1, int) {
      for (int64_t q = q0; q < q1; ++q)
        for (int64_t c = 0; c < g.OC; ++c) py[q * g.OC + c] += pb[c];
    });
  }
}

}  // namespace kvad::cpu
