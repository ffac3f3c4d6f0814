// AVX2+FMA+F16C kernels. Compiled with ${KVAD_AVX2_FLAGS} and
// -ffp-contract=off; called only when cpu_features().has_avx2_fma().
//
// Each function computes what its reference in quants_ref.cpp computes:
// - to_float and from_float are bit-identical to the reference (same
//   roundings in the same order; from_float_q8_* emulates roundf exactly);
// - vec_dot forms the same exact integer block sums, but scales and adds
//   them in a different order (8 float lanes, FMA), so it differs from the
//   reference by float rounding only (ggml's AVX2 paths do the same).
#include <immintrin.h>

#include "kernels/cpu/simd_avx2.h"

#include <cstring>

#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/quants.h"
#include "tensor/half.h"

namespace kvad::cpu::quants::avx2 {

namespace {

inline float fp16(uint16_t h) { return _cvtsh_ss(h); }

using kvad::cpu::avx2::hsum;

inline int hsum_i32(__m256i v) {
  __m128i r = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  r = _mm_add_epi32(r, _mm_unpackhi_epi64(r, r));
  r = _mm_add_epi32(r, _mm_shuffle_epi32(r, 1));
  return _mm_cvtsi128_si32(r);
}

// 16 bytes of nibbles -> 32 bytes in element order: low nibbles (elements
// 0..15) in the low lane, high nibbles (16..31) in the high lane.
inline __m256i nibbles_32(const uint8_t* p) {
  const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m256i b = _mm256_inserti128_si256(_mm256_castsi128_si256(t), _mm_srli_epi16(t, 4), 1);
  return _mm256_and_si256(b, _mm256_set1_epi8(0x0F));
}

// 32 bits -> 32 bytes, 0xFF where the bit is set, 0x00 where not.
inline __m256i bits_32(const uint8_t* p) {
  uint32_t x32;
  std::memcpy(&x32, p, 4);
  const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                         0x0101010101010101, 0x0000000000000000);
  __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(x32)), shuf);
  bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
  return _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1));
}

// Sum of u8*s8 products in pairs, then in quads: 8 x int32. Exact as long
// as each pair stays in int16 (|u| <= 128 and |s| <= 127 here).
inline __m256i dot_us8(__m256i ux, __m256i sy) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(ux, sy), _mm256_set1_epi16(1));
}
// Signed x signed: move x's sign onto y.
inline __m256i dot_s8(__m256i x, __m256i y) {
  return dot_us8(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}

// 8 int8 at p -> 8 floats.
inline __m256 i8_to_ps(__m128i v8) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v8)); }

// Exact roundf (half away from zero) of floats with |v| < 2^23.
inline __m256 roundf_ps(__m256 v) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256 frac = _mm256_andnot_ps(sign, _mm256_sub_ps(v, t));  // exact
  const __m256 ge = _mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ);
  const __m256 one = _mm256_or_ps(_mm256_and_ps(v, sign), _mm256_set1_ps(1.0f));
  return _mm256_add_ps(t, _mm256_and_ps(ge, one));
}

// Quantizes 32 floats to int8 with d = amax/127, id = 1/d (as the reference).
// Returns d; stores the 32 quants at q.
inline float quantize_32_q8(const float* x, int8_t* q, __m256i* isum) {
  __m256 v0 = _mm256_loadu_ps(x);
  __m256 v1 = _mm256_loadu_ps(x + 8);
  __m256 v2 = _mm256_loadu_ps(x + 16);
  __m256 v3 = _mm256_loadu_ps(x + 24);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 amax = _mm256_andnot_ps(sign, v0);
  amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v1));
  amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v2));
  amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v3));
  __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(amax, 1), _mm256_castps256_ps128(amax));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  const float maxv = _mm_cvtss_f32(m4);
  const float d = maxv / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  const __m256 mul = _mm256_set1_ps(id);
  v0 = roundf_ps(_mm256_mul_ps(v0, mul));
  v1 = roundf_ps(_mm256_mul_ps(v1, mul));
  v2 = roundf_ps(_mm256_mul_ps(v2, mul));
  v3 = roundf_ps(_mm256_mul_ps(v3, mul));
  __m256i i0 = _mm256_cvtps_epi32(v0);
  __m256i i1 = _mm256_cvtps_epi32(v1);
  __m256i i2 = _mm256_cvtps_epi32(v2);
  __m256i i3 = _mm256_cvtps_epi32(v3);
  if (isum) {
    *isum = _mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3));
  }
  i0 = _mm256_packs_epi32(i0, i1);
  i2 = _mm256_packs_epi32(i2, i3);
  i0 = _mm256_packs_epi16(i0, i2);
  i0 = _mm256_permutevar8x32_epi32(i0, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), i0);
  return d;
}

