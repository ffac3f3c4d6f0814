// Every format's kernels (kernels/cpu/kernels.h) on random data: the
// dispatched (SIMD) kernels against the scalar references, and the references
// against plain double-precision arithmetic on the dequantized values.
// Also the rows of the CPU kernels table: which formats have kernels, and
// that dispatch picks the SIMD kernels exactly when the CPU has AVX2+FMA.
//
// Tolerances:
// - to_float and from_float: bit-identical (SIMD does the same roundings in
//   the same order as the reference).
// - vec_dot, SIMD vs reference: both form the same exact integer block sums;
//   they differ only in how the float terms are scaled and added. For a sum
//   of nb terms recursive float summation errs by at most (nb+2)*eps*S (Higham,
//   "Accuracy and Stability of Numerical Algorithms", 4.2), S = sum of |terms|,
//   so we allow 2*(nb+4)*eps*S. For f32/f16/bf16 (n products, the reference in
//   double) we allow (n/8+16)*eps*S.
// - vec_dot, reference vs double: the same bound, plus for q4_1/q5_1 the f16
//   rounding of the activation's s = d*sum(q) (at most 2^-11 relative), which
//   the min term m*s inherits (as in ggml): s is rounded to f16 and made from
//   the unrounded d, so |s - d16*sum(q)| <= 2^-10*|d16*sum(q)| + 2^-24*(1+|sum(q)|).
// - quantize then dequantize: per element at most c*|d| + 2^-9*amax(block),
//   c = 1 for q4_0/q5_0 (ggml clips the q = 16 / 32 end, an error of one step),
//   1/2 for the others; the 2^-9*amax covers the f16 rounding of d and m,
//   and 2^-18 = 128 * 2^-25 the rounding of subnormal f16 scales (tiny blocks).
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/cpu_features.h"
#include "base/error.h"
#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/kernels.h"
#include "tensor/dtype.h"
#include "tensor/half.h"

using namespace kvad;
using cpu::CpuKernels;

