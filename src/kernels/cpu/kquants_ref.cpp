// Scalar reference kernels of the K-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and
// their activation format Q8_K): the definition of these formats' arithmetic
// in kvad. IQ4_NL and the ternary TQ1_0/TQ2_0 are in iq_tq_ref.cpp, MXFP4 in
// mxfp4_ref.cpp.
//
// - Quantization reproduces ggml's quantize_row_*_ref (ggml/src/ggml-quants.c)
//   step for step in float32: the same trial scales, the same sums in the same
//   order, ggml's nearest_int (round half to even by the 1.5*2^23 trick). The
//   output is byte-identical to ggml's (tests/kernels/cpu/test_fixtures.cpp
//   checks it against ggml).
// - Dequantization follows dequantize_row_* (and gguf-py's quants.py): the
//   sub-block scale d*sc (and min dmin*m) in float32, then scale*q [- min],
//   each a separate rounding.
// - Dot products form exact integer sums within a super-block, then scale
//   them in float and accumulate, as ggml's ggml_vec_dot_*_generic do. The
//   K-quant dots take the min (Q2_K, Q4_K, Q5_K) or offset terms from Q8_K's
//   bsums.
//
// This file is compiled with -ffp-contract=off (CMakeLists.txt): an FMA would
// change the roundings above and with them the bytes the quantizers write.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/kquants_ref.h"
#include "kernels/cpu/quants.h"