// [dx*dy, mx*sy, ., .] of a (d, m) weight block and a (d, s) q8_1 block, with
// one F16C conversion of the four scales.
inline __m128 scales_dm(const void* xdm, const void* yds) {
  uint32_t a, b;
  std::memcpy(&a, xdm, 4);
  std::memcpy(&b, yds, 4);
  const __m128 v = _mm_cvtph_ps(_mm_cvtsi64_si128(static_cast<long long>((uint64_t{b} << 32) | a)));
  return _mm_mul_ps(v, _mm_movehl_ps(v, v));
}

}  // namespace

// ---- f32 -------------------------------------------------------------------

void to_float_f32(const void* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}
void from_float_f32(const float* src, void* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

float vec_dot_f32(int64_t n, const void* vx, const void* vy) {
  const float* x = static_cast<const float*>(vx);
  const float* y = static_cast<const float*>(vy);
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8), a1);
    a2 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 16), _mm256_loadu_ps(y + i + 16), a2);
    a3 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 24), _mm256_loadu_ps(y + i + 24), a3);
  }
  for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), a0);
  float s = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  for (; i < n; ++i) s += x[i] * y[i];
  return s;
}

// ---- f16 -------------------------------------------------------------------

void to_float_f16(const void* src, float* dst, int64_t n) {
  const uint16_t* x = static_cast<const uint16_t*>(src);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i))));
  }
  for (; i < n; ++i) dst[i] = fp16(x[i]);
}

void from_float_f16(const float* src, void* dst, int64_t n) {
  uint16_t* y = static_cast<uint16_t*>(dst);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) y[i] = f32_to_f16(src[i]);
}

float vec_dot_f16(int64_t n, const void* vx, const void* vy) {
  const uint16_t* x = static_cast<const uint16_t*>(vx);
  const uint16_t* y = static_cast<const uint16_t*>(vy);
  auto ld = [](const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  };
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm256_fmadd_ps(ld(x + i), ld(y + i), a0);
    a1 = _mm256_fmadd_ps(ld(x + i + 8), ld(y + i + 8), a1);
    a2 = _mm256_fmadd_ps(ld(x + i + 16), ld(y + i + 16), a2);
    a3 = _mm256_fmadd_ps(ld(x + i + 24), ld(y + i + 24), a3);
  }
  for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(ld(x + i), ld(y + i), a0);
  float s = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  for (; i < n; ++i) s += fp16(x[i]) * fp16(y[i]);
  return s;
}

// ---- bf16 ------------------------------------------------------------------

namespace {
inline __m256 bf16_8(const uint16_t* p) {
  const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
}  // namespace

void to_float_bf16(const void* src, float* dst, int64_t n) {
  const uint16_t* x = static_cast<const uint16_t*>(src);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, bf16_8(x + i));
  for (; i < n; ++i) dst[i] = bf16_to_f32(x[i]);
}

void from_float_bf16(const float* src, void* dst, int64_t n) {
  uint16_t* y = static_cast<uint16_t*>(dst);
  int64_t i = 0;
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i inf = _mm256_set1_epi32(0x7f800000);
  for (; i + 16 <= n; i += 16) {
    __m256i r[2];
    for (int k = 0; k < 2; ++k) {
      const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 8 * k));
      const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
      const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
      const __m256i rounded =
          _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
      const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(64));
      r[k] = _mm256_blendv_epi8(rounded, quiet, nan);
    }
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r[0], r[1]), 0xD8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), packed);
  }
  for (; i < n; ++i) y[i] = f32_to_bf16(src[i]);
}

