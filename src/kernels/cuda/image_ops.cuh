// The device kernels of kernels/cuda/image_kernels.h, #included at the end of
// kernels.cu (nvcc's only translation unit in kvad; it uses that file's
// launch helpers and activation_ops.cuh's block_sum, in the same anonymous
// namespace). Status: compiles for sm_90; UNVERIFIED ON A GPU in this build.
#pragma once
#include "kernels/cuda/image_kernels.h"

namespace kvad::cuda {

namespace {

struct Dims4 {
  int64_t v[4];
};

// One block per (group, image): the group's P·Cg values are element e =
// (p, j) at x[(n·P + p)·C + g·Cg + j].
__global__ void group_norm_kernel(const float* __restrict__ x, int64_t C, int64_t P, int64_t Cg, const float* w,
                                  const float* b, float eps, float* __restrict__ y) {
  const int64_t g = blockIdx.x, n = blockIdx.y, m = P * Cg;
  const float* xg = x + n * P * C + g * Cg;
  float* yg = y + n * P * C + g * Cg;
  float s = 0.0f;
  for (int64_t e = threadIdx.x; e < m; e += blockDim.x) s += xg[(e / Cg) * C + e % Cg];
  const float mean = block_sum(s) / static_cast<float>(m);
  float sq = 0.0f;
  for (int64_t e = threadIdx.x; e < m; e += blockDim.x) {
    const float d = xg[(e / Cg) * C + e % Cg] - mean;
    sq += d * d;
  }
  const float rstd = rsqrtf(block_sum(sq) / static_cast<float>(m) + eps);
  for (int64_t e = threadIdx.x; e < m; e += blockDim.x) {
    const int64_t off = (e / Cg) * C + e % Cg, c = g * Cg + e % Cg;
    float v = (xg[off] - mean) * rstd;
    if (w) v *= w[c];
    if (b) v += b[c];
    yg[off] = v;
  }
}

__global__ void upsample_kernel(const float* __restrict__ x, int64_t C, int64_t W, int64_t H, int64_t f, int64_t n,
                                float* __restrict__ y) {
  const int64_t OW = W * f, OH = H * f;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = i % C, ox = (i / C) % OW, oy = (i / (C * OW)) % OH, b = i / (C * OW * OH);
    y[i] = x[((b * H + oy / f) * W + ox / f) * C + c];
  }
}

__global__ void pad_kernel(const float* __restrict__ x, Dims4 ne, Dims4 lo, Dims4 one, int64_t n,
                           float* __restrict__ y) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t r = i, src = 0, mul = 1;
    bool inside = true;
    for (int d = 0; d < 4; ++d) {
      const int64_t j = r % one.v[d] - lo.v[d];
      r /= one.v[d];
      inside = inside && j >= 0 && j < ne.v[d];
      src += j * mul;
      mul *= ne.v[d];
    }
    y[i] = inside ? x[src] : 0.0f;
  }
}

__global__ void concat_dim_kernel(const uint8_t* __restrict__ a, StridedLayout la, const uint8_t* __restrict__ b,
                                  StridedLayout lb, int dim, Dims4 one, int64_t n, float* __restrict__ out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t j[4], r = i;
    for (int d = 0; d < 4; ++d) {
      j[d] = r % one.v[d];
      r /= one.v[d];
    }
    const bool from_a = j[dim] < la.ne[dim];
    if (!from_a) j[dim] -= la.ne[dim];
    const StridedLayout& l = from_a ? la : lb;
    const uint8_t* p = (from_a ? a : b) + j[0] * l.nb[0] + j[1] * l.nb[1] + j[2] * l.nb[2] + j[3] * l.nb[3];
    out[i] = *reinterpret_cast<const float*>(p);
  }
}

Dims4 dims(const int64_t* v) { return {{v[0], v[1], v[2], v[3]}}; }

