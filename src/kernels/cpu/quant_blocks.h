// Block layouts of the quantized formats, byte for byte as ggml stores them
// (ggml/src/ggml-common.h). Scales are IEEE binary16 bit patterns (uint16_t);
// convert with kvad::f16_to_f32. Every weight block has alignment 2 at most,
// so a row of blocks may start at any even address (GGUF aligns tensor data to
// 32); block_q8_K (an activation format kvad makes itself) has alignment 4.
//
// Element order within a 32-element block with 4-bit (or 5-bit) quants:
// qs[j] & 0xF is element j and qs[j] >> 4 is element j + 16; for the 5-bit
// formats bit j of qh (little endian uint32) is the 5th bit of element j.
#pragma once
#include <cstdint>
#include <cstring>

namespace kvad::cpu {

inline constexpr int QK4_0 = 32;
inline constexpr int QK4_1 = 32;
inline constexpr int QK5_0 = 32;
inline constexpr int QK5_1 = 32;
inline constexpr int QK8_0 = 32;
inline constexpr int QK8_1 = 32;
inline constexpr int QK_K = 256;
inline constexpr int QK4_NL = 32;

/// x[j] = d * ((q[j]) - 8), q in [0, 15].
struct block_q4_0 {
  uint16_t d;              // f16 scale
  uint8_t qs[QK4_0 / 2];   // nibbles
};
static_assert(sizeof(block_q4_0) == 18);

/// x[j] = d * q[j] + m, q in [0, 15].
struct block_q4_1 {
  uint16_t d;              // f16 scale
  uint16_t m;              // f16 min
  uint8_t qs[QK4_1 / 2];
};
static_assert(sizeof(block_q4_1) == 20);

/// x[j] = d * (q[j] - 16), q in [0, 31]; 5th bits in qh.
struct block_q5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[QK5_0 / 2];
};
static_assert(sizeof(block_q5_0) == 22);

/// x[j] = d * q[j] + m, q in [0, 31]; 5th bits in qh.
struct block_q5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[QK5_1 / 2];
};
static_assert(sizeof(block_q5_1) == 24);

/// x[j] = d * q[j], q in [-127, 127].
struct block_q8_0 {
  uint16_t d;
  int8_t qs[QK8_0];
};
static_assert(sizeof(block_q8_0) == 34);

/// x[j] = d * q[j]; s = d * sum(q) (f16), used by the Q4_1/Q5_1 dots for the min term.
struct block_q8_1 {
  uint16_t d;
  uint16_t s;
  int8_t qs[QK8_1];
};
static_assert(sizeof(block_q8_1) == 36);

// ---- K-quants: super-blocks of QK_K = 256 elements -------------------------
//
// Element e of a super-block lies in sub-block e/16 (Q2_K, Q3_K, Q6_K) or
// e/32 (Q4_K, Q5_K), each with its own small integer scale (and min) that
// the super-block's f16 d (and dmin) multiplies. Bit positions, per ggml's
// dequantize_row_*:
//   2-bit fields (Q2_K, Q3_K low bits): e = 128*h + 32*s + l (h < 2, s < 4,
//     l < 32) is bits 2s..2s+1 of qs[32*h + l];
//   4-bit fields (Q4_K, Q5_K low bits): e = 64*c + l is the low nibble of
//     qs[32*c + l], e = 64*c + 32 + l the high nibble (c < 4, l < 32);
//   Q3_K high bit of e = 32*b + l (b < 8): bit b of hmask[l]; Q5_K fifth bit
//     likewise: bit b of qh[l];
//   Q6_K: e = 128*h + 32*s + l has its low 4 bits in nibble s>>1 (0: low,
//     1: high) of ql[64*h + 32*(s&1) + l] and its high 2 bits at bits
//     2s..2s+1 of qh[32*h + l].
// Q4_K/Q5_K 6-bit scales and mins of sub-blocks j < 8 in scales[12]:
//   j < 4: sc = scales[j] & 63, m = scales[j+4] & 63;
//   j >= 4: sc = (scales[j+4] & 15) | (scales[j-4] >> 6) << 4,
//           m = (scales[j+4] >> 4) | (scales[j] >> 6) << 4.
// Q3_K 6-bit scales of sub-blocks j < 16 in scales[12] (stored + 32):
//   low 4 bits: j < 8: scales[j] & 15, j >= 8: scales[j-8] >> 4;
//   high 2 bits: bits 2*(j/4)..+1 of scales[8 + j%4].

/// x = d * (sc * q) - dmin * m; q in [0, 3]; sc, m 4-bit (low, high nibble of scales[e/16]).
struct block_q2_K {
  uint8_t scales[QK_K / 16];
  uint8_t qs[QK_K / 4];
  uint16_t d;
  uint16_t dmin;
};
static_assert(sizeof(block_q2_K) == 84);

/// x = d * (sc - 32) * q; q in [-4, 3] = low 2 bits - (high bit ? 0 : 4); sc 6-bit.
struct block_q3_K {
  uint8_t hmask[QK_K / 8];
  uint8_t qs[QK_K / 4];
  uint8_t scales[12];
  uint16_t d;
};
static_assert(sizeof(block_q3_K) == 110);