float vec_dot_bf16(int64_t n, const void* vx, const void* vy) {
  const uint16_t* x = static_cast<const uint16_t*>(vx);
  const uint16_t* y = static_cast<const uint16_t*>(vy);
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm256_fmadd_ps(bf16_8(x + i), bf16_8(y + i), a0);
    a1 = _mm256_fmadd_ps(bf16_8(x + i + 8), bf16_8(y + i + 8), a1);
    a2 = _mm256_fmadd_ps(bf16_8(x + i + 16), bf16_8(y + i + 16), a2);
    a3 = _mm256_fmadd_ps(bf16_8(x + i + 24), bf16_8(y + i + 24), a3);
  }
  for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(bf16_8(x + i), bf16_8(y + i), a0);
  float s = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  for (; i < n; ++i) s += bf16_to_f32(x[i]) * bf16_to_f32(y[i]);
  return s;
}

// ---- q4_0 ------------------------------------------------------------------

void to_float_q4_0(const void* src, float* dst, int64_t n) {
  const block_q4_0* x = static_cast<const block_q4_0*>(src);
  const int64_t nb = n / QK4_0;
  for (int64_t i = 0; i < nb; ++i) {
    const __m256 d = _mm256_set1_ps(fp16(x[i].d));
    const __m256i q = _mm256_sub_epi8(nibbles_32(x[i].qs), _mm256_set1_epi8(8));
    const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
    float* o = dst + i * QK4_0;
    _mm256_storeu_ps(o + 0, _mm256_mul_ps(i8_to_ps(lo), d));
    _mm256_storeu_ps(o + 8, _mm256_mul_ps(i8_to_ps(_mm_srli_si128(lo, 8)), d));
    _mm256_storeu_ps(o + 16, _mm256_mul_ps(i8_to_ps(hi), d));
    _mm256_storeu_ps(o + 24, _mm256_mul_ps(i8_to_ps(_mm_srli_si128(hi, 8)), d));
  }
}

void from_float_q4_0(const float* src, void* dst, int64_t n) { ref::from_float_q4_0(src, dst, n); }

float vec_dot_q4_0_q8_0(int64_t n, const void* vx, const void* vy) {
  const block_q4_0* x = static_cast<const block_q4_0*>(vx);
  const block_q8_0* y = static_cast<const block_q8_0*>(vy);
  const int64_t nb = n / QK8_0;
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  const __m256i off = _mm256_set1_epi8(8);
  int64_t i = 0;
  for (; i + 2 <= nb; i += 2) {
    const __m256i qx0 = _mm256_sub_epi8(nibbles_32(x[i].qs), off);
    const __m256i qx1 = _mm256_sub_epi8(nibbles_32(x[i + 1].qs), off);
    const __m256i qy0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[i].qs));
    const __m256i qy1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[i + 1].qs));
    const __m256 d0 = _mm256_set1_ps(fp16(x[i].d) * fp16(y[i].d));
    const __m256 d1 = _mm256_set1_ps(fp16(x[i + 1].d) * fp16(y[i + 1].d));
    acc0 = _mm256_fmadd_ps(d0, _mm256_cvtepi32_ps(dot_s8(qx0, qy0)), acc0);
    acc1 = _mm256_fmadd_ps(d1, _mm256_cvtepi32_ps(dot_s8(qx1, qy1)), acc1);
  }
  for (; i < nb; ++i) {
    const __m256i qx = _mm256_sub_epi8(nibbles_32(x[i].qs), off);
    const __m256i qy = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[i].qs));
    const __m256 d = _mm256_set1_ps(fp16(x[i].d) * fp16(y[i].d));
    acc0 = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_s8(qx, qy)), acc0);
  }
  return hsum(_mm256_add_ps(acc0, acc1));
}

// ---- q4_1 ------------------------------------------------------------------

