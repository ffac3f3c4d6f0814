// Tiled matrix products of the K-quants Q4_K and Q6_K with Q8_K activations
// (gemm.h), compiled once per instruction set by the files that include this
// one (internal to them): gemm_kquants_avx2.cpp (namespace gemm::avx2,
// ${KVAD_AVX2_FLAGS}) and gemm_kquants_avx512.cpp (gemm::avx512vnni, with
// AVX512-VL/BW/VNNI as well), both with -ffp-contract=off and called only
// after the run-time CPU feature check (kernels_table.cpp). The AVX512 build
// has 32 vector registers, so a tile's 3 x 8 accumulators stay in
// registers; adds each scaled pair sum with one vpdpwssd instead of
// vpmaddwd + vpaddd (the same exact integer sums); and runs Q4_K two weight
// rows at a time in 512-bit registers (row2_q4_K), each half doing the
// 256-bit kernel's float operations in its order: both builds give the same
// bits (test_matmul Gemm.Avx512VnniEqualsAvx2). On this project's 2-core
// Zen 4 machine the AVX512 Q4_K gemm runs 1.9x, Q6_K 1.4x the AVX2 one
// (bench_matmul BM_kernel/q4_K/gemm-avx2 vs gemm-avx512vnni, 768x2048, 32 tokens).
//
// One weight row times C tokens at a time. Per 256-element super-block the
// row's quants are unpacked and its sub-block scales expanded once, then
// every token's exact integer sums are formed as in the AVX2 vec_dots
// (kquants_avx2.cpp: maddubs, then madd with the sub-block scales; mins and
// offsets through Q8_K's bsums). The float work stays in vector lanes: per
// super-block and token, the eight int32 lane sums are converted (exactly
// for Q4_K, whose lanes stay below 8 * 2 * 2 * 15 * 127 * 63 < 2^22; a Q6_K
// lane can pass 2^24 only with extreme scales, then it rounds once) and
// added with one FMA by d_w * d_y, the min terms
// likewise in four lanes, and the lanes are summed once per output. The
// reference instead sums the lanes to one integer per super-block and adds
// d * float(sum) in scalar code, so the results differ by float rounding
// (test_matmul bounds it); a token's arithmetic does not depend on C. The
// activations are packed as q8_Kx (gemm.h): each Q8_K block plus its
// sub-block sums times d as floats, so Q4_K's min term is one FMA of
// dmin * m_j (per row) with them (per token).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/gemm.h"

#ifndef KVAD_GEMM_KQUANTS_ISA
#error "include gemm_kquants_impl.h from gemm_kquants_avx2.cpp or gemm_kquants_avx512.cpp only"
#endif

namespace kvad::cpu::gemm::KVAD_GEMM_KQUANTS_ISA {

namespace {

inline float fp16(uint16_t h) { return _cvtsh_ss(h); }

inline __m256i load(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m128i load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

inline float hsum(__m128 r) {
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  r = _mm_add_ss(r, _mm_movehdup_ps(r));
  return _mm_cvtss_f32(r);
}
inline float hsum(__m256 v) { return hsum(_mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1))); }

// u8 x s8 products in pairs (int16, exact), times int16 scales, summed in pairs: 8 x int32.
inline __m256i dot_scaled(__m256i q, const int8_t* y, __m256i scale16) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(q, load(y)), scale16);
}
// acc + dot_scaled(q, y, scale16), in one instruction where VNNI has it.
inline __m256i add_dot_scaled(__m256i acc, __m256i q, const int8_t* y, __m256i scale16) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpwssd_epi32(acc, _mm256_maddubs_epi16(q, load(y)), scale16);
#else
  return _mm256_add_epi32(acc, dot_scaled(q, y, scale16));
#endif
}


// Int8 scales of 16-element sub-blocks 2k and 2k+1 as 16 x int16 (eight
// copies each), the layout of a maddubs result over 32 elements.
inline __m256i scale_pair(__m128i sc, int k) {
  const long long lo = 0x0101010101010101LL * (2 * k), hi = 0x0101010101010101LL * (2 * k + 1);
  return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc, _mm_set_epi64x(hi, lo)));
}

