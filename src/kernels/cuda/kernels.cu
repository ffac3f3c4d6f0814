// The device kernels behind kernels/cuda/device_kernels.h, in one translation unit to
// keep nvcc's share of the build small (one architecture, few templates:
// 7 formats × {gemv, get_rows, dequantize}, 4 quantized formats × the MMA
// GEMM, and 3 attention head sizes). This file holds the kernels that read
// weight formats (GEMV, GEMM, get_rows, dequantize); the ones on activations
// are in activation_ops.cuh, #included at the end (the same translation unit).
//
// Formats are read in "units" of 32 consecutive elements of a row
// (units.h, which a host test checks against the CPU references).
//
// Status: compiles for sm_90 (nvcc 13.0); UNVERIFIED ON A GPU in this build.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <string>

#include "base/error.h"
#include "kernels/cpu/quant_blocks.h"
#include "kernels/cuda/context.h"
#include "kernels/cuda/gemm_tile.h"
#include "kernels/cuda/device_kernels.h"
#include "kernels/cuda/units.h"

namespace kvad::cuda {

namespace {

using fmt::h2f;
using fmt::Fmt;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

constexpr int kMaxGemvTok = kGemvMaxTokens;
constexpr int kGemvWarps = 4;

// One warp per output row: lanes stride over the row's units; each unit is
// dequantized once and dotted with every token's 32 activations.
template <DType T>
__global__ void gemv_kernel(const uint8_t* __restrict__ W, size_t row_bytes, int64_t n_in, int64_t n_out,
                            const float* __restrict__ x, int n_tok, float* __restrict__ y) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kGemvWarps + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (r >= n_out) return;
  const uint8_t* row = W + static_cast<size_t>(r) * row_bytes;
  const int64_t n_units = n_in / 32;
  float acc[kMaxGemvTok];
#pragma unroll
  for (int t = 0; t < kMaxGemvTok; ++t) acc[t] = 0.0f;
  float w[32];
  for (int64_t u = lane; u < n_units; u += 32) {
    Fmt<T>::unit(row, u, w);
#pragma unroll
    for (int t = 0; t < kMaxGemvTok; ++t) {
      if (t < n_tok) {
        const float4* xt = reinterpret_cast<const float4*>(x + t * n_in + u * 32);
        float s = 0.0f;
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          const float4 v = xt[k];
          s += w[4 * k] * v.x + w[4 * k + 1] * v.y + w[4 * k + 2] * v.z + w[4 * k + 3] * v.w;
        }
        acc[t] += s;
      }
    }
  }
#pragma unroll
  for (int t = 0; t < kMaxGemvTok; ++t) {
    if (t < n_tok) {
      const float s = warp_sum(acc[t]);
      if (lane == 0) y[t * n_out + r] = s;
    }
  }
}

// One thread per (row, unit): out row i = W row ids[i] (zeros for a bad id).
template <DType T>
__global__ void get_rows_kernel(const uint8_t* __restrict__ W, size_t row_bytes, int64_t n_in, int64_t n_rows,
                                const int32_t* __restrict__ ids, int64_t n_ids, float* __restrict__ out) {
  const int64_t n_units = n_in / 32;
  const int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g >= n_ids * n_units) return;
  const int64_t i = g / n_units, u = g % n_units;
  const int32_t id = ids[i];
  float* o = out + i * n_in + u * 32;
  if (id < 0 || id >= n_rows) {
    for (int j = 0; j < 32; ++j) o[j] = 0.0f;
    return;
  }
  float w[32];
  Fmt<T>::unit(W + static_cast<size_t>(id) * row_bytes, u, w);
#pragma unroll
  for (int j = 0; j < 32; ++j) o[j] = w[j];
}

// One thread per (row, unit): dst = W in bf16 or f16.
template <DType T>
__global__ void dequantize_kernel(const uint8_t* __restrict__ W, size_t row_bytes, int64_t n_in, int64_t n_out,
                                  uint16_t* __restrict__ dst, bool bf16) {
  const int64_t n_units = n_in / 32;
  const int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g >= n_out * n_units) return;
  const int64_t r = g / n_units, u = g % n_units;
  float w[32];
  Fmt<T>::unit(W + static_cast<size_t>(r) * row_bytes, u, w);
  uint16_t* o = dst + r * n_in + u * 32;
  if (bf16) {
#pragma unroll
    for (int j = 0; j < 32; ++j) o[j] = __bfloat16_as_ushort(__float2bfloat16_rn(w[j]));
  } else {
#pragma unroll
    for (int j = 0; j < 32; ++j) o[j] = __half_as_ushort(__float2half_rn(w[j]));
  }
}

