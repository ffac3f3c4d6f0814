// Scalar reference kernels: the definition of each format's arithmetic.
//
// Quantization follows ggml's quantize_row_*_ref (ggml/src/ggml-quants.c),
// which gguf-py's quants.py reproduces bit for bit; dequantization follows
// dequantize_row_*; dot products follow ggml_vec_dot_*_generic: integer sums
// within a block, scaled and accumulated in float; the plain formats
// (f32, f16, bf16) accumulate in double as ggml's scalar paths do.
//
// This file is compiled with -ffp-contract=off (CMakeLists.txt) so that
// `d * q + m` stays two roundings, as in ggml and numpy.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/quants.h"
#include "tensor/half.h"

namespace kvad::cpu::quants::ref {

namespace {
inline float fp16(uint16_t h) { return f16_to_f32(h); }
inline uint16_t to_fp16(float f) { return f32_to_f16(f); }
}  // namespace

// ---- f32 -------------------------------------------------------------------

void to_float_f32(const void* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}
void from_float_f32(const float* src, void* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}
float vec_dot_f32(int64_t n, const void* vx, const void* vy) {
  const float* x = static_cast<const float*>(vx);
  const float* y = static_cast<const float*>(vy);
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i] * y[i]);
  return static_cast<float>(s);
}

// ---- f16 -------------------------------------------------------------------

void to_float_f16(const void* src, float* dst, int64_t n) {
  const uint16_t* x = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = fp16(x[i]);
}
void from_float_f16(const float* src, void* dst, int64_t n) {
  uint16_t* y = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) y[i] = to_fp16(src[i]);
}
float vec_dot_f16(int64_t n, const void* vx, const void* vy) {
  const uint16_t* x = static_cast<const uint16_t*>(vx);
  const uint16_t* y = static_cast<const uint16_t*>(vy);
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(fp16(x[i]) * fp16(y[i]));
  return static_cast<float>(s);
}

// ---- bf16 ------------------------------------------------------------------

void to_float_bf16(const void* src, float* dst, int64_t n) {
  const uint16_t* x = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(x[i]);
}
void from_float_bf16(const float* src, void* dst, int64_t n) {
  uint16_t* y = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) y[i] = f32_to_bf16(src[i]);
}
float vec_dot_bf16(int64_t n, const void* vx, const void* vy) {
  const uint16_t* x = static_cast<const uint16_t*>(vx);
  const uint16_t* y = static_cast<const uint16_t*>(vy);
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(bf16_to_f32(x[i]) * bf16_to_f32(y[i]));
  return static_cast<float>(s);
}

// ---- q4_0: x = d * (q - 8) -------------------------------------------------

void to_float_q4_0(const void* src, float* dst, int64_t n) {
  const block_q4_0* x = static_cast<const block_q4_0*>(src);
  const int64_t nb = n / QK4_0;
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16(x[i].d);
    for (int j = 0; j < QK4_0 / 2; ++j) {
      const int x0 = (x[i].qs[j] & 0x0F) - 8;
      const int x1 = (x[i].qs[j] >> 4) - 8;
      dst[i * QK4_0 + j] = static_cast<float>(x0) * d;
      dst[i * QK4_0 + j + QK4_0 / 2] = static_cast<float>(x1) * d;
    }
  }
}

void from_float_q4_0(const float* src, void* dst, int64_t n) {
  block_q4_0* y = static_cast<block_q4_0*>(dst);
  const int64_t nb = n / QK4_0;
  for (int64_t i = 0; i < nb; ++i) {
    const float* x = src + i * QK4_0;
    float amax = 0.0f, max = 0.0f;  // max keeps its sign
    for (int j = 0; j < QK4_0; ++j) {
      if (amax < std::fabs(x[j])) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = to_fp16(d);
    for (int j = 0; j < QK4_0 / 2; ++j) {
      const float x0 = x[j] * id;
      const float x1 = x[QK4_0 / 2 + j] * id;
      const int xi0 = std::min(15, static_cast<int>(static_cast<int8_t>(x0 + 8.5f)));
      const int xi1 = std::min(15, static_cast<int>(static_cast<int8_t>(x1 + 8.5f)));
      y[i].qs[j] = static_cast<uint8_t>(xi0 | (xi1 << 4));
    }
  }
}

float vec_dot_q4_0_q8_0(int64_t n, const void* vx, const void* vy) {
  const block_q4_0* x = static_cast<const block_q4_0*>(vx);
  const block_q8_0* y = static_cast<const block_q8_0*>(vy);
  const int64_t nb = n / QK8_0;
  float sumf = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    int sumi0 = 0, sumi1 = 0;
    for (int j = 0; j < QK8_0 / 2; ++j) {
      const int v0 = (x[i].qs[j] & 0x0F) - 8;
      const int v1 = (x[i].qs[j] >> 4) - 8;
      sumi0 += v0 * y[i].qs[j];
      sumi1 += v1 * y[i].qs[j + QK8_0 / 2];
    }
    const int sumi = sumi0 + sumi1;
    sumf += static_cast<float>(sumi) * (fp16(x[i].d) * fp16(y[i].d));
  }
  return sumf;
}