// Q6_K quants (0..63) of elements 128*h + 32*s + l (quant_blocks.h).
inline void q6_quants(const uint8_t* ql, const uint8_t* qh, __m256i q[4]) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x30);
  const __m256i l0 = load(ql), l1 = load(ql + 32), h = load(qh);
  q[0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(h, 4), m2));
  q[1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(h, 2), m2));
  q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(h, m2));
  q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                         _mm256_and_si256(_mm256_srli_epi16(h, 2), m2));
}

inline const q8_Kx* yrow(const uint8_t* y, size_t ldy, int c) {
  return reinterpret_cast<const q8_Kx*>(y + static_cast<size_t>(c) * ldy);
}

// ---- Q4_K ------------------------------------------------------------------------

template <int C>
void row_q4_K(int64_t nb, const block_q4_K* x, const uint8_t* y, size_t ldy, float* out, int64_t ldo) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256 acc[C];   // d_w d_y * (scaled quant sums), 8 lanes
  __m256 accm[C];  // (dmin_w m_j) * (d_y bsum_j), sub-block j in lane j
  for (int c = 0; c < C; ++c) {
    acc[c] = _mm256_setzero_ps();
    accm[c] = _mm256_setzero_ps();
  }
  for (int64_t i = 0; i < nb; ++i) {
    uint8_t sc[8], m[8];
    scales_mins_k4(x[i].scales, sc, m);
    // The eight scales as int16 in both lanes; sub-block k's scale in every
    // int16 lane is one byte shuffle of it (bytes 2k, 2k+1 repeated).
    const __m256i sc16 =
        _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc))));
    auto scale = [&](int k) { return _mm256_shuffle_epi8(sc16, _mm256_set1_epi16(static_cast<short>((2 * k + 1) << 8 | 2 * k))); };
    __m256i sumi[C];
    for (int c = 0; c < C; ++c) sumi[c] = _mm256_setzero_si256();
    // Sub-blocks two at a time (2j and 2j+1: the low and high nibbles of 32
    // bytes), so that the tokens' accumulators, two quant vectors and two
    // scales stay in registers.
    for (int j = 0; j < 4; ++j) {
      const __m256i v = load(x[i].qs + 32 * j);
      const __m256i q_lo = _mm256_and_si256(v, m4), q_hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
      const __m256i s_lo = scale(2 * j), s_hi = scale(2 * j + 1);
      for (int c = 0; c < C; ++c) {
        const int8_t* q8 = yrow(y, ldy, c)[i].b.qs + 64 * j;
        sumi[c] = add_dot_scaled(add_dot_scaled(sumi[c], q_lo, q8, s_lo), q_hi, q8 + 32, s_hi);
      }
    }
    const float dx = fp16(x[i].d);
    const __m256 mins = _mm256_mul_ps(_mm256_set1_ps(fp16(x[i].dmin)),
                                      _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(m)))));
    for (int c = 0; c < C; ++c) {
      const q8_Kx& yb = yrow(y, ldy, c)[i];
      acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(dx * yb.b.d), _mm256_cvtepi32_ps(sumi[c]), acc[c]);
      accm[c] = _mm256_fmadd_ps(mins, _mm256_loadu_ps(yb.dbs), accm[c]);
    }
  }
  for (int c = 0; c < C; ++c) out[c * ldo] = hsum(acc[c]) - hsum(accm[c]);
}

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
// Two weight rows at once in 512-bit registers (row r in the low 256 bits,
// row r + 1 in the high ones; each token's activations broadcast to both):
// half the instructions of two row_q4_K<C> calls, and in each half exactly
// row_q4_K's operations on the same values (the products dx * dy, the
// conversions, the FMAs and the final hsum in the same order), so the same
// bits.
inline __m512i pair512(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }
inline __m256 high256(__m512 v) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)); }