namespace kvad::cpu::quants::ref {

namespace {

// ggml's nearest_int: adds 1.5 * 2^23 so that the float addition rounds
// (half to even) and reads the integer from the mantissa. Exact for
// |v| <= 2^22; beyond that it returns what ggml returns (quantizers clamp
// the result), which keeps the bytes identical for any input.
inline int nearest_int(float v) {
  const float t = v + 12582912.0f;
  int32_t i;
  std::memcpy(&i, &t, sizeof i);
  return (i & 0x007fffff) - 0x00400000;
}

inline int clamp(int v, int lo, int hi) { return std::max(lo, std::min(hi, v)); }

// ggml make_qx_quants(n, nmax, x, L, rmse_type = 1, qw = NULL). Symmetric
// quants l in [-nmax, nmax) stored as L = l + nmax, weight w = x^2: tries the
// inverse scales -(nmax + 0.1*is)/max, is = -9..9 (max: the x of largest |x|),
// and keeps the least-squares scale sum(w*x*l)/sum(w*l*l) of the set of l
// with the largest sum(w*x*l)^2/sum(w*l*l). Returns the scale.
float make_qx_quants(int n, int nmax, const float* x, int8_t* L) {
  float max = 0.0f, amax = 0.0f;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.0f;
  }
  float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0.0f, suml2 = 0.0f;
  for (int i = 0; i < n; ++i) {
    const int l = clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
    L[i] = static_cast<int8_t>(l + nmax);
    const float w = x[i] * x[i];
    const float fl = static_cast<float>(l);
    sumlx += w * x[i] * fl;
    suml2 += w * fl * fl;
  }
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / max;
    sumlx = suml2 = 0.0f;
    for (int i = 0; i < n; ++i) {
      const int l = clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
      const float w = x[i] * x[i];
      const float fl = static_cast<float>(l);
      sumlx += w * x[i] * fl;
      suml2 += w * fl * fl;
    }
    if (suml2 > 0.0f && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) {
        L[i] = static_cast<int8_t>(nmax + clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1));
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// ggml make_q3_quants(n, nmax, x, L, do_rmse = true): starts from
// l = round(-nmax * x / max), then up to 5 sweeps of coordinate descent, each
// l moved to round(x * sum(w*l*l) / sum(w*x*l)) (the sums without l's own
// term) when that raises sum(w*x*l)^2 / sum(w*l*l); w = x^2. L = l + nmax.
float make_q3_quants(int n, int nmax, const float* x, int8_t* L) {
  float max = 0.0f, amax = 0.0f;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.0f;
  }
  const float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0.0f, suml2 = 0.0f;
  for (int i = 0; i < n; ++i) {
    const int l = clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
    L[i] = static_cast<int8_t>(l);
    const float w = x[i] * x[i];
    const float fl = static_cast<float>(l);
    sumlx += w * x[i] * fl;
    suml2 += w * fl * fl;
  }
  for (int itry = 0; itry < 5; ++itry) {
    int n_changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      const float li = static_cast<float>(L[i]);
      float slx = sumlx - w * x[i] * li;
      if (slx > 0.0f) {
        float sl2 = suml2 - w * li * li;
        const int new_l = clamp(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
        if (new_l != L[i]) {
          const float fl = static_cast<float>(new_l);
          slx += w * x[i] * fl;
          sl2 += w * fl * fl;
          if (sl2 > 0.0f && slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = static_cast<int8_t>(new_l);
            sumlx = slx;
            suml2 = sl2;
            ++n_changed;
          }
        }
      }
    }
    if (!n_changed) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(L[i] + nmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// ggml make_qkx2_quants: asymmetric quants x ~ scale * L + min, L in
// [0, nmax], min <= 0. Starts from the range [min(x, 0), max(x)], then tries
// the inverse scales (rmin + rdelta*is + nmax) / (max - min), is = 0..nstep,
// each with the weighted least-squares (scale, min) for its L, and keeps the
// one of least weighted error (|diff| if use_mad, diff^2 otherwise).
// Returns the scale; *the_min = -min >= 0.
float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* the_min,
                       uint8_t* Laux, float rmin, float rdelta, int nstep, bool use_mad) {
  float min = x[0], max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0.0f) min = 0.0f;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *the_min = -min;
    return 0.0f;
  }
  float iscale = static_cast<float>(nmax) / (max - min);
  float scale = 1.0f / iscale;
  float best_error = 0.0f;
  for (int i = 0; i < n; ++i) {
    const int l = nearest_int(iscale * (x[i] - min));
    L[i] = static_cast<uint8_t>(clamp(l, 0, nmax));
    float diff = scale * static_cast<float>(L[i]) + min - x[i];
    diff = use_mad ? std::fabs(diff) : diff * diff;
    best_error += weights[i] * diff;
  }
  if (nstep < 1) {
    *the_min = -min;
    return scale;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * static_cast<float>(is) + static_cast<float>(nmax)) / (max - min);
    float sum_l = 0.0f, sum_l2 = 0.0f, sum_xl = 0.0f;
    for (int i = 0; i < n; ++i) {
      const int l = clamp(nearest_int(iscale * (x[i] - min)), 0, nmax);
      Laux[i] = static_cast<uint8_t>(l);
      const float w = weights[i];
      const float fl = static_cast<float>(l);
      sum_l += w * fl;
      sum_l2 += w * fl * fl;
      sum_xl += w * fl * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0.0f) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0.0f) {
        this_min = 0.0f;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0.0f;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * static_cast<float>(Laux[i]) + this_min - x[i];
        diff = use_mad ? std::fabs(diff) : diff * diff;
        cur_error += weights[i] * diff;
      }
      if (cur_error < best_error) {
        for (int i = 0; i < n; ++i) L[i] = Laux[i];
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

// 6-bit scale and min of sub-block j of a Q4_K/Q5_K super-block (quant_blocks.h).
inline void scale_min_k4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// Packs the 6-bit (scale, min) of sub-block j into a Q4_K/Q5_K scales[12]
// (which must start zeroed for j >= 4's OR).
inline void pack_scale_min_k4(int j, uint8_t ls, uint8_t lm, uint8_t* q) {
  if (j < 4) {
    q[j] = ls;
    q[j + 4] = lm;
  } else {
    q[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
    q[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
    q[j] |= static_cast<uint8_t>((lm >> 4) << 6);
  }
}

// 6-bit scale of sub-block j of a Q3_K super-block, minus 32: [-32, 31].
inline int scale_q3_K(int j, const uint8_t* s) {
  const int lo = j < 8 ? s[j] & 0xF : s[j - 8] >> 4;
  const int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
  return (lo | (hi << 4)) - 32;
}

// Q4_K/Q5_K low 4 bits of element e.
inline int get_4bit(const uint8_t* qs, int e) {
  const uint8_t b = qs[32 * (e / 64) + e % 32];
  return (e / 32) % 2 ? b >> 4 : b & 0xF;
}

// Q6_K 6-bit quant of element e, in [0, 63].
inline int get_q6(const block_q6_K& b, int e) {
  const int h = e / 128, s = (e / 32) % 4, l = e % 32;
  const uint8_t lo = b.ql[64 * h + 32 * (s & 1) + l];
  const int low = (s >> 1) ? lo >> 4 : lo & 0xF;
  return low | (((b.qh[32 * h + l] >> (2 * s)) & 3) << 4);
}

// Q3_K signed 3-bit quant of element e, in [-4, 3].
inline int get_q3(const block_q3_K& b, int e) {
  const int hbit = (b.hmask[e % 32] >> (e / 32)) & 1;
  return get_2bit(b.qs, e) - (hbit ? 0 : 4);
}

// Q5_K 5-bit quant of element e, in [0, 31].
inline int get_q5(const block_q5_K& b, int e) { return get_4bit(b.qs, e) | (((b.qh[e % 32] >> (e / 32)) & 1) << 4); }

}  // namespace

// ---- q2_K: x = d * sc * q - dmin * m, 16 sub-blocks of 16 ------------------

void to_float_q2_K(const void* src, float* dst, int64_t n) {
  const block_q2_K* x = static_cast<const block_q2_K*>(src);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = fp16(x[i].d), dmin = fp16(x[i].dmin);
    float* y = dst + i * QK_K;
    for (int j = 0; j < QK_K / 16; ++j) {
      const uint8_t sc = x[i].scales[j];
      const float dl = d * static_cast<float>(sc & 0xF);
      const float ml = dmin * static_cast<float>(sc >> 4);
      for (int e = 16 * j; e < 16 * j + 16; ++e) y[e] = dl * static_cast<float>(get_2bit(x[i].qs, e)) - ml;
    }
  }
}

void from_float_q2_K(const float* src, void* dst, int64_t n) {
  block_q2_K* y = static_cast<block_q2_K*>(dst);
  constexpr float q4scale = 15.0f;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float* x = src + i * QK_K;
    uint8_t L[QK_K], Laux[16];
    float weights[16], mins[QK_K / 16], scales[QK_K / 16];
    float max_scale = 0.0f, max_min = 0.0f;  // scales and mins are >= 0
    for (int j = 0; j < QK_K / 16; ++j) {
      for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
      scales[j] = make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, true);
      if (scales[j] > max_scale) max_scale = scales[j];
      if (mins[j] > max_min) max_min = mins[j];
    }
    if (max_scale > 0.0f) {
      const float iscale = q4scale / max_scale;
      for (int j = 0; j < QK_K / 16; ++j) y[i].scales[j] = static_cast<uint8_t>(nearest_int(iscale * scales[j]));
      y[i].d = to_fp16(max_scale / q4scale);
    } else {
      for (int j = 0; j < QK_K / 16; ++j) y[i].scales[j] = 0;
      y[i].d = to_fp16(0.0f);
    }
    if (max_min > 0.0f) {
      const float iscale = q4scale / max_min;
      for (int j = 0; j < QK_K / 16; ++j) {
        y[i].scales[j] = static_cast<uint8_t>(y[i].scales[j] | (nearest_int(iscale * mins[j]) << 4));
      }
      y[i].dmin = to_fp16(max_min / q4scale);
    } else {
      y[i].dmin = to_fp16(0.0f);
    }
    // Requantize against the rounded scales (sub-blocks with d = 0 keep L).
    for (int j = 0; j < QK_K / 16; ++j) {
      const float d = fp16(y[i].d) * static_cast<float>(y[i].scales[j] & 0xF);
      if (d == 0.0f) continue;
      const float dm = fp16(y[i].dmin) * static_cast<float>(y[i].scales[j] >> 4);
      for (int l = 0; l < 16; ++l) {
        L[16 * j + l] = static_cast<uint8_t>(clamp(nearest_int((x[16 * j + l] + dm) / d), 0, 3));
      }
    }
    pack_2bit(L, y[i].qs);
  }
}

