// AVX2+FMA+F16C tiled matrix products (gemm.h). Compiled with
// ${KVAD_AVX2_FLAGS}; called only when cpu_features().has_avx2_fma().
//
// Shape of the work: one weight row times C activation rows (tokens) at a
// time, C accumulators in registers. The k loop walks the row four blocks
// (128 elements) at a time: the row's four blocks are unpacked to int8 once
// and their scales converted once, then reused for all C tokens. The
// activations are packed (gemm.h) so that one 32-byte load of two weight
// blocks' nibbles, split into low and high nibbles, lines up with them.
// Per token and group:
//   - four u8 x s8 maddubs products (int16 pair sums), added across halves
//     and blocks into eight int32 lanes holding parts of blocks
//     (0, 2, 0, 2 | 1, 3, 1, 3), exact (bounds at sum4_u4 / sum4_s8);
//   - one int->float conversion and one FMA with the blocks' d_w * d_y in
//     that lane order (plus one FMA of m * s for Q4_1), so the float work per
//     block is a quarter of a vec_dot's.
// The integer block sums are the reference's; only the order in which the
// scaled terms are added differs (by float rounding, as the vec_dots).
#include <immintrin.h>

#include "kernels/cpu/simd_avx2.h"

#include <algorithm>
#include <cstring>

#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/gemm.h"

namespace kvad::cpu::gemm::avx2 {

namespace {

inline __m256i load(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

using kvad::cpu::avx2::hsum;

inline uint32_t load_u32(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// [lo | hi]: two 16-byte halves (hi == nullptr: zero).
inline __m256i load_pair(const void* lo, const void* hi) {
  const __m128i l = _mm_loadu_si128(reinterpret_cast<const __m128i*>(lo));
  if (!hi) return _mm256_inserti128_si256(_mm256_setzero_si256(), l, 0);
  return _mm256_inserti128_si256(_mm256_castsi128_si256(l), _mm_loadu_si128(reinterpret_cast<const __m128i*>(hi)), 1);
}

// The nibbles of a group's (up to) four 4-bit blocks as four int8 vectors in
// the packed activation order (gemm.h); missing blocks (j >= cnt) are zero.
template <typename Block>
inline void nibbles_4(const Block* xb, int cnt, __m256i q[4]) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i v01 = load_pair(xb[0].qs, cnt > 1 ? xb[1].qs : nullptr);
  const __m256i v23 = cnt > 2 ? load_pair(xb[2].qs, cnt > 3 ? xb[3].qs : nullptr) : _mm256_setzero_si256();
  q[0] = _mm256_and_si256(v01, m4);
  q[1] = _mm256_and_si256(_mm256_srli_epi16(v01, 4), m4);
  q[2] = _mm256_and_si256(v23, m4);
  q[3] = _mm256_and_si256(_mm256_srli_epi16(v23, 4), m4);
}

// Q5_0 quants (0..31) of a group in the packed order: the nibbles, plus 16
// where the block's qh has the element's bit set (quant_blocks.h). Vector 0 takes
// bits 0..15 of blocks 0 and 1 (one block per 128-bit lane), vector 1 bits
// 16..31, vectors 2 and 3 likewise for blocks 2 and 3. Each lane holds its
// block's 32-bit qh broadcast; a byte shuffle sends byte i/8 of the wanted
// half to byte i, and a compare with bit i%8 turns the bit into 0 or 16.
inline void high_bits_pair(const block_q5_0* a, const block_q5_0* b, __m256i& lo, __m256i& hi) {
  const __m256i qh = _mm256_setr_m128i(_mm_set1_epi32(static_cast<int>(load_u32(a->qh))),
                                       _mm_set1_epi32(b ? static_cast<int>(load_u32(b->qh)) : 0));
  const __m256i mask = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ULL));
  const __m256i sixteen = _mm256_set1_epi8(0x10);
  const __m256i shuf_lo = _mm256_set_epi64x(0x0101010101010101, 0, 0x0101010101010101, 0);
  const __m256i shuf_hi = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0303030303030303,
                                            0x0202020202020202);
  const __m256i bl = _mm256_and_si256(_mm256_shuffle_epi8(qh, shuf_lo), mask);
  const __m256i bh = _mm256_and_si256(_mm256_shuffle_epi8(qh, shuf_hi), mask);
  lo = _mm256_and_si256(_mm256_cmpeq_epi8(bl, mask), sixteen);
  hi = _mm256_and_si256(_mm256_cmpeq_epi8(bh, mask), sixteen);
}

