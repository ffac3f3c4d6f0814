// The data movement of the prefill MMA GEMM (device_kernels.h gemm_mma; kernel in
// kernels.cu): which thread loads which part of the x and W tiles into shared
// memory, where each warp's wmma fragments start, and which thread stores
// which output element. Every function here is one thread's share of a
// step, written for the device (nvcc) and the host (g++), so
// tests/kernels/cuda/test_cuda_units.cpp runs the kernel's own loaders and
// stores for all 128 threads on the host, with the tensor-core multiply
// replaced by a loop that follows wmma's documented semantics (row-major A,
// column-major B, row-major C store, leading dimensions as passed), on every
// machine, GPU or not. What that test cannot check is the hardware itself.
//
// Block tile: 64 tokens (M) × 64 rows of W (N); K in steps of 64 (two
// 32-element units). 128 threads = 4 warps in a 2 × 2 grid; warp w computes
// tokens 32·(w/2) .. +32 × rows 32·(w%2) .. +32 as 2 × 2 fragments of 16 × 16.
// Shared tiles (16-bit bf16 bit patterns):
//   xs[64 tokens][kLd]   x[m0 + r][k0 + c]
//   ws[64 rows][kLd]     bf16(W[n0 + r][k0 + c]) (as dequantize_kernel rounds)
// padded to kLd = 72 elements (144 bytes): wmma needs ldm % 8 == 0 and
// 32-byte-aligned fragment origins; the pad also spreads rows over banks.
// The output tile cs[64 tokens][kLdC] f32 reuses the same shared memory.
// Out-of-range tokens, rows and units are zeros in xs/ws and never stored.
#pragma once
#include <cstdint>
#include <cstring>

#include "kernels/cuda/device_kernels.h"
#include "kernels/cuda/units.h"