float vec_dot_q2_K_q8_K(int64_t n, const void* vx, const void* vy) {
  const block_q2_K* x = static_cast<const block_q2_K*>(vx);
  const block_q8_K* y = static_cast<const block_q8_K*>(vy);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    int isum = 0, summs = 0;
    for (int j = 0; j < QK_K / 16; ++j) {
      int s = 0;
      for (int e = 16 * j; e < 16 * j + 16; ++e) s += get_2bit(x[i].qs, e) * y[i].qs[e];
      isum += (x[i].scales[j] & 0xF) * s;
      summs += (x[i].scales[j] >> 4) * y[i].bsums[j];
    }
    const float dall = y[i].d * fp16(x[i].d);
    const float dmin = y[i].d * fp16(x[i].dmin);
    sumf += dall * static_cast<float>(isum) - dmin * static_cast<float>(summs);
  }
  return sumf;
}

// ---- q3_K: x = d * (sc - 32) * q, q in [-4, 3], 16 sub-blocks of 16 --------

void to_float_q3_K(const void* src, float* dst, int64_t n) {
  const block_q3_K* x = static_cast<const block_q3_K*>(src);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d_all = fp16(x[i].d);
    float* y = dst + i * QK_K;
    for (int j = 0; j < QK_K / 16; ++j) {
      const float dl = d_all * static_cast<float>(scale_q3_K(j, x[i].scales));
      for (int e = 16 * j; e < 16 * j + 16; ++e) y[e] = dl * static_cast<float>(get_q3(x[i], e));
    }
  }
}