// ---- Quantized GEMM for prefill (device_kernels.h gemm_mma) ----
//
// The tiles, who loads what, and the fragment origins: gemm_tile.h (shared
// with a host test that runs these same loaders and stores for every thread).
// Per 64-column K step: every thread loads its share of the x and W tiles,
// then each warp does 4 k16 sub-steps × 2 × 2 wmma 16×16×16 MMAs (bf16 ×
// bf16 → f32 accumulators). After the last step the accumulators go through
// shared memory (reusing the operand tiles) so the global stores are
// coalesced rows. blockIdx.z is the K slice: with one slice the tile goes to
// y, with more to partial[z] (split_sum_kernel adds them).
template <DType T>
__global__ void __launch_bounds__(mma_tile::kThreads)
    gemm_mma_kernel(const uint8_t* __restrict__ W, size_t row_bytes, int64_t n_in, int64_t n_out,
                    const uint16_t* __restrict__ x, int64_t n_tok, float* __restrict__ out) {
  namespace wmma = nvcuda::wmma;
  using namespace mma_tile;
  __shared__ __align__(128) uint8_t smem[kSmemBytes];
  auto* xs = reinterpret_cast<uint16_t*>(smem);  // [64 tokens][kLd]
  uint16_t* ws = xs + kMmaTileM * kLd;            // [64 rows of W][kLd]
  const int tid = threadIdx.x, warp = tid / 32;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kMmaTileN;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kMmaTileM;
  int64_t s_begin, s_end;
  slice(n_in, blockIdx.z, gridDim.z, &s_begin, &s_end);

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

  for (int64_t s = s_begin; s < s_end; ++s) {
    load_x(x, n_in, n_tok, m0, s * kMmaTileK, tid, xs);
    load_w<T>(W, row_bytes, n_in, n_out, n0, s, tid, ws);
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kMmaTileK; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a[2];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b[2];
#pragma unroll
      for (int i = 0; i < 2; ++i)
        wmma::load_matrix_sync(a[i], reinterpret_cast<const __nv_bfloat16*>(xs + a_origin(warp, i, kk)), kLd);
#pragma unroll
      for (int j = 0; j < 2; ++j)
        wmma::load_matrix_sync(b[j], reinterpret_cast<const __nv_bfloat16*>(ws + b_origin(warp, j, kk)), kLd);
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }

  float* cs = reinterpret_cast<float*>(smem);  // [64 tokens][kLdC]
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) wmma::store_matrix_sync(cs + c_origin(warp, i, j), acc[i][j], kLdC, wmma::mem_row_major);
  __syncthreads();
  store_out(cs, n_tok, n_out, m0, n0, tid, out + static_cast<size_t>(blockIdx.z) * n_tok * n_out);
}

// y[i] = Σ_z partial[z][i], slices added in order (deterministic).
__global__ void split_sum_kernel(const float* __restrict__ partial, int splits, int64_t n, float* __restrict__ y) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float s = partial[i];
    for (int z = 1; z < splits; ++z) s += partial[z * n + i];
    y[i] = s;
  }
}

unsigned blocks_for(int64_t n, int threads) {
  return static_cast<unsigned>((n + threads - 1) / threads);
}
unsigned capped_blocks(int64_t n, int threads) {
  const int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b < 65535 * 8 ? (b > 0 ? b : 1) : 65535 * 8);
}

// Calls f.template operator()<T>() for the format's instantiation.
template <class F>
void dispatch(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::F32: f.template operator()<DType::F32>(); return;
    case DType::F16: f.template operator()<DType::F16>(); return;
    case DType::BF16: f.template operator()<DType::BF16>(); return;
    case DType::Q8_0: f.template operator()<DType::Q8_0>(); return;
    case DType::Q4_0: f.template operator()<DType::Q4_0>(); return;
    case DType::Q4_K: f.template operator()<DType::Q4_K>(); return;
    case DType::Q6_K: f.template operator()<DType::Q6_K>(); return;
    default:
      throw Error(std::string("cuda::") + op + ": no CUDA kernels for format " + dtype_name(t) +
                  " (supported: f32, f16, bf16, q8_0, q4_0, q4_K, q6_K)");
  }
}