inline void quants5_4(const block_q5_0* xb, int cnt, __m256i q[4]) {
  nibbles_4(xb, cnt, q);
  for (int p = 0; p < 2 && 2 * p < cnt; ++p) {
    __m256i lo, hi;
    high_bits_pair(&xb[2 * p], 2 * p + 1 < cnt ? &xb[2 * p + 1] : nullptr, lo, hi);
    q[2 * p] = _mm256_or_si256(q[2 * p], lo);
    q[2 * p + 1] = _mm256_or_si256(q[2 * p + 1], hi);
  }
}

// Products of unsigned quants q (at most 31) and the packed int8 activations
// y of a group, reduced to int32 lanes of blocks (0, 2, 0, 2 | 1, 3, 1, 3).
// A maddubs lane is at most 2 * 31 * 128 = 7936 in magnitude; the int16 sums
// of two and then four of them stay within 31744 < 2^15: exact.
// cnt <= 2: blocks 2 and 3 are absent (zero).
template <int cnt = 4>
inline __m256i sum4_u4(const __m256i q[4], const int8_t* y) {
  const __m256i p01 = _mm256_add_epi16(_mm256_maddubs_epi16(q[0], load(y)), _mm256_maddubs_epi16(q[1], load(y + 32)));
  const __m256i p23 = cnt <= 2 ? _mm256_setzero_si256()
                               : _mm256_add_epi16(_mm256_maddubs_epi16(q[2], load(y + 64)),
                                                  _mm256_maddubs_epi16(q[3], load(y + 96)));
  const __m256i t = _mm256_add_epi16(_mm256_unpacklo_epi32(p01, p23), _mm256_unpackhi_epi32(p01, p23));
  return _mm256_madd_epi16(t, _mm256_set1_epi16(1));
}

// The same for int8 weights x (vectors in the packed order): x's sign moves
// onto y and |x| <= 128 is the unsigned factor. A maddubs lane can reach
// 2 * 128 * 127 = 32512, so each product is widened to int32 (madd) before
// anything is added.
template <int cnt = 4>
inline __m256i sum4_s8(const __m256i x[4], const __m256i ax[4], const int8_t* y) {
  const __m256i one = _mm256_set1_epi16(1);
  __m256i p[4];
  for (int j = 0; j < (cnt <= 2 ? 2 : 4); ++j)
    p[j] = _mm256_madd_epi16(_mm256_maddubs_epi16(ax[j], _mm256_sign_epi8(load(y + 32 * j), x[j])), one);
  const __m256i p01 = _mm256_add_epi32(p[0], p[1]);
  const __m256i p23 = cnt <= 2 ? _mm256_setzero_si256() : _mm256_add_epi32(p[2], p[3]);
  return _mm256_add_epi32(_mm256_unpacklo_epi32(p01, p23), _mm256_unpackhi_epi32(p01, p23));
}

// Q4_1 row scales of a group: d in lane order (d0 d2 d0 d2 d1 d3 d1 d3) and
// m as (m0 m1 m2 m3 0 0 0 0); blocks j >= cnt count as 0.
inline void scales_q4_1(const block_q4_1* xb, int cnt, __m256& d, __m256& m) {
  uint32_t a[4] = {0, 0, 0, 0};
  for (int j = 0; j < cnt; ++j) a[j] = load_u32(&xb[j].d);
  const __m128i v = _mm_setr_epi32(static_cast<int>(a[0]), static_cast<int>(a[1]), static_cast<int>(a[2]),
                                   static_cast<int>(a[3]));  // f16 d0 m0 d1 m1 d2 m2 d3 m3
  d = _mm256_cvtph_ps(_mm_shuffle_epi8(v, _mm_setr_epi8(0, 1, 8, 9, 0, 1, 8, 9, 4, 5, 12, 13, 4, 5, 12, 13)));
  m = _mm256_cvtph_ps(_mm_shuffle_epi8(v, _mm_setr_epi8(2, 3, 6, 7, 10, 11, 14, 15, -1, -1, -1, -1, -1, -1, -1, -1)));
}

