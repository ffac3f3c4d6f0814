// The K-quants (Q2_K..Q6_K and their activation format Q8_K), IQ4_NL, MXFP4 and the
// ternary TQ1_0/TQ2_0 on random data: the dispatched (SIMD) kernels against
// the scalar references, the references against plain double-precision
// arithmetic on the dequantized values, and quantize-dequantize error bounds.
// (Byte-exact agreement with ggml and gguf-py is in test_fixtures.cpp.)
//
// Tolerances:
// - to_float and from_float: bit-identical (same roundings in the same order).
// - vec_dot, SIMD vs reference: bit-identical for the K-quants and TQ (same
//   integer block sums, same float arithmetic on them); IQ4_NL as below.
// - vec_dot, reference vs double (and IQ4_NL's SIMD vs reference): the dots
//   form the same exact integer sums per (super-)block and differ from the exact sum
//   of products only by float rounding of the nb block terms, the products of
//   scales and the dequantization roundings of the double reference, so we
//   allow 2*(nb+16)*eps*S (Higham, "Accuracy and Stability of Numerical
//   Algorithms", 4.2), S = sum over elements of (|x| + 2|min|) * |y| where min
//   is the element's sub-block min dmin*m (Q2_K, Q4_K, Q5_K; 0 otherwise).
// - Quantize then dequantize:
//   Q8_K: |x - y| <= |d|/2 (no clipping: |iscale*x| <= 127);
//   TQ1_0/TQ2_0: |x - y| <= amax/2 (+ the f16 rounding of d = amax);
//   K-quants: every element gets a nearest level of its sub-block given the
//     stored scales (ggml requantizes against the rounded scales), and
//     |x - y| <= c * amax(super-block), c measured on these data with margin
//     (the scale search is an optimizer; no closed-form bound holds for
//     sub-blocks whose 4/6-bit scale rounds coarsely);
//   IQ4_NL: |x - y| <= c * amax(block), c likewise measured with margin.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "base/cpu_features.h"
#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/kernels.h"
#include "tensor/dtype.h"
#include "tensor/half.h"

using namespace kvad;
using cpu::CpuKernels;