// ---- q4_1: x = d * q + m ---------------------------------------------------

void to_float_q4_1(const void* src, float* dst, int64_t n) {
  const block_q4_1* x = static_cast<const block_q4_1*>(src);
  const int64_t nb = n / QK4_1;
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16(x[i].d);
    const float m = fp16(x[i].m);
    for (int j = 0; j < QK4_1 / 2; ++j) {
      const int x0 = x[i].qs[j] & 0x0F;
      const int x1 = x[i].qs[j] >> 4;
      dst[i * QK4_1 + j] = static_cast<float>(x0) * d + m;
      dst[i * QK4_1 + j + QK4_1 / 2] = static_cast<float>(x1) * d + m;
    }
  }
}

void from_float_q4_1(const float* src, void* dst, int64_t n) {
  block_q4_1* y = static_cast<block_q4_1*>(dst);
  const int64_t nb = n / QK4_1;
  for (int64_t i = 0; i < nb; ++i) {
    const float* x = src + i * QK4_1;
    float min = INFINITY, max = -INFINITY;
    for (int j = 0; j < QK4_1; ++j) {
      if (x[j] < min) min = x[j];
      if (x[j] > max) max = x[j];
    }
    const float d = (max - min) / 15.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = to_fp16(d);
    y[i].m = to_fp16(min);
    for (int j = 0; j < QK4_1 / 2; ++j) {
      const float x0 = (x[j] - min) * id;
      const float x1 = (x[QK4_1 / 2 + j] - min) * id;
      const int xi0 = std::min(15, static_cast<int>(static_cast<int8_t>(x0 + 0.5f)));
      const int xi1 = std::min(15, static_cast<int>(static_cast<int8_t>(x1 + 0.5f)));
      y[i].qs[j] = static_cast<uint8_t>(xi0 | (xi1 << 4));
    }
  }
}

float vec_dot_q4_1_q8_1(int64_t n, const void* vx, const void* vy) {
  const block_q4_1* x = static_cast<const block_q4_1*>(vx);
  const block_q8_1* y = static_cast<const block_q8_1*>(vy);
  const int64_t nb = n / QK8_1;
  float sumf = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    int sumi0 = 0, sumi1 = 0;
    for (int j = 0; j < QK8_1 / 2; ++j) {
      const int v0 = x[i].qs[j] & 0x0F;
      const int v1 = x[i].qs[j] >> 4;
      sumi0 += v0 * y[i].qs[j];
      sumi1 += v1 * y[i].qs[j + QK8_1 / 2];
    }
    const int sumi = sumi0 + sumi1;
    sumf += (fp16(x[i].d) * fp16(y[i].d)) * static_cast<float>(sumi) + fp16(x[i].m) * fp16(y[i].s);
  }
  return sumf;
}

// ---- q5_0: x = d * (q - 16) ------------------------------------------------

void to_float_q5_0(const void* src, float* dst, int64_t n) {
  const block_q5_0* x = static_cast<const block_q5_0*>(src);
  const int64_t nb = n / QK5_0;
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16(x[i].d);
    uint32_t qh;
    std::memcpy(&qh, x[i].qh, 4);
    for (int j = 0; j < QK5_0 / 2; ++j) {
      const uint8_t xh0 = static_cast<uint8_t>(((qh >> (j + 0)) << 4) & 0x10);
      const uint8_t xh1 = static_cast<uint8_t>(((qh >> (j + 12))) & 0x10);
      const int x0 = ((x[i].qs[j] & 0x0F) | xh0) - 16;
      const int x1 = ((x[i].qs[j] >> 4) | xh1) - 16;
      dst[i * QK5_0 + j] = static_cast<float>(x0) * d;
      dst[i * QK5_0 + j + QK5_0 / 2] = static_cast<float>(x1) * d;
    }
  }
}