/// x = d * sc * q - dmin * m; q in [0, 15]; sc, m 6-bit per 32 elements.
struct block_q4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qs[QK_K / 2];
};
static_assert(sizeof(block_q4_K) == 144);

/// x = d * sc * q - dmin * m; q in [0, 31] (fifth bit in qh); sc, m 6-bit per 32.
struct block_q5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[QK_K / 8];
  uint8_t qs[QK_K / 2];
};
static_assert(sizeof(block_q5_K) == 176);

/// The eight 6-bit scales sc[j] and mins m[j] of a Q4_K/Q5_K super-block,
/// unpacked from its 12 `scales` bytes (ggml's layout: j < 4 in the low six
/// bits of bytes j and j + 4; j >= 4 from the low/high nibbles of byte j + 4
/// and the top two bits of bytes j - 4 and j).
inline void scales_mins_k4(const uint8_t* q, uint8_t* sc, uint8_t* m) {
  uint32_t a[3];
  std::memcpy(a, q, 12);
  const uint32_t s_lo = a[0] & 0x3f3f3f3fu, m_lo = a[1] & 0x3f3f3f3fu;
  const uint32_t s_hi = (a[2] & 0x0f0f0f0fu) | (((a[0] >> 6) & 0x03030303u) << 4);
  const uint32_t m_hi = ((a[2] >> 4) & 0x0f0f0f0fu) | (((a[1] >> 6) & 0x03030303u) << 4);
  std::memcpy(sc, &s_lo, 4);
  std::memcpy(sc + 4, &s_hi, 4);
  std::memcpy(m, &m_lo, 4);
  std::memcpy(m + 4, &m_hi, 4);
}

/// x = d * sc * (q - 32); q in [0, 63]; sc int8 per 16 elements.
struct block_q6_K {
  uint8_t ql[QK_K / 2];
  uint8_t qh[QK_K / 4];
  int8_t scales[QK_K / 16];
  uint16_t d;
};
static_assert(sizeof(block_q6_K) == 210);

/// The K-quants' activation format: x = d * q, q in [-127, 127] (ggml's
/// quantizer never makes -128); bsums[k] = sum of q[16k .. 16k+15], which the
/// dots use for the min (Q2_K, Q4_K, Q5_K) and offset (Q3_K, Q6_K, TQ) terms.
struct block_q8_K {
  float d;
  int8_t qs[QK_K];
  int16_t bsums[QK_K / 16];
};
static_assert(sizeof(block_q8_K) == 292);

// ---- non-linear and ternary ------------------------------------------------

/// x = d * kvalues_iq4nl[q], q a 4-bit index; nibble order as block_q4_0.
struct block_iq4_nl {
  uint16_t d;
  uint8_t qs[QK4_NL / 2];
};
static_assert(sizeof(block_iq4_nl) == 18);

/// The 16 levels of IQ4_NL (ggml-common.h kvalues_iq4nl), ascending.
inline constexpr int8_t kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                             1,    13,   25,  38,  53,  69,  89,  113};

/// MXFP4 (OCP Microscaling Formats v1.0, MXFP4): 32 FP4 (E2M1) values and
/// one E8M0 scale. x = kvalues_mxfp4[q] * 2^(e - 128): the table holds the
/// E2M1 values doubled, so the scale is halved (ggml's
/// GGML_E8M0_TO_FP32_HALF). Nibble order as block_q4_0. GGUF type 39.
inline constexpr int QK_MXFP4 = 32;
struct block_mxfp4 {
  uint8_t e;
  uint8_t qs[QK_MXFP4 / 2];
};
static_assert(sizeof(block_mxfp4) == 17);

/// E2M1 values doubled (ggml-common.h kvalues_mxfp4): 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives, x2.
inline constexpr int8_t kvalues_mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/// 2^(e - 128) as a float, the E8M0 scale halved (e = 0, 1 give the
/// subnormals 2^-128, 2^-127); exact.
inline float e8m0_to_f32_half(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
  float f;
  __builtin_memcpy(&f, &bits, sizeof f);
  return f;
}

/// Ternary, 1.6875 bits: x = d * (t - 1), t in {0, 1, 2}. Five trits per byte
/// in qs, four in qh, stored as a fixed-point fraction: byte = ceil(v * 256 / 243)
/// for the base-3 number v (first trit most significant); trit k of a byte is
/// ((uint8_t)(byte * 3^k) * 3) >> 8. Element order: trit k of qs[m], m < 32:
/// e = 32k + m; of qs[32 + m], m < 16: e = 160 + 16k + m; of qh[m], k < 4:
/// e = 240 + 4k + m.
struct block_tq1_0 {
  uint8_t qs[(QK_K - 4 * QK_K / 64) / 5];
  uint8_t qh[QK_K / 64];
  uint16_t d;
};
static_assert(sizeof(block_tq1_0) == 54);

/// Ternary, 2.0625 bits: x = d * (t - 1), t in {0, 1, 2} at bits 2s..2s+1 of
/// qs[32*h + l] for e = 128*h + 32*s + l.
struct block_tq2_0 {
  uint8_t qs[QK_K / 4];
  uint16_t d;
};
static_assert(sizeof(block_tq2_0) == 66);

}  // namespace kvad::cpu
