// Scalar f16/bf16 conversions (tensor/half.h) against independent references:
// the compiler's _Float16 (libgcc's soft-float conversion) when it has one,
// F16C hardware through the dispatched f16 kernels, and hand-picked values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "base/cpu_features.h"
#include "kernels/cpu/kernels.h"
#include "tensor/half.h"

using namespace kvad;

namespace {
uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// f32 values that probe every f16 rounding boundary: each f16 value, the
// midpoints to its neighbour and one f32 ulp either side, plus random bits.
std::vector<float> probe_values() {
  std::vector<float> v;
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    for (uint32_t s : {0u, 0x8000u}) {
      const float a = f16_to_f32(static_cast<uint16_t>(h | s));
      const float b = f16_to_f32(static_cast<uint16_t>((h + 1) | s));
      const float mid = static_cast<float>((static_cast<double>(a) + b) / 2);  // exact in f32
      v.push_back(a);
      v.push_back(mid);
      v.push_back(std::nextafter(mid, 0.0f));
      v.push_back(std::nextafter(mid, INFINITY * (s ? -1.0f : 1.0f)));
    }
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 1 << 20; ++i) v.push_back(from_bits(rng()));
  for (float f : {0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, 1e10f, -1e10f, 1e-30f, -1e-30f,
                  5.9604645e-8f, 2.9802322e-8f, 2.9802326e-8f, std::numeric_limits<float>::infinity(),
                  -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::denorm_min()}) {
    v.push_back(f);
  }
  v.push_back(from_bits(0x7fc00000u));  // quiet NaN
  v.push_back(from_bits(0xffc00001u));
  v.push_back(from_bits(0x7f800001u));  // signaling NaN
  v.push_back(from_bits(0x7fa5a5a5u));
  return v;
}
}  // namespace

TEST(Half, F16ToF32Specials) {
  EXPECT_EQ(bits(f16_to_f32(0x0000)), 0x00000000u);
  EXPECT_EQ(bits(f16_to_f32(0x8000)), 0x80000000u);
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(f16_to_f32(0x03ff), std::ldexp(1023.0f, -24));  // largest subnormal
  EXPECT_EQ(f16_to_f32(0x0400), std::ldexp(1.0f, -14));  // smallest normal
  EXPECT_EQ(f16_to_f32(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(f16_to_f32(0xfc00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7e00)));
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7c01)));
}

TEST(Half, F32ToF16Specials) {
  EXPECT_EQ(f32_to_f16(0.0f), 0x0000);
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65519.99f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);  // tie at the top rounds to even: inf
  EXPECT_EQ(f32_to_f16(1e10f), 0x7c00);
  EXPECT_EQ(f32_to_f16(-1e10f), 0xfc00);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);  // tie between 0 and 2^-24: even
  EXPECT_EQ(f32_to_f16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(f32_to_f16(std::ldexp(3.0f, -25)), 0x0002);  // tie 1.5 ulp: even (2)
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie: even
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(3.0f, -11)), 0x3c02);  // tie: even
  EXPECT_EQ(f32_to_f16(std::ldexp(2047.0f, -25)), 0x0400);  // rounds up into the normals
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(f32_to_f16(from_bits(0x7fc00000u)), 0x7e00);
  EXPECT_EQ(f32_to_f16(from_bits(0x7f800001u)) & 0x7e00, 0x7e00);  // sNaN -> quiet NaN
}

TEST(Half, F16RoundTripExhaustive) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = f16_to_f32(static_cast<uint16_t>(h));
    const bool snan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0 && (h & 0x200) == 0;
    const uint16_t back = f32_to_f16(f);
    if (snan) {
      EXPECT_EQ(back, h | 0x200) << std::hex << h;  // quieted, payload kept
    } else {
      ASSERT_EQ(back, h) << std::hex << h;
    }
  }
}