void from_float_q3_K(const float* src, void* dst, int64_t n) {
  block_q3_K* y = static_cast<block_q3_K*>(dst);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float* x = src + i * QK_K;
    int8_t L[QK_K];
    float scales[QK_K / 16];
    float max_scale = 0.0f, amax = 0.0f;
    for (int j = 0; j < QK_K / 16; ++j) {
      scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
      const float scale = std::fabs(scales[j]);
      if (scale > amax) {
        amax = scale;
        max_scale = scales[j];
      }
    }
    std::memset(y[i].scales, 0, sizeof y[i].scales);
    if (max_scale != 0.0f) {
      const float iscale = -32.0f / max_scale;
      for (int j = 0; j < QK_K / 16; ++j) {
        // ggml stores nearest_int into an int8_t first; the value is within [-32, 32].
        int l = static_cast<int8_t>(nearest_int(iscale * scales[j]));
        l = clamp(l, -32, 31) + 32;
        if (j < 8) {
          y[i].scales[j] = static_cast<uint8_t>(l & 0xF);
        } else {
          y[i].scales[j - 8] = static_cast<uint8_t>(y[i].scales[j - 8] | ((l & 0xF) << 4));
        }
        l >>= 4;
        y[i].scales[j % 4 + 8] = static_cast<uint8_t>(y[i].scales[j % 4 + 8] | (l << (2 * (j / 4))));
      }
      y[i].d = to_fp16(1.0f / iscale);
    } else {
      y[i].d = to_fp16(0.0f);
    }
    for (int j = 0; j < QK_K / 16; ++j) {
      const float d = fp16(y[i].d) * static_cast<float>(scale_q3_K(j, y[i].scales));
      if (d == 0.0f) continue;
      for (int l = 0; l < 16; ++l) {
        L[16 * j + l] = static_cast<int8_t>(clamp(nearest_int(x[16 * j + l] / d), -4, 3) + 4);
      }
    }
    // High bit of element e: bit e/32 of hmask[e%32]; the low 2 bits as Q2_K.
    std::memset(y[i].hmask, 0, sizeof y[i].hmask);
    uint8_t low[QK_K];
    for (int e = 0; e < QK_K; ++e) {
      int l = L[e];
      if (l > 3) {
        y[i].hmask[e % 32] = static_cast<uint8_t>(y[i].hmask[e % 32] | (1 << (e / 32)));
        l -= 4;
      }
      low[e] = static_cast<uint8_t>(l);
    }
    pack_2bit(low, y[i].qs);
  }
}

