// AVX2+FMA+F16C kernels of the K-quants, IQ4_NL and TQ1_0/TQ2_0. Compiled
// with ${KVAD_AVX2_FLAGS} and -ffp-contract=off; called only when
// cpu_features().has_avx2_fma().
//
// Each function computes what its reference in kquants_ref.cpp or
// iq_tq_ref.cpp computes (MXFP4: mxfp4_avx2.cpp):
// - to_float (q4_K, q5_K, q6_K, q8_K) and from_float (q8_K) are bit-identical to
//   the reference: the same float32 roundings in the same order (Q8_K's
//   nearest_int is the default round-half-even of cvtps2dq);
// - vec_dot forms the same exact integer sums as the reference (unsigned
//   quants times signed int8 activations with maddubs, each pair sum within
//   int16, then madd with the sub-block scales). Offsets and mins come from
//   Q8_K's bsums:
//     sum sc*(q - c)*y = sum sc*q*y - c * sum sc*bsum   (Q3_K c=4, Q6_K c=32,
//                                                        TQ1_0/TQ2_0 c=1, sc=1)
//     sum (d*sc*q - dmin*m)*y = d*sum sc*q*y - dmin*sum m*bsum (Q2_K/Q4_K/Q5_K).
//   The K-quant and TQ dots reduce the integer lanes to one int per
//   super-block and then do the reference's float arithmetic, so they equal
//   the reference bit for bit (and no float rounding sees the uncancelled
//   lane sums of an offset). The IQ4_NL dot (32-element blocks, no offset)
//   scales 8 int lanes per block and adds them in float lanes with FMA, so it
//   differs from the reference by float rounding only.
#include <immintrin.h>

#include "kernels/cpu/simd_avx2.h"

#include <cstring>

#include "kernels/cpu/dot_table4_avx2.h"
#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/quants.h"

namespace kvad::cpu::quants::avx2 {

namespace {

inline float fp16(uint16_t h) { return _cvtsh_ss(h); }

using kvad::cpu::avx2::hsum;

inline int hsum_i32(__m128i r) {
  r = _mm_add_epi32(r, _mm_unpackhi_epi64(r, r));
  r = _mm_add_epi32(r, _mm_shuffle_epi32(r, 1));
  return _mm_cvtsi128_si32(r);
}

inline int hsum_i32(__m256i v) {
  return hsum_i32(_mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1)));
}

inline __m256i load(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m128i load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

// u8 x s8 products summed in pairs (int16, exact while |pair| < 2^15), times
// int16 scales and summed in pairs again: 8 x int32.
inline __m256i dot_scaled(__m256i q, __m256i y, __m256i scale16) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(q, y), scale16);
}

// Sum of u8 x s8 products in groups of four: 8 x int32.
inline __m256i dot_us8(__m256i q, __m256i y) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(q, y), _mm256_set1_epi16(1));
}

// The int8 scales of 16-element sub-blocks 2k and 2k+1 (of 16 in `sc`) as
// 16 x int16: eight copies of each, the layout of a maddubs result over 32
// elements (low 128-bit lane: elements 0..15).
inline __m256i scale_pair(__m128i sc, int k) {
  const long long lo = 0x0101010101010101LL * (2 * k), hi = 0x0101010101010101LL * (2 * k + 1);
  return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc, _mm_set_epi64x(hi, lo)));
}

// Sum over 16-element groups j of sc[j] * bsums[j]: 8 x int32 (pairs of j).
inline __m256i scaled_bsums(__m128i sc_i8, const int16_t* bsums) {
  return _mm256_madd_epi16(_mm256_cvtepi8_epi16(sc_i8), load(bsums));
}


// The 16 Q3_K scales (quant_blocks.h), minus 32, as int8.
inline __m128i scales_q3_K(const uint8_t* q) {
  uint32_t a[3];
  std::memcpy(a, q, 12);
  const uint32_t s0 = (a[0] & 0x0f0f0f0fu) | ((a[2] & 0x03030303u) << 4);
  const uint32_t s1 = (a[1] & 0x0f0f0f0fu) | (((a[2] >> 2) & 0x03030303u) << 4);
  const uint32_t s2 = ((a[0] >> 4) & 0x0f0f0f0fu) | (((a[2] >> 4) & 0x03030303u) << 4);
  const uint32_t s3 = ((a[1] >> 4) & 0x0f0f0f0fu) | (((a[2] >> 6) & 0x03030303u) << 4);
  const __m128i s = _mm_set_epi32(static_cast<int>(s3), static_cast<int>(s2), static_cast<int>(s1),
                                  static_cast<int>(s0));
  return _mm_sub_epi8(s, _mm_set1_epi8(32));
}

