// AVX2+FMA tiled products for f32 or f16 weights and f32 activations
// (gemm.h; sentence encoders and HF checkpoints stored in f32, diffusion
// models and HF checkpoints stored in f16). Compiled with ${KVAD_AVX2_FLAGS};
// called only when cpu_features().has_avx2_fma().
//
// A vec_dot per (row, token) pair loads two vectors per FMA. Here a tile of
// 4 weight rows x 3 tokens keeps 12 accumulators in registers: each k step
// of 8 elements loads 3 token vectors and 4 weight vectors for 12 FMAs, and
// the tile's weights are read once for 3 tokens. Each output is the same
// dot product as vec_dot_f32 up to float summation order (8 lanes summed at
// the end, then the scalar tail). f16 weights are widened in registers
// (vcvtph2ps, exact), so an f16 tile computes the very products and sums of
// an f32 tile over the widened weights: the same bits as gemm_f32 on them.
#include <immintrin.h>

#include "kernels/cpu/simd_avx2.h"

#include "kernels/cpu/gemm.h"

namespace kvad::cpu::gemm::avx2 {

namespace {

using kvad::cpu::avx2::hsum;

// Eight weights from i on, as floats; one weight as a float.
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }

// s + the products of elements [i, n) (fewer than 8), in order. f16 weights
// are widened into a buffer first, so that both formats run the very same
// float loop (the compiler may fuse its multiply-adds; it then fuses both).
inline float tail(float s, const float* w, const float* y, int64_t i, int64_t n) {
  for (int64_t j = i; j < n; ++j) s += w[j] * y[j];
  return s;
}
inline float tail(float s, const uint16_t* w, const float* y, int64_t i, int64_t n) {
  float wf[8];
  for (int64_t j = i; j < n; ++j) wf[j - i] = _cvtsh_ss(w[j]);
  return tail(s, wf, y + i, 0, n - i);
}

template <int R, int C, typename W>
inline void tile(int64_t n, const W* const* w, const float* const* y, float* out, int64_t ldo) {
  __m256 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 yv[C];
    for (int c = 0; c < C; ++c) yv[c] = _mm256_loadu_ps(y[c] + i);
    for (int r = 0; r < R; ++r) {
      const __m256 wv = load8(w[r] + i);
      for (int c = 0; c < C; ++c) acc[r][c] = _mm256_fmadd_ps(wv, yv[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) {
      out[c * ldo + r] = tail(hsum(acc[r][c]), w[r], y[c], i, n);
    }
}

template <int R, typename W>
void rows(int64_t n, const W* const* w, const uint8_t* y, size_t ldy, int64_t nc, float* out, int64_t ldo) {
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

template <typename W>
void gemm_rows(int64_t n, const void* w, size_t ldw, int64_t nr, const void* y, size_t ldy, int64_t nc, float* out,
               int64_t ldo) {
  const auto* pw = static_cast<const uint8_t*>(w);
  const auto* py = static_cast<const uint8_t*>(y);
  auto row = [&](int64_t r) { return reinterpret_cast<const W*>(pw + r * ldw); };
  int64_t r = 0;
  for (; r + 4 <= nr; r += 4) {
    const W* wr[4] = {row(r), row(r + 1), row(r + 2), row(r + 3)};
    rows<4>(n, wr, py, ldy, nc, out + r, ldo);
  }
  for (; r < nr; ++r) {
    const W* wr[1] = {row(r)};
    rows<1>(n, wr, py, ldy, nc, out + r, ldo);
  }
}

}  // namespace

void gemm_f32(int64_t n, const void* w, size_t ldw, int64_t nr, const void* y, size_t ldy, int64_t nc, float* out,
              int64_t ldo) {
  gemm_rows<float>(n, w, ldw, nr, y, ldy, nc, out, ldo);
}

void gemm_f16(int64_t n, const void* w, size_t ldw, int64_t nr, const void* y, size_t ldy, int64_t nc, float* out,
              int64_t ldo) {
  gemm_rows<uint16_t>(n, w, ldw, nr, y, ldy, nc, out, ldo);
}

void pack_f16_f32(int64_t n, const void* x, size_t ldx, int64_t n_rows, void* dst, size_t ldp) {
  for (int64_t t = 0; t < n_rows; ++t) {
    const auto* src = reinterpret_cast<const uint16_t*>(static_cast<const uint8_t*>(x) + t * ldx);
    auto* d = reinterpret_cast<float*>(static_cast<uint8_t*>(dst) + t * ldp);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(d + i, load8(src + i));
    for (; i < n; ++i) d[i] = _cvtsh_ss(src[i]);
  }
}

}  // namespace kvad::cpu::gemm::avx2