// Row d of a group of blocks that start with an f16 d (Q4_0, Q5_0, Q8_0), in lane order.
template <typename Block>
inline __m256 scales_d(const Block* xb, int cnt) {
  uint16_t a[4] = {0, 0, 0, 0};
  for (int j = 0; j < cnt; ++j) a[j] = xb[j].d;
  const __m128i v = _mm_setr_epi16(static_cast<short>(a[0]), static_cast<short>(a[1]), static_cast<short>(a[2]),
                                   static_cast<short>(a[3]), 0, 0, 0, 0);
  return _mm256_cvtph_ps(_mm_shuffle_epi8(v, _mm_setr_epi8(0, 1, 4, 5, 0, 1, 4, 5, 2, 3, 6, 7, 2, 3, 6, 7)));
}

// ---- Q4_1 x Q8_1 ---------------------------------------------------------------

template <int C>
struct TileQ4_1 {
  __m256 acc[C];

  template <int cnt>
  void group(const block_q4_1* xb, const uint8_t* y, size_t ldy, int64_t g) {
    __m256i q[4];
    nibbles_4(xb, cnt, q);
    __m256 rd, rm;
    scales_q4_1(xb, cnt, rd, rm);
    for (int c = 0; c < C; ++c) {
      const q8_1x4& yg = reinterpret_cast<const q8_1x4*>(y + c * ldy)[g];
      const __m256 dd = _mm256_mul_ps(rd, _mm256_loadu_ps(yg.d));
      acc[c] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(sum4_u4<cnt>(q, yg.qs)), acc[c]);
      acc[c] = _mm256_fmadd_ps(rm, _mm256_loadu_ps(yg.s), acc[c]);  // m * s
    }
  }

};

// ---- Q4_0 x Q8_0 ---------------------------------------------------------------

template <int C>
struct TileQ4_0 {
  __m256 acc[C];

  template <int cnt>
  void group(const block_q4_0* xb, const uint8_t* y, size_t ldy, int64_t g) {
    __m256i q[4];
    nibbles_4(xb, cnt, q);
    const __m256 rd = scales_d(xb, cnt);
    for (int c = 0; c < C; ++c) {
      const q8_0x4& yg = reinterpret_cast<const q8_0x4*>(y + c * ldy)[g];
      const __m256 dd = _mm256_mul_ps(rd, _mm256_loadu_ps(yg.d));
      // sum (q - 8) y = sum q y - 8 sum y, lane by lane, in int32.
      const __m256i s = _mm256_sub_epi32(sum4_u4<cnt>(q, yg.qs), load(yg.ysum));
      acc[c] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(s), acc[c]);
    }
  }

};

// ---- Q5_0 x Q8_0 ---------------------------------------------------------------

template <int C>
struct TileQ5_0 {
  __m256 acc[C];

  template <int cnt>
  void group(const block_q5_0* xb, const uint8_t* y, size_t ldy, int64_t g) {
    __m256i q[4];
    quants5_4(xb, cnt, q);
    const __m256 rd = scales_d(xb, cnt);
    for (int c = 0; c < C; ++c) {
      const q8_0x4& yg = reinterpret_cast<const q8_0x4*>(y + c * ldy)[g];
      const __m256 dd = _mm256_mul_ps(rd, _mm256_loadu_ps(yg.d));
      // sum (q - 16) y = sum q y - 16 sum y = sum q y - 2 ysum, in int32.
      const __m256i s = _mm256_sub_epi32(sum4_u4<cnt>(q, yg.qs), _mm256_slli_epi32(load(yg.ysum), 1));
      acc[c] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(s), acc[c]);
    }
  }

};

// ---- Q8_0 x Q8_0 ---------------------------------------------------------------

template <int C>
struct TileQ8_0 {
  __m256 acc[C];

