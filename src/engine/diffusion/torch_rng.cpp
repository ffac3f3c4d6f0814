// torch.randn on the CPU generator; see torch_rng.h for the sources. The
// float path is written as scalar code that performs, operation for
// operation, what torch's 8-lane code performs per lane: every multiply-add
// that GCC contracts there is a std::fma here, every other operation a single
// rounded float operation (this file is built with -ffp-contract=off so the
// compiler adds no contraction of its own). tests/engine/diffusion check it
// bit for bit against torch's output.
#include "engine/diffusion/torch_rng.h"

#include <bit>
#include <cmath>

#include "base/error.h"

namespace kvad::diffusion {

namespace {

constexpr double kPi = 3.14159265358979323846;

// Natural log for x in (0, 1] (torch passes 1 - u, u in [0, 1)): Cephes'
// logf as vectorized by Pommier's sse_mathfun: x = m * 2^e with m in
// [sqrt(1/2), sqrt(2)), log(1 + f) by a degree-9 polynomial, e * log(2) added
// in two parts (q2 + q1).
float cephes_log(float x) {
  constexpr float kSqrtHalf = 0.707106781186547524f;
  constexpr float p[9] = {7.0376836292E-2f,  -1.1514610310E-1f, 1.1676998740E-1f,
                          -1.2420140846E-1f, 1.4249322787E-1f,  -1.6668057665E-1f,
                          2.0000714765E-1f,  -2.4999993993E-1f, 3.3333331174E-1f};
  constexpr float q1 = -2.12194440e-4f, q2 = 0.693359375f;
  x = std::fmax(x, std::bit_cast<float>(0x00800000u));  // no denormals
  uint32_t bits = std::bit_cast<uint32_t>(x);
  const int exponent = static_cast<int>(bits >> 23) - 0x7f;
  bits = (bits & ~0x7f800000u) | std::bit_cast<uint32_t>(0.5f);
  const float m = std::bit_cast<float>(bits);  // [0.5, 1)
  float e = static_cast<float>(exponent) + 1.0f;
  const bool small = m < kSqrtHalf;
  float f = m - 1.0f;
  if (small) {
    e = e - 1.0f;
    f = f + m;
  }
  const float z = f * f;
  float y = p[0];
  for (int i = 1; i < 9; ++i) y = std::fma(y, f, p[i]);
  y = y * f;
  y = std::fma(y, z, e * q1);
  y = y - z * 0.5f;
  f = f + y;
  return std::fma(e, q2, f);
}

// sin and cos of x >= 0 (x = 2 pi u): Cephes' sinf/cosf octant reduction
// (x * 4/pi to an even octant j, x - j * pi/4 in three parts) and the two
// polynomials, swapped and signed by the octant.
void cephes_sincos(float x, float* s, float* c) {
  constexpr float kFourOverPi = 1.27323954473516f;
  constexpr float dp1 = -0.78515625f, dp2 = -2.4187564849853515625e-4f, dp3 = -3.77489497744594108e-8f;
  constexpr float s0 = -1.9515295891E-4f, s1 = 8.3321608736E-3f, s2 = -1.6666654611E-1f;
  constexpr float c0 = 2.443315711809948E-005f, c1 = -1.388731625493765E-003f, c2 = 4.166664568298827E-002f;
  uint32_t sign_sin = std::bit_cast<uint32_t>(x) & 0x80000000u;
  x = std::fabs(x);
  int32_t j = static_cast<int32_t>(x * kFourOverPi);
  j = (j + 1) & ~1;
  const float y = static_cast<float>(j);
  sign_sin ^= (static_cast<uint32_t>(j) & 4u) << 29;
  const uint32_t sign_cos = (~static_cast<uint32_t>(j - 2) & 4u) << 29;
  const bool first_octant_poly = (j & 2) == 0;
  x = std::fma(y, dp1, x);
  x = std::fma(y, dp2, x);
  x = std::fma(y, dp3, x);
  const float z = x * x;
  float pc = std::fma(c0, z, c1);
  pc = std::fma(pc, z, c2);
  pc = pc * z;
  pc = std::fma(pc, z, -(z * 0.5f));
  pc = pc + 1.0f;
  float ps = std::fma(s0, z, s1);
  ps = std::fma(ps, z, s2);
  ps = ps * z;
  ps = std::fma(ps, x, x);
  const float sv = first_octant_poly ? ps : pc, cv = first_octant_poly ? pc : ps;
  *s = std::bit_cast<float>(std::bit_cast<uint32_t>(sv) ^ sign_sin);
  *c = std::bit_cast<float>(std::bit_cast<uint32_t>(cv) ^ sign_cos);
}

// torch's normal_fill_16: uniforms d[0..15] in place to normals, Box-Muller
// over the pairs (j, j + 8); mean 0 and std 1 (its fmadd(n, 1, 0) is n).
void normal_fill_16(float* d) {
  const float two_pi = static_cast<float>(2.0 * kPi);
  float out[16];
  for (int j = 0; j < 8; ++j) {
    const float u1 = 1.0f - d[j];
    const float u2 = d[j + 8];
    const float radius = std::sqrt(-2.0f * cephes_log(u1));
    float s, c;
    cephes_sincos(two_pi * u2, &s, &c);
    out[j] = radius * c;
    out[j + 8] = radius * s;
  }
  for (int j = 0; j < 16; ++j) d[j] = out[j];
}

}  // namespace

TorchGenerator::TorchGenerator(uint64_t seed) : engine_(static_cast<uint32_t>(seed & 0xffffffffu)) {}

uint32_t TorchGenerator::random() { return static_cast<uint32_t>(engine_()); }

uint64_t TorchGenerator::random64() {
  const uint64_t hi = random();
  const uint64_t lo = random();
  return (hi << 32) | lo;
}

// at::normal_distribution<double>: u1, u2 uniform with 53 bits; returns
// r cos(theta) and keeps r sin(theta) for the next call.
double TorchGenerator::normal_double() {
  if (has_next_double_) {
    has_next_double_ = false;
    return next_double_;
  }
  constexpr uint64_t kMask = (uint64_t{1} << 53) - 1;
  constexpr double kScale = 1.0 / static_cast<double>(uint64_t{1} << 53);
  const double u1 = static_cast<double>(random64() & kMask) * kScale;
  const double u2 = static_cast<double>(random64() & kMask) * kScale;
  const double r = std::sqrt(-2.0 * std::log1p(-u2));
  const double theta = 2.0 * kPi * u1;
  next_double_ = r * std::sin(theta);
  has_next_double_ = true;
  return r * std::cos(theta);
}

void TorchGenerator::randn(std::span<float> out) {
  const size_t n = out.size();
  if (n < 16) {
    for (float& v : out) v = static_cast<float>(normal_double());
    return;
  }
  constexpr float kScale = 1.0f / 16777216.0f;  // uniform_real<float>: 24 bits
  for (float& v : out) v = static_cast<float>(random() & 0xFFFFFFu) * kScale;
  for (size_t i = 0; i + 16 <= n; i += 16) normal_fill_16(out.data() + i);
  if (n % 16 != 0) {
    float* tail = out.data() + n - 16;
    for (int i = 0; i < 16; ++i) tail[i] = static_cast<float>(random() & 0xFFFFFFu) * kScale;
    normal_fill_16(tail);
  }
}

void torch_randn(uint64_t seed, std::span<float> out) { TorchGenerator(seed).randn(out); }

std::vector<float> torch_randn(uint64_t seed, size_t n) {
  if (n > (size_t{1} << 34)) throw Error("torch_randn: " + std::to_string(n) + " values is over the 2^34 bound");
  std::vector<float> v(n);
  torch_randn(seed, v);
  return v;
}

}  // namespace kvad::diffusion
