// AVX2+FMA versions of image_ops.h's channel kernels: eight channels a lane,
// each pixel's values added in pixel order as the references add them.
// Compiled with KVAD_AVX2_FLAGS; called only after a run-time CPU check.
#include <immintrin.h>

#include "kernels/cpu/image_ops.h"

namespace kvad::cpu {

namespace {

void channel_sums(const float* x, int64_t n_pix, int64_t C, const float* shift, bool square, float* sum) {
  int64_t c = 0;
  for (; c + 8 <= C; c += 8) {
    __m256 acc = _mm256_loadu_ps(sum + c);
    const __m256 sh = shift ? _mm256_loadu_ps(shift + c) : _mm256_setzero_ps();
    for (int64_t p = 0; p < n_pix; ++p) {
      const __m256 v = _mm256_sub_ps(_mm256_loadu_ps(x + p * C + c), sh);
      acc = square ? _mm256_add_ps(acc, _mm256_mul_ps(v, v)) : _mm256_add_ps(acc, v);
    }
    _mm256_storeu_ps(sum + c, acc);
  }
  for (; c < C; ++c) {
    float s = sum[c];
    const float sh = shift ? shift[c] : 0.0f;
    for (int64_t p = 0; p < n_pix; ++p) {
      const float v = x[p * C + c] - sh;
      s += square ? v * v : v;
    }
    sum[c] = s;
  }
}

void channel_affine(const float* x, int64_t n_pix, int64_t C, const float* a, const float* b, float* y) {
  for (int64_t p = 0; p < n_pix; ++p) {
    const float* xp = x + p * C;
    float* yp = y + p * C;
    int64_t c = 0;
    for (; c + 8 <= C; c += 8)
      _mm256_storeu_ps(yp + c, _mm256_fmadd_ps(_mm256_loadu_ps(xp + c), _mm256_loadu_ps(a + c), _mm256_loadu_ps(b + c)));
    for (; c < C; ++c) yp[c] = xp[c] * a[c] + b[c];
  }
}

}  // namespace

const ChannelKernels& channel_kernels_avx2() {
  static const ChannelKernels k{channel_sums, channel_affine};
  return k;
}

}  // namespace kvad::cpu