__global__ void im2col_kernel(const float* __restrict__ x, ConvGeom g, int64_t p0, int64_t np,
                              float* __restrict__ col) {
  const int64_t K = g.C * g.KW * g.KH, n = np * K;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = e / K, k = e % K, c = k % g.C, kx = (k / g.C) % g.KW, ky = k / (g.C * g.KW);
    const int64_t q = p0 + i, ox = q % g.OW, oy = (q / g.OW) % g.OH, b = q / (g.OW * g.OH);
    const int64_t iy = oy * g.stride_h + ky - g.pad_h, ix = ox * g.stride_w + kx - g.pad_w;
    col[e] = iy >= 0 && iy < g.H && ix >= 0 && ix < g.W ? x[((b * g.H + iy) * g.W + ix) * g.C + c] : 0.0f;
  }
}

template <typename TW>
__global__ void conv2d_direct_kernel(const float* __restrict__ x, const TW* __restrict__ w, const float* bias,
                                     ConvGeom g, float* __restrict__ y) {
  const int64_t n = g.N * g.OH * g.OW * g.OC;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t o = e % g.OC, q = e / g.OC, ox = q % g.OW, oy = (q / g.OW) % g.OH, b = q / (g.OW * g.OH);
    float s = 0.0f;
    for (int64_t ky = 0; ky < g.KH; ++ky) {
      const int64_t iy = oy * g.stride_h + ky - g.pad_h;
      if (iy < 0 || iy >= g.H) continue;
      for (int64_t kx = 0; kx < g.KW; ++kx) {
        const int64_t ix = ox * g.stride_w + kx - g.pad_w;
        if (ix < 0 || ix >= g.W) continue;
        const float* xp = x + ((b * g.H + iy) * g.W + ix) * g.C;
        const TW* wp = w + ((o * g.KH + ky) * g.KW + kx) * g.C;
        for (int64_t c = 0; c < g.C; ++c) s += xp[c] * kv_get(wp + c);
      }
    }
    y[e] = bias ? s + bias[o] : s;
  }
}

// One warp per (image, query, head); lane l holds dims l + 32j of q and of
// the output accumulator (as attention_kernel), keys streamed in order.
template <int NJ>
__global__ void sdpa_kernel(const float* __restrict__ q, AttnStrides sq, const float* __restrict__ k, AttnStrides sk,
                            const float* __restrict__ v, AttnStrides sv, int64_t n_q, int64_t n_kv, int64_t H,
                            int64_t D, float scale, float* __restrict__ out) {
  const int64_t t = blockIdx.x, b = blockIdx.z;
  const int64_t h = static_cast<int64_t>(blockIdx.y) * kAttnWarps + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (h >= H) return;
  const float* qh = q + b * sq.image + t * sq.token + h * sq.head;
  const float* kh = k + b * sk.image + h * sk.head;
  const float* vh = v + b * sv.image + h * sv.head;
  float* oh = out + ((b * n_q + t) * H + h) * D;
  float qr[NJ], acc[NJ];
#pragma unroll
  for (int j = 0; j < NJ; ++j) {
    const int64_t d = lane + 32 * j;
    qr[j] = d < D ? qh[d] : 0.0f;
    acc[j] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (int64_t p = 0; p < n_kv; ++p) {
    const float* kr = kh + p * sk.token;
    const float* vr = vh + p * sv.token;
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
      const int64_t d = lane + 32 * j;
      if (d < D) s += qr[j] * kr[d];
    }
    s = warp_sum(s) * scale;
    const float m_new = fmaxf(m, s);
    const float corr = expf(m - m_new), e = expf(s - m_new);
    l = l * corr + e;
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
      const int64_t d = lane + 32 * j;
      if (d < D) acc[j] = acc[j] * corr + e * vr[d];
    }
    m = m_new;
  }
  const float inv = 1.0f / l;
#pragma unroll
  for (int j = 0; j < NJ; ++j) {
    const int64_t d = lane + 32 * j;
    if (d < D) oh[d] = acc[j] * inv;
  }
}

}  // namespace

void im2col(const float* x, const ConvGeom& g, int64_t p0, int64_t np, float* col) {
  const int64_t n = np * g.C * g.KW * g.KH;
  if (n <= 0) return;
  Stream st = stream_for("conv2d (im2col)");
  im2col_kernel<<<capped_blocks(n, 256), 256, 0, st>>>(x, g, p0, np, col);
  Context::get().check("conv2d (im2col)");
}