// 8 bytes -> 8 floats (unsigned, signed).
inline __m256 u8_to_ps(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)); }
inline __m256 i8_to_ps(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)); }

// out[0..31] = d * q - m for 32 unsigned bytes q (mul, then sub: two roundings).
inline void store_affine_u8(__m256i q, float d, float m, float* out) {
  const __m256 vd = _mm256_set1_ps(d), vm = _mm256_set1_ps(m);
  const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
  _mm256_storeu_ps(out + 0, _mm256_sub_ps(_mm256_mul_ps(u8_to_ps(lo), vd), vm));
  _mm256_storeu_ps(out + 8, _mm256_sub_ps(_mm256_mul_ps(u8_to_ps(_mm_srli_si128(lo, 8)), vd), vm));
  _mm256_storeu_ps(out + 16, _mm256_sub_ps(_mm256_mul_ps(u8_to_ps(hi), vd), vm));
  _mm256_storeu_ps(out + 24, _mm256_sub_ps(_mm256_mul_ps(u8_to_ps(_mm_srli_si128(hi, 8)), vd), vm));
}

// out[0..15] = d0 * q[0..15], out[16..31] = d1 * q[16..31] for 32 signed bytes q.
inline void store_scaled_i8(__m256i q, float d0, float d1, float* out) {
  const __m256 v0 = _mm256_set1_ps(d0), v1 = _mm256_set1_ps(d1);
  const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
  _mm256_storeu_ps(out + 0, _mm256_mul_ps(i8_to_ps(lo), v0));
  _mm256_storeu_ps(out + 8, _mm256_mul_ps(i8_to_ps(_mm_srli_si128(lo, 8)), v0));
  _mm256_storeu_ps(out + 16, _mm256_mul_ps(i8_to_ps(hi), v1));
  _mm256_storeu_ps(out + 24, _mm256_mul_ps(i8_to_ps(_mm_srli_si128(hi, 8)), v1));
}

// Q6_K: the 6-bit quants (0..63) of elements 128*h + 32*s + l, l < 32, from
// ql[64h..64h+63] (two loads) and qh[32h..32h+31].
inline void q6_quants(const uint8_t* ql, const uint8_t* qh, __m256i q[4]) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x30);
  const __m256i l0 = load(ql), l1 = load(ql + 32), h = load(qh);
  // ((h >> 2s) & 3) << 4 as a shift of h by 4 - 2s, masked to bits 4..5.
  q[0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(h, 4), m2));
  q[1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(h, 2), m2));
  q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(h, m2));
  q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                         _mm256_and_si256(_mm256_srli_epi16(h, 2), m2));
}

}  // namespace

// ---- q2_K ------------------------------------------------------------------

float vec_dot_q2_K_q8_K(int64_t n, const void* vx, const void* vy) {
  const block_q2_K* x = static_cast<const block_q2_K*>(vx);
  const block_q8_K* y = static_cast<const block_q8_K*>(vy);
  const __m256i m3 = _mm256_set1_epi8(3);
  const __m128i m4 = _mm_set1_epi8(0x0F);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float dall = y[i].d * fp16(x[i].d);
    const float dmin = y[i].d * fp16(x[i].dmin);
    const __m128i sb = load128(x[i].scales);
    const __m128i sc = _mm_and_si128(sb, m4);
    const __m128i mn = _mm_and_si128(_mm_srli_epi16(sb, 4), m4);
    const int summs = hsum_i32(scaled_bsums(mn, y[i].bsums));
    __m256i sumi = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i qs = load(x[i].qs + 32 * h);
      const int8_t* q8 = y[i].qs + 128 * h;
      sumi = _mm256_add_epi32(sumi, dot_scaled(_mm256_and_si256(qs, m3), load(q8), scale_pair(sc, 4 * h)));
      sumi = _mm256_add_epi32(sumi, dot_scaled(_mm256_and_si256(_mm256_srli_epi16(qs, 2), m3), load(q8 + 32),
                                               scale_pair(sc, 4 * h + 1)));
      sumi = _mm256_add_epi32(sumi, dot_scaled(_mm256_and_si256(_mm256_srli_epi16(qs, 4), m3), load(q8 + 64),
                                               scale_pair(sc, 4 * h + 2)));
      sumi = _mm256_add_epi32(sumi, dot_scaled(_mm256_and_si256(_mm256_srli_epi16(qs, 6), m3), load(q8 + 96),
                                               scale_pair(sc, 4 * h + 3)));
    }
    sumf += dall * static_cast<float>(hsum_i32(sumi)) - dmin * static_cast<float>(summs);
  }
  return sumf;
}