float vec_dot_q3_K_q8_K(int64_t n, const void* vx, const void* vy) {
  const block_q3_K* x = static_cast<const block_q3_K*>(vx);
  const block_q8_K* y = static_cast<const block_q8_K*>(vy);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    int isum = 0;
    for (int j = 0; j < QK_K / 16; ++j) {
      int s = 0;
      for (int e = 16 * j; e < 16 * j + 16; ++e) s += get_q3(x[i], e) * y[i].qs[e];
      isum += scale_q3_K(j, x[i].scales) * s;
    }
    sumf += (fp16(x[i].d) * y[i].d) * static_cast<float>(isum);
  }
  return sumf;
}

// ---- q4_K: x = d * sc * q - dmin * m, 8 sub-blocks of 32 -------------------

void to_float_q4_K(const void* src, float* dst, int64_t n) {
  const block_q4_K* x = static_cast<const block_q4_K*>(src);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = fp16(x[i].d), dmin = fp16(x[i].dmin);
    float* y = dst + i * QK_K;
    for (int j = 0; j < QK_K / 32; ++j) {
      uint8_t sc, m;
      scale_min_k4(j, x[i].scales, &sc, &m);
      const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
      for (int e = 32 * j; e < 32 * j + 32; ++e) y[e] = d1 * static_cast<float>(get_4bit(x[i].qs, e)) - m1;
    }
  }
}

namespace {

// The shared Q4_K/Q5_K quantizer (ggml quantize_row_q4_K_ref and _q5_K_ref):
// per sub-block of 32 a (scale, min) fit by make_qkx2_quants with weights
// rms(x) + |x|, 6-bit sub-block scales and mins relative to the largest,
// then every element requantized against the rounded scales. Writes d, dmin,
// scales[12] and L[256] in [0, nmax].
void quantize_k4(const float* x, int nmax, float rmin, float rdelta, int nstep, uint16_t* d_out,
                 uint16_t* dmin_out, uint8_t* scales_out, uint8_t* L) {
  uint8_t Laux[32];
  float weights[32], mins[QK_K / 32], scales[QK_K / 32];
  float max_scale = 0.0f, max_min = 0.0f;
  for (int j = 0; j < QK_K / 32; ++j) {
    float sum_x2 = 0.0f;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = std::sqrt(sum_x2 / 32.0f);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
    scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin, rdelta, nstep, false);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0.0f ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0.0f ? 63.0f / max_min : 0.0f;
  for (int j = 0; j < QK_K / 32; ++j) {
    // ggml stores nearest_int into a uint8_t, then clamps to 63.
    uint8_t ls = static_cast<uint8_t>(nearest_int(inv_scale * scales[j]));
    uint8_t lm = static_cast<uint8_t>(nearest_int(inv_min * mins[j]));
    ls = std::min<uint8_t>(63, ls);
    lm = std::min<uint8_t>(63, lm);
    pack_scale_min_k4(j, ls, lm, scales_out);
  }
  *d_out = to_fp16(max_scale / 63.0f);
  *dmin_out = to_fp16(max_min / 63.0f);
  for (int j = 0; j < QK_K / 32; ++j) {
    uint8_t sc, m;
    scale_min_k4(j, scales_out, &sc, &m);
    const float d = fp16(*d_out) * static_cast<float>(sc);
    if (d == 0.0f) continue;  // keeps make_qkx2_quants' L, as ggml does
    const float dm = fp16(*dmin_out) * static_cast<float>(m);
    for (int l = 0; l < 32; ++l) {
      L[32 * j + l] = static_cast<uint8_t>(clamp(nearest_int((x[32 * j + l] + dm) / d), 0, nmax));
    }
  }
}

}  // namespace

void from_float_q4_K(const float* src, void* dst, int64_t n) {
  block_q4_K* y = static_cast<block_q4_K*>(dst);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    uint8_t L[QK_K];
    std::memset(y[i].scales, 0, sizeof y[i].scales);
    quantize_k4(src + i * QK_K, 15, -1.0f, 0.1f, 20, &y[i].d, &y[i].dmin, y[i].scales, L);
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        y[i].qs[32 * c + l] = static_cast<uint8_t>(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
      }
    }
  }
}