bool mma_format(DType t) { return gemm_mma_format(t); }

// dispatch for the quantized formats only (the MMA GEMM's instantiations).
template <class F>
void dispatch_quant(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::Q8_0: f.template operator()<DType::Q8_0>(); return;
    case DType::Q4_0: f.template operator()<DType::Q4_0>(); return;
    case DType::Q4_K: f.template operator()<DType::Q4_K>(); return;
    case DType::Q6_K: f.template operator()<DType::Q6_K>(); return;
    default:
      throw Error(std::string("cuda::") + op + ": format " + dtype_name(t) + " is not one of q8_0, q4_0, q4_K, q6_K");
  }
}

void check_matrix(const DeviceMatrix& w, const char* op) {
  if (w.n_in % 32 != 0 || w.n_in % dtype_info(w.type).block_elems != 0)
    throw Error(std::string("cuda::") + op + ": rows of " + std::to_string(w.n_in) + " elements of " +
                dtype_name(w.type) + " are not a whole number of 32-element units");
}

Stream stream_for(const char* op) {
  Context& c = Context::get();
  c.note_op(op);
  return c.compute();
}

void blas_check(cublasStatus_t s, const char* op) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw Error(std::string("cuda::") + op + ": cuBLAS error " + cublasGetStatusString(s));
}

}  // namespace

bool has_kernels(DType t) {
  switch (t) {
    case DType::F32: case DType::F16: case DType::BF16: case DType::Q8_0: case DType::Q4_0:
    case DType::Q4_K: case DType::Q6_K:
      return true;
    default:
      return false;
  }
}