// ---- q3_K ------------------------------------------------------------------

float vec_dot_q3_K_q8_K(int64_t n, const void* vx, const void* vy) {
  const block_q3_K* x = static_cast<const block_q3_K*>(vx);
  const block_q8_K* y = static_cast<const block_q8_K*>(vy);
  const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const __m128i sc = scales_q3_K(x[i].scales);
    // q = low 2 bits + 4 * high bit - 4: the -4 through bsums.
    __m256i sumi = _mm256_slli_epi32(scaled_bsums(sc, y[i].bsums), 2);
    sumi = _mm256_sub_epi32(_mm256_setzero_si256(), sumi);
    __m256i hm = load(x[i].hmask);  // bit 4h + s of hmask[l]: shifted down one per chunk
    for (int h = 0; h < 2; ++h) {
      const __m256i qs = load(x[i].qs + 32 * h);
      const int8_t* q8 = y[i].qs + 128 * h;
      __m256i lo[4];
      lo[0] = _mm256_and_si256(qs, m3);
      lo[1] = _mm256_and_si256(_mm256_srli_epi16(qs, 2), m3);
      lo[2] = _mm256_and_si256(_mm256_srli_epi16(qs, 4), m3);
      lo[3] = _mm256_and_si256(_mm256_srli_epi16(qs, 6), m3);
      for (int s = 0; s < 4; ++s) {
        const __m256i q = _mm256_or_si256(lo[s], _mm256_slli_epi16(_mm256_and_si256(hm, one), 2));
        hm = _mm256_srli_epi16(hm, 1);
        sumi = _mm256_add_epi32(sumi, dot_scaled(q, load(q8 + 32 * s), scale_pair(sc, 4 * h + s)));
      }
    }
    sumf += (fp16(x[i].d) * y[i].d) * static_cast<float>(hsum_i32(sumi));
  }
  return sumf;
}

// ---- q4_K ------------------------------------------------------------------

void to_float_q4_K(const void* src, float* dst, int64_t n) {
  const block_q4_K* x = static_cast<const block_q4_K*>(src);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = fp16(x[i].d), dmin = fp16(x[i].dmin);
    uint8_t sc[8], m[8];
    scales_mins_k4(x[i].scales, sc, m);
    float* y = dst + i * QK_K;
    for (int c = 0; c < 4; ++c) {
      const __m256i q = load(x[i].qs + 32 * c);
      store_affine_u8(_mm256_and_si256(q, m4), d * static_cast<float>(sc[2 * c]),
                      dmin * static_cast<float>(m[2 * c]), y + 64 * c);
      store_affine_u8(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), d * static_cast<float>(sc[2 * c + 1]),
                      dmin * static_cast<float>(m[2 * c + 1]), y + 64 * c + 32);
    }
  }
}

float vec_dot_q4_K_q8_K(int64_t n, const void* vx, const void* vy) {
  const block_q4_K* x = static_cast<const block_q4_K*>(vx);
  const block_q8_K* y = static_cast<const block_q8_K*>(vy);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    uint8_t sc[8], m[8];
    scales_mins_k4(x[i].scales, sc, m);
    // Mins: sum over sub-blocks j of m[j] * (bsums[2j] + bsums[2j+1]).
    const __m256i bs = load(y[i].bsums);
    const __m128i bs_pairs = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
    const __m128i mins = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(m)));
    const int summ = hsum_i32(_mm_madd_epi16(mins, bs_pairs));
    __m256i sumi = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      const __m256i q = load(x[i].qs + 32 * c);
      const int8_t* q8 = y[i].qs + 64 * c;
      sumi = _mm256_add_epi32(sumi, dot_scaled(_mm256_and_si256(q, m4), load(q8), _mm256_set1_epi16(sc[2 * c])));
      sumi = _mm256_add_epi32(sumi, dot_scaled(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), load(q8 + 32),
                                               _mm256_set1_epi16(sc[2 * c + 1])));
    }
    const float d = fp16(x[i].d) * y[i].d;
    const float dmin = fp16(x[i].dmin) * y[i].d;
    sumf += d * static_cast<float>(hsum_i32(sumi)) - dmin * static_cast<float>(summ);
  }
  return sumf;
}

