// Scalar reference kernels of IQ4_NL and of the ternary TQ1_0/TQ2_0: the
// definition of these formats' arithmetic in kvad (the K-quants are in
// kquants_ref.cpp).
//
// - Quantization reproduces ggml's quantize_row_*_ref (ggml/src/ggml-quants.c)
//   step for step in float32. The output is byte-identical to ggml's
//   (tests/kernels/cpu/test_fixtures.cpp checks it against ggml and, for
//   TQ1_0/TQ2_0, gguf-py's quants.quantize).
// - Dequantization follows dequantize_row_* (and gguf-py's quants.py).
// - Dot products form exact integer sums within a super-block (or 32-block
//   for IQ4_NL), then scale them in float and accumulate, as ggml's
//   ggml_vec_dot_*_generic do.
//
// This file is compiled with -ffp-contract=off (CMakeLists.txt): an FMA would
// change the roundings above and with them the bytes the quantizers write.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/kquants_ref.h"
#include "kernels/cpu/quants.h"

namespace kvad::cpu::quants::ref {

namespace {

// Trit k of a TQ1_0 byte (quant_blocks.h).
inline int trit(uint8_t byte, int k) {
  static constexpr uint8_t pow3[5] = {1, 3, 9, 27, 81};
  const uint8_t q = static_cast<uint8_t>(byte * pow3[k]);
  return (static_cast<uint16_t>(q) * 3) >> 8;
}

// TQ1_0 ternary value t - 1 of element e, in [-1, 1].
inline int get_tq1(const block_tq1_0& b, int e) {
  if (e < 160) return trit(b.qs[e % 32], e / 32) - 1;
  if (e < 240) return trit(b.qs[32 + (e - 160) % 16], (e - 160) / 16) - 1;
  return trit(b.qh[(e - 240) % 4], (e - 240) / 4) - 1;
}

}  // namespace

// ---- iq4_nl: x = d * kvalues_iq4nl[q], blocks of 32 ------------------------

void to_float_iq4_nl(const void* src, float* dst, int64_t n) {
  const block_iq4_nl* x = static_cast<const block_iq4_nl*>(src);
  for (int64_t i = 0; i < n / QK4_NL; ++i) {
    const float d = fp16(x[i].d);
    for (int j = 0; j < QK4_NL / 2; ++j) {
      dst[i * QK4_NL + j] = d * static_cast<float>(kvalues_iq4nl[x[i].qs[j] & 0xF]);
      dst[i * QK4_NL + j + QK4_NL / 2] = d * static_cast<float>(kvalues_iq4nl[x[i].qs[j] >> 4]);
    }
  }
}

namespace {
// Index of the level of kvalues_iq4nl nearest to v, ties to the upper one
// (ggml best_index_int8): a binary search over the midpoints, each compared
// exactly as 2v >= values[j-1] + values[j].
inline int best_index_iq4nl(float v) {
  const float v2 = v + v;
  int idx = 0;
  for (int step = 8; step > 0; step >>= 1) {
    const int j = idx + step;
    if (v2 >= static_cast<float>(kvalues_iq4nl[j - 1] + kvalues_iq4nl[j])) idx = j;
  }
  return idx;
}
}  // namespace

// ggml quantize_row_iq4_nl_ref (quantize_row_iq4_nl_impl with no importance
// weights and ntry = -1): indices for d0 = max / -127 (max: the x of largest
// |x|), then the block scale is the weighted least-squares fit
// sum(w*v*x) / sum(w*v*v), w = x^2, v = kvalues_iq4nl[index]; the indices
// are not recomputed for it.
void from_float_iq4_nl(const float* src, void* dst, int64_t n) {
  block_iq4_nl* y = static_cast<block_iq4_nl*>(dst);
  for (int64_t i = 0; i < n / QK4_NL; ++i) {
    const float* x = src + i * QK4_NL;
    uint8_t L[QK4_NL] = {};
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < QK4_NL; ++j) {
      const float ax = std::fabs(x[j]);
      if (ax > amax) {
        amax = ax;
        max = x[j];
      }
    }
    float d = 0.0f;
    if (amax >= kGroupMaxEps) {
      const float d0 = max / static_cast<float>(kvalues_iq4nl[0]);
      const float id = 1.0f / d0;
      float sumqx = 0.0f, sumq2 = 0.0f;
      for (int j = 0; j < QK4_NL; ++j) {
        const int l = best_index_iq4nl(id * x[j]);
        L[j] = static_cast<uint8_t>(l);
        const float q = static_cast<float>(kvalues_iq4nl[l]);
        const float w = x[j] * x[j];
        sumqx += w * q * x[j];
        sumq2 += w * q * q;
      }
      d = sumq2 > 0.0f ? sumqx / sumq2 : 0.0f;
    }
    y[i].d = to_fp16(d);
    for (int j = 0; j < QK4_NL / 2; ++j) y[i].qs[j] = static_cast<uint8_t>(L[j] | (L[j + 16] << 4));
  }
}