void conv2d_direct(const float* x, const void* w, bool w_f16, const float* bias, const ConvGeom& g, float* y) {
  const int64_t n = g.N * g.OH * g.OW * g.OC;
  if (n <= 0) return;
  Stream st = stream_for("conv2d (direct)");
  if (w_f16)
    conv2d_direct_kernel<uint16_t><<<capped_blocks(n, 256), 256, 0, st>>>(x, static_cast<const uint16_t*>(w), bias, g, y);
  else
    conv2d_direct_kernel<float><<<capped_blocks(n, 256), 256, 0, st>>>(x, static_cast<const float*>(w), bias, g, y);
  Context::get().check("conv2d (direct)");
}

void sdpa(const float* q, AttnStrides sq, const float* k, AttnStrides sk, const float* v, AttnStrides sv, int64_t N,
          int64_t n_q, int64_t n_kv, int64_t H, int64_t D, float scale, float* out) {
  if (N <= 0 || n_q <= 0 || H <= 0) return;
  if (D <= 0 || D > 256 || n_kv <= 0 || n_q >= (int64_t{1} << 31) || N >= 65536)
    throw Error("cuda::sdpa: head_dim " + std::to_string(D) + " (max 256), " + std::to_string(n_q) + " queries, " +
                std::to_string(n_kv) + " keys, " + std::to_string(N) + " images not supported");
  Stream st = stream_for("sdpa");
  const dim3 grid(static_cast<unsigned>(n_q), blocks_for(H, kAttnWarps), static_cast<unsigned>(N));
  const int threads = 32 * kAttnWarps;
  if (D <= 64)
    sdpa_kernel<2><<<grid, threads, 0, st>>>(q, sq, k, sk, v, sv, n_q, n_kv, H, D, scale, out);
  else if (D <= 128)
    sdpa_kernel<4><<<grid, threads, 0, st>>>(q, sq, k, sk, v, sv, n_q, n_kv, H, D, scale, out);
  else
    sdpa_kernel<8><<<grid, threads, 0, st>>>(q, sq, k, sk, v, sv, n_q, n_kv, H, D, scale, out);
  Context::get().check("sdpa");
}

void group_norm(const float* x, int64_t C, int64_t P, int64_t N, int64_t G, const float* w, const float* b, float eps,
                float* y) {
  if (C <= 0 || P <= 0 || N <= 0) return;
  if (G <= 0 || C % G != 0 || G >= 65536 || N >= 65536)
    throw Error("cuda::group_norm: " + std::to_string(G) + " groups of " + std::to_string(C) + " channels, " +
                std::to_string(N) + " images not supported");
  Stream st = stream_for("group_norm");
  group_norm_kernel<<<dim3(static_cast<unsigned>(G), static_cast<unsigned>(N)), kRowThreads, 0, st>>>(
      x, C, P, C / G, w, b, eps, y);
  Context::get().check("group_norm");
}

void upsample_nearest2d(const float* x, int64_t C, int64_t W, int64_t H, int64_t N, int64_t f, float* y) {
  const int64_t n = C * W * f * H * f * N;
  if (n <= 0) return;
  Stream st = stream_for("upsample_nearest2d");
  upsample_kernel<<<capped_blocks(n, 256), 256, 0, st>>>(x, C, W, H, f, n, y);
  Context::get().check("upsample_nearest2d");
}

void pad(const float* x, const int64_t* ne, const int64_t* lo, const int64_t* one, float* y) {
  const int64_t n = one[0] * one[1] * one[2] * one[3];
  if (n <= 0) return;
  Stream st = stream_for("pad");
  pad_kernel<<<capped_blocks(n, 256), 256, 0, st>>>(x, dims(ne), dims(lo), dims(one), n, y);
  Context::get().check("pad");
}

void concat_dim(const void* a, const StridedLayout& la, const void* b, const StridedLayout& lb, int dim,
                const int64_t* one, float* out) {
  const int64_t n = one[0] * one[1] * one[2] * one[3];
  if (n <= 0) return;
  Stream st = stream_for("concat");
  concat_dim_kernel<<<capped_blocks(n, 256), 256, 0, st>>>(static_cast<const uint8_t*>(a), la,
                                                           static_cast<const uint8_t*>(b), lb, dim, dims(one), n, out);
  Context::get().check("concat");
}

}  // namespace kvad::cuda