void to_float_q4_1(const void* src, float* dst, int64_t n) {
  const block_q4_1* x = static_cast<const block_q4_1*>(src);
  const int64_t nb = n / QK4_1;
  for (int64_t i = 0; i < nb; ++i) {
    const __m256 d = _mm256_set1_ps(fp16(x[i].d));
    const __m256 m = _mm256_set1_ps(fp16(x[i].m));
    const __m256i q = nibbles_32(x[i].qs);
    const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
    float* o = dst + i * QK4_1;
    // mul then add (two roundings), as the reference; no FMA here.
    _mm256_storeu_ps(o + 0, _mm256_add_ps(_mm256_mul_ps(i8_to_ps(lo), d), m));
    _mm256_storeu_ps(o + 8, _mm256_add_ps(_mm256_mul_ps(i8_to_ps(_mm_srli_si128(lo, 8)), d), m));
    _mm256_storeu_ps(o + 16, _mm256_add_ps(_mm256_mul_ps(i8_to_ps(hi), d), m));
    _mm256_storeu_ps(o + 24, _mm256_add_ps(_mm256_mul_ps(i8_to_ps(_mm_srli_si128(hi, 8)), d), m));
  }
}

void from_float_q4_1(const float* src, void* dst, int64_t n) { ref::from_float_q4_1(src, dst, n); }

float vec_dot_q4_1_q8_1(int64_t n, const void* vx, const void* vy) {
  const block_q4_1* x = static_cast<const block_q4_1*>(vx);
  const block_q8_1* y = static_cast<const block_q8_1*>(vy);
  const int64_t nb = n / QK8_1;
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  __m128 accm = _mm_setzero_ps();  // lane 1: sum of m * s
  int64_t i = 0;
  for (; i + 2 <= nb; i += 2) {
    const __m128 s0 = scales_dm(&x[i].d, &y[i].d), s1 = scales_dm(&x[i + 1].d, &y[i + 1].d);
    accm = _mm_add_ps(accm, _mm_add_ps(s0, s1));
    const __m256i qy0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[i].qs));
    const __m256i qy1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[i + 1].qs));
    acc0 = _mm256_fmadd_ps(_mm256_broadcastss_ps(s0), _mm256_cvtepi32_ps(dot_us8(nibbles_32(x[i].qs), qy0)), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_broadcastss_ps(s1), _mm256_cvtepi32_ps(dot_us8(nibbles_32(x[i + 1].qs), qy1)), acc1);
  }
  for (; i < nb; ++i) {
    const __m128 s0 = scales_dm(&x[i].d, &y[i].d);
    accm = _mm_add_ps(accm, s0);
    const __m256i qy = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[i].qs));
    acc0 = _mm256_fmadd_ps(_mm256_broadcastss_ps(s0), _mm256_cvtepi32_ps(dot_us8(nibbles_32(x[i].qs), qy)), acc0);
  }
  return hsum(_mm256_add_ps(acc0, acc1)) + _mm_cvtss_f32(_mm_movehdup_ps(accm));
}

// ---- q5_0 ------------------------------------------------------------------

namespace {
// Signed 5-bit quants (q - 16) of a q5_0 block as 32 int8.
inline __m256i q5_0_signed(const block_q5_0& b) {
  const __m256i lo = nibbles_32(b.qs);
  // Where the 5th bit is clear, q - 16 = nibble - 16 = nibble | 0xF0 (as int8).
  const __m256i hi = _mm256_andnot_si256(bits_32(b.qh), _mm256_set1_epi8(static_cast<char>(0xF0)));
  return _mm256_or_si256(lo, hi);
}
inline __m256i q5_1_unsigned(const block_q5_1& b) {
  const __m256i lo = nibbles_32(b.qs);
  const __m256i hi = _mm256_and_si256(bits_32(b.qh), _mm256_set1_epi8(0x10));
  return _mm256_or_si256(lo, hi);
}
}  // namespace

void to_float_q5_0(const void* src, float* dst, int64_t n) {
  const block_q5_0* x = static_cast<const block_q5_0*>(src);
  const int64_t nb = n / QK5_0;
  for (int64_t i = 0; i < nb; ++i) {
    const __m256 d = _mm256_set1_ps(fp16(x[i].d));
    const __m256i q = q5_0_signed(x[i]);
    const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
    float* o = dst + i * QK5_0;
    _mm256_storeu_ps(o + 0, _mm256_mul_ps(i8_to_ps(lo), d));
    _mm256_storeu_ps(o + 8, _mm256_mul_ps(i8_to_ps(_mm_srli_si128(lo, 8)), d));
    _mm256_storeu_ps(o + 16, _mm256_mul_ps(i8_to_ps(hi), d));
    _mm256_storeu_ps(o + 24, _mm256_mul_ps(i8_to_ps(_mm_srli_si128(hi, 8)), d));
  }
}