// ---- q5_K ------------------------------------------------------------------

void to_float_q5_K(const void* src, float* dst, int64_t n) {
  const block_q5_K* x = static_cast<const block_q5_K*>(src);
  const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = fp16(x[i].d), dmin = fp16(x[i].dmin);
    uint8_t sc[8], m[8];
    scales_mins_k4(x[i].scales, sc, m);
    __m256i hb = load(x[i].qh);
    float* y = dst + i * QK_K;
    for (int c = 0; c < 4; ++c) {
      const __m256i q = load(x[i].qs + 32 * c);
      const __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(hb, one), 4);
      const __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 1), one), 4);
      hb = _mm256_srli_epi16(hb, 2);
      store_affine_u8(_mm256_or_si256(_mm256_and_si256(q, m4), h0), d * static_cast<float>(sc[2 * c]),
                      dmin * static_cast<float>(m[2 * c]), y + 64 * c);
      store_affine_u8(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), h1),
                      d * static_cast<float>(sc[2 * c + 1]), dmin * static_cast<float>(m[2 * c + 1]), y + 64 * c + 32);
    }
  }
}

float vec_dot_q5_K_q8_K(int64_t n, const void* vx, const void* vy) {
  const block_q5_K* x = static_cast<const block_q5_K*>(vx);
  const block_q8_K* y = static_cast<const block_q8_K*>(vy);
  const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    uint8_t sc[8], m[8];
    scales_mins_k4(x[i].scales, sc, m);
    const __m256i bs = load(y[i].bsums);
    const __m128i bs_pairs = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
    const __m128i mins = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(m)));
    const int summ = hsum_i32(_mm_madd_epi16(mins, bs_pairs));
    __m256i hb = load(x[i].qh);  // fifth bit of sub-block j: bit j of qh[l], shifted down as we go
    __m256i sumi = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      const __m256i q = load(x[i].qs + 32 * c);
      const int8_t* q8 = y[i].qs + 64 * c;
      const __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(hb, one), 4);
      const __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 1), one), 4);
      hb = _mm256_srli_epi16(hb, 2);
      const __m256i q0 = _mm256_or_si256(_mm256_and_si256(q, m4), h0);
      const __m256i q1 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), h1);
      sumi = _mm256_add_epi32(sumi, dot_scaled(q0, load(q8), _mm256_set1_epi16(sc[2 * c])));
      sumi = _mm256_add_epi32(sumi, dot_scaled(q1, load(q8 + 32), _mm256_set1_epi16(sc[2 * c + 1])));
    }
    const float d = fp16(x[i].d) * y[i].d;
    const float dmin = fp16(x[i].dmin) * y[i].d;
    sumf += d * static_cast<float>(hsum_i32(sumi)) - dmin * static_cast<float>(summ);
  }
  return sumf;
}

// ---- q6_K ------------------------------------------------------------------

void to_float_q6_K(const void* src, float* dst, int64_t n) {
  const block_q6_K* x = static_cast<const block_q6_K*>(src);
  const __m256i off = _mm256_set1_epi8(32);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = fp16(x[i].d);
    float* y = dst + i * QK_K;
    for (int h = 0; h < 2; ++h) {
      __m256i q[4];
      q6_quants(x[i].ql + 64 * h, x[i].qh + 32 * h, q);
      for (int s = 0; s < 4; ++s) {
        const int j = 8 * h + 2 * s;  // sub-blocks j, j+1
        store_scaled_i8(_mm256_sub_epi8(q[s], off), d * static_cast<float>(x[i].scales[j]),
                        d * static_cast<float>(x[i].scales[j + 1]), y + 128 * h + 32 * s);
      }
    }
  }
}

float vec_dot_q6_K_q8_K(int64_t n, const void* vx, const void* vy) {
  const block_q6_K* x = static_cast<const block_q6_K*>(vx);
  const block_q8_K* y = static_cast<const block_q8_K*>(vy);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const __m128i sc = load128(x[i].scales);
    // q - 32: the -32 through bsums.
    __m256i sumi = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(scaled_bsums(sc, y[i].bsums), 5));
    for (int h = 0; h < 2; ++h) {
      __m256i q[4];
      q6_quants(x[i].ql + 64 * h, x[i].qh + 32 * h, q);
      const int8_t* q8 = y[i].qs + 128 * h;
      for (int s = 0; s < 4; ++s) {
        sumi = _mm256_add_epi32(sumi, dot_scaled(q[s], load(q8 + 32 * s), scale_pair(sc, 4 * h + s)));
      }
    }
    sumf += (fp16(x[i].d) * y[i].d) * static_cast<float>(hsum_i32(sumi));
  }
  return sumf;
}