namespace {

const DType kWeights[] = {DType::Q2_K,  DType::Q3_K,  DType::Q4_K,  DType::Q5_K, DType::Q6_K,
                          DType::IQ4_NL, DType::TQ1_0, DType::TQ2_0, DType::MXFP4};
const DType kFormats[] = {DType::Q2_K,   DType::Q3_K,  DType::Q4_K,  DType::Q5_K, DType::Q6_K,
                          DType::Q8_K, DType::IQ4_NL, DType::TQ1_0, DType::TQ2_0, DType::MXFP4};

// Random floats with a different scale (10^-3 .. 10^1) per 16 elements, as
// real rows have, and edge runs: all zero, constant, one outlier, all
// positive, all negative, tiny (f16-subnormal scales).
std::vector<float> random_floats(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> N(0.0f, 1.0f);
  std::uniform_real_distribution<float> U(-3.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t b = 0; b < n; b += 16) {
    const int kind = static_cast<int>(rng() % 24);
    const float scale = kind == 6 ? 1e-7f : std::pow(10.0f, U(rng));
    for (int64_t j = b; j < std::min(n, b + 16); ++j) {
      float x = N(rng) * scale;
      if (kind == 0) x = 0.0f;
      if (kind == 1) x = 0.25f * scale;
      if (kind == 3) x = std::fabs(x) + scale;
      if (kind == 4) x = -std::fabs(x) - scale;
      v[static_cast<size_t>(j)] = x;
    }
    if (kind == 2) v[static_cast<size_t>(b)] = -30.0f * scale;
  }
  return v;
}

std::vector<float> gaussian(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> N(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = N(rng);
  return v;
}

std::vector<uint8_t> quantize(DType t, const std::vector<float>& x, bool ref) {
  const CpuKernels& k = cpu::cpu_kernels(t);
  std::vector<uint8_t> q(row_bytes(t, static_cast<int64_t>(x.size())));
  (ref ? k.from_float_ref : k.from_float)(x.data(), q.data(), static_cast<int64_t>(x.size()));
  return q;
}

std::vector<float> dequantize(DType t, const std::vector<uint8_t>& q, int64_t n, bool ref) {
  const CpuKernels& k = cpu::cpu_kernels(t);
  std::vector<float> y(static_cast<size_t>(n));
  (ref ? k.to_float_ref : k.to_float)(q.data(), y.data(), n);
  return y;
}

// Byte ranges of a block that hold its float scales (f16 d, dmin).
std::vector<std::pair<size_t, size_t>> scale_fields(DType t) {
  switch (t) {
    case DType::Q2_K: return {{80, 4}};
    case DType::Q3_K: return {{108, 2}};
    case DType::Q4_K: case DType::Q5_K: return {{0, 4}};
    case DType::Q6_K: return {{208, 2}};
    case DType::IQ4_NL: return {{0, 2}};
    case DType::MXFP4: return {{0, 1}};
    case DType::TQ1_0: return {{52, 2}};
    case DType::TQ2_0: return {{64, 2}};
    default: return {};
  }
}

// Random bytes everywhere but the float scales, so that every quant value
// and every packed sub-block scale occurs. Q8_K: random quants in
// [-127, 127] (ggml never makes -128), bsums made to match.
void randomize(DType t, std::vector<uint8_t>& q, std::mt19937& rng) {
  const size_t bb = dtype_info(t).block_bytes;
  if (t == DType::Q8_K) {
    for (size_t b = 0; b < q.size(); b += bb) {
      auto* blk = reinterpret_cast<cpu::block_q8_K*>(&q[b]);
      for (int j = 0; j < cpu::QK_K; ++j) blk->qs[j] = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
      for (int j = 0; j < cpu::QK_K / 16; ++j) {
        int s = 0;
        for (int l = 0; l < 16; ++l) s += blk->qs[16 * j + l];
        blk->bsums[j] = static_cast<int16_t>(s);
      }
    }
    return;
  }
  const auto keep = scale_fields(t);
  for (size_t b = 0; b < q.size(); b += bb) {
    for (size_t j = 0; j < bb; ++j) {
      bool scale = false;
      for (auto [off, len] : keep) scale |= j >= off && j < off + len;
      if (!scale) q[b + j] = static_cast<uint8_t>(rng());
    }
  }
}

std::vector<int64_t> lengths(DType t) {
  const int64_t be = dtype_info(t).block_elems;
  std::vector<int64_t> n;
  for (int64_t nb : be == 256 ? std::vector<int64_t>{1, 3, 7, 8, 16} : std::vector<int64_t>{1, 3, 7, 8, 33, 101})
    n.push_back(nb * be);
  return n;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

// Sub-block geometry of a K-quant element, decoded here independently of the
// kernels (ggml-common.h layouts): value = step * q - min, q in [qmin, qmax].
struct Level {
  double step, min;
  int qmin, qmax;
};

int k4_scale(const uint8_t* s, int j, bool want_min) {
  if (j < 4) return want_min ? s[j + 4] & 63 : s[j] & 63;
  return want_min ? (s[j + 4] >> 4) | ((s[j] >> 6) << 4) : (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
}

Level level_of(DType t, const uint8_t* row, int64_t e) {
  const int64_t b = e / cpu::QK_K;
  const int i = static_cast<int>(e % cpu::QK_K);
  switch (t) {
    case DType::Q2_K: {
      const auto& x = reinterpret_cast<const cpu::block_q2_K*>(row)[b];
      const uint8_t sc = x.scales[i / 16];
      return {static_cast<double>(f16_to_f32(x.d) * static_cast<float>(sc & 15)),
              static_cast<double>(f16_to_f32(x.dmin) * static_cast<float>(sc >> 4)), 0, 3};
    }
    case DType::Q3_K: {
      const auto& x = reinterpret_cast<const cpu::block_q3_K*>(row)[b];
      const int j = i / 16;
      const int lo = j < 8 ? x.scales[j] & 15 : x.scales[j - 8] >> 4;
      const int hi = (x.scales[8 + j % 4] >> (2 * (j / 4))) & 3;
      return {static_cast<double>(f16_to_f32(x.d) * static_cast<float>((lo | hi << 4) - 32)), 0.0, -4, 3};
    }
    case DType::Q4_K: case DType::Q5_K: {
      const uint8_t* s = t == DType::Q4_K ? reinterpret_cast<const cpu::block_q4_K*>(row)[b].scales
                                          : reinterpret_cast<const cpu::block_q5_K*>(row)[b].scales;
      uint16_t d, dmin;
      std::memcpy(&d, row + b * dtype_info(t).block_bytes, 2);
      std::memcpy(&dmin, row + b * dtype_info(t).block_bytes + 2, 2);
      return {static_cast<double>(f16_to_f32(d) * static_cast<float>(k4_scale(s, i / 32, false))),
              static_cast<double>(f16_to_f32(dmin) * static_cast<float>(k4_scale(s, i / 32, true))), 0,
              t == DType::Q4_K ? 15 : 31};
    }
    case DType::Q6_K: {
      const auto& x = reinterpret_cast<const cpu::block_q6_K*>(row)[b];
      return {static_cast<double>(f16_to_f32(x.d) * static_cast<float>(x.scales[i / 16])), 0.0, -32, 31};
    }
    default: return {0.0, 0.0, 0, 0};
  }
}

bool has_levels(DType t) {
  return t == DType::Q2_K || t == DType::Q3_K || t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K;
}

// |min| of the element's sub-block (the dot's min term), 0 for formats without one.
double element_min(DType t, const uint8_t* row, int64_t e) {
  return has_levels(t) ? std::fabs(level_of(t, row, e).min) : 0.0;
}

}  // namespace

TEST(KQuants, ToFloatSimdMatchesReference) {
  std::mt19937 rng(11);
  for (DType t : kFormats) {
    for (int64_t n : lengths(t)) {
      std::vector<uint8_t> q = quantize(t, random_floats(n, rng), true);
      ASSERT_TRUE(same_bits(dequantize(t, q, n, false), dequantize(t, q, n, true))) << dtype_name(t) << " n=" << n;
      randomize(t, q, rng);
      ASSERT_TRUE(same_bits(dequantize(t, q, n, false), dequantize(t, q, n, true)))
          << dtype_name(t) << " n=" << n << " (random quants)";
    }
  }
}

TEST(KQuants, FromFloatSimdMatchesReference) {
  std::mt19937 rng(12);
  for (DType t : kFormats) {
    for (int64_t n : lengths(t)) {
      std::vector<float> x = random_floats(n, rng);
      if (n >= 512) {
        // Q8_K ties: max -127 makes iscale = 1, then k + 0.5 rounds to even;
        // +127 after -127: the first of equal |x| sets the sign.
        for (int j = 0; j < 256; ++j) x[static_cast<size_t>(256 + j)] = static_cast<float>(j % 200) - 99.5f;
        x[256 + 3] = -127.0f;
        x[256 + 100] = 127.0f;
      }
      ASSERT_EQ(quantize(t, x, false), quantize(t, x, true)) << dtype_name(t) << " n=" << n;
    }
  }
}

TEST(KQuants, Q8KQuantizer) {
  std::mt19937 rng(13);
  for (int64_t n : lengths(DType::Q8_K)) {
    std::vector<float> x = random_floats(n, rng);
    for (bool ref : {true, false}) {
      const std::vector<uint8_t> q = quantize(DType::Q8_K, x, ref);
      const auto* b = reinterpret_cast<const cpu::block_q8_K*>(q.data());
      for (int64_t i = 0; i < n / cpu::QK_K; ++i) {
        float amax = 0.0f;
        for (int j = 0; j < cpu::QK_K; ++j) amax = std::max(amax, std::fabs(x[i * cpu::QK_K + j]));
        EXPECT_FLOAT_EQ(std::fabs(b[i].d), amax / 127.0f) << "block " << i;
        for (int j = 0; j < cpu::QK_K / 16; ++j) {
          int s = 0;
          for (int l = 0; l < 16; ++l) {
            const int v = b[i].qs[16 * j + l];
            ASSERT_GE(v, -127);  // the AVX2 dots' sign trick needs it
            s += v;
          }
          ASSERT_EQ(s, b[i].bsums[j]) << "block " << i << " bsum " << j;
        }
        for (int j = 0; j < cpu::QK_K; ++j) {
          const double e = std::fabs(static_cast<double>(x[i * cpu::QK_K + j]) - b[i].d * b[i].qs[j]);
          ASSERT_LE(e, 0.5 * std::fabs(b[i].d) * (1 + 1e-6) + 1e-38) << "block " << i << " j=" << j;
        }
      }
    }
  }
}

TEST(KQuants, QuantizeRoundTripError) {
  // Largest |x - y| / amax allowed: measured over these data (printed below)
  // with margin; see the header comment.
  auto bound = [](DType t) {
    switch (t) {
      case DType::Q2_K: return 0.45;
      case DType::Q3_K: return 0.30;
      case DType::Q4_K: return 0.15;
      case DType::Q5_K: return 0.08;
      case DType::Q6_K: return 0.04;
      case DType::IQ4_NL: return 0.15;
      case DType::MXFP4: return 0.30;
      case DType::TQ1_0: case DType::TQ2_0: return 0.5 * (1 + std::ldexp(1.0, -10));
      default: return 0.0;
    }
  };
  // Relative RMS error on N(0, 1) data: measured, with margin (quality guard).
  auto rms_bound = [](DType t) {
    switch (t) {
      case DType::Q2_K: return 0.35;
      case DType::Q3_K: return 0.18;
      case DType::Q4_K: return 0.10;
      case DType::Q5_K: return 0.05;
      case DType::Q6_K: return 0.025;
      case DType::IQ4_NL: return 0.10;
      case DType::MXFP4: return 0.20;
      default: return 1.0;
    }
  };
  std::mt19937 rng(14);
  for (DType t : kWeights) {
    const int64_t be = dtype_info(t).block_elems;
    const int64_t group = be == 32 ? 32 : 256;
    double worst = 0.0, worst_level = 0.0;
    for (int pass = 0; pass < 2; ++pass) {
      for (int64_t n : lengths(t)) {
        const std::vector<float> x = pass == 0 ? random_floats(n, rng) : gaussian(n, rng);
        const std::vector<uint8_t> q = quantize(t, x, false);
        const std::vector<float> y = dequantize(t, q, n, false);
        for (int64_t b = 0; b < n; b += group) {
          float amax = 0.0f;
          for (int64_t j = b; j < b + group; ++j) amax = std::max(amax, std::fabs(x[j]));
          // f16 scales below 2^-14 are subnormal: absolute rounding 2^-25, times q <= 127.
          const double tol = bound(t) * amax + std::ldexp(1.0, -17);
          for (int64_t j = b; j < b + group; ++j) {
            const double e = std::fabs(static_cast<double>(x[j]) - y[j]);
            ASSERT_LE(e, tol) << dtype_name(t) << " n=" << n << " j=" << j << " x=" << x[j] << " y=" << y[j]
                              << " amax=" << amax;
            if (amax > 1e-3f) worst = std::max(worst, e / amax);  // f16-subnormal scales aside
            if (has_levels(t)) {
              // y is a nearest level of the element's sub-block.
              const Level L = level_of(t, q.data(), j);
              double best = INFINITY;
              for (int v = L.qmin; v <= L.qmax; ++v) best = std::min(best, std::fabs(x[j] - (L.step * v - L.min)));
              const double slack = 1e-6 * (std::fabs(L.step) * 32 + std::fabs(L.min)) + 1e-37;
              ASSERT_LE(e, best + slack) << dtype_name(t) << " n=" << n << " j=" << j << " x=" << x[j]
                                         << " y=" << y[j];
              worst_level = std::max(worst_level, e - best);
            }
          }
        }
      }
    }
    // Relative RMS on Gaussian data, one long row.
    const std::vector<float> g = gaussian(64 * 256, rng);
    const std::vector<float> gy = dequantize(t, quantize(t, g, false), static_cast<int64_t>(g.size()), false);
    double sq = 0.0, ref_sq = 0.0;
    for (size_t j = 0; j < g.size(); ++j) {
      sq += (static_cast<double>(g[j]) - gy[j]) * (static_cast<double>(g[j]) - gy[j]);
      ref_sq += static_cast<double>(g[j]) * g[j];
    }
    const double rms = std::sqrt(sq / ref_sq);
    std::printf("%-6s round trip: max |err|/amax %.3g (bound %.3g), N(0,1) rel rms %.4f%s\n", dtype_name(t), worst,
                bound(t), rms, has_levels(t) ? ", every element at a nearest level" : "");
    if (t != DType::TQ1_0 && t != DType::TQ2_0) {
      EXPECT_LE(rms, rms_bound(t)) << dtype_name(t);
    }
  }
}

TEST(KQuants, VecDot) {
  std::mt19937 rng(15);
  for (DType t : kWeights) {
    const DTypeInfo& info = dtype_info(t);
    const DType ty = info.vec_dot_type;
    const CpuKernels& k = cpu::cpu_kernels(t);
    double worst_simd = 0.0, worst_ref = 0.0;  // in units of eps*S
    for (int64_t n : lengths(t)) {
      for (int rep = 0; rep < 4; ++rep) {
        std::vector<uint8_t> qx = quantize(t, random_floats(n, rng), true);
        if (rep & 1) randomize(t, qx, rng);  // every quant value and sub-block scale reachable
        std::vector<uint8_t> qy = quantize(ty, rep == 2 ? gaussian(n, rng) : random_floats(n, rng), false);
        if (rep == 3 && ty == DType::Q8_K) randomize(ty, qy, rng);  // extreme activations too
        const std::vector<float> fx = dequantize(t, qx, n, true);
        const std::vector<float> fy = dequantize(ty, qy, n, true);
        double exact = 0.0, S = 0.0;
        for (int64_t i = 0; i < n; ++i) {
          exact += static_cast<double>(fx[i]) * fy[i];
          S += (std::fabs(fx[i]) + 2.0 * element_min(t, qx.data(), i)) * std::fabs(fy[i]) * 1.001;
        }
        const double nb = static_cast<double>(n / info.block_elems);
        const double tol = 2.0 * (nb + 16.0) * FLT_EPSILON * S + 1e-35;
        const float r = k.vec_dot_ref(n, qx.data(), qy.data());
        const float s = k.vec_dot(n, qx.data(), qy.data());
        EXPECT_LE(std::fabs(static_cast<double>(s) - r), tol) << dtype_name(t) << " n=" << n << " rep=" << rep;
        if (t != DType::IQ4_NL && t != DType::MXFP4) {
          // The K-quant and TQ SIMD dots do the reference's float arithmetic on
          // the same integer block sums (IQ4_NL's and MXFP4's sum blocks in
          // another order: within the bound above).
          EXPECT_EQ(s, r) << dtype_name(t) << " n=" << n << " rep=" << rep;
        }
        EXPECT_LE(std::fabs(static_cast<double>(r) - exact), tol)
            << dtype_name(t) << " n=" << n << " rep=" << rep << " ref=" << r << " exact=" << exact;
        if (S > 0) {
          worst_simd = std::max(worst_simd, std::fabs(static_cast<double>(s) - r) / (FLT_EPSILON * S));
          worst_ref = std::max(worst_ref, std::fabs(static_cast<double>(r) - exact) / (FLT_EPSILON * S));
        }
      }
    }
    std::printf("%-6s x %-5s vec_dot: |simd-ref| <= %.2f eps*S, |ref-double| <= %.2f eps*S\n", dtype_name(t),
                dtype_name(ty), worst_simd, worst_ref);
  }
}

// Dots of integer data: equal to the double-precision dot of the dequantized
// operands up to float rounding, and for ternary weights (held exactly, d = 1)
// and activations with amax 127 in every block (Q8_K then keeps them exactly,
// d = 1) equal to the exact integer dot.
TEST(KQuants, VecDotKnownValues) {
  for (DType t : kWeights) {
    const DType ty = dtype_info(t).vec_dot_type;
    const CpuKernels& k = cpu::cpu_kernels(t);
    const int64_t n = 768;
    const bool ternary = t == DType::TQ1_0 || t == DType::TQ2_0;
    std::vector<float> x(n), y(n);
    double want = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      x[i] = ternary ? static_cast<float>(i % 3) - 1.0f : static_cast<float>((i % 7) - 3);
      y[i] = static_cast<float>(i % 255) - 127.0f;  // every 256 block holds -127 and 127
      want += static_cast<double>(x[i]) * y[i];
    }
    const std::vector<uint8_t> qx = quantize(t, x, false), qy = quantize(ty, y, false);
    const std::vector<float> fx = dequantize(t, qx, n, true), fy = dequantize(ty, qy, n, true);
    double via = 0.0;
    for (int64_t i = 0; i < n; ++i) via += static_cast<double>(fx[i]) * fy[i];
    double S = 0.0;  // d*sum(sc*q*y) and dmin*sum(m*y) cancel: the error scales with S
    for (int64_t i = 0; i < n; ++i) S += (std::fabs(fx[i]) + 2.0 * element_min(t, qx.data(), i)) * std::fabs(fy[i]);
    EXPECT_NEAR(k.vec_dot(n, qx.data(), qy.data()), via, 64 * FLT_EPSILON * S) << dtype_name(t);
    EXPECT_NEAR(k.vec_dot_ref(n, qx.data(), qy.data()), via, 64 * FLT_EPSILON * S) << dtype_name(t);
    if (ternary) {
      EXPECT_EQ(k.vec_dot(n, qx.data(), qy.data()), static_cast<float>(want)) << dtype_name(t);
      EXPECT_EQ(k.vec_dot_ref(n, qx.data(), qy.data()), static_cast<float>(want)) << dtype_name(t);
    }
  }
}