#if defined(__FLT16_MAX__)
TEST(Half, MatchesCompilerFloat16) {
  // libgcc/compiler-rt's conversions are an implementation not written here.
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    _Float16 x;
    const uint16_t hh = static_cast<uint16_t>(h);
    std::memcpy(&x, &hh, 2);
    const float want = static_cast<float>(x);
    if (std::isnan(want)) continue;
    ASSERT_EQ(bits(f16_to_f32(hh)), bits(want)) << std::hex << h;
  }
  size_t n = 0;
  for (float f : probe_values()) {
    if (std::isnan(f)) continue;
    const _Float16 x = static_cast<_Float16>(f);
    uint16_t want;
    std::memcpy(&want, &x, 2);
    ASSERT_EQ(f32_to_f16(f), want) << "f=" << f << " bits=" << std::hex << bits(f);
    ++n;
  }
  std::printf("f32->f16 matches _Float16 on %zu values\n", n);
}
#endif

TEST(Half, MatchesF16CKernels) {
  // The dispatched f16 kernels are F16C instructions on an AVX2 machine: a
  // hardware reference. Compare bit patterns, NaNs included.
  const cpu::CpuKernels& k = cpu::cpu_kernels(DType::F16);
  std::vector<float> v = probe_values();
  v.resize(v.size() / 8 * 8);
  std::vector<uint16_t> a(v.size()), b(v.size());
  k.from_float(v.data(), a.data(), static_cast<int64_t>(v.size()));
  k.from_float_ref(v.data(), b.data(), static_cast<int64_t>(v.size()));
  for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(a[i], b[i]) << "bits=" << std::hex << bits(v[i]);

  std::vector<uint16_t> all(65536);
  for (uint32_t h = 0; h <= 0xffff; ++h) all[h] = static_cast<uint16_t>(h);
  std::vector<float> fa(65536), fb(65536);
  k.to_float(all.data(), fa.data(), 65536);
  k.to_float_ref(all.data(), fb.data(), 65536);
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    // F16C quiets signaling NaNs on the way up; the scalar keeps the payload as is.
    if (std::isnan(fa[h])) {
      EXPECT_TRUE(std::isnan(fb[h]));
      continue;
    }
    ASSERT_EQ(bits(fa[h]), bits(fb[h])) << std::hex << h;
  }
  std::printf("f16 kernels: %s\n", cpu_features().has_avx2_fma() ? "F16C vs scalar" : "scalar only");
}

TEST(Half, BF16) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_bf16(0.0f), 0x0000);
  EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f808000u)), 0x3f80);  // tie: even
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f818000u)), 0x3f82);  // tie: even (up)
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f808001u)), 0x3f81);
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(f32_to_bf16(from_bits(0x7f7fffffu)), 0x7f80);  // FLT_MAX rounds to inf
  EXPECT_EQ(f32_to_bf16(from_bits(0x7f800001u)), 0x7fc0);  // NaN stays NaN, quiet
  EXPECT_EQ(f32_to_bf16(from_bits(0x00000001u)), 0x0000);  // denormal rounds, not flushed
  EXPECT_EQ(f32_to_bf16(from_bits(0x00008000u)), 0x0000);
  EXPECT_EQ(f32_to_bf16(from_bits(0x00018000u)), 0x0002);
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = bf16_to_f32(static_cast<uint16_t>(h));
    EXPECT_EQ(bits(f), h << 16);
    if (!std::isnan(f)) {
      ASSERT_EQ(f32_to_bf16(f), h);
    }
  }
  // SIMD vs scalar on random bit patterns (NaNs included).
  const cpu::CpuKernels& k = cpu::cpu_kernels(DType::BF16);
  std::mt19937 rng(11);
  std::vector<float> v(1 << 16);
  for (auto& f : v) f = from_bits(rng());
  v[0] = from_bits(0x7f800001u);
  v[1] = from_bits(0xffffffffu);
  std::vector<uint16_t> a(v.size()), b(v.size());
  k.from_float(v.data(), a.data(), static_cast<int64_t>(v.size() - 3));  // odd tail
  k.from_float_ref(v.data(), b.data(), static_cast<int64_t>(v.size() - 3));
  for (size_t i = 0; i + 3 < v.size(); ++i) ASSERT_EQ(a[i], b[i]) << std::hex << bits(v[i]);
}