namespace kvad::cuda::mma_tile {

constexpr int kThreads = 128;
constexpr int kLd = kMmaTileK + 8;   // bf16 per shared row of xs and ws
constexpr int kLdC = kMmaTileN + 4;  // f32 per shared row of cs
constexpr int kSmemBytes = 2 * kMmaTileM * kLd * 2;
static_assert(kMmaTileM * kLdC * 4 <= kSmemBytes, "the output tile reuses the operand tiles");
static_assert(kMmaTileM == 64 && kMmaTileN == 64 && kMmaTileK == 64, "the thread mapping assumes 64 × 64 × 64");

/// 64-column K steps of a row of n_in elements, and the steps [begin, end)
/// of slice z of n_slices (balanced; every slice non-empty when
/// n_slices <= steps, as gemm_mma_splits guarantees).
KVAD_HD int64_t k_steps(int64_t n_in) { return (n_in / 32 + 1) / 2; }
KVAD_HD void slice(int64_t n_in, int64_t z, int64_t n_slices, int64_t* begin, int64_t* end) {
  const int64_t s = k_steps(n_in);
  *begin = s * z / n_slices;
  *end = s * (z + 1) / n_slices;
}

/// f32 → bf16 bits, round to nearest even.
KVAD_HD uint16_t to_bf16(float v) {
#if defined(__CUDA_ARCH__)
  return __bfloat16_as_ushort(__float2bfloat16_rn(v));
#else
  return kvad::f32_to_bf16(v);
#endif
}

/// 16 bytes from src to dst (both 16-byte aligned).
KVAD_HD void copy16(void* dst, const void* src) {
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
#else
  std::memcpy(dst, src, 16);
#endif
}
/// Four 32-bit words to dst (16-byte aligned).
KVAD_HD void store16(void* dst, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<uint4*>(dst) = make_uint4(a, b, c, d);
#else
  const uint32_t v[4] = {a, b, c, d};
  std::memcpy(dst, v, 16);
#endif
}
KVAD_HD void zero16(void* dst) { store16(dst, 0, 0, 0, 0); }

/// Thread tid's share of the x tile for the step at column k0: 4 of the 512
/// 16-byte chunks (chunk c = tid + 128·i: token row c / 8, columns 8·(c % 8)).
/// x: [n_tok, n_in] bf16, rows 64-byte multiples (n_in % 32 == 0).
KVAD_HD void load_x(const uint16_t* x, int64_t n_in, int64_t n_tok, int64_t m0, int64_t k0, int tid, uint16_t* xs) {
KVAD_UNROLL
  for (int i = 0; i < 4; ++i) {
    const int c = tid + kThreads * i, r = c >> 3, col = (c & 7) * 8;
    if (m0 + r < n_tok && k0 + col < n_in) copy16(xs + r * kLd + col, x + (m0 + r) * n_in + k0 + col);
    else zero16(xs + r * kLd + col);
  }
}

/// Thread tid's share of the W tile for step s: unit 2s + tid % 2 of row
/// n0 + tid / 2, dequantized by the format's reader and rounded to bf16, into
/// ws[tid / 2][32·(tid % 2) .. +32].
template <DType T>
KVAD_HD void load_w(const uint8_t* W, size_t row_bytes, int64_t n_in, int64_t n_out, int64_t n0, int64_t s, int tid,
                    uint16_t* ws) {
  const int dr = tid >> 1, du = tid & 1;
  const int64_t u = 2 * s + du;
  uint16_t* dst = ws + dr * kLd + du * 32;
  uint32_t p[16];  // bf16 pairs, the lower-indexed element in the low half (little-endian order)
  if (n0 + dr < n_out && u < n_in / 32) {
    float w[32];
    fmt::Fmt<T>::unit(W + static_cast<size_t>(n0 + dr) * row_bytes, u, w);
KVAD_UNROLL
    for (int j = 0; j < 16; ++j)
      p[j] = static_cast<uint32_t>(to_bf16(w[2 * j])) | (static_cast<uint32_t>(to_bf16(w[2 * j + 1])) << 16);
  } else {
KVAD_UNROLL
    for (int j = 0; j < 16; ++j) p[j] = 0;
  }
KVAD_UNROLL
  for (int j = 0; j < 4; ++j) store16(dst + 8 * j, p[4 * j], p[4 * j + 1], p[4 * j + 2], p[4 * j + 3]);
}

/// Fragment origins of warp `warp` (element offsets): A fragment i (tokens)
/// in xs, B fragment j (rows of W) in ws at K offset kk (0, 16, 32, 48), and
/// accumulator (i, j) in cs. A is row-major and B column-major, both with
/// ldm kLd (B(k, n) = ws[n][k]); C is stored row-major with ldm kLdC.
KVAD_HD int a_origin(int warp, int i, int kk) { return ((warp >> 1) * 32 + 16 * i) * kLd + kk; }
KVAD_HD int b_origin(int warp, int j, int kk) { return ((warp & 1) * 32 + 16 * j) * kLd + kk; }
KVAD_HD int c_origin(int warp, int i, int j) { return ((warp >> 1) * 32 + 16 * i) * kLdC + (warp & 1) * 32 + 16 * j; }

/// Thread tid's share of the output: elements e = tid + 128·i of the 64 × 64
/// tile (token e / 64, row e % 64: consecutive threads, consecutive columns),
/// those inside [n_tok, n_out], from cs to o: [n_tok, n_out] f32.
KVAD_HD void store_out(const float* cs, int64_t n_tok, int64_t n_out, int64_t m0, int64_t n0, int tid, float* o) {
  for (int e = tid; e < kMmaTileM * kMmaTileN; e += kThreads) {
    const int r = e / kMmaTileN, c = e % kMmaTileN;
    if (m0 + r < n_tok && n0 + c < n_out) o[(m0 + r) * n_out + n0 + c] = cs[r * kLdC + c];
  }
}

}  // namespace kvad::cuda::mma_tile
