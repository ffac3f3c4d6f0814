// The AVX2 dot product of the 4-bit table formats against Q8_0, shared by
// kquants_avx2.cpp (IQ4_NL) and mxfp4_avx2.cpp (MXFP4): 32-element blocks of
// 4-bit indices into a table of 16 int8 levels, one scale per block. Compiled
// with KVAD_AVX2_FLAGS only; never include this from generic code.
#pragma once
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/simd_avx2.h"

namespace kvad::cpu::quants::avx2 {

/// sum over blocks i of scale(x[i], y[i]) * sum_j levels[q_j] * y[i].qs[j],
/// n / 32 blocks (n % 32 == 0), two accumulators. Block: a struct with
/// qs[16] (element j in the low nibble of qs[j], j + 16 in the high one);
/// levels: 16 int8 values, |level| <= 127 (they come from a byte shuffle of
/// the table, their sign moved onto y for maddubs); scale(x, y) -> float.
/// Equals the reference (exact integer sum per block, scaled in float) up
/// to float rounding: the 8 int lanes of a block are scaled and added in
/// float lanes with FMA.
template <class Block, class Scale>
float dot_table4_q8_0(int64_t n, const Block* x, const block_q8_0* y, const int8_t* levels, Scale scale) {
  const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(levels)));
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i ones16 = _mm256_set1_epi16(1);
  auto block_dot = [&](const Block& b, const block_q8_0& a) {
    const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs));
    const __m256i idx = _mm256_and_si256(_mm256_inserti128_si256(_mm256_castsi128_si256(t), _mm_srli_epi16(t, 4), 1), m4);
    const __m256i v = _mm256_shuffle_epi8(table, idx);
    const __m256i q8 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qs));
    // u8 x s8 products summed in groups of four: 8 x int32.
    const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(v, v), _mm256_sign_epi8(q8, v)), ones16);
    return _mm256_cvtepi32_ps(p);
  };
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  const int64_t nb = n / 32;
  int64_t i = 0;
  for (; i + 2 <= nb; i += 2) {
    acc0 = _mm256_fmadd_ps(_mm256_set1_ps(scale(x[i], y[i])), block_dot(x[i], y[i]), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_set1_ps(scale(x[i + 1], y[i + 1])), block_dot(x[i + 1], y[i + 1]), acc1);
  }
  for (; i < nb; ++i) acc0 = _mm256_fmadd_ps(_mm256_set1_ps(scale(x[i], y[i])), block_dot(x[i], y[i]), acc0);
  return kvad::cpu::avx2::hsum(_mm256_add_ps(acc0, acc1));
}

}  // namespace kvad::cpu::quants::avx2
