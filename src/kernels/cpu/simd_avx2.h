// Inline AVX2+FMA helpers shared by the AVX2 translation units (compiled
// with KVAD_AVX2_FLAGS only; never include this from generic code).
#pragma once
#include <immintrin.h>

namespace kvad::cpu::avx2 {

/// Sum of the eight lanes.
inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

/// e^x lane by lane, Cephes' expf: x = n·ln2 + r with |r| <= ln2/2 (ln2 split
/// in two for an exact reduction), e^r by a degree-6 polynomial (relative
/// error about 2e-7), 2^n through the exponent bits. x is clamped to
/// [-87.3, 88.3], the range where e^x is a normal f32.
inline __m256 exp_ps(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.3f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

/// tanh x lane by lane as 1 - 2 / (e^(2x) + 1) with exp_ps (its clamp makes
/// the result exactly ±1 for |x| > ~44); absolute error about 2e-7, so
/// relative error grows as |x| → 0 (Gemma 2's soft-capping multiplies it by
/// the cap and adds it to a softmax logit, where absolute error is what counts).
inline __m256 tanh_ps(__m256 x) {
  const __m256 e = exp_ps(_mm256_add_ps(x, x));
  const __m256 one = _mm256_set1_ps(1.0f);
  return _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, one)));
}

}  // namespace kvad::cpu::avx2