void from_float_q5_0(const float* src, void* dst, int64_t n) {
  block_q5_0* y = static_cast<block_q5_0*>(dst);
  const int64_t nb = n / QK5_0;
  for (int64_t i = 0; i < nb; ++i) {
    const float* x = src + i * QK5_0;
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < QK5_0; ++j) {
      if (amax < std::fabs(x[j])) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = to_fp16(d);
    uint32_t qh = 0;
    for (int j = 0; j < QK5_0 / 2; ++j) {
      const float x0 = x[j] * id;
      const float x1 = x[QK5_0 / 2 + j] * id;
      const int xi0 = std::min(31, static_cast<int>(static_cast<int8_t>(x0 + 16.5f)));
      const int xi1 = std::min(31, static_cast<int>(static_cast<int8_t>(x1 + 16.5f)));
      y[i].qs[j] = static_cast<uint8_t>((xi0 & 0x0F) | ((xi1 & 0x0F) << 4));
      qh |= ((static_cast<uint32_t>(xi0) & 0x10u) >> 4) << (j + 0);
      qh |= ((static_cast<uint32_t>(xi1) & 0x10u) >> 4) << (j + QK5_0 / 2);
    }
    std::memcpy(y[i].qh, &qh, 4);
  }
}

float vec_dot_q5_0_q8_0(int64_t n, const void* vx, const void* vy) {
  const block_q5_0* x = static_cast<const block_q5_0*>(vx);
  const block_q8_0* y = static_cast<const block_q8_0*>(vy);
  const int64_t nb = n / QK8_0;
  float sumf = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    uint32_t qh;
    std::memcpy(&qh, x[i].qh, 4);
    int sumi0 = 0, sumi1 = 0;
    for (int j = 0; j < QK8_0 / 2; ++j) {
      const uint8_t xh0 = static_cast<uint8_t>(((qh & (1u << (j + 0))) >> (j + 0)) << 4);
      const uint8_t xh1 = static_cast<uint8_t>(((qh & (1u << (j + 16))) >> (j + 12)));
      const int v0 = ((x[i].qs[j] & 0x0F) | xh0) - 16;
      const int v1 = ((x[i].qs[j] >> 4) | xh1) - 16;
      sumi0 += v0 * y[i].qs[j];
      sumi1 += v1 * y[i].qs[j + QK8_0 / 2];
    }
    const int sumi = sumi0 + sumi1;
    sumf += (fp16(x[i].d) * fp16(y[i].d)) * static_cast<float>(sumi);
  }
  return sumf;
}

// ---- q5_1: x = d * q + m ---------------------------------------------------

void to_float_q5_1(const void* src, float* dst, int64_t n) {
  const block_q5_1* x = static_cast<const block_q5_1*>(src);
  const int64_t nb = n / QK5_1;
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16(x[i].d);
    const float m = fp16(x[i].m);
    uint32_t qh;
    std::memcpy(&qh, x[i].qh, 4);
    for (int j = 0; j < QK5_1 / 2; ++j) {
      const uint8_t xh0 = static_cast<uint8_t>(((qh >> (j + 0)) << 4) & 0x10);
      const uint8_t xh1 = static_cast<uint8_t>(((qh >> (j + 12))) & 0x10);
      const int x0 = (x[i].qs[j] & 0x0F) | xh0;
      const int x1 = (x[i].qs[j] >> 4) | xh1;
      dst[i * QK5_1 + j] = static_cast<float>(x0) * d + m;
      dst[i * QK5_1 + j + QK5_1 / 2] = static_cast<float>(x1) * d + m;
    }
  }
}

void from_float_q5_1(const float* src, void* dst, int64_t n) {
  block_q5_1* y = static_cast<block_q5_1*>(dst);
  const int64_t nb = n / QK5_1;
  for (int64_t i = 0; i < nb; ++i) {
    const float* x = src + i * QK5_1;
    float min = INFINITY, max = -INFINITY;
    for (int j = 0; j < QK5_1; ++j) {
      if (x[j] < min) min = x[j];
      if (x[j] > max) max = x[j];
    }
    const float d = (max - min) / 31.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = to_fp16(d);
    y[i].m = to_fp16(min);
    uint32_t qh = 0;
    for (int j = 0; j < QK5_1 / 2; ++j) {
      const float x0 = (x[j] - min) * id;
      const float x1 = (x[QK5_1 / 2 + j] - min) * id;
      // ggml casts to uint8_t without a clamp; (x-min)*id never exceeds
      // 31 + a few ulps, so the clamp only guards against misuse.
      const int xi0 = std::min(31, static_cast<int>(static_cast<uint8_t>(x0 + 0.5f)));
      const int xi1 = std::min(31, static_cast<int>(static_cast<uint8_t>(x1 + 0.5f)));
      y[i].qs[j] = static_cast<uint8_t>((xi0 & 0x0F) | ((xi1 & 0x0F) << 4));
      qh |= ((static_cast<uint32_t>(xi0) & 0x10u) >> 4) << (j + 0);
      qh |= ((static_cast<uint32_t>(xi1) & 0x10u) >> 4) << (j + QK5_1 / 2);
    }
    std::memcpy(y[i].qh, &qh, 4);
  }
}

