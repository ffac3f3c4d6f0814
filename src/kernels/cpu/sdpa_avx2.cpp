// Attention without a mask (ops.h sdpa) over f32 keys and values, AVX2+FMA:
// a tile of query rows of one head streams over blocks of kBlock keys with
// an online softmax (Milakov & Gimelshein 2018; FlashAttention's tiling, Dao
// et al. 2022). Compiled with KVAD_AVX2_FLAGS; called only after a run-time
// CPU check (attention.cpp).
//
// Unlike attention_avx2.cpp's kernel (one query row at a time, a horizontal
// sum per score), each key block is transposed once per tile into kt[d][j]
// so that two query rows' scores for 32 keys are 8 accumulators of
// broadcast(q[d]) · kt[d][j..j+8): no horizontal sums, scores land in lanes
// for the softmax; P·V then runs two rows at a time over chunks of up to 40
// output values (10 accumulators). The transposition is amortized over the
// tile's rows (up to kMaxRows).
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/simd_avx2.h"

namespace kvad::cpu {

namespace {

using avx2::exp_ps;
using avx2::hsum;

constexpr int kBlock = 32;    // keys per block: 4 vectors of scores per row
constexpr int kMaxDim = 256;

inline float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// s[r][0..32) = q_r · kt (kt: D rows of kBlock keys), R rows.
template <int R>
inline void scores(const float* const* q, const float* kt, int64_t D, __m256 (&s)[R][4]) {
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < 4; ++c) s[r][c] = _mm256_setzero_ps();
  for (int64_t d = 0; d < D; ++d) {
    const float* kd = kt + d * kBlock;
    const __m256 k0 = _mm256_load_ps(kd), k1 = _mm256_load_ps(kd + 8), k2 = _mm256_load_ps(kd + 16),
                 k3 = _mm256_load_ps(kd + 24);
    for (int r = 0; r < R; ++r) {
      const __m256 qv = _mm256_broadcast_ss(q[r] + d);
      s[r][0] = _mm256_fmadd_ps(qv, k0, s[r][0]);
      s[r][1] = _mm256_fmadd_ps(qv, k1, s[r][1]);
      s[r][2] = _mm256_fmadd_ps(qv, k2, s[r][2]);
      s[r][3] = _mm256_fmadd_ps(qv, k3, s[r][3]);
    }
  }
}

// o_r[c0 .. c0 + 8·NV) += Σ_{j < nb} p_r[j] · v_j[c0 ..], R rows.
template <int R, int NV>
inline void accumulate(float* const* o, const float (*p)[kBlock], const float* const* vrow, int nb, int64_t c0) {
  __m256 acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < NV; ++c) acc[r][c] = _mm256_loadu_ps(o[r] + c0 + 8 * c);
  for (int j = 0; j < nb; ++j) {
    __m256 vv[NV];
    for (int c = 0; c < NV; ++c) vv[c] = _mm256_loadu_ps(vrow[j] + c0 + 8 * c);
    for (int r = 0; r < R; ++r) {
      const __m256 w = _mm256_broadcast_ss(&p[r][j]);
      for (int c = 0; c < NV; ++c) acc[r][c] = _mm256_fmadd_ps(w, vv[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < NV; ++c) _mm256_storeu_ps(o[r] + c0 + 8 * c, acc[r][c]);
}

template <int R>
void accumulate_all(float* const* o, const float (*p)[kBlock], const float* const* vrow, int nb, int64_t D) {
  for (int64_t c0 = 0; c0 < D; c0 += 40) {
    switch (std::min<int64_t>(5, (D - c0) / 8)) {
      case 5: accumulate<R, 5>(o, p, vrow, nb, c0); break;
      case 4: accumulate<R, 4>(o, p, vrow, nb, c0); break;
      case 3: accumulate<R, 3>(o, p, vrow, nb, c0); break;
      case 2: accumulate<R, 2>(o, p, vrow, nb, c0); break;
      default: accumulate<R, 1>(o, p, vrow, nb, c0); break;
    }
  }
}

// One block for R (1 or 2) rows: scores, the online softmax update of m, l
// and the outputs' scale, then P·V.
template <int R>
void block_rows(const float* const* q, float* const* o, float* m, float* l, const float* kt,
                const float* const* vrow, int nb, int64_t D, float scale) {
  __m256 s[R][4];
  scores<R>(q, kt, D, s);
  alignas(32) float p[R][kBlock];
  const __m256 vscale = _mm256_set1_ps(scale);
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (int r = 0; r < R; ++r) {
    __m256 bm = _mm256_set1_ps(-INFINITY);
    for (int c = 0; c < 4; ++c) {
      // Keys past nb (a partial last block) get -inf: e^(-inf) = 0.
      const __m256 in = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(nb - 8 * c), lane));
      s[r][c] = _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), _mm256_mul_ps(s[r][c], vscale), in);
      bm = _mm256_max_ps(bm, s[r][c]);
    }
    const float m_new = std::max(m[r], hmax(bm));
    // 0 on the first block (m = -inf); 1, without libm's exp, once the
    // running maximum settles (most blocks of a long row).
    const float alpha = m_new == m[r] ? 1.0f : std::exp(m[r] - m_new);
    const __m256 vm = _mm256_set1_ps(m_new);
    __m256 sum = _mm256_setzero_ps();
    for (int c = 0; c < 4; ++c) {
      const __m256 e = exp_ps(_mm256_sub_ps(s[r][c], vm));
      // exp_ps clamps its argument, so e^(-inf) comes out tiny, not 0: mask.
      const __m256 in = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(nb - 8 * c), lane));
      const __m256 pe = _mm256_and_ps(e, in);
      _mm256_store_ps(p[r] + 8 * c, pe);
      sum = _mm256_add_ps(sum, pe);
    }
    l[r] = l[r] * alpha + hsum(sum);
    m[r] = m_new;
    if (alpha != 1.0f) {
      const __m256 va = _mm256_set1_ps(alpha);
      for (int64_t c = 0; c < D; c += 8) _mm256_storeu_ps(o[r] + c, _mm256_mul_ps(_mm256_loadu_ps(o[r] + c), va));
    }
  }
  accumulate_all<R>(o, p, vrow, nb, D);
}

}  // namespace

