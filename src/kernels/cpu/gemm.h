// Internal: the tiled matrix-product kernels behind CpuKernels::gemm
// (kernels.h) and the activation layouts they read.
//
// gemm(n, w, ldw, nr, y, ldy, nc, out, ldo) computes, for r < nr and c < nc,
//   out[c * ldo + r] = vec_dot(n, w + r * ldw, y + c * ldy)
// i.e. a block of nr weight rows times nc activation rows, the same numbers
// the format's vec_dot gives up to float summation order. The reference
// (gemm_ref below) is exactly that loop of reference vec_dots over rows in
// the format's vec_dot_type. The AVX2 versions (gemm_avx2.cpp) read the
// activations packed by their gemm_pack (layouts below), which holds the same
// quants and the same scales (f16 widened to f32, exactly), grouped four
// blocks at a time so that one load fetches four scales.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/kernels.h"

namespace kvad::cpu::gemm {

// Packed activations: a row in groups of four 32-element blocks b0..b3.
// The quants of a group are stored as four 32-byte vectors
//   [b0 elements 0..15 | b1 0..15], [b0 16..31 | b1 16..31],
//   [b2 0..15 | b3 0..15],          [b2 16..31 | b3 16..31],
// the order in which one 32-byte load of two weight blocks' nibbles
// (Q4_0/Q4_1) splits into low and high nibbles. The kernels reduce a group's
// products to eight int32 lanes that hold parts of blocks (0, 2, 0, 2, 1, 3,
// 1, 3); scales are stored in that lane order, f16 widened to f32 (exactly).
// A row's last group is zero-padded when its block count is not a multiple
// of 4.

/// Q8_1 activations for Q4_1 weights: d = the blocks' d in lane order
/// (d0 d2 d0 d2 d1 d3 d1 d3); s = (s0 s1 s2 s3 0 0 0 0).
struct q8_1x4 {
  float d[8];
  float s[8];
  int8_t qs[128];
};
static_assert(sizeof(q8_1x4) == 192);

/// Q8_0 activations for Q4_0, Q5_0 and Q8_0 weights: d as q8_1x4; ysum[l] = 8 x
/// the sum of the quants that lane l covers (Q4_0's offset: sum (q - 8) y =
/// sum q y - 8 sum y, exactly, in integers; Q5_0's is 16 sum y).
struct q8_0x4 {
  float d[8];
  int32_t ysum[8];
  int8_t qs[128];
};
static_assert(sizeof(q8_0x4) == 192);

/// Q8_K activations for Q4_K and Q6_K weights, one per 256-element
/// super-block: the block as it is, plus dbs[j] = d * (bsums[2j] +
/// bsums[2j+1]) (the exact integer sum of 32-element sub-block j, times d:
/// one f32 rounding), which Q4_K's min term multiplies by dmin * m_j. Formed
/// once per token instead of once per (weight row, token).
struct q8_Kx {
  block_q8_K b;
  float dbs[8];
};
static_assert(sizeof(q8_Kx) == 324);

/// Bytes of a packed row of n elements (n % 32 == 0; n % 256 == 0 for q8_Kx).
size_t packed_bytes_q8_1x4(int64_t n);
size_t packed_bytes_q8_0x4(int64_t n);
size_t packed_bytes_q8_Kx(int64_t n);
size_t packed_bytes_f32(int64_t n);  ///< 4 n: F16 activation rows widened to f32

/// The loop of reference vec_dots (the definition of every gemm entry).
template <VecDotFn dot>
void gemm_ref(int64_t n, const void* w, size_t ldw, int64_t nr, const void* y, size_t ldy, int64_t nc,
              float* out, int64_t ldo) {
  const uint8_t* wb = static_cast<const uint8_t*>(w);
  const uint8_t* yb = static_cast<const uint8_t*>(y);
  for (int64_t c = 0; c < nc; ++c)
    for (int64_t r = 0; r < nr; ++r)
      out[c * ldo + r] = dot(n, wb + static_cast<size_t>(r) * ldw, yb + static_cast<size_t>(c) * ldy);
}

namespace avx2 {
// Packers: n_rows rows of n elements in the vec_dot_type (ldx bytes apart) ->
// packed rows (ldp bytes apart, ldp >= packed_bytes_*(n)).
void pack_q8_1x4(int64_t n, const void* x, size_t ldx, int64_t n_rows, void* dst, size_t ldp);
void pack_q8_0x4(int64_t n, const void* x, size_t ldx, int64_t n_rows, void* dst, size_t ldp);
void pack_q8_Kx(int64_t n, const void* x, size_t ldx, int64_t n_rows, void* dst, size_t ldp);

// Tiled products; y is packed (q8_1x4 for Q4_1, q8_0x4 for Q4_0, Q5_0 and Q8_0).
void gemm_q4_1(int64_t n, const void* w, size_t ldw, int64_t nr, const void* y, size_t ldy, int64_t nc,
               float* out, int64_t ldo);
void gemm_q4_0(int64_t n, const void* w, size_t ldw, int64_t nr, const void* y, size_t ldy, int64_t nc,
               float* out, int64_t ldo);
void gemm_q5_0(int64_t n, const void* w, size_t ldw, int64_t nr, const void* y, size_t ldy, int64_t nc,
               float* out, int64_t ldo);
void gemm_q8_0(int64_t n, const void* w, size_t ldw, int64_t nr, const void* y, size_t ldy, int64_t nc,
               float* out, int64_t ldo);
// K-quants (gemm_kquants_avx2.cpp): y is packed as q8_Kx; outputs equal the
// reference vec_dot up to float summation order.
void gemm_q4_K(int64_t n, const void* w, size_t ldw, int64_t nr, const void* y, size_t ldy, int64_t nc,
               float* out, int64_t ldo);
void gemm_q6_K(int64_t n, const void* w, size_t ldw, int64_t nr, const void* y, size_t ldy, int64_t nc,
               float* out, int64_t ldo);
// F32 weights and f32 activations, unpacked (gemm_f32_avx2.cpp): tiles of
// 4 rows x 3 tokens; outputs equal vec_dot_f32 up to float summation order.
void gemm_f32(int64_t n, const void* w, size_t ldw, int64_t nr, const void* y, size_t ldy, int64_t nc,
              float* out, int64_t ldo);
// F16 weights and f32 activations (gemm_f32_avx2.cpp): gemm_f32's tiles with
// each weight vector widened in registers, so the outputs are gemm_f32's
// bits on the widened weights (conv2d's f16 product reads its f32 im2col
// rows with it directly). Behind matmul, the F16 activation rows are
// widened to f32 by pack_f16_f32 (exact), so the outputs equal vec_dot_f16
// up to float summation order.
void gemm_f16(int64_t n, const void* w, size_t ldw, int64_t nr, const void* y, size_t ldy, int64_t nc,
              float* out, int64_t ldo);
void pack_f16_f32(int64_t n, const void* x, size_t ldx, int64_t n_rows, void* dst, size_t ldp);
}  // namespace avx2

// The same K-quant gemms built for AVX512-VL/BW/VNNI (gemm_kquants_avx512.cpp;
// CPUs with cpu_features().has_avx512_vnni()): the AVX2 ones' bits, faster.
namespace avx512vnni {
void gemm_q4_K(int64_t n, const void* w, size_t ldw, int64_t nr, const void* y, size_t ldy, int64_t nc,
               float* out, int64_t ldo);
void gemm_q6_K(int64_t n, const void* w, size_t ldw, int64_t nr, const void* y, size_t ldy, int64_t nc,
               float* out, int64_t ldo);
}  // namespace avx512vnni

}  // namespace kvad::cpu::gemm