// ---- q8_K ------------------------------------------------------------------

void to_float_q8_K(const void* src, float* dst, int64_t n) {
  const block_q8_K* x = static_cast<const block_q8_K*>(src);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const __m256 d = _mm256_set1_ps(x[i].d);
    for (int k = 0; k < QK_K; k += 8) {
      const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(x[i].qs + k));
      _mm256_storeu_ps(dst + i * QK_K + k, _mm256_mul_ps(d, i8_to_ps(q)));
    }
  }
}

void from_float_q8_K(const float* src, void* dst, int64_t n) {
  block_q8_K* y = static_cast<block_q8_K*>(dst);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float* x = src + i * QK_K;
    __m256 vmax = _mm256_setzero_ps();
    for (int k = 0; k < QK_K; k += 8) vmax = _mm256_max_ps(vmax, _mm256_and_ps(_mm256_loadu_ps(x + k), abs_mask));
    __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(vmax, 1), _mm256_castps256_ps128(vmax));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    if (amax == 0.0f) {
      std::memset(&y[i], 0, sizeof y[i]);
      continue;
    }
    // The reference keeps the first x of largest |x|: its sign sets iscale's.
    float max = 0.0f;
    const __m256 vamax = _mm256_set1_ps(amax);
    for (int k = 0; k < QK_K; k += 8) {
      const int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_and_ps(_mm256_loadu_ps(x + k), abs_mask), vamax, _CMP_EQ_OQ));
      if (hit) {
        max = x[k + __builtin_ctz(static_cast<unsigned>(hit))];
        break;
      }
    }
    const float iscale = -127.0f / max;
    const __m256 mul = _mm256_set1_ps(iscale);
    const __m256i q_max = _mm256_set1_epi32(127);
    __m128i bsum4[4];
    for (int g = 0; g < QK_K / 32; ++g) {
      __m256i v[4];
      for (int k = 0; k < 4; ++k) {
        // cvtps2dq rounds half to even, as nearest_int does for |v| <= 127.
        v[k] = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 32 * g + 8 * k), mul)), q_max);
      }
      // bsums of elements 32g..32g+15 and 32g+16..32g+31 (8 partial sums each).
      const __m256i s0 = _mm256_add_epi32(v[0], v[1]), s1 = _mm256_add_epi32(v[2], v[3]);
      const __m256i h = _mm256_hadd_epi32(s0, s1);  // lane sums of s0, s0, s1, s1 per 128-bit lane
      const __m128i r = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
      // r = [s0 a, s0 b, s1 a, s1 b] partials; fold pairs below.
      if (g % 2 == 0) {
        bsum4[g / 2] = r;
      } else {
        bsum4[g / 2] = _mm_hadd_epi32(bsum4[g / 2], r);  // bsums 4*(g/2) .. 4*(g/2)+3
      }
      __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3]));
      p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[i].qs + 32 * g), p);
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y[i].bsums), _mm_packs_epi32(bsum4[0], bsum4[1]));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y[i].bsums + 8), _mm_packs_epi32(bsum4[2], bsum4[3]));
    y[i].d = 1.0f / iscale;
  }
}

// ---- iq4_nl (dot_table4_avx2.h) -------------------------------------------

float vec_dot_iq4_nl_q8_0(int64_t n, const void* vx, const void* vy) {
  static_assert(QK4_NL == 32);
  return dot_table4_q8_0(n, static_cast<const block_iq4_nl*>(vx), static_cast<const block_q8_0*>(vy), kvalues_iq4nl,
                         [](const block_iq4_nl& b, const block_q8_0& a) { return fp16(a.d) * fp16(b.d); });
}

// ---- tq1_0 -----------------------------------------------------------------

namespace {
// Trits of bytes b, trit index per 16-bit lane given as the multiplier
// p = 3^k in p16: t = ((uint8_t)(b * p) * 3) >> 8, for the low and the high
// byte of each lane: the byte is moved to the lane's top, multiplied mod 2^16
// (the top byte is then (b * p) mod 256), and mulhi by 3 takes (q * 3) >> 8.
inline __m256i trits(__m256i b, __m256i p16) {
  const __m256i three = _mm256_set1_epi16(3);
  const __m256i lo = _mm256_mulhi_epu16(_mm256_mullo_epi16(_mm256_slli_epi16(b, 8), p16), three);
  const __m256i hi = _mm256_mulhi_epu16(
      _mm256_mullo_epi16(_mm256_and_si256(b, _mm256_set1_epi16(static_cast<short>(0xFF00))), p16), three);
  return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 8));
}

