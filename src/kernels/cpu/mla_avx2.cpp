// AVX2+FMA inner loops of the CPU row's latent attention (mla.cpp), compiled
// with KVAD_AVX2_FLAGS and only called after the run-time feature check.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cpu/mla.h"

namespace kvad::cpu {

namespace {
float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
}  // namespace

// One block of nh <= 8 heads of one token over m latent rows (row j at
// row(j)); D, n_v multiples of 8. w: nh·m scratch.
void latent_block_avx2(const LatentBlock& b) {
  const int nh = b.nh;
  const int64_t D = b.D, n_v = b.n_v, m = b.m;
  float* w = b.w;
  for (int64_t j = 0; j < m; ++j) {
    const float* c = b.base + ((b.first + j) % b.slots) * D;
    __m256 acc[8];
    for (int h = 0; h < nh; ++h) acc[h] = _mm256_setzero_ps();
    for (int64_t d = 0; d < D; d += 8) {
      const __m256 cv = _mm256_loadu_ps(c + d);
      for (int h = 0; h < nh; ++h) acc[h] = _mm256_fmadd_ps(_mm256_loadu_ps(b.q[h] + d), cv, acc[h]);
    }
    for (int h = 0; h < nh; ++h) w[h * m + j] = b.scale * hsum(acc[h]);
  }
  for (int h = 0; h < nh; ++h) {
    float* wh = w + h * m;
    const float mx = *std::max_element(wh, wh + m);
    float sum = 0;
    for (int64_t j = 0; j < m; ++j) sum += (wh[j] = std::exp(wh[j] - mx));
    const float inv = 1.0f / sum;
    for (int64_t j = 0; j < m; ++j) wh[j] *= inv;
    std::fill(b.out[h], b.out[h] + n_v, 0.0f);
  }
  for (int64_t j = 0; j < m; ++j) {
    const float* c = b.base + ((b.first + j) % b.slots) * D;
    for (int h = 0; h < nh; ++h) {
      const __m256 s = _mm256_set1_ps(w[h * m + j]);
      float* o = b.out[h];
      for (int64_t d = 0; d < n_v; d += 8)
        _mm256_storeu_ps(o + d, _mm256_fmadd_ps(s, _mm256_loadu_ps(c + d), _mm256_loadu_ps(o + d)));
    }
  }
}

float dot_f32_avx2(const float* a, const float* b, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  float r = hsum(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) r += a[i] * b[i];
  return r;
}

void axpy_f32_avx2(float s, const float* x, float* y, int64_t n) {
  const __m256 sv = _mm256_set1_ps(s);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(sv, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += s * x[i];
}

}  // namespace kvad::cpu