namespace {

const DType kWeights[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q4_0,
                          DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0};
const DType kAllFormats[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q4_0, DType::Q4_1,
                             DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::Q8_1};

// Random floats, a different scale per 32-element run (as real rows have),
// with a few edge runs: all zero, constant, a single outlier.
std::vector<float> random_floats(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> N(0.0f, 1.0f);
  std::uniform_real_distribution<float> U(-4.0f, 2.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t b = 0; b < n; b += 32) {
    const int kind = static_cast<int>(rng() % 16);
    const float scale = std::pow(10.0f, U(rng));
    for (int64_t j = b; j < std::min(n, b + 32); ++j) {
      float x = N(rng) * scale;
      if (kind == 0) x = 0.0f;
      if (kind == 1) x = 0.25f * scale;
      v[static_cast<size_t>(j)] = x;
    }
    if (kind == 2) v[static_cast<size_t>(b)] = -30.0f * scale;
  }
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

// Bytes of a block after its f16 header (scales), i.e. the quants; any value is valid.
size_t header_bytes(DType t) {
  switch (t) {
    case DType::Q4_0: case DType::Q5_0: case DType::Q8_0: return 2;
    case DType::Q4_1: case DType::Q5_1: case DType::Q8_1: return 4;
    default: return 0;
  }
}

// Scale the weight rows' min (q4_1/q5_1), per element; 0 for the other formats.
float block_min(DType t, const uint8_t* row, int64_t i) {
  const int64_t b = i / 32;
  if (t == DType::Q4_1) return f16_to_f32(reinterpret_cast<const cpu::block_q4_1*>(row)[b].m);
  if (t == DType::Q5_1) return f16_to_f32(reinterpret_cast<const cpu::block_q5_1*>(row)[b].m);
  return 0.0f;
}

std::vector<int64_t> lengths(DType t) {
  if (dtype_info(t).block_elems == 1) return {1, 5, 8, 13, 31, 32, 33, 67, 256, 1000, 4099};
  std::vector<int64_t> n;
  for (int64_t nb : {1, 2, 3, 7, 8, 33, 64, 101}) n.push_back(nb * 32);
  return n;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

}  // namespace

TEST(Formats, ToFloatSimdMatchesReference) {
  std::mt19937 rng(1);
  for (DType t : kAllFormats) {
    for (int64_t n : lengths(t)) {
      std::vector<uint8_t> q = quantize(t, random_floats(n, rng), true);
      // Randomize the quants (all values, q8's -128 included), keep the scales.
      const size_t bb = dtype_info(t).block_bytes, hb = header_bytes(t);
      if (hb) {
        for (size_t b = 0; b < q.size(); b += bb) {
          for (size_t j = hb; j < bb; ++j) q[b + j] = static_cast<uint8_t>(rng());
        }
      }
      ASSERT_TRUE(same_bits(dequantize(t, q, n, false), dequantize(t, q, n, true)))
          << dtype_name(t) << " n=" << n;
    }
  }
}

TEST(Formats, FromFloatSimdMatchesReference) {
  std::mt19937 rng(2);
  for (DType t : kAllFormats) {
    for (int64_t n : lengths(t)) {
      std::vector<float> x = random_floats(n, rng);
      if (n >= 64) {
        // Exact roundf ties for q8: amax 127 makes d = 1, and x.5 values.
        x[32] = 127.0f;
        for (int j = 1; j < 32; ++j) x[static_cast<size_t>(32 + j)] = static_cast<float>(j) - 15.5f;
      }
      ASSERT_EQ(quantize(t, x, false), quantize(t, x, true)) << dtype_name(t) << " n=" << n;
    }
  }
}

TEST(Formats, QuantizeRoundTripError) {
  std::mt19937 rng(3);
  for (DType t : kAllFormats) {
    const DTypeInfo& info = dtype_info(t);
    double worst = 0.0, sq = 0.0, ref_sq = 0.0;
    for (int64_t n : lengths(t)) {
      const std::vector<float> x = random_floats(n, rng);
      const std::vector<uint8_t> q = quantize(t, x, false);
      const std::vector<float> y = dequantize(t, q, n, false);
      for (int64_t b = 0; b < n; b += info.block_elems) {
        float amax = 0.0f;
        for (int64_t j = b; j < b + info.block_elems; ++j) amax = std::max(amax, std::fabs(x[j]));
        double bound;
        if (!info.quantized) {
          const double rel = t == DType::F32 ? 0.0 : t == DType::F16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
          bound = rel * amax + (t == DType::F16 ? std::ldexp(1.0, -25) : 0.0);
        } else {
          uint16_t d16;
          std::memcpy(&d16, &q[static_cast<size_t>(b / 32) * info.block_bytes], 2);
          const float d = f16_to_f32(d16);
          const double c = (t == DType::Q4_0 || t == DType::Q5_0) ? 1.0 : 0.5;
          // f16 scales below 2^-14 are subnormal: absolute rounding 2^-25, times q <= 128.
          bound = c * std::fabs(d) * (1 + 1e-6) + std::ldexp(static_cast<double>(amax), -9) + std::ldexp(1.0, -18);
        }
        for (int64_t j = b; j < b + info.block_elems; ++j) {
          const double e = std::fabs(static_cast<double>(x[j]) - y[j]);
          ASSERT_LE(e, bound) << dtype_name(t) << " n=" << n << " j=" << j << " x=" << x[j] << " y=" << y[j];
          worst = std::max(worst, e / std::max(amax, 1e-30f));
          sq += e * e;
          ref_sq += static_cast<double>(x[j]) * x[j];
        }
      }
    }
    std::printf("%-5s round trip: max |err|/amax(block) %.3g, rel rms %.3g\n", dtype_name(t), worst,
                std::sqrt(sq / ref_sq));
  }
}

TEST(Formats, VecDot) {
  std::mt19937 rng(4);
  for (DType t : kWeights) {
    const DTypeInfo& info = dtype_info(t);
    const DType ty = info.vec_dot_type;
    const CpuKernels& k = cpu::cpu_kernels(t);
    double worst_simd = 0.0, worst_ref = 0.0;  // in units of eps*S
    for (int64_t n : lengths(t)) {
      for (int rep = 0; rep < 4; ++rep) {
        std::vector<uint8_t> qx = quantize(t, random_floats(n, rng), true);
        if (rep & 1) {  // random quants, all values reachable
          const size_t bb = info.block_bytes, hb = header_bytes(t);
          if (hb) {
            for (size_t b = 0; b < qx.size(); b += bb) {
              for (size_t j = hb; j < bb; ++j) qx[b + j] = static_cast<uint8_t>(rng());
            }
          }
        }
        const std::vector<uint8_t> qy = quantize(ty, random_floats(n, rng), false);
        const std::vector<float> fx = dequantize(t, qx, n, true);
        const std::vector<float> fy = dequantize(ty, qy, n, true);

        double exact = 0.0, S = 0.0, s_err = 0.0;
        for (int64_t i = 0; i < n; ++i) {
          exact += static_cast<double>(fx[i]) * fy[i];
          const double m = std::fabs(block_min(t, qx.data(), i));
          S += (std::fabs(fx[i]) + 2.0 * m) * std::fabs(fy[i]) * 1.001;
        }
        if (ty == DType::Q8_1) {
          const auto* y = reinterpret_cast<const cpu::block_q8_1*>(qy.data());
          for (int64_t b = 0; b < n / 32; ++b) {
            // s = f16(d * sum(q)) uses the unrounded d; the exact value uses the
            // stored f16 d: |s - d16 * sum(q)| <= 2^-10 |d16 sum(q)| + 2^-24 (1 + |sum(q)|).
            int sum = 0;
            for (int j = 0; j < 32; ++j) sum += y[b].qs[j];
            const double d16 = std::fabs(f16_to_f32(y[b].d));
            s_err += std::fabs(block_min(t, qx.data(), b * 32)) *
                     ((std::ldexp(d16, -10) + std::ldexp(1.0, -24)) * std::abs(sum) + std::ldexp(1.0, -24));
          }
        }
        const double nterms = info.quantized ? static_cast<double>(n / 32) : n / 8.0;
        const double tol = 2.0 * (nterms + 16.0) * FLT_EPSILON * S + 1e-35;

        const float r = k.vec_dot_ref(n, qx.data(), qy.data());
        const float s = k.vec_dot(n, qx.data(), qy.data());
        EXPECT_LE(std::fabs(static_cast<double>(s) - r), tol) << dtype_name(t) << " n=" << n << " rep=" << rep;
        EXPECT_LE(std::fabs(static_cast<double>(r) - exact), tol + s_err)
            << dtype_name(t) << " n=" << n << " rep=" << rep << " ref=" << r << " exact=" << exact;
        if (S > 0) {
          worst_simd = std::max(worst_simd, std::fabs(static_cast<double>(s) - r) / (FLT_EPSILON * S));
          if (s_err == 0.0)
            worst_ref = std::max(worst_ref, std::fabs(static_cast<double>(r) - exact) / (FLT_EPSILON * S));
        }
      }
    }
    std::printf("%-5s x %-5s vec_dot: |simd-ref| <= %.2f eps*S, |ref-double| <= %.2f eps*S%s\n",
                dtype_name(t), dtype_name(ty), worst_simd, worst_ref,
                ty == DType::Q8_1 ? " (q8_1: +f16 s rounding, not counted)" : "");
  }
}

// Dot products whose exact value is known: quantization error aside, the
// kernels compute sum(x*y).
TEST(Formats, VecDotKnownValues) {
  for (DType t : kWeights) {
    const DType ty = dtype_info(t).vec_dot_type;
    const CpuKernels& k = cpu::cpu_kernels(t);
    const int64_t n = 96;
    std::vector<float> x(n), y(n);
    double want = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      x[i] = static_cast<float>((i % 7) - 3);  // exactly representable in every format
      y[i] = static_cast<float>(i % 5) - 2.0f;
      want += static_cast<double>(x[i]) * y[i];
    }
    const std::vector<uint8_t> qx = quantize(t, x, false), qy = quantize(ty, y, false);
    const float got = k.vec_dot(n, qx.data(), qy.data());
    const float got_ref = k.vec_dot_ref(n, qx.data(), qy.data());
    // Integer inputs in [-3, 3] quantize exactly only where the scale is exact;
    // allow the quantization error of one step in a few places.
    EXPECT_NEAR(got, want, 1.0) << dtype_name(t);
    EXPECT_NEAR(got_ref, want, 1.0) << dtype_name(t);
  }
}

TEST(CpuKernels, Rows) {
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q4_0, DType::Q4_1, DType::Q5_0,
                  DType::Q5_1, DType::Q8_0, DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K,
                  DType::Q6_K, DType::IQ4_NL, DType::TQ1_0, DType::TQ2_0, DType::MXFP4}) {
    EXPECT_TRUE(cpu::has_cpu_kernels(t)) << dtype_name(t);
    const cpu::CpuKernels& k = cpu::cpu_kernels(t);
    EXPECT_TRUE(k.to_float && k.from_float && k.vec_dot) << dtype_name(t);
    EXPECT_TRUE(k.to_float_ref && k.from_float_ref && k.vec_dot_ref) << dtype_name(t);
    // The activation format has a from_float to make the dot's right operand.
    EXPECT_NE(cpu::cpu_kernels(dtype_info(t).vec_dot_type).from_float, nullptr);
    if (!cpu_features().has_avx2_fma()) {
      EXPECT_EQ(k.vec_dot, k.vec_dot_ref);
      EXPECT_EQ(k.to_float, k.to_float_ref);
    } else {
      EXPECT_NE(k.vec_dot, k.vec_dot_ref) << dtype_name(t);
    }
  }
  // Q8_1 is an activation format: conversions but no weight dot.
  EXPECT_FALSE(cpu::has_cpu_kernels(DType::Q8_1));
  EXPECT_NE(cpu::cpu_kernels(DType::Q8_1).from_float, nullptr);
  EXPECT_EQ(cpu::cpu_kernels(DType::Q8_1).vec_dot, nullptr);
  // So is Q8_K (the K-quants' and TQ's).
  EXPECT_FALSE(cpu::has_cpu_kernels(DType::Q8_K));
  EXPECT_NE(cpu::cpu_kernels(DType::Q8_K).from_float, nullptr);
  EXPECT_NE(cpu::cpu_kernels(DType::Q8_K).to_float, nullptr);
  EXPECT_EQ(cpu::cpu_kernels(DType::Q8_K).vec_dot, nullptr);
  EXPECT_FALSE(cpu::has_cpu_kernels(DType::I32));
  try {
    cpu::cpu_kernels(DType::I32);
    FAIL() << "expected kvad::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("i32"), std::string::npos) << e.what();
  }
  std::printf("dispatch: %s\n", cpu_features().has_avx2_fma() ? "AVX2+FMA+F16C" : "scalar reference");
}