void from_float_q5_0(const float* src, void* dst, int64_t n) { ref::from_float_q5_0(src, dst, n); }

float vec_dot_q5_0_q8_0(int64_t n, const void* vx, const void* vy) {
  const block_q5_0* x = static_cast<const block_q5_0*>(vx);
  const block_q8_0* y = static_cast<const block_q8_0*>(vy);
  const int64_t nb = n / QK8_0;
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 2 <= nb; i += 2) {
    const __m256i qy0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[i].qs));
    const __m256i qy1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[i + 1].qs));
    const __m256 d0 = _mm256_set1_ps(fp16(x[i].d) * fp16(y[i].d));
    const __m256 d1 = _mm256_set1_ps(fp16(x[i + 1].d) * fp16(y[i + 1].d));
    acc0 = _mm256_fmadd_ps(d0, _mm256_cvtepi32_ps(dot_s8(q5_0_signed(x[i]), qy0)), acc0);
    acc1 = _mm256_fmadd_ps(d1, _mm256_cvtepi32_ps(dot_s8(q5_0_signed(x[i + 1]), qy1)), acc1);
  }
  for (; i < nb; ++i) {
    const __m256i qy = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[i].qs));
    const __m256 d = _mm256_set1_ps(fp16(x[i].d) * fp16(y[i].d));
    acc0 = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_s8(q5_0_signed(x[i]), qy)), acc0);
  }
  return hsum(_mm256_add_ps(acc0, acc1));
}

// ---- q5_1 ------------------------------------------------------------------

void to_float_q5_1(const void* src, float* dst, int64_t n) {
  const block_q5_1* x = static_cast<const block_q5_1*>(src);
  const int64_t nb = n / QK5_1;
  for (int64_t i = 0; i < nb; ++i) {
    const __m256 d = _mm256_set1_ps(fp16(x[i].d));
    const __m256 m = _mm256_set1_ps(fp16(x[i].m));
    const __m256i q = q5_1_unsigned(x[i]);
    const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
    float* o = dst + i * QK5_1;
    _mm256_storeu_ps(o + 0, _mm256_add_ps(_mm256_mul_ps(i8_to_ps(lo), d), m));
    _mm256_storeu_ps(o + 8, _mm256_add_ps(_mm256_mul_ps(i8_to_ps(_mm_srli_si128(lo, 8)), d), m));
    _mm256_storeu_ps(o + 16, _mm256_add_ps(_mm256_mul_ps(i8_to_ps(hi), d), m));
    _mm256_storeu_ps(o + 24, _mm256_add_ps(_mm256_mul_ps(i8_to_ps(_mm_srli_si128(hi, 8)), d), m));
  }
}

void from_float_q5_1(const float* src, void* dst, int64_t n) { ref::from_float_q5_1(src, dst, n); }

float vec_dot_q5_1_q8_1(int64_t n, const void* vx, const void* vy) {
  const block_q5_1* x = static_cast<const block_q5_1*>(vx);
  const block_q8_1* y = static_cast<const block_q8_1*>(vy);
  const int64_t nb = n / QK8_1;
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  __m128 accm = _mm_setzero_ps();  // lane 1: sum of m * s
  int64_t i = 0;
  for (; i + 2 <= nb; i += 2) {
    const __m128 s0 = scales_dm(&x[i].d, &y[i].d), s1 = scales_dm(&x[i + 1].d, &y[i + 1].d);
    accm = _mm_add_ps(accm, _mm_add_ps(s0, s1));
    const __m256i qy0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[i].qs));
    const __m256i qy1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[i + 1].qs));
    acc0 = _mm256_fmadd_ps(_mm256_broadcastss_ps(s0), _mm256_cvtepi32_ps(dot_us8(q5_1_unsigned(x[i]), qy0)), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_broadcastss_ps(s1), _mm256_cvtepi32_ps(dot_us8(q5_1_unsigned(x[i + 1]), qy1)), acc1);
  }
  for (; i < nb; ++i) {
    const __m128 s0 = scales_dm(&x[i].d, &y[i].d);
    accm = _mm_add_ps(accm, s0);
    const __m256i qy = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[i].qs));
    acc0 = _mm256_fmadd_ps(_mm256_broadcastss_ps(s0), _mm256_cvtepi32_ps(dot_us8(q5_1_unsigned(x[i]), qy)), acc0);
  }
  return hsum(_mm256_add_ps(acc0, acc1)) + _mm_cvtss_f32(_mm_movehdup_ps(accm));
}