void matmul(const DeviceMatrix& w, const float* x, int64_t n_tok, float* y, GemmPath path) {
  check_matrix(w, "matmul");
  if (n_tok <= 0 || w.n_out == 0) return;
  Context& c = Context::get();
  const size_t rb = row_bytes(w.type, w.n_in);
  if (n_tok <= kMaxGemvTok) {
    Stream st = stream_for("matmul (gemv)");
    const dim3 grid(blocks_for(w.n_out, kGemvWarps));
    dispatch(w.type, "matmul", [&]<DType T>() {
      gemv_kernel<T><<<grid, 32 * kGemvWarps, 0, st>>>(static_cast<const uint8_t*>(w.data), rb, w.n_in, w.n_out,
                                                       x, static_cast<int>(n_tok), y);
    });
    c.check("matmul (gemv)");
    return;
  }
  if (path == GemmPath::Auto) {
    static const GemmPath env = gemm_path_from_env();  // read once per process
    path = env;
  }
  if (path == GemmPath::Mma && mma_format(w.type)) {
    auto* xh = static_cast<uint16_t*>(c.scratch(1, static_cast<size_t>(w.n_in) * n_tok * 2));
    f32_to_half(x, xh, w.n_in * n_tok, true);
    gemm_mma(w, xh, n_tok, y, 0);
    return;
  }
  // Prefill: 16-bit (or f32) operands through cuBLAS, f32 accumulation.
  // Column-major view: A = W as [n_in × n_out] (lda n_in), B = x as
  // [n_in × n_tok], C = y as [n_out × n_tok]; C = Aᵀ·B.
  Stream st = stream_for("matmul (gemm)");
  const float alpha = 1.0f, beta = 0.0f;
  const void* A = w.data;
  const void* B = x;
  cudaDataType_t ab_type = CUDA_R_32F;
  if (w.type != DType::F32) {
    const bool bf16 = w.type != DType::F16;  // quantized formats dequantize to bf16 (f16 could overflow)
    ab_type = bf16 ? CUDA_R_16BF : CUDA_R_16F;
    if (w.type != DType::F16 && w.type != DType::BF16) {
      auto* dq = static_cast<uint16_t*>(c.scratch(0, static_cast<size_t>(w.n_in) * w.n_out * 2));
      dequantize(w, dq, true);
      A = dq;
    }
    auto* xh = static_cast<uint16_t*>(c.scratch(1, static_cast<size_t>(w.n_in) * n_tok * 2));
    f32_to_half(x, xh, w.n_in * n_tok, bf16);
    B = xh;
    c.note_op("matmul (gemm)");
  }
  blas_check(cublasGemmEx(c.blas(), CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(w.n_out), static_cast<int>(n_tok),
                          static_cast<int>(w.n_in), &alpha, A, ab_type, static_cast<int>(w.n_in), B, ab_type,
                          static_cast<int>(w.n_in), &beta, y, CUDA_R_32F, static_cast<int>(w.n_out),
                          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
             "matmul (gemm)");
  (void)st;
  c.check("matmul (gemm)");
}

void gemm_mma(const DeviceMatrix& w, const uint16_t* x, int64_t n_tok, float* y, int split_k) {
  check_matrix(w, "gemm_mma");
  if (!mma_format(w.type))
    throw Error(std::string("cuda::gemm_mma: format ") + dtype_name(w.type) + " is not one of q8_0, q4_0, q4_K, q6_K");
  if (n_tok <= 0 || w.n_out == 0) return;
  const int64_t m_tiles = (n_tok + kMmaTileM - 1) / kMmaTileM;
  if (m_tiles > 65535) throw Error("cuda::gemm_mma: " + std::to_string(n_tok) + " tokens is more than 65535 × 64");
  Context& c = Context::get();
  const int splits = gemm_mma_splits(w.n_in, w.n_out, n_tok, c.sm_count(), split_k);
  const int64_t n = n_tok * w.n_out;
  float* out = y;
  if (splits > 1) out = static_cast<float*>(c.scratch(2, static_cast<size_t>(splits) * n * sizeof(float)));
  Stream st = stream_for("gemm_mma");
  const size_t rb = row_bytes(w.type, w.n_in);
  const dim3 grid(blocks_for(w.n_out, kMmaTileN), static_cast<unsigned>(m_tiles), static_cast<unsigned>(splits));
  dispatch_quant(w.type, "gemm_mma", [&]<DType T>() {
    gemm_mma_kernel<T><<<grid, mma_tile::kThreads, 0, st>>>(static_cast<const uint8_t*>(w.data), rb, w.n_in, w.n_out, x,
                                                     n_tok, out);
  });
  c.check("gemm_mma");
  if (splits > 1) {
    c.note_op("gemm_mma (split-K sum)");
    split_sum_kernel<<<capped_blocks(n, 256), 256, 0, st>>>(out, splits, n, y);
    c.check("gemm_mma (split-K sum)");
  }
}

void get_rows(const DeviceMatrix& w, const int32_t* ids, int64_t n_ids, float* out) {
  check_matrix(w, "get_rows");
  if (n_ids <= 0) return;
  Stream st = stream_for("get_rows");
  const size_t rb = row_bytes(w.type, w.n_in);
  const int64_t n = n_ids * (w.n_in / 32);
  dispatch(w.type, "get_rows", [&]<DType T>() {
    get_rows_kernel<T><<<blocks_for(n, 256), 256, 0, st>>>(static_cast<const uint8_t*>(w.data), rb, w.n_in,
                                                            w.n_out, ids, n_ids, out);
  });
  Context::get().check("get_rows");
}

void dequantize(const DeviceMatrix& w, uint16_t* dst, bool bf16) {
  check_matrix(w, "dequantize");
  Stream st = stream_for("dequantize");
  const size_t rb = row_bytes(w.type, w.n_in);
  const int64_t n = w.n_out * (w.n_in / 32);
  if (n == 0) return;
  dispatch(w.type, "dequantize", [&]<DType T>() {
    dequantize_kernel<T><<<blocks_for(n, 256), 256, 0, st>>>(static_cast<const uint8_t*>(w.data), rb, w.n_in,
                                                              w.n_out, dst, bf16);
  });
  Context::get().check("dequantize");
}

}  // namespace kvad::cuda

// The kernels on activations (norms, RoPE, element-wise, softmax, concat,
// gathers, the KV cache and attention): the same translation unit.
#include "kernels/cuda/activation_ops.cuh"
// The kernels on strided tensors (cont): the same translation unit.
#include "kernels/cuda/strided_ops.cuh"
// The image ops (group_norm, upsample, pad, concat along a dimension, ...):
// the same translation unit.
#include "kernels/cuda/image_ops.cuh"
