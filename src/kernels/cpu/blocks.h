// Block layouts of the quantized formats, byte for byte as ggml stores them
// (ggml/src/ggml-common.h). Scales are IEEE binary16 bit patterns (uint16_t);
// convert with kvad::f16_to_f32. Every struct has alignment 2 at most, so a
// row of blocks may start at any even address (GGUF aligns tensor data to 32).
//
// Element order within a 32-element block with 4-bit (or 5-bit) quants:
// qs[j] & 0xF is element j and qs[j] >> 4 is element j + 16; for the 5-bit
// formats bit j of qh (little endian uint32) is the 5th bit of element j.
#pragma once
#include <cstdint>

namespace kvad::cpu {

inline constexpr int QK4_0 = 32;
inline constexpr int QK4_1 = 32;
inline constexpr int QK5_0 = 32;
inline constexpr int QK5_1 = 32;
inline constexpr int QK8_0 = 32;
inline constexpr int QK8_1 = 32;
inline constexpr int QK_K = 256;

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

}  // namespace kvad::cpu