  template <int cnt>
  void group(const block_q8_0* xb, const uint8_t* y, size_t ldy, int64_t g) {
    __m256i x[4], ax[4];
    for (int h = 0; h < 2; ++h) {  // halves 0..15 and 16..31
      x[h] = load_pair(xb[0].qs + 16 * h, cnt > 1 ? xb[1].qs + 16 * h : nullptr);
      x[2 + h] = cnt > 2 ? load_pair(xb[2].qs + 16 * h, cnt > 3 ? xb[3].qs + 16 * h : nullptr)
                         : _mm256_setzero_si256();
    }
    for (int j = 0; j < 4; ++j) ax[j] = _mm256_sign_epi8(x[j], x[j]);
    const __m256 rd = scales_d(xb, cnt);
    for (int c = 0; c < C; ++c) {
      const q8_0x4& yg = reinterpret_cast<const q8_0x4*>(y + c * ldy)[g];
      const __m256 dd = _mm256_mul_ps(rd, _mm256_loadu_ps(yg.d));
      acc[c] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(sum4_s8<cnt>(x, ax, yg.qs)), acc[c]);
    }
  }

};

// One weight row x (nb blocks) against C tokens: the tile's accumulators over
// the row's groups of four blocks (the last one partial), then one sum each.
// Inlined into rows(): as a call it measured ~8% slower (Q8_0, 512 tokens).
template <template <int> class Tile, int C, typename Block>
[[gnu::always_inline]] inline void run_row(int64_t nb, const Block* x, const uint8_t* y, size_t ldy, float* out,
                                           int64_t ldo) {
  Tile<C> t;
  for (int c = 0; c < C; ++c) t.acc[c] = _mm256_setzero_ps();
  const int64_t ng = nb / 4;
  for (int64_t g = 0; g < ng; ++g) t.template group<4>(x + 4 * g, y, ldy, g);
  switch (nb % 4) {
    case 1: t.template group<1>(x + 4 * ng, y, ldy, ng); break;
    case 2: t.template group<2>(x + 4 * ng, y, ldy, ng); break;
    case 3: t.template group<3>(x + 4 * ng, y, ldy, ng); break;
    default: break;
  }
  for (int c = 0; c < C; ++c) out[c * ldo] = hsum(t.acc[c]);
}

// Every weight row against tokens [c0, c0 + C).
template <template <int> class Tile, int C, typename Block>
void rows(int64_t nb, const uint8_t* w, size_t ldw, int64_t nr, const uint8_t* y, size_t ldy, float* out,
          int64_t ldo) {
  for (int64_t r = 0; r < nr; ++r)
    run_row<Tile, C, Block>(nb, reinterpret_cast<const Block*>(w + static_cast<size_t>(r) * ldw), y, ldy, out + r,
                            ldo);
}

// Tokens in tiles of kC (and one smaller tile for the rest).
template <template <int> class Tile, int kC, typename Block>
void gemm_tiles(int64_t n, const void* w, size_t ldw, int64_t nr, const void* y, size_t ldy, int64_t nc,
                float* out, int64_t ldo) {
  static_assert(kC >= 1 && kC <= 8);
  const int64_t nb = n / 32;
  const uint8_t* wb = static_cast<const uint8_t*>(w);
  const uint8_t* yb = static_cast<const uint8_t*>(y);
  for (int64_t c0 = 0; c0 < nc; c0 += kC) {
    const uint8_t* yc = yb + static_cast<size_t>(c0) * ldy;
    float* oc = out + c0 * ldo;
    switch (std::min<int64_t>(kC, nc - c0)) {
#define KVAD_TILE_CASE(k) \
  case k:                 \
    if constexpr (k <= kC) rows<Tile, k, Block>(nb, wb, ldw, nr, yc, ldy, oc, ldo); \
    break;
      KVAD_TILE_CASE(1) KVAD_TILE_CASE(2) KVAD_TILE_CASE(3) KVAD_TILE_CASE(4)
      KVAD_TILE_CASE(5) KVAD_TILE_CASE(6) KVAD_TILE_CASE(7) KVAD_TILE_CASE(8)
#undef KVAD_TILE_CASE
      default: break;
    }
  }
}

}  // namespace

// ---- packers -------------------------------------------------------------------

namespace {

// Quants of a group's blocks b[0..cnt) in the packed order (gemm.h), zeros
// for the missing blocks.
template <typename Block>
void pack_qs(const Block* b, int cnt, int8_t* qs) {
  std::memset(qs, 0, 128);
  for (int j = 0; j < cnt; ++j) {
    const int pair = j / 2, side = j % 2;  // vectors 2*pair (elements 0..15), 2*pair+1 (16..31)
    std::memcpy(qs + 64 * pair + 16 * side, b[j].qs, 16);
    std::memcpy(qs + 64 * pair + 32 + 16 * side, b[j].qs + 16, 16);
  }
}

// Lane order of the packed scales: lane l holds block kLaneBlock[l].
constexpr int kLaneBlock[8] = {0, 2, 0, 2, 1, 3, 1, 3};

}  // namespace