float vec_dot_iq4_nl_q8_0(int64_t n, const void* vx, const void* vy) {
  const block_iq4_nl* x = static_cast<const block_iq4_nl*>(vx);
  const block_q8_0* y = static_cast<const block_q8_0*>(vy);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / QK4_NL; ++i) {
    int sumi = 0;
    for (int j = 0; j < QK4_NL / 2; ++j) {
      sumi += kvalues_iq4nl[x[i].qs[j] & 0xF] * y[i].qs[j];
      sumi += kvalues_iq4nl[x[i].qs[j] >> 4] * y[i].qs[j + QK4_NL / 2];
    }
    sumf += (fp16(y[i].d) * fp16(x[i].d)) * static_cast<float>(sumi);
  }
  return sumf;
}

// ---- tq1_0: x = d * t, t in {-1, 0, 1}, five trits per byte ----------------

void to_float_tq1_0(const void* src, float* dst, int64_t n) {
  const block_tq1_0* x = static_cast<const block_tq1_0*>(src);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = fp16(x[i].d);
    for (int e = 0; e < QK_K; ++e) dst[i * QK_K + e] = static_cast<float>(get_tq1(x[i], e)) * d;
  }
}

namespace {
// Ternary quantization of a block as ggml's quantize_row_tq*_ref: d = amax,
// t = lroundf(x / d) + 1 in {0, 1, 2}.
void ternary(const float* x, uint8_t* t, uint16_t* d_out) {
  float amax = 0.0f;
  for (int j = 0; j < QK_K; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float id = amax != 0.0f ? 1.0f / amax : 0.0f;
  *d_out = to_fp16(amax);
  for (int j = 0; j < QK_K; ++j) t[j] = static_cast<uint8_t>(std::lround(x[j] * id) + 1);
}

// Packs up to five trits (first most significant, `count` of them, padded
// with zero trits to five) as ceil(v * 256 / 243).
inline uint8_t pack_trits(const uint8_t* t, int stride, int count) {
  int v = 0;
  for (int k = 0; k < 5; ++k) v = v * 3 + (k < count ? t[k * stride] : 0);
  return static_cast<uint8_t>((v * 256 + 242) / 243);
}
}  // namespace

void from_float_tq1_0(const float* src, void* dst, int64_t n) {
  block_tq1_0* y = static_cast<block_tq1_0*>(dst);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    uint8_t t[QK_K];
    ternary(src + i * QK_K, t, &y[i].d);
    for (int m = 0; m < 32; ++m) y[i].qs[m] = pack_trits(t + m, 32, 5);
    for (int m = 0; m < 16; ++m) y[i].qs[32 + m] = pack_trits(t + 160 + m, 16, 5);
    for (int m = 0; m < 4; ++m) y[i].qh[m] = pack_trits(t + 240 + m, 4, 4);
  }
}

float vec_dot_tq1_0_q8_K(int64_t n, const void* vx, const void* vy) {
  const block_tq1_0* x = static_cast<const block_tq1_0*>(vx);
  const block_q8_K* y = static_cast<const block_q8_K*>(vy);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    int sumi = 0;
    for (int e = 0; e < QK_K; ++e) sumi += get_tq1(x[i], e) * y[i].qs[e];
    sumf += static_cast<float>(sumi) * (y[i].d * fp16(x[i].d));
  }
  return sumf;
}

// ---- tq2_0: x = d * (t - 1), t in {0, 1, 2}, four per byte -----------------

void to_float_tq2_0(const void* src, float* dst, int64_t n) {
  const block_tq2_0* x = static_cast<const block_tq2_0*>(src);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = fp16(x[i].d);
    for (int e = 0; e < QK_K; ++e) dst[i * QK_K + e] = static_cast<float>(get_2bit(x[i].qs, e) - 1) * d;
  }
}

void from_float_tq2_0(const float* src, void* dst, int64_t n) {
  block_tq2_0* y = static_cast<block_tq2_0*>(dst);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    uint8_t t[QK_K];
    ternary(src + i * QK_K, t, &y[i].d);
    pack_2bit(t, y[i].qs);
  }
}

float vec_dot_tq2_0_q8_K(int64_t n, const void* vx, const void* vy) {
  const block_tq2_0* x = static_cast<const block_tq2_0*>(vx);
  const block_q8_K* y = static_cast<const block_q8_K*>(vy);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    int sumi = 0;
    for (int e = 0; e < QK_K; ++e) sumi += (get_2bit(x[i].qs, e) - 1) * y[i].qs[e];
    sumf += static_cast<float>(sumi) * (y[i].d * fp16(x[i].d));
  }
  return sumf;
}

}  // namespace kvad::cpu::quants::ref
