// Helpers the scalar references of the K-quant family share: kquants_ref.cpp
// (Q2_K..Q6_K, Q8_K), iq_tq_ref.cpp (IQ4_NL, TQ1_0, TQ2_0) and mxfp4_ref.cpp
// (MXFP4). All three are compiled with -ffp-contract=off (CMakeLists.txt).
#pragma once
#include <cstdint>

#include "kernels/cpu/quant_blocks.h"
#include "tensor/half.h"

namespace kvad::cpu::quants::ref {

inline float fp16(uint16_t h) { return f16_to_f32(h); }
inline uint16_t to_fp16(float f) { return f32_to_f16(f); }

// ggml's GROUP_MAX_EPS: a group whose largest |x| is below it is all zero.
inline constexpr float kGroupMaxEps = 1e-15f;

// Q2_K/Q3_K 2-bit fields and TQ2_0: L[0..255] (each < 4) into qs[64].
inline void pack_2bit(const uint8_t* L, uint8_t* qs) {
  for (int j = 0; j < QK_K; j += 128) {
    for (int l = 0; l < 32; ++l) {
      qs[j / 4 + l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) |
                                           (L[j + l + 96] << 6));
    }
  }
}

// The 2-bit field of element e (quant_blocks.h).
inline int get_2bit(const uint8_t* qs, int e) { return (qs[32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4))) & 3; }

}  // namespace kvad::cpu::quants::ref