// Sum of all 16 bsums (sum of the block's quants), 8 x int32 partials.
inline __m256i bsum_total(const int16_t* bsums) { return _mm256_madd_epi16(load(bsums), _mm256_set1_epi16(1)); }
}  // namespace

float vec_dot_tq1_0_q8_K(int64_t n, const void* vx, const void* vy) {
  const block_tq1_0* x = static_cast<const block_tq1_0*>(vx);
  const block_q8_K* y = static_cast<const block_q8_K*>(vy);
  static constexpr short kPow3[5] = {1, 3, 9, 27, 81};
  // qs[32..47] in both lanes: trits k (low lane) and k+1 (high lane) are the
  // 32 elements 160 + 16k ... 191 + 16k.
  const __m256i p01 = _mm256_setr_epi16(1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i p23 = _mm256_setr_epi16(9, 9, 9, 9, 9, 9, 9, 9, 27, 27, 27, 27, 27, 27, 27, 27);
  // Low lane: trit 4 of qs[32..47] (elements 224..239); high lane: qh[0..3]
  // repeated four times, byte 4k + m as trit k of qh[m] (elements 240..255).
  const __m256i p4h = _mm256_setr_epi16(81, 81, 81, 81, 81, 81, 81, 81, 1, 1, 3, 3, 9, 9, 27, 27);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const int8_t* q8 = y[i].qs;
    __m256i sumi = _mm256_sub_epi32(_mm256_setzero_si256(), bsum_total(y[i].bsums));  // t - 1
    const __m256i b0 = load(x[i].qs);
    for (int k = 0; k < 5; ++k) {
      sumi = _mm256_add_epi32(sumi, dot_us8(trits(b0, _mm256_set1_epi16(kPow3[k])), load(q8 + 32 * k)));
    }
    const __m128i b1 = load128(x[i].qs + 32);
    const __m256i b11 = _mm256_broadcastsi128_si256(b1);
    sumi = _mm256_add_epi32(sumi, dot_us8(trits(b11, p01), load(q8 + 160)));
    sumi = _mm256_add_epi32(sumi, dot_us8(trits(b11, p23), load(q8 + 192)));
    int32_t qh;
    std::memcpy(&qh, x[i].qh, 4);
    const __m256i b2 = _mm256_inserti128_si256(_mm256_castsi128_si256(b1), _mm_set1_epi32(qh), 1);
    sumi = _mm256_add_epi32(sumi, dot_us8(trits(b2, p4h), load(q8 + 224)));
    sumf += static_cast<float>(hsum_i32(sumi)) * (y[i].d * fp16(x[i].d));
  }
  return sumf;
}

// ---- tq2_0 -----------------------------------------------------------------

float vec_dot_tq2_0_q8_K(int64_t n, const void* vx, const void* vy) {
  const block_tq2_0* x = static_cast<const block_tq2_0*>(vx);
  const block_q8_K* y = static_cast<const block_q8_K*>(vy);
  const __m256i m3 = _mm256_set1_epi8(3);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    __m256i sumi = _mm256_sub_epi32(_mm256_setzero_si256(), bsum_total(y[i].bsums));  // t - 1
    for (int h = 0; h < 2; ++h) {
      const __m256i qs = load(x[i].qs + 32 * h);
      const int8_t* q8 = y[i].qs + 128 * h;
      sumi = _mm256_add_epi32(sumi, dot_us8(_mm256_and_si256(qs, m3), load(q8)));
      sumi = _mm256_add_epi32(sumi, dot_us8(_mm256_and_si256(_mm256_srli_epi16(qs, 2), m3), load(q8 + 32)));
      sumi = _mm256_add_epi32(sumi, dot_us8(_mm256_and_si256(_mm256_srli_epi16(qs, 4), m3), load(q8 + 64)));
      sumi = _mm256_add_epi32(sumi, dot_us8(_mm256_and_si256(_mm256_srli_epi16(qs, 6), m3), load(q8 + 96)));
    }
    sumf += static_cast<float>(hsum_i32(sumi)) * (y[i].d * fp16(x[i].d));
  }
  return sumf;
}

}  // namespace kvad::cpu::quants::avx2