template <int C>
void row2_q4_K(int64_t nb, const block_q4_K* x0, const block_q4_K* x1, const uint8_t* y, size_t ldy, float* out,
               int64_t ldo) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  __m512 acc[C], accm[C];
  for (int c = 0; c < C; ++c) {
    acc[c] = _mm512_setzero_ps();
    accm[c] = _mm512_setzero_ps();
  }
  for (int64_t i = 0; i < nb; ++i) {
    uint8_t sc0[8], m0[8], sc1[8], m1[8];
    scales_mins_k4(x0[i].scales, sc0, m0);
    scales_mins_k4(x1[i].scales, sc1, m1);
    auto sc16_of = [](const uint8_t* sc) {
      return _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc))));
    };
    const __m512i sc16 = pair512(sc16_of(sc0), sc16_of(sc1));
    auto scale = [&](int k) { return _mm512_shuffle_epi8(sc16, _mm512_set1_epi16(static_cast<short>((2 * k + 1) << 8 | 2 * k))); };
    __m512i sumi[C];
    for (int c = 0; c < C; ++c) sumi[c] = _mm512_setzero_si512();
    for (int j = 0; j < 4; ++j) {
      const __m512i v = pair512(load(x0[i].qs + 32 * j), load(x1[i].qs + 32 * j));
      const __m512i q_lo = _mm512_and_si512(v, m4), q_hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
      const __m512i s_lo = scale(2 * j), s_hi = scale(2 * j + 1);
      for (int c = 0; c < C; ++c) {
        const int8_t* q8 = yrow(y, ldy, c)[i].b.qs + 64 * j;
        const __m512i y_lo = _mm512_broadcast_i64x4(load(q8)), y_hi = _mm512_broadcast_i64x4(load(q8 + 32));
        sumi[c] = _mm512_dpwssd_epi32(sumi[c], _mm512_maddubs_epi16(q_lo, y_lo), s_lo);
        sumi[c] = _mm512_dpwssd_epi32(sumi[c], _mm512_maddubs_epi16(q_hi, y_hi), s_hi);
      }
    }
    const __m512 dx = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(fp16(x0[i].d)), _mm512_set1_ps(fp16(x1[i].d)));
    const __m512 dmin =
        _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(fp16(x0[i].dmin)), _mm512_set1_ps(fp16(x1[i].dmin)));
    auto m32_of = [](const uint8_t* m) { return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(m))); };
    const __m512 mins = _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(pair512(m32_of(m0), m32_of(m1))));
    for (int c = 0; c < C; ++c) {
      const q8_Kx& yb = yrow(y, ldy, c)[i];
      acc[c] = _mm512_fmadd_ps(_mm512_mul_ps(dx, _mm512_set1_ps(yb.b.d)), _mm512_cvtepi32_ps(sumi[c]), acc[c]);
      const __m512 dbs = _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(yb.dbs))));
      accm[c] = _mm512_fmadd_ps(mins, dbs, accm[c]);
    }
  }
  for (int c = 0; c < C; ++c) {
    out[c * ldo] = hsum(_mm512_castps512_ps256(acc[c])) - hsum(_mm512_castps512_ps256(accm[c]));
    out[c * ldo + 1] = hsum(high256(acc[c])) - hsum(high256(accm[c]));
  }
}

