// AVX2+FMA+F16C versions of vec.h; compiled with KVAD_AVX2_FLAGS and only
// called after the run-time feature check in vec.cpp.
#include <immintrin.h>

#include "kernels/cpu/simd_avx2.h"
#include "kernels/cpu/vec.h"
#include "tensor/half.h"

namespace kvad::cpu {

using avx2::hsum;

static float dot_f16_f32(int64_t n, const uint16_t* a, const float* b) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256 a0 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i)));
    __m256 a1 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i + 8)));
    acc0 = _mm256_fmadd_ps(a0, _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(a1, _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) {
    __m256 a0 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i)));
    acc0 = _mm256_fmadd_ps(a0, _mm256_loadu_ps(b + i), acc0);
  }
  float s = hsum(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) s += f16_to_f32(a[i]) * b[i];
  return s;
}

static void axpy_f16(int64_t n, float s, const uint16_t* x, float* y) {
  const __m256 vs = _mm256_set1_ps(s);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 xv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i)));
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(vs, xv, _mm256_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] += s * f16_to_f32(x[i]);
}

static void f32_to_f16v(const float* x, uint16_t* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), h);
  }
  for (; i < n; ++i) y[i] = f32_to_f16(x[i]);
}

// g[i] <- g[i] * sigmoid(k * z[i]) * u[i], z = g (SiLU, k = 1) or the GELU
// tanh argument (k = 2, since 0.5 (1 + tanh z) = sigmoid(2z)).
template <bool kGelu>
static void glu(float* g, const float* u, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(g + i);
    __m256 z = x;
    if constexpr (kGelu) {
      // z = 2 sqrt(2/pi) (x + 0.044715 x^3)
      const __m256 x2 = _mm256_mul_ps(x, x);
      z = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(2.0f * 0.7978845608028654f), x),
                        _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), x2, one));
    }
    // x / (1 + e^-z) * u, rounded in the scalar reference's order.
    const __m256 act = _mm256_div_ps(x, _mm256_add_ps(one, avx2::exp_ps(_mm256_sub_ps(_mm256_setzero_ps(), z))));
    _mm256_storeu_ps(g + i, _mm256_mul_ps(act, _mm256_loadu_ps(u + i)));
  }
  if (i < n) (kGelu ? vec_ops_ref().geglu : vec_ops_ref().swiglu)(g + i, u + i, n - i);
}

// 0.5 (1 + erf(x / sqrt 2)) lane by lane: with z = |x| / sqrt 2, erfc(z) by
// Numerical Recipes' erfcc, t = 1 / (1 + z/2),
//   erfc(z) = t · exp(-z² - 1.26551223 + t (1.00002368 + t (0.37409196 + ...)))
// (fractional error < 1.2e-7 for every z), and 1 + erf(x) = 2 - erfc(z) for
// x >= 0, erfc(z) for x < 0 (no cancellation on the negative side).
static inline __m256 gelu_erf_cdf(__m256 x) {
  const __m256 z = _mm256_mul_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), x), _mm256_set1_ps(0.70710678118654752f));
  const __m256 t = _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_fmadd_ps(_mm256_set1_ps(0.5f), z, _mm256_set1_ps(1.0f)));
  __m256 p = _mm256_set1_ps(0.17087277f);
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-0.82215223f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(1.48851587f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-1.13520398f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.27886807f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-0.18628806f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.09678418f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.37409196f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(1.00002368f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-1.26551223f));
  const __m256 c = _mm256_mul_ps(t, avx2::exp_ps(_mm256_fnmadd_ps(z, z, p)));
  const __m256 neg = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ);
  const __m256 one_plus_erf = _mm256_blendv_ps(_mm256_sub_ps(_mm256_set1_ps(2.0f), c), c, neg);
  return _mm256_mul_ps(_mm256_set1_ps(0.5f), one_plus_erf);
}

static void gelu_erf(float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    _mm256_storeu_ps(x + i, _mm256_mul_ps(v, gelu_erf_cdf(v)));
  }
  if (i < n) vec_ops_ref().gelu_erf(x + i, n - i);
}

static void geglu_erf(float* g, const float* u, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(g + i);
    _mm256_storeu_ps(g + i, _mm256_mul_ps(_mm256_mul_ps(v, gelu_erf_cdf(v)), _mm256_loadu_ps(u + i)));
  }
  if (i < n) vec_ops_ref().geglu_erf(g + i, u + i, n - i);
}

static void quick_gelu(float* x, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f), k = _mm256_set1_ps(-1.702f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    _mm256_storeu_ps(x + i, _mm256_div_ps(v, _mm256_add_ps(one, avx2::exp_ps(_mm256_mul_ps(k, v)))));
  }
  if (i < n) vec_ops_ref().quick_gelu(x + i, n - i);
}

const VecOps& vec_ops_avx2() {
  static const VecOps ops{dot_f16_f32, axpy_f16, f32_to_f16v, glu<false>, glu<true>, gelu_erf, geglu_erf, quick_gelu};
  return ops;
}

}  // namespace kvad::cpu