// ---- q8_0 ------------------------------------------------------------------

void to_float_q8_0(const void* src, float* dst, int64_t n) {
  const block_q8_0* x = static_cast<const block_q8_0*>(src);
  const int64_t nb = n / QK8_0;
  for (int64_t i = 0; i < nb; ++i) {
    const __m256 d = _mm256_set1_ps(fp16(x[i].d));
    float* o = dst + i * QK8_0;
    for (int k = 0; k < 4; ++k) {
      const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(x[i].qs + 8 * k));
      _mm256_storeu_ps(o + 8 * k, _mm256_mul_ps(i8_to_ps(q), d));
    }
  }
}

void from_float_q8_0(const float* src, void* dst, int64_t n) {
  block_q8_0* y = static_cast<block_q8_0*>(dst);
  const int64_t nb = n / QK8_0;
  for (int64_t i = 0; i < nb; ++i) {
    const float d = quantize_32_q8(src + i * QK8_0, y[i].qs, nullptr);
    y[i].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
  }
}

float vec_dot_q8_0_q8_0(int64_t n, const void* vx, const void* vy) {
  const block_q8_0* x = static_cast<const block_q8_0*>(vx);
  const block_q8_0* y = static_cast<const block_q8_0*>(vy);
  const int64_t nb = n / QK8_0;
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 2 <= nb; i += 2) {
    const __m256i qx0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i].qs));
    const __m256i qx1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i + 1].qs));
    const __m256i qy0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[i].qs));
    const __m256i qy1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[i + 1].qs));
    const __m256 d0 = _mm256_set1_ps(fp16(x[i].d) * fp16(y[i].d));
    const __m256 d1 = _mm256_set1_ps(fp16(x[i + 1].d) * fp16(y[i + 1].d));
    acc0 = _mm256_fmadd_ps(d0, _mm256_cvtepi32_ps(dot_s8(qx0, qy0)), acc0);
    acc1 = _mm256_fmadd_ps(d1, _mm256_cvtepi32_ps(dot_s8(qx1, qy1)), acc1);
  }
  for (; i < nb; ++i) {
    const __m256i qx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i].qs));
    const __m256i qy = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[i].qs));
    const __m256 d = _mm256_set1_ps(fp16(x[i].d) * fp16(y[i].d));
    acc0 = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_s8(qx, qy)), acc0);
  }
  return hsum(_mm256_add_ps(acc0, acc1));
}

// ---- q8_1 ------------------------------------------------------------------

void to_float_q8_1(const void* src, float* dst, int64_t n) {
  const block_q8_1* x = static_cast<const block_q8_1*>(src);
  const int64_t nb = n / QK8_1;
  for (int64_t i = 0; i < nb; ++i) {
    const __m256 d = _mm256_set1_ps(fp16(x[i].d));
    float* o = dst + i * QK8_1;
    for (int k = 0; k < 4; ++k) {
      const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(x[i].qs + 8 * k));
      _mm256_storeu_ps(o + 8 * k, _mm256_mul_ps(i8_to_ps(q), d));
    }
  }
}

void from_float_q8_1(const float* src, void* dst, int64_t n) {
  block_q8_1* y = static_cast<block_q8_1*>(dst);
  const int64_t nb = n / QK8_1;
  for (int64_t i = 0; i < nb; ++i) {
    __m256i isum;
    const float d = quantize_32_q8(src + i * QK8_1, y[i].qs, &isum);
    y[i].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
    y[i].s = _cvtss_sh(static_cast<float>(hsum_i32(isum)) * d, _MM_FROUND_TO_NEAREST_INT);
  }
}

}  // namespace kvad::cpu::quants::avx2
