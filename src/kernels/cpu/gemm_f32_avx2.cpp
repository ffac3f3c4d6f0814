// AVX2+FMA tiled product for f32 weights and f32 activations (gemm.h;
// sentence encoders and HF checkpoints stored in f32). Compiled with
// ${KVAD_AVX2_FLAGS}; called only when cpu_features().has_avx2_fma().
//
// A vec_dot per (row, token) pair loads two vectors per FMA. Here a tile of
// 4 weight rows x 3 tokens keeps 12 accumulators in registers: each k step
// of 8 elements loads 3 token vectors and 4 weight vectors for 12 FMAs, and
// the tile's weights are read once for 3 tokens. Each output is the same
// dot product as vec_dot_f32 up to float summation order (8 lanes summed at
// the end, then the scalar tail).
#include <immintrin.h>

#include "kernels/cpu/simd_avx2.h"

#include "kernels/cpu/gemm.h"

namespace kvad::cpu::gemm::avx2 {

namespace {

using kvad::cpu::avx2::hsum;

template <int R, int C>
inline void tile(int64_t n, const float* const* w, const float* const* y, float* out, int64_t ldo) {
  __m256 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 yv[C];
    for (int c = 0; c < C; ++c) yv[c] = _mm256_loadu_ps(y[c] + i);
    for (int r = 0; r < R; ++r) {
      const __m256 wv = _mm256_loadu_ps(w[r] + i);
      for (int c = 0; c < C; ++c) acc[r][c] = _mm256_fmadd_ps(wv, yv[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) {
      float s = hsum(acc[r][c]);
      for (int64_t j = i; j < n; ++j) s += w[r][j] * y[c][j];
      out[c * ldo + r] = s;
    }
}

template <int R>
void rows(int64_t n, const float* const* w, const uint8_t* y, size_t ldy, int64_t nc, float* out, int64_t ldo) {
  int64_t c = 0;
  for (; c + 3 <= nc; c += 3) {
    const float* yc[3] = {reinterpret_cast<const float*>(y + c * ldy), reinterpret_cast<const float*>(y + (c + 1) * ldy),
                          reinterpret_cast<const float*>(y + (c + 2) * ldy)};
    tile<R, 3>(n, w, yc, out + c * ldo, ldo);
  }
  for (; c < nc; ++c) {
    const float* yc[1] = {reinterpret_cast<const float*>(y + c * ldy)};
    tile<R, 1>(n, w, yc, out + c * ldo, ldo);
  }
}

}  // namespace

void gemm_f32(int64_t n, const void* w, size_t ldw, int64_t nr, const void* y, size_t ldy, int64_t nc, float* out,
              int64_t ldo) {
  const auto* pw = static_cast<const uint8_t*>(w);
  const auto* py = static_cast<const uint8_t*>(y);
  auto row = [&](int64_t r) { return reinterpret_cast<const float*>(pw + r * ldw); };
  int64_t r = 0;
  for (; r + 4 <= nr; r += 4) {
    const float* wr[4] = {row(r), row(r + 1), row(r + 2), row(r + 3)};
    rows<4>(n, wr, py, ldy, nc, out + r, ldo);
  }
  for (; r < nr; ++r) {
    const float* wr[1] = {row(r)};
    rows<1>(n, wr, py, ldy, nc, out + r, ldo);
  }
}

}  // namespace kvad::cpu::gemm::avx2