float vec_dot_q4_K_q8_K(int64_t n, const void* vx, const void* vy) {
  const block_q4_K* x = static_cast<const block_q4_K*>(vx);
  const block_q8_K* y = static_cast<const block_q8_K*>(vy);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    int sumi = 0, summ = 0;
    for (int j = 0; j < QK_K / 32; ++j) {
      uint8_t sc, m;
      scale_min_k4(j, x[i].scales, &sc, &m);
      int s = 0;
      for (int e = 32 * j; e < 32 * j + 32; ++e) s += get_4bit(x[i].qs, e) * y[i].qs[e];
      sumi += sc * s;
      summ += m * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
    }
    const float d = fp16(x[i].d) * y[i].d;
    const float dmin = fp16(x[i].dmin) * y[i].d;
    sumf += d * static_cast<float>(sumi) - dmin * static_cast<float>(summ);
  }
  return sumf;
}

// ---- q5_K: as q4_K with a fifth bit in qh ----------------------------------

void to_float_q5_K(const void* src, float* dst, int64_t n) {
  const block_q5_K* x = static_cast<const block_q5_K*>(src);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = fp16(x[i].d), dmin = fp16(x[i].dmin);
    float* y = dst + i * QK_K;
    for (int j = 0; j < QK_K / 32; ++j) {
      uint8_t sc, m;
      scale_min_k4(j, x[i].scales, &sc, &m);
      const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
      for (int e = 32 * j; e < 32 * j + 32; ++e) y[e] = d1 * static_cast<float>(get_q5(x[i], e)) - m1;
    }
  }
}

void from_float_q5_K(const float* src, void* dst, int64_t n) {
  block_q5_K* y = static_cast<block_q5_K*>(dst);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    uint8_t L[QK_K];
    std::memset(y[i].scales, 0, sizeof y[i].scales);
    quantize_k4(src + i * QK_K, 31, -0.5f, 0.1f, 15, &y[i].d, &y[i].dmin, y[i].scales, L);
    std::memset(y[i].qh, 0, sizeof y[i].qh);
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        int l1 = L[64 * c + l], l2 = L[64 * c + 32 + l];
        if (l1 > 15) {
          l1 -= 16;
          y[i].qh[l] = static_cast<uint8_t>(y[i].qh[l] | (1 << (2 * c)));
        }
        if (l2 > 15) {
          l2 -= 16;
          y[i].qh[l] = static_cast<uint8_t>(y[i].qh[l] | (2 << (2 * c)));
        }
        y[i].qs[32 * c + l] = static_cast<uint8_t>(l1 | (l2 << 4));
      }
    }
  }
}

float vec_dot_q5_K_q8_K(int64_t n, const void* vx, const void* vy) {
  const block_q5_K* x = static_cast<const block_q5_K*>(vx);
  const block_q8_K* y = static_cast<const block_q8_K*>(vy);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    int sumi = 0, summ = 0;
    for (int j = 0; j < QK_K / 32; ++j) {
      uint8_t sc, m;
      scale_min_k4(j, x[i].scales, &sc, &m);
      int s = 0;
      for (int e = 32 * j; e < 32 * j + 32; ++e) s += get_q5(x[i], e) * y[i].qs[e];
      sumi += sc * s;
      summ += m * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
    }
    const float d = fp16(x[i].d) * y[i].d;
    const float dmin = fp16(x[i].dmin) * y[i].d;
    sumf += d * static_cast<float>(sumi) - dmin * static_cast<float>(summ);
  }
  return sumf;
}

// ---- q6_K: x = d * sc * (q - 32), 16 sub-blocks of 16 ----------------------

void to_float_q6_K(const void* src, float* dst, int64_t n) {
  const block_q6_K* x = static_cast<const block_q6_K*>(src);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = fp16(x[i].d);
    float* y = dst + i * QK_K;
    for (int j = 0; j < QK_K / 16; ++j) {
      const float ds = d * static_cast<float>(x[i].scales[j]);
      for (int e = 16 * j; e < 16 * j + 16; ++e) y[e] = ds * static_cast<float>(get_q6(x[i], e) - 32);
    }
  }
}