// gemm_rows for Q4_K with rows in pairs (row_q4_K for an odd last row).
template <int kC>
void gemm_rows_q4_K_pairs(int64_t n, const void* w, size_t ldw, int64_t nr, const void* y, size_t ldy, int64_t nc,
                          float* out, int64_t ldo) {
  const int64_t nb = n / QK_K;
  const uint8_t* wb = static_cast<const uint8_t*>(w);
  const uint8_t* yb = static_cast<const uint8_t*>(y);
  for (int64_t c0 = 0; c0 < nc; c0 += kC) {
    const uint8_t* yc = yb + static_cast<size_t>(c0) * ldy;
    float* oc = out + c0 * ldo;
    const int cc = static_cast<int>(std::min<int64_t>(kC, nc - c0));
    auto x = [&](int64_t r) { return reinterpret_cast<const block_q4_K*>(wb + static_cast<size_t>(r) * ldw); };
    int64_t r = 0;
    for (; r + 1 < nr; r += 2) {
      switch (cc) {
#define KVAD_ROW2_CASE(k) \
  case k:                 \
    if constexpr (k <= kC) row2_q4_K<k>(nb, x(r), x(r + 1), yc, ldy, oc + r, ldo); \
    break;
        KVAD_ROW2_CASE(1) KVAD_ROW2_CASE(2) KVAD_ROW2_CASE(3) KVAD_ROW2_CASE(4)
        KVAD_ROW2_CASE(5) KVAD_ROW2_CASE(6) KVAD_ROW2_CASE(7) KVAD_ROW2_CASE(8)
#undef KVAD_ROW2_CASE
        default: break;
      }
    }
    if (r < nr) {
      switch (cc) {
#define KVAD_ROW_CASE(k) \
  case k:                \
    if constexpr (k <= kC) row_q4_K<k>(nb, x(r), yc, ldy, oc + r, ldo); \
    break;
        KVAD_ROW_CASE(1) KVAD_ROW_CASE(2) KVAD_ROW_CASE(3) KVAD_ROW_CASE(4)
        KVAD_ROW_CASE(5) KVAD_ROW_CASE(6) KVAD_ROW_CASE(7) KVAD_ROW_CASE(8)
#undef KVAD_ROW_CASE
        default: break;
      }
    }
  }
}
#endif

// ---- Q6_K ------------------------------------------------------------------------

template <int C>
void row_q6_K(int64_t nb, const block_q6_K* x, const uint8_t* y, size_t ldy, float* out, int64_t ldo) {
  __m256 acc[C];
  for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const __m128i sc = load128(x[i].scales);
    const __m256i sc16 = _mm256_cvtepi8_epi16(sc);
    __m256i sumi[C];
    // q - 32: the -32 through bsums.
    for (int c = 0; c < C; ++c)
      sumi[c] = _mm256_sub_epi32(_mm256_setzero_si256(),
                                 _mm256_slli_epi32(_mm256_madd_epi16(sc16, load(yrow(y, ldy, c)[i].b.bsums)), 5));
    for (int h = 0; h < 2; ++h) {
      __m256i q[4];
      q6_quants(x[i].ql + 64 * h, x[i].qh + 32 * h, q);
      const __m256i s0 = scale_pair(sc, 4 * h), s1 = scale_pair(sc, 4 * h + 1);
      const __m256i s2 = scale_pair(sc, 4 * h + 2), s3 = scale_pair(sc, 4 * h + 3);
      for (int c = 0; c < C; ++c) {
        const int8_t* q8 = yrow(y, ldy, c)[i].b.qs + 128 * h;
        __m256i s = add_dot_scaled(sumi[c], q[0], q8, s0);
        s = add_dot_scaled(s, q[1], q8 + 32, s1);
        s = add_dot_scaled(s, q[2], q8 + 64, s2);
        sumi[c] = add_dot_scaled(s, q[3], q8 + 96, s3);
      }
    }
    const float dx = fp16(x[i].d);
    for (int c = 0; c < C; ++c)
      acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(dx * yrow(y, ldy, c)[i].b.d), _mm256_cvtepi32_ps(sumi[c]), acc[c]);
  }
  for (int c = 0; c < C; ++c) out[c * ldo] = hsum(acc[c]);
}

