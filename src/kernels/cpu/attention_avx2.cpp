// Tiled attention over an f16 or f32 KV cache, AVX2+FMA+F16C. Compiled with
// KVAD_AVX2_FLAGS; called only after a run-time CPU check (host_kernels.cpp).
//
// One call handles up to AttentionRows::kMax query rows that read the same
// KV head. Keys are visited in blocks of kBlock; each block of K and V is
// converted to f32 once and used by every row, and each row keeps a running
// maximum m, a running sum l and an unnormalised output o (the online softmax
// of Milakov & Gimelshein 2018, as tiled in FlashAttention, Dao et al. 2022):
//   m' = max(m, max_j s_j),  o' = o·e^(m-m') + Σ_j e^(s_j-m')·v_j,
//   l' = l·e^(m-m') + Σ_j e^(s_j-m'),  out = o / l at the end.
// The score matrix is never materialised beyond one block per row.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "kernels/cpu/host_kernels.h"
#include "kernels/cpu/simd_avx2.h"

namespace kvad::cpu {

namespace {

using avx2::exp_ps;
using avx2::hsum;
using avx2::tanh_ps;

constexpr int kBlock = 32;     // keys per block
constexpr int kMaxDim = 256;   // head_dim limit of this kernel

// Eight cache values as f32: an f16 cache is widened, an f32 one read as is.
inline __m256 load8(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }

// Eight dot products q·k_j (j = 0..7, rows of kf with stride D) as one vector.
inline __m256 dot8(const float* q, const float* kf, int64_t D) {
  __m256 a[8];
  for (int j = 0; j < 8; ++j) a[j] = _mm256_setzero_ps();
  for (int64_t c = 0; c < D; c += 8) {
    const __m256 qv = _mm256_loadu_ps(q + c);
    for (int j = 0; j < 8; ++j) a[j] = _mm256_fmadd_ps(_mm256_load_ps(kf + j * D + c), qv, a[j]);
  }
  // Transpose-reduce: lane j of the result is the full sum of a[j].
  const __m256 h01 = _mm256_hadd_ps(a[0], a[1]), h23 = _mm256_hadd_ps(a[2], a[3]);
  const __m256 h45 = _mm256_hadd_ps(a[4], a[5]), h67 = _mm256_hadd_ps(a[6], a[7]);
  const __m256 h0123 = _mm256_hadd_ps(h01, h23), h4567 = _mm256_hadd_ps(h45, h67);
  return _mm256_add_ps(_mm256_permute2f128_ps(h0123, h4567, 0x20), _mm256_permute2f128_ps(h0123, h4567, 0x31));
}

// o[0 .. 8*NV) += Σ_{j in [j0, j1)} p[j] · vf[j][0 .. 8*NV), vf rows of stride D.
template <int NV>
inline void accumulate_pv(float* o, const float* p, const float* vf, int64_t D, int j0, int j1) {
  __m256 acc[NV];
  for (int c = 0; c < NV; ++c) acc[c] = _mm256_loadu_ps(o + 8 * c);
  for (int j = j0; j < j1; ++j) {
    const __m256 w = _mm256_broadcast_ss(p + j);
    for (int c = 0; c < NV; ++c) acc[c] = _mm256_fmadd_ps(w, _mm256_load_ps(vf + j * D + 8 * c), acc[c]);
  }
  for (int c = 0; c < NV; ++c) _mm256_storeu_ps(o + 8 * c, acc[c]);
}

void accumulate_pv_any(float* o, const float* p, const float* vf, int64_t D, int j0, int j1) {
  for (int64_t c0 = 0; c0 < D; c0 += 64) {
    float* oc = o + c0;
    const float* vc = vf + c0;
    switch (std::min<int64_t>(8, (D - c0) / 8)) {
      case 8: accumulate_pv<8>(oc, p, vc, D, j0, j1); break;
      case 7: accumulate_pv<7>(oc, p, vc, D, j0, j1); break;
      case 6: accumulate_pv<6>(oc, p, vc, D, j0, j1); break;
      case 5: accumulate_pv<5>(oc, p, vc, D, j0, j1); break;
      case 4: accumulate_pv<4>(oc, p, vc, D, j0, j1); break;
      case 3: accumulate_pv<3>(oc, p, vc, D, j0, j1); break;
      case 2: accumulate_pv<2>(oc, p, vc, D, j0, j1); break;
      default: accumulate_pv<1>(oc, p, vc, D, j0, j1); break;
    }
  }
}

// TK, TV: the element types of the K and V caches (uint16_t f16, float).
template <typename TK, typename TV>
void attention_rows_impl(const AttentionRows& rows, const TK* k, const TV* v, int64_t kv_stride, int64_t D,
                         float scale) {
  alignas(32) static thread_local float kf[kBlock * kMaxDim], vf[kBlock * kMaxDim];
  alignas(32) float s[kBlock];
  float m[AttentionRows::kMax], l[AttentionRows::kMax];
  int64_t lo = rows.first[0], hi = rows.last[0];
  for (int r = 0; r < rows.n; ++r) {
    lo = std::min(lo, rows.first[r]);
    hi = std::max(hi, rows.last[r]);
    // A sink starts the online softmax as one seen logit with a zero value.
    m[r] = rows.sinks ? rows.sink[r] : -INFINITY;
    l[r] = rows.sinks ? 1.0f : 0.0f;
    std::fill(rows.out[r], rows.out[r] + D, 0.0f);
  }
  const __m256 vscale = _mm256_set1_ps(scale);
  const bool capped = rows.softcap > 0;
  const __m256 vcap = _mm256_set1_ps(rows.softcap), vinv_cap = _mm256_set1_ps(capped ? 1.0f / rows.softcap : 0.0f);
  for (int64_t b0 = lo; b0 <= hi; b0 += kBlock) {
    const int nb = static_cast<int>(std::min<int64_t>(kBlock, hi + 1 - b0));
    const int nb8 = (nb + 7) & ~7;
    // Keys b0 .. b0 + nb - 1 are rows s0 .. of k/v; in a ring (rows.ring > 0)
    // they wrap to row 0 after row ring - 1, splitting the block in two runs.
    const int64_t s0 = rows.ring > 0 ? b0 % rows.ring : b0;
    const int split = rows.ring > 0 && s0 + nb > rows.ring ? static_cast<int>(rows.ring - s0) : nb;
    for (int run = 0; run < 2; ++run) {
      const int j0 = run == 0 ? 0 : split, j1 = run == 0 ? split : nb;
      const TK* kb = k + (run == 0 ? s0 : -static_cast<int64_t>(split)) * kv_stride;
      const TV* vb = v + (run == 0 ? s0 : -static_cast<int64_t>(split)) * kv_stride;
      for (int j = j0; j < j1; ++j) {
        const TK* kr = kb + j * kv_stride;
        const TV* vr = vb + j * kv_stride;
        for (int64_t c = 0; c < D; c += 8) {
          _mm256_store_ps(kf + j * D + c, load8(kr + c));
          _mm256_store_ps(vf + j * D + c, load8(vr + c));
        }
      }
    }
    std::fill(kf + nb * D, kf + nb8 * D, 0.0f);  // padding keys: finite scores, masked below
    for (int r = 0; r < rows.n; ++r) {
      // Keys of this block row r may see: [j0, j1).
      const int j0 = static_cast<int>(std::max<int64_t>(rows.first[r] - b0, 0));
      const int j1 = static_cast<int>(std::min<int64_t>(rows.last[r] + 1 - b0, nb));
      if (j0 >= j1) continue;
      for (int j = 0; j < nb8; j += 8) {
        __m256 sj = _mm256_mul_ps(dot8(rows.q[r], kf + j * D, D), vscale);
        if (capped) sj = _mm256_mul_ps(vcap, tanh_ps(_mm256_mul_ps(sj, vinv_cap)));
        _mm256_store_ps(s + j, sj);
      }
      float bm = -INFINITY;
      for (int j = j0; j < j1; ++j) bm = std::max(bm, s[j]);
      const float m_new = std::max(m[r], bm);
      const float alpha = std::exp(m[r] - m_new);  // 0 on the first block (m = -inf) without a sink
      // p_j = e^(s_j - m_new) inside [j0, j1), 0 outside.
      const __m256 vm = _mm256_set1_ps(m_new);
      __m256 vsum = _mm256_setzero_ps();
      for (int j = 0; j < nb8; j += 8) {
        const __m256i idx = _mm256_add_epi32(_mm256_set1_epi32(j), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        const __m256i in = _mm256_and_si256(_mm256_cmpgt_epi32(idx, _mm256_set1_epi32(j0 - 1)),
                                            _mm256_cmpgt_epi32(_mm256_set1_epi32(j1), idx));
        const __m256 e = _mm256_and_ps(exp_ps(_mm256_sub_ps(_mm256_load_ps(s + j), vm)), _mm256_castsi256_ps(in));
        _mm256_store_ps(s + j, e);
        vsum = _mm256_add_ps(vsum, e);
      }
      l[r] = l[r] * alpha + hsum(vsum);
      m[r] = m_new;
      float* o = rows.out[r];
      if (alpha != 1.0f) {
        const __m256 va = _mm256_set1_ps(alpha);
        for (int64_t c = 0; c < D; c += 8) _mm256_storeu_ps(o + c, _mm256_mul_ps(_mm256_loadu_ps(o + c), va));
      }
      accumulate_pv_any(o, s, vf, D, j0, j1);
    }
  }
  for (int r = 0; r < rows.n; ++r) {
    const __m256 inv = _mm256_set1_ps(1.0f / l[r]);
    float* o = rows.out[r];
    for (int64_t c = 0; c < D; c += 8) _mm256_storeu_ps(o + c, _mm256_mul_ps(_mm256_loadu_ps(o + c), inv));
  }
}

}  // namespace

void attention_rows_avx2(const AttentionRows& rows, KVRows k, KVRows v, int64_t kv_stride, int64_t D, float scale) {
  const auto* kh = static_cast<const uint16_t*>(k.data);
  const auto* vh = static_cast<const uint16_t*>(v.data);
  const auto* kf = static_cast<const float*>(k.data);
  const auto* vf = static_cast<const float*>(v.data);
  if (!k.f32 && !v.f32) attention_rows_impl(rows, kh, vh, kv_stride, D, scale);
  else if (k.f32 && v.f32) attention_rows_impl(rows, kf, vf, kv_stride, D, scale);
  else if (k.f32) attention_rows_impl(rows, kf, vh, kv_stride, D, scale);
  else attention_rows_impl(rows, kh, vf, kv_stride, D, scale);
}

}  // namespace kvad::cpu
