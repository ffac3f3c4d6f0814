// Scalar reference kernels of MXFP4 (OCP Microscaling Formats v1.0: 32 FP4
// E2M1 values and one E8M0 scale per block; quant_blocks.h block_mxfp4), the
// definition of the format's arithmetic in kvad. gpt-oss ships its experts
// in it.
//
// - Quantization reproduces ggml's quantize_row_mxfp4_ref
//   (ggml/src/ggml-quants.c) step for step in float32; the output is
//   byte-identical to ggml's (tests/kernels/cpu/test_fixtures.cpp).
// - Dequantization follows dequantize_row_mxfp4.
// - The dot product against Q8_0 forms the exact integer sum of each
//   32-element block, then scales it in float and accumulates, as
//   ggml_vec_dot_mxfp4_q8_0's generic path does. mxfp4_avx2.cpp is its fast
//   version.
//
// This file is compiled with -ffp-contract=off (CMakeLists.txt): an FMA would
// change the roundings above and with them the bytes the quantizer writes.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/kquants_ref.h"
#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/quants.h"

namespace kvad::cpu::quants::ref {

// ---- mxfp4: x = kvalues_mxfp4[q] * 2^(e - 128), blocks of 32 ---------------

void to_float_mxfp4(const void* src, float* dst, int64_t n) {
  const block_mxfp4* x = static_cast<const block_mxfp4*>(src);
  for (int64_t i = 0; i < n / QK_MXFP4; ++i) {
    const float d = e8m0_to_f32_half(x[i].e);
    for (int j = 0; j < QK_MXFP4 / 2; ++j) {
      dst[i * QK_MXFP4 + j] = static_cast<float>(kvalues_mxfp4[x[i].qs[j] & 0xF]) * d;
      dst[i * QK_MXFP4 + j + QK_MXFP4 / 2] = static_cast<float>(kvalues_mxfp4[x[i].qs[j] >> 4]) * d;
    }
  }
}

namespace {
// The level nearest to x at scale d, the first of equal errors (ggml
// best_index_mxfp4).
inline uint8_t best_index_mxfp4(float x, float d) {
  uint8_t best = 0;
  float best_err = std::fabs(static_cast<float>(kvalues_mxfp4[0]) * d - x);
  for (uint8_t i = 1; i < 16; ++i) {
    const float err = std::fabs(static_cast<float>(kvalues_mxfp4[i]) * d - x);
    if (err < best_err) {
      best = i;
      best_err = err;
    }
  }
  return best;
}
}  // namespace

// ggml quantize_row_mxfp4_ref: e = floor(log2(amax)) - 2 + 127 (the largest
// E2M1 value, 6, is 1.5 * 2^2), then each value's nearest level.
void from_float_mxfp4(const float* src, void* dst, int64_t n) {
  block_mxfp4* y = static_cast<block_mxfp4*>(dst);
  for (int64_t i = 0; i < n / QK_MXFP4; ++i) {
    const float* x = src + i * QK_MXFP4;
    float amax = 0.0f;
    for (int j = 0; j < QK_MXFP4; ++j) amax = std::max(amax, std::fabs(x[j]));
    // ggml converts the float to uint8_t; through int32 here, which is what
    // that conversion does on x86 for the (denormal-input) negative case.
    const uint8_t e = amax > 0.0f ? static_cast<uint8_t>(static_cast<int32_t>(std::floor(std::log2(amax)) - 2 + 127)) : 0;
    const float d = e8m0_to_f32_half(e);
    y[i].e = e;
    for (int j = 0; j < QK_MXFP4 / 2; ++j)
      y[i].qs[j] = static_cast<uint8_t>(best_index_mxfp4(x[j], d) | (best_index_mxfp4(x[j + QK_MXFP4 / 2], d) << 4));
  }
}

float vec_dot_mxfp4_q8_0(int64_t n, const void* vx, const void* vy) {
  const block_mxfp4* x = static_cast<const block_mxfp4*>(vx);
  const block_q8_0* y = static_cast<const block_q8_0*>(vy);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / QK_MXFP4; ++i) {
    int sumi = 0;
    for (int j = 0; j < QK_MXFP4 / 2; ++j) {
      sumi += y[i].qs[j] * kvalues_mxfp4[x[i].qs[j] & 0xF];
      sumi += y[i].qs[j + QK_MXFP4 / 2] * kvalues_mxfp4[x[i].qs[j] >> 4];
    }
    sumf += fp16(y[i].d) * e8m0_to_f32_half(x[i].e) * static_cast<float>(sumi);
  }
  return sumf;
}

}  // namespace kvad::cpu::quants::ref