// Every weight row against tokens [c0, c0 + C), tokens in tiles of kC.
template <typename Block, template <int> class Row, int kC>
void gemm_rows(int64_t n, const void* w, size_t ldw, int64_t nr, const void* y, size_t ldy, int64_t nc,
               float* out, int64_t ldo) {
  const int64_t nb = n / QK_K;
  const uint8_t* wb = static_cast<const uint8_t*>(w);
  const uint8_t* yb = static_cast<const uint8_t*>(y);
  for (int64_t c0 = 0; c0 < nc; c0 += kC) {
    const uint8_t* yc = yb + static_cast<size_t>(c0) * ldy;
    float* oc = out + c0 * ldo;
    const int cc = static_cast<int>(std::min<int64_t>(kC, nc - c0));
    for (int64_t r = 0; r < nr; ++r) {
      const Block* x = reinterpret_cast<const Block*>(wb + static_cast<size_t>(r) * ldw);
      switch (cc) {
#define KVAD_ROW_CASE(k) \
  case k:                \
    if constexpr (k <= kC) Row<k>::run(nb, x, yc, ldy, oc + r, ldo); \
    break;
        KVAD_ROW_CASE(1) KVAD_ROW_CASE(2) KVAD_ROW_CASE(3) KVAD_ROW_CASE(4)
        KVAD_ROW_CASE(5) KVAD_ROW_CASE(6) KVAD_ROW_CASE(7) KVAD_ROW_CASE(8)
#undef KVAD_ROW_CASE
        default: break;
      }
    }
  }
}

template <int C>
struct RowQ4_K {
  static void run(int64_t nb, const block_q4_K* x, const uint8_t* y, size_t ldy, float* out, int64_t ldo) {
    row_q4_K<C>(nb, x, y, ldy, out, ldo);
  }
};
template <int C>
struct RowQ6_K {
  static void run(int64_t nb, const block_q6_K* x, const uint8_t* y, size_t ldy, float* out, int64_t ldo) {
    row_q6_K<C>(nb, x, y, ldy, out, ldo);
  }
};

}  // namespace

#ifndef KVAD_GEMM_KQUANTS_NO_PACK  // the packer is the same for both builds: once, in the AVX2 one
void pack_q8_Kx(int64_t n, const void* x, size_t ldx, int64_t n_rows, void* dst, size_t ldp) {
  const int64_t nb = n / QK_K;
  for (int64_t r = 0; r < n_rows; ++r) {
    const block_q8_K* b = reinterpret_cast<const block_q8_K*>(static_cast<const uint8_t*>(x) + r * ldx);
    q8_Kx* p = reinterpret_cast<q8_Kx*>(static_cast<uint8_t*>(dst) + r * ldp);
    for (int64_t i = 0; i < nb; ++i) {
      p[i].b = b[i];
      for (int j = 0; j < 8; ++j) p[i].dbs[j] = b[i].d * static_cast<float>(b[i].bsums[2 * j] + b[i].bsums[2 * j + 1]);
    }
  }
}

#endif

void gemm_q4_K(int64_t n, const void* w, size_t ldw, int64_t nr, const void* y, size_t ldy, int64_t nc,
               float* out, int64_t ldo) {
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
  // Pairs of rows pay off when each row's unpacked quants serve several
  // tokens (prefill). With one to three tokens (decode) the product waits on
  // memory, and reading two rows at once halves the length of each
  // sequential stream the hardware prefetcher sees: decode measured 1.8x
  // slower (Llama-3.2-1B shape, Q4_K_M, 1 thread). Rows one at a time there.
  if (nc >= 4) {
    gemm_rows_q4_K_pairs<8>(n, w, ldw, nr, y, ldy, nc, out, ldo);
    return;
  }
#endif
  gemm_rows<block_q4_K, RowQ4_K, 8>(n, w, ldw, nr, y, ldy, nc, out, ldo);
}

void gemm_q6_K(int64_t n, const void* w, size_t ldw, int64_t nr, const void* y, size_t ldy, int64_t nc,
               float* out, int64_t ldo) {
  gemm_rows<block_q6_K, RowQ6_K, 8>(n, w, ldw, nr, y, ldy, nc, out, ldo);
}

}  // namespace kvad::cpu::gemm::KVAD_GEMM_KQUANTS_ISA