void pack_q8_1x4(int64_t n, const void* x, size_t ldx, int64_t n_rows, void* dst, size_t ldp) {
  const int64_t nb = n / QK8_1, ng = (nb + 3) / 4;
  for (int64_t r = 0; r < n_rows; ++r) {
    const block_q8_1* b = reinterpret_cast<const block_q8_1*>(static_cast<const uint8_t*>(x) + r * ldx);
    q8_1x4* g = reinterpret_cast<q8_1x4*>(static_cast<uint8_t*>(dst) + r * ldp);
    for (int64_t gi = 0; gi < ng; ++gi) {
      const int cnt = static_cast<int>(std::min<int64_t>(4, nb - 4 * gi));
      const block_q8_1* bg = b + 4 * gi;
      for (int l = 0; l < 8; ++l) {
        const int j = kLaneBlock[l];
        g[gi].d[l] = j < cnt ? _cvtsh_ss(bg[j].d) : 0.0f;
        g[gi].s[l] = l < 4 && l < cnt ? _cvtsh_ss(bg[l].s) : 0.0f;
      }
      pack_qs(bg, cnt, g[gi].qs);
    }
  }
}

void pack_q8_0x4(int64_t n, const void* x, size_t ldx, int64_t n_rows, void* dst, size_t ldp) {
  const int64_t nb = n / QK8_0, ng = (nb + 3) / 4;
  const __m256i ones = _mm256_set1_epi8(1);
  const __m256i q1[4] = {ones, ones, ones, ones};
  for (int64_t r = 0; r < n_rows; ++r) {
    const block_q8_0* b = reinterpret_cast<const block_q8_0*>(static_cast<const uint8_t*>(x) + r * ldx);
    q8_0x4* g = reinterpret_cast<q8_0x4*>(static_cast<uint8_t*>(dst) + r * ldp);
    for (int64_t gi = 0; gi < ng; ++gi) {
      const int cnt = static_cast<int>(std::min<int64_t>(4, nb - 4 * gi));
      const block_q8_0* bg = b + 4 * gi;
      for (int l = 0; l < 8; ++l) {
        const int j = kLaneBlock[l];
        g[gi].d[l] = j < cnt ? _cvtsh_ss(bg[j].d) : 0.0f;
      }
      pack_qs(bg, cnt, g[gi].qs);
      // 8 x the sum of the quants each lane covers: the same reduction with
      // every weight quant 1 (exact: |sum| <= 8 * 127 per lane).
      const __m256i s = _mm256_slli_epi32(sum4_u4(q1, g[gi].qs), 3);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(g[gi].ysum), s);
    }
  }
}

// ---- entries -------------------------------------------------------------------

void gemm_q4_1(int64_t n, const void* w, size_t ldw, int64_t nr, const void* y, size_t ldy, int64_t nc,
               float* out, int64_t ldo) {
  gemm_tiles<TileQ4_1, 8, block_q4_1>(n, w, ldw, nr, y, ldy, nc, out, ldo);
}

void gemm_q4_0(int64_t n, const void* w, size_t ldw, int64_t nr, const void* y, size_t ldy, int64_t nc,
               float* out, int64_t ldo) {
  gemm_tiles<TileQ4_0, 8, block_q4_0>(n, w, ldw, nr, y, ldy, nc, out, ldo);
}

void gemm_q5_0(int64_t n, const void* w, size_t ldw, int64_t nr, const void* y, size_t ldy, int64_t nc,
               float* out, int64_t ldo) {
  gemm_tiles<TileQ5_0, 8, block_q5_0>(n, w, ldw, nr, y, ldy, nc, out, ldo);
}

void gemm_q8_0(int64_t n, const void* w, size_t ldw, int64_t nr, const void* y, size_t ldy, int64_t nc,
               float* out, int64_t ldo) {
  gemm_tiles<TileQ8_0, 8, block_q8_0>(n, w, ldw, nr, y, ldy, nc, out, ldo);
}

}  // namespace kvad::cpu::gemm::avx2