void sdpa_tile_avx2(const float* const* q, float* const* out, int n_rows, const float* k, const float* v,
                    int64_t kv_stride, int64_t n_kv, int64_t D, float scale) {
  alignas(32) static thread_local float kt[kMaxDim * kBlock];
  float m[kSdpaMaxRows], l[kSdpaMaxRows];
  for (int r = 0; r < n_rows; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
    std::fill(out[r], out[r] + D, 0.0f);
  }
  const float* vrow[kBlock];
  for (int64_t b0 = 0; b0 < n_kv; b0 += kBlock) {
    const int nb = static_cast<int>(std::min<int64_t>(kBlock, n_kv - b0));
    // kt[d][j] = k_{b0 + j}[d]; zeros for the keys past nb.
    for (int j = 0; j < nb; ++j) {
      const float* kr = k + (b0 + j) * kv_stride;
      for (int64_t d = 0; d < D; ++d) kt[d * kBlock + j] = kr[d];
      vrow[j] = v + (b0 + j) * kv_stride;
    }
    for (int j = nb; j < kBlock; ++j)
      for (int64_t d = 0; d < D; ++d) kt[d * kBlock + j] = 0.0f;
    int r = 0;
    for (; r + 2 <= n_rows; r += 2) block_rows<2>(q + r, out + r, m + r, l + r, kt, vrow, nb, D, scale);
    if (r < n_rows) block_rows<1>(q + r, out + r, m + r, l + r, kt, vrow, nb, D, scale);
  }
  for (int r = 0; r < n_rows; ++r) {
    const __m256 inv = _mm256_set1_ps(1.0f / l[r]);
    for (int64_t c = 0; c < D; c += 8) _mm256_storeu_ps(out[r] + c, _mm256_mul_ps(_mm256_loadu_ps(out[r] + c), inv));
  }
}

}  // namespace kvad::cpu