float vec_dot_q5_1_q8_1(int64_t n, const void* vx, const void* vy) {
  const block_q5_1* x = static_cast<const block_q5_1*>(vx);
  const block_q8_1* y = static_cast<const block_q8_1*>(vy);
  const int64_t nb = n / QK8_1;
  float sumf = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    uint32_t qh;
    std::memcpy(&qh, x[i].qh, 4);
    int sumi0 = 0, sumi1 = 0;
    for (int j = 0; j < QK8_1 / 2; ++j) {
      const uint8_t xh0 = static_cast<uint8_t>(((qh >> (j + 0)) << 4) & 0x10);
      const uint8_t xh1 = static_cast<uint8_t>(((qh >> (j + 12))) & 0x10);
      const int v0 = (x[i].qs[j] & 0x0F) | xh0;
      const int v1 = (x[i].qs[j] >> 4) | xh1;
      sumi0 += v0 * y[i].qs[j];
      sumi1 += v1 * y[i].qs[j + QK8_1 / 2];
    }
    const int sumi = sumi0 + sumi1;
    sumf += (fp16(x[i].d) * fp16(y[i].d)) * static_cast<float>(sumi) + fp16(x[i].m) * fp16(y[i].s);
  }
  return sumf;
}

// ---- q8_0: x = d * q -------------------------------------------------------

void to_float_q8_0(const void* src, float* dst, int64_t n) {
  const block_q8_0* x = static_cast<const block_q8_0*>(src);
  const int64_t nb = n / QK8_0;
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16(x[i].d);
    for (int j = 0; j < QK8_0; ++j) dst[i * QK8_0 + j] = static_cast<float>(x[i].qs[j]) * d;
  }
}

void from_float_q8_0(const float* src, void* dst, int64_t n) {
  block_q8_0* y = static_cast<block_q8_0*>(dst);
  const int64_t nb = n / QK8_0;
  for (int64_t i = 0; i < nb; ++i) {
    const float* x = src + i * QK8_0;
    float amax = 0.0f;
    for (int j = 0; j < QK8_0; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = to_fp16(d);
    for (int j = 0; j < QK8_0; ++j) y[i].qs[j] = static_cast<int8_t>(std::roundf(x[j] * id));
  }
}

float vec_dot_q8_0_q8_0(int64_t n, const void* vx, const void* vy) {
  const block_q8_0* x = static_cast<const block_q8_0*>(vx);
  const block_q8_0* y = static_cast<const block_q8_0*>(vy);
  const int64_t nb = n / QK8_0;
  float sumf = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    int sumi = 0;
    for (int j = 0; j < QK8_0; ++j) sumi += x[i].qs[j] * y[i].qs[j];
    sumf += static_cast<float>(sumi) * (fp16(x[i].d) * fp16(y[i].d));
  }
  return sumf;
}

// ---- q8_1: x = d * q, s = d * sum(q) ---------------------------------------

void to_float_q8_1(const void* src, float* dst, int64_t n) {
  const block_q8_1* x = static_cast<const block_q8_1*>(src);
  const int64_t nb = n / QK8_1;
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16(x[i].d);
    for (int j = 0; j < QK8_1; ++j) dst[i * QK8_1 + j] = static_cast<float>(x[i].qs[j]) * d;
  }
}

void from_float_q8_1(const float* src, void* dst, int64_t n) {
  block_q8_1* y = static_cast<block_q8_1*>(dst);
  const int64_t nb = n / QK8_1;
  for (int64_t i = 0; i < nb; ++i) {
    const float* x = src + i * QK8_1;
    float amax = 0.0f;
    for (int j = 0; j < QK8_1; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = to_fp16(d);
    int sum = 0;
    for (int j = 0; j < QK8_1; ++j) {
      const int8_t q = static_cast<int8_t>(std::roundf(x[j] * id));
      y[i].qs[j] = q;
      sum += q;
    }
    y[i].s = to_fp16(static_cast<float>(sum) * d);
  }
}

}  // namespace kvad::cpu::quants::ref