void from_float_q6_K(const float* src, void* dst, int64_t n) {
  block_q6_K* y = static_cast<block_q6_K*>(dst);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float* x = src + i * QK_K;
    int8_t L[QK_K];
    float scales[QK_K / 16];
    float max_scale = 0.0f, max_abs_scale = 0.0f;
    for (int j = 0; j < QK_K / 16; ++j) {
      scales[j] = make_qx_quants(16, 32, x + 16 * j, L + 16 * j);
      const float abs_scale = std::fabs(scales[j]);
      if (abs_scale > max_abs_scale) {
        max_abs_scale = abs_scale;
        max_scale = scales[j];
      }
    }
    if (max_abs_scale < kGroupMaxEps) {
      std::memset(&y[i], 0, sizeof y[i]);
      continue;
    }
    const float iscale = -128.0f / max_scale;
    y[i].d = to_fp16(1.0f / iscale);
    for (int j = 0; j < QK_K / 16; ++j) {
      y[i].scales[j] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[j])));
    }
    for (int j = 0; j < QK_K / 16; ++j) {
      const float d = fp16(y[i].d) * static_cast<float>(y[i].scales[j]);
      if (d == 0.0f) continue;
      for (int l = 0; l < 16; ++l) {
        L[16 * j + l] = static_cast<int8_t>(clamp(nearest_int(x[16 * j + l] / d), -32, 31) + 32);
      }
    }
    for (int h = 0; h < 2; ++h) {
      const int8_t* Lh = L + 128 * h;
      for (int l = 0; l < 32; ++l) {
        const int q1 = Lh[l], q2 = Lh[l + 32], q3 = Lh[l + 64], q4 = Lh[l + 96];
        y[i].ql[64 * h + l] = static_cast<uint8_t>((q1 & 0xF) | ((q3 & 0xF) << 4));
        y[i].ql[64 * h + 32 + l] = static_cast<uint8_t>((q2 & 0xF) | ((q4 & 0xF) << 4));
        y[i].qh[32 * h + l] = static_cast<uint8_t>((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
      }
    }
  }
}

float vec_dot_q6_K_q8_K(int64_t n, const void* vx, const void* vy) {
  const block_q6_K* x = static_cast<const block_q6_K*>(vx);
  const block_q8_K* y = static_cast<const block_q8_K*>(vy);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    int isum = 0;
    for (int j = 0; j < QK_K / 16; ++j) {
      int s = 0;
      for (int e = 16 * j; e < 16 * j + 16; ++e) s += (get_q6(x[i], e) - 32) * y[i].qs[e];
      isum += x[i].scales[j] * s;
    }
    sumf += (fp16(x[i].d) * y[i].d) * static_cast<float>(isum);
  }
  return sumf;
}

// ---- q8_K: x = d * q (f32 d), bsums ----------------------------------------

void to_float_q8_K(const void* src, float* dst, int64_t n) {
  const block_q8_K* x = static_cast<const block_q8_K*>(src);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    for (int j = 0; j < QK_K; ++j) dst[i * QK_K + j] = x[i].d * static_cast<float>(x[i].qs[j]);
  }
}

// ggml quantize_row_q8_K_ref: iscale = -127 / max (max: the x of largest |x|,
// the first of equals), q = min(127, nearest_int(iscale * x)), d = 1 / iscale.
// An all-zero block gets d = 0 and zero quants and bsums (ggml leaves bsums
// unwritten there; kvad writes zeros).
void from_float_q8_K(const float* src, void* dst, int64_t n) {
  block_q8_K* y = static_cast<block_q8_K*>(dst);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float* x = src + i * QK_K;
    float max = 0.0f, amax = 0.0f;
    for (int j = 0; j < QK_K; ++j) {
      const float ax = std::fabs(x[j]);
      if (ax > amax) {
        amax = ax;
        max = x[j];
      }
    }
    if (amax == 0.0f) {
      std::memset(&y[i], 0, sizeof y[i]);
      continue;
    }
    const float iscale = -127.0f / max;
    for (int j = 0; j < QK_K; ++j) y[i].qs[j] = static_cast<int8_t>(std::min(127, nearest_int(iscale * x[j])));
    for (int j = 0; j < QK_K / 16; ++j) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += y[i].qs[16 * j + l];
      y[i].bsums[j] = static_cast<int16_t>(sum);
    }
    y[i].d = 1.0f / iscale;
  }
}

}  // namespace kvad::cpu::quants::ref
