// The ops image models use (SD 1.5 / SDXL UNet, VAE, CLIP): every one on
// every device present against the CPU row (op_check.h: sim bit for bit, CUDA
// within a tolerance), and the CPU row against each op's definition computed
// here in double. Odd sizes throughout: channel counts, widths and heights
// that are not multiples of any SIMD width or tile.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "op_check.h"
#include "tensor/ops.h"

namespace {

using kvad::Device;
using kvad::DType;
using kvad::Error;
using kvad::Tensor;
namespace ops = kvad::ops;
using namespace kvad::op_test;

// Max over i of |got[i] - want[i]| / max(1, |want[i]|).
double rel_err(const std::vector<float>& got, const std::vector<double>& want) {
  EXPECT_EQ(got.size(), want.size());
  double m = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    const double d = std::fabs(got[i] - want[i]) / std::max(1.0, std::fabs(want[i]));
    m = std::isnan(d) ? INFINITY : std::max(m, d);
  }
  return m;
}

double gelu_erf_d(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }

TEST(ImageOps, ElementWise) {
  std::mt19937 rng(1);
  const Tensor x = rand_f32(rng, {37, 5, 3, 1}, 3.0f);  // 555 values, past every SIMD width
  struct U {
    const char* name;
    Tensor (*op)(const Tensor&);
    double (*def)(double);
  };
  const U unary[] = {
      {"tanh", ops::tanh, [](double v) { return std::tanh(v); }},
      {"sin", ops::sin, [](double v) { return std::sin(v); }},
      {"cos", ops::cos, [](double v) { return std::cos(v); }},
      {"quick_gelu", ops::quick_gelu, [](double v) { return v / (1.0 + std::exp(-1.702 * v)); }},
      {"gelu_erf", ops::gelu_erf, gelu_erf_d},
      {"gelu", ops::gelu,
       [](double v) { return 0.5 * v * (1.0 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v))); }},
  };
  const std::vector<float> xv = host_f32(x);
  for (const U& u : unary) {
    std::vector<double> want(xv.size());
    for (size_t i = 0; i < xv.size(); ++i) want[i] = u.def(xv[i]);
    const double e = rel_err(host_f32(u.op(x)), want);
    std::printf("[def] %-12s cpu max_err %.3g\n", u.name, e);
    EXPECT_LE(e, 1e-6) << u.name;
    check(u.name, {x}, 1e-5, [&u](const auto& t) { return u.op(t[0]); });
  }
  // sin/cos at timestep-embedding arguments: steps up to 1000 times
  // frequencies down to 1e-4 (diffusers' get_timestep_embedding).
  std::vector<float> args;
  for (int t : {0, 1, 499, 999})
    for (int i = 0; i < 160; ++i) args.push_back(static_cast<float>(t) * std::exp(-std::log(10000.0f) * i / 160.0f));
  const Tensor a = ops::from_host(args.data(), DType::F32, {160, 4, 1, 1}, Device::cpu());
  std::vector<double> ws(args.size()), wc(args.size());
  for (size_t i = 0; i < args.size(); ++i) ws[i] = std::sin(double(args[i])), wc[i] = std::cos(double(args[i]));
  EXPECT_LE(rel_err(host_f32(ops::sin(a)), ws), 1e-6);
  EXPECT_LE(rel_err(host_f32(ops::cos(a)), wc), 1e-6);
  check("sin timesteps", {a}, 1e-5, [](const auto& t) { return ops::sin(t[0]); });
  check("cos timesteps", {a}, 1e-5, [](const auto& t) { return ops::cos(t[0]); });
}

// GEGLU as diffusers computes it: proj(x).chunk(2, -1) -> hidden ⊙ gelu(gate).
TEST(ImageOps, Geglu) {
  std::mt19937 rng(2);
  for (int64_t F : {1, 7, 40, 83}) {
    const Tensor x = rand_f32(rng, {2 * F, 9, 2, 1}, 2.0f);
    const std::vector<float> xv = host_f32(x);
    std::vector<double> want(F * 18);
    for (int64_t r = 0; r < 18; ++r)
      for (int64_t i = 0; i < F; ++i) want[r * F + i] = xv[r * 2 * F + i] * gelu_erf_d(xv[r * 2 * F + F + i]);
    const Tensor y = ops::geglu_split(x);
    EXPECT_EQ(y.ne, (Shape{F, 9, 2, 1}));
    const double e = rel_err(host_f32(y), want);
    std::printf("[def] geglu_split F=%-3lld cpu max_err %.3g\n", static_cast<long long>(F), e);
    EXPECT_LE(e, 1e-6);
    check("geglu_split F=" + std::to_string(F), {x}, 1e-5, [](const auto& t) { return ops::geglu_split(t[0]); });
    // The same as geglu_erf on the contiguous halves.
    const Tensor g = rand_f32(rng, {F, 5, 1, 1}), u = rand_f32(rng, {F, 5, 1, 1});
    const std::vector<float> gv = host_f32(g), uv = host_f32(u);
    std::vector<double> w2(gv.size());
    for (size_t i = 0; i < gv.size(); ++i) w2[i] = gelu_erf_d(gv[i]) * uv[i];
    EXPECT_LE(rel_err(host_f32(ops::geglu_erf(g, u)), w2), 1e-6);
    check("geglu_erf F=" + std::to_string(F), {g, u}, 1e-5, [](const auto& t) { return ops::geglu_erf(t[0], t[1]); });
  }
  EXPECT_THROW(ops::geglu_split(rand_f32(rng, {7, 2, 1, 1})), Error);  // odd: no halves
}

// Per-channel broadcasting: a bias [C] over {C, W, H, N} (one row), a
// per-sample [N, C] (ne {C, 1, 1, N}, the timestep embedding added in a
// ResNet block), and [C] over an NCHW-like {W, H, C, N} (ne {1, 1, C, 1}).
TEST(ImageOps, PerChannelBroadcast) {
  std::mt19937 rng(3);
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{13, 7, 5, 2}, {13, 1, 1, 1}},
      {{13, 7, 5, 2}, {13, 1, 1, 2}},
      {{7, 5, 13, 2}, {1, 1, 13, 1}},
      {{7, 5, 13, 2}, {1, 1, 13, 2}},
  };
  for (const auto& [an, bn] : cases) {
    const Tensor a = rand_f32(rng, an), b = rand_f32(rng, bn);
    const std::vector<float> av = host_f32(a), bv = host_f32(b);
    std::vector<double> sum(av.size()), prod(av.size());
    for (int64_t i3 = 0; i3 < an[3]; ++i3)
      for (int64_t i2 = 0; i2 < an[2]; ++i2)
        for (int64_t i1 = 0; i1 < an[1]; ++i1)
          for (int64_t i0 = 0; i0 < an[0]; ++i0) {
            const int64_t i = ((i3 * an[2] + i2) * an[1] + i1) * an[0] + i0;
            const int64_t j = (((bn[3] == 1 ? 0 : i3) * bn[2] + (bn[2] == 1 ? 0 : i2)) * bn[1] + (bn[1] == 1 ? 0 : i1)) *
                                  bn[0] + (bn[0] == 1 ? 0 : i0);
            sum[i] = double(av[i]) + bv[j];
            prod[i] = double(av[i]) * bv[j];
          }
    const std::string s = shape_str(a) + " by " + shape_str(b);
    EXPECT_LE(rel_err(host_f32(ops::add(a, b)), sum), 1e-7) << s;
    EXPECT_LE(rel_err(host_f32(ops::mul(a, b)), prod), 1e-7) << s;
    check("add " + s, {a, b}, 1e-6, [](const auto& t) { return ops::add(t[0], t[1]); });
    check("mul " + s, {a, b}, 1e-6, [](const auto& t) { return ops::mul(t[0], t[1]); });
  }
}

// GroupNorm's definition (torch.nn.GroupNorm) in double.
std::vector<double> group_norm_def(const std::vector<float>& x, Shape ne, int64_t G, const std::vector<float>* w,
                                   const std::vector<float>* b, double eps) {
  const int64_t C = ne[0], P = ne[1] * ne[2], N = ne[3], Cg = C / G;
  std::vector<double> y(x.size());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t g = 0; g < G; ++g) {
      double s = 0, sq = 0;
      for (int64_t p = 0; p < P; ++p)
        for (int64_t j = 0; j < Cg; ++j) s += x[(n * P + p) * C + g * Cg + j];
      const double mean = s / double(P * Cg);
      for (int64_t p = 0; p < P; ++p)
        for (int64_t j = 0; j < Cg; ++j) {
          const double d = x[(n * P + p) * C + g * Cg + j] - mean;
          sq += d * d;
        }
      const double rstd = 1.0 / std::sqrt(sq / double(P * Cg) + eps);
      for (int64_t p = 0; p < P; ++p)
        for (int64_t j = 0; j < Cg; ++j) {
          const int64_t c = g * Cg + j, i = (n * P + p) * C + c;
          y[i] = (x[i] - mean) * rstd * (w ? (*w)[c] : 1.0) + (b ? (*b)[c] : 0.0);
        }
    }
  return y;
}

TEST(ImageOps, GroupNorm) {
  std::mt19937 rng(4);
  struct Case {
    Shape ne;
    int64_t G;
    bool affine;
    float eps;
  };
  const Case cases[] = {
      {{12, 5, 3, 2}, 3, true, 1e-5f},     // 4 channels a group, odd W and H
      {{40, 7, 9, 1}, 8, true, 1e-6f},     // 5 channels a group
      {{64, 9, 7, 2}, 32, false, 1e-5f},   // GroupNorm32, no affine
      {{96, 17, 11, 1}, 32, true, 1e-5f},  // 3 channels a group, more than one 64-pixel chunk
      {{7, 3, 2, 3}, 1, true, 1e-5f},      // one group (LayerNorm over the image), C < 8
      {{13, 4, 4, 1}, 13, true, 1e-5f},    // a group per channel (InstanceNorm)
  };
  for (const Case& c : cases) {
    // An offset mean: the variance must not come from E[x²] - E[x]².
    const Tensor x = rand_f32(rng, c.ne, 2.0f, 3.0f);
    const Tensor w = c.affine ? rand_f32(rng, {c.ne[0], 1, 1, 1}, 0.3f, 1.0f) : Tensor{};
    const Tensor b = c.affine ? rand_f32(rng, {c.ne[0], 1, 1, 1}) : Tensor{};
    const std::vector<float> xv = host_f32(x), wv = c.affine ? host_f32(w) : std::vector<float>{},
                             bv = c.affine ? host_f32(b) : std::vector<float>{};
    const std::vector<double> want =
        group_norm_def(xv, c.ne, c.G, c.affine ? &wv : nullptr, c.affine ? &bv : nullptr, c.eps);
    const std::string name = "group_norm " + shape_str(x) + " G=" + std::to_string(c.G);
    const double e = rel_err(host_f32(ops::group_norm(x, c.G, w, b, c.eps)), want);
    std::printf("[def] %-40s cpu max_err %.3g\n", name.c_str(), e);
    EXPECT_LE(e, 2e-6) << name;
    check(name, {x, w, b}, 1e-5, [&c](const auto& t) { return ops::group_norm(t[0], c.G, t[1], t[2], c.eps); });
  }
  const Tensor x = rand_f32(rng, {12, 2, 2, 1});
  EXPECT_THROW(ops::group_norm(x, 5, Tensor{}, Tensor{}, 1e-5f), Error);                    // 5 does not divide 12
  EXPECT_THROW(ops::group_norm(x, 3, rand_f32(rng, {11, 1, 1, 1}), Tensor{}, 1e-5f), Error);  // weight not [C]
}

TEST(ImageOps, UpsamplePadConcat) {
  std::mt19937 rng(5);
  for (int64_t f : {1, 2, 3}) {
    const Shape ne = {5, 3, 4, 2};
    const Tensor x = rand_f32(rng, ne);
    const std::vector<float> xv = host_f32(x), y = host_f32(ops::upsample_nearest2d(x, f));
    ASSERT_EQ(y.size(), xv.size() * f * f);
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t oy = 0; oy < 4 * f; ++oy)
        for (int64_t ox = 0; ox < 3 * f; ++ox)
          for (int64_t c = 0; c < 5; ++c)
            ASSERT_EQ(y[((n * 4 * f + oy) * 3 * f + ox) * 5 + c], xv[((n * 4 + oy / f) * 3 + ox / f) * 5 + c]);
    check("upsample_nearest2d f=" + std::to_string(f), {x}, 0,
          [f](const auto& t) { return ops::upsample_nearest2d(t[0], f); });
  }
  EXPECT_THROW(ops::upsample_nearest2d(rand_f32(rng, {2, 2, 2, 1}), 0), Error);

  {
    const Shape ne = {3, 5, 2, 2};
    const std::array<int64_t, 4> lo = {1, 0, 2, 0}, hi = {0, 1, 1, 1};
    const Tensor x = rand_f32(rng, ne);
    const Tensor y = ops::pad(x, lo, hi);
    EXPECT_EQ(y.ne, (Shape{4, 6, 5, 3}));
    const std::vector<float> xv = host_f32(x), yv = host_f32(y);
    for (int64_t i3 = 0; i3 < 3; ++i3)
      for (int64_t i2 = 0; i2 < 5; ++i2)
        for (int64_t i1 = 0; i1 < 6; ++i1)
          for (int64_t i0 = 0; i0 < 4; ++i0) {
            const int64_t j0 = i0 - lo[0], j1 = i1 - lo[1], j2 = i2 - lo[2], j3 = i3 - lo[3];
            const bool inside = j0 >= 0 && j0 < 3 && j1 >= 0 && j1 < 5 && j2 >= 0 && j2 < 2 && j3 >= 0 && j3 < 2;
            const float want = inside ? xv[((j3 * 2 + j2) * 5 + j1) * 3 + j0] : 0.0f;
            ASSERT_EQ(yv[((i3 * 5 + i2) * 6 + i1) * 4 + i0], want);
          }
    check("pad", {x}, 0, [&](const auto& t) { return ops::pad(t[0], lo, hi); });
    EXPECT_THROW(ops::pad(x, {0, -1, 0, 0}, {0, 0, 0, 0}), Error);
  }

  for (int dim = 0; dim < 4; ++dim) {
    Shape an = {5, 3, 4, 2}, bn = an;
    bn[dim] = 3;
    const Tensor a = rand_f32(rng, an), b = rand_f32(rng, bn);
    const Tensor y = ops::concat(a, b, dim);
    Shape on = an;
    on[dim] = an[dim] + bn[dim];
    EXPECT_EQ(y.ne, on);
    const std::vector<float> av = host_f32(a), bv = host_f32(b), yv = host_f32(y);
    for (int64_t i3 = 0; i3 < on[3]; ++i3)
      for (int64_t i2 = 0; i2 < on[2]; ++i2)
        for (int64_t i1 = 0; i1 < on[1]; ++i1)
          for (int64_t i0 = 0; i0 < on[0]; ++i0) {
            int64_t j[4] = {i0, i1, i2, i3};
            const bool from_a = j[dim] < an[dim];
            if (!from_a) j[dim] -= an[dim];
            const Shape& sn = from_a ? an : bn;
            const float want = (from_a ? av : bv)[((j[3] * sn[2] + j[2]) * sn[1] + j[1]) * sn[0] + j[0]];
            ASSERT_EQ(yv[((i3 * on[2] + i2) * on[1] + i1) * on[0] + i0], want) << "dim " << dim;
          }
    check("concat dim=" + std::to_string(dim), {a, b}, 0, [dim](const auto& t) { return ops::concat(t[0], t[1], dim); });
    // A strided operand (a permuted view) gives the values of its contiguous copy.
    const Tensor bt = ops::permute(ops::cont(ops::permute(b, {1, 0, 2, 3})), {1, 0, 2, 3});
    ASSERT_FALSE(bt.is_contiguous());
    check("concat dim=" + std::to_string(dim) + " strided b", {a, b}, 0, [dim](const auto& t) {
      return ops::concat(t[0], ops::permute(ops::cont(ops::permute(t[1], {1, 0, 2, 3})), {1, 0, 2, 3}), dim);
    });
    EXPECT_EQ(host_f32(ops::concat(a, bt, dim)), yv);
  }
  EXPECT_THROW(ops::concat(rand_f32(rng, {5, 3, 1, 1}), rand_f32(rng, {5, 4, 1, 1}), 0), Error);  // dim 1 differs
  EXPECT_THROW(ops::concat(rand_f32(rng, {5, 3, 1, 1}), rand_f32(rng, {5, 3, 1, 1}), 4), Error);
}

// conv2d's definition in double, from the weights as the op reads them
// (dequantized) and x; also the bound Σ |w·x| per output.
void conv2d_def(const Tensor& x, const Tensor& w, const Tensor& bias, const kvad::Conv2dParams& p,
                std::vector<double>& y, std::vector<double>& mag, Shape& on) {
  const std::vector<float> xv = host_f32(x), wv = host_f32(ops::convert(w, DType::F32));
  const std::vector<float> bv = bias ? host_f32(bias) : std::vector<float>{};
  const int64_t C = x.ne[0], W = x.ne[1], H = x.ne[2], N = x.ne[3], KW = w.ne[1], KH = w.ne[2], OC = w.ne[3];
  const int64_t OW = (W + 2 * p.pad_w - KW) / p.stride_w + 1, OH = (H + 2 * p.pad_h - KH) / p.stride_h + 1;
  on = {OC, OW, OH, N};
  y.assign(OC * OW * OH * N, 0.0);
  mag.assign(y.size(), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t oy = 0; oy < OH; ++oy)
      for (int64_t ox = 0; ox < OW; ++ox)
        for (int64_t o = 0; o < OC; ++o) {
          double s = bias ? bv[o] : 0.0, a = bias ? std::fabs(bv[o]) : 0.0;
          for (int64_t ky = 0; ky < KH; ++ky)
            for (int64_t kx = 0; kx < KW; ++kx) {
              const int64_t iy = oy * p.stride_h + ky - p.pad_h, ix = ox * p.stride_w + kx - p.pad_w;
              if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
              for (int64_t c = 0; c < C; ++c) {
                const double t = double(wv[((o * KH + ky) * KW + kx) * C + c]) * xv[((n * H + iy) * W + ix) * C + c];
                s += t;
                a += std::fabs(t);
              }
            }
          const size_t i = ((n * OH + oy) * OW + ox) * OC + o;
          y[i] = s;
          mag[i] = a;
        }
}

TEST(ImageOps, Conv2d) {
  std::mt19937 rng(6);
  struct Case {
    const char* name;
    Shape x;             // {C, W, H, N}
    int64_t KW, KH, OC;
    kvad::Conv2dParams p;
    bool bias;
  };
  const Case cases[] = {
      {"3x3 pad 1", {5, 7, 6, 2}, 3, 3, 3, {1, 1, 1, 1}, true},
      {"3x3 stride 2 pad 1", {9, 9, 7, 1}, 3, 3, 11, {2, 2, 1, 1}, true},
      {"1x1", {13, 5, 3, 2}, 1, 1, 7, {}, false},
      {"1x1 stride 2", {6, 5, 5, 1}, 1, 1, 4, {2, 2, 0, 0}, true},
      {"4x3 stride (2, 1) pad (0, 2)", {3, 8, 5, 1}, 4, 3, 5, {2, 1, 0, 2}, true},
      {"5x5 no pad", {4, 9, 6, 1}, 5, 5, 2, {}, false},
      {"3x3 pad 1, 17 out channels", {8, 11, 10, 2}, 3, 3, 17, {1, 1, 1, 1}, true},
  };
  for (const Case& c : cases)
    for (DType wt : {DType::F32, DType::F16}) {
      const Tensor x = rand_f32(rng, c.x);
      const Tensor w = ops::convert(rand_f32(rng, {c.x[0], c.KW, c.KH, c.OC}, 0.3f), wt);
      const Tensor b = c.bias ? rand_f32(rng, {c.OC, 1, 1, 1}) : Tensor{};
      std::vector<double> want, mag;
      Shape on;
      conv2d_def(x, w, b, c.p, want, mag, on);
      const Tensor y = ops::conv2d(x, w, b, c.p);
      EXPECT_EQ(y.ne, on) << c.name;
      const std::string name = std::string("conv2d ") + c.name + " " + kvad::dtype_name(wt);
      // f32 weights: the f32 gemm's rounding; f16 weights: converted exactly
      // to f32 on the CPU, so the same bound.
      const double e = rel_err(host_f32(y), want);
      std::printf("[def] %-48s cpu max_err %.3g\n", name.c_str(), e);
      EXPECT_LE(e, 1e-5) << name;
      check(name, {x, w, b}, wt == DType::F32 ? 1e-3 : 3e-2,
            [&c](const auto& t) { return ops::conv2d(t[0], t[1], t[2], c.p); }, wt);
    }
  // q8_0 weights (32 input channels: whole blocks): activations quantized
  // to q8_0 per pixel as matmul does, within 1e-2 · Σ|w·x| of the definition.
  for (int64_t C : {32, 64}) {
    const Tensor x = rand_f32(rng, {C, 6, 5, 2});
    const Tensor w = ops::convert(rand_f32(rng, {C, 3, 3, 9}, 0.1f), DType::Q8_0);
    const Tensor b = rand_f32(rng, {9, 1, 1, 1});
    const kvad::Conv2dParams p{1, 1, 1, 1};
    std::vector<double> want, mag;
    Shape on;
    conv2d_def(x, w, b, p, want, mag, on);
    for (double& m : mag) m = 1e-2 * m + 1e-4;
    check("conv2d 3x3 q8_0 C=" + std::to_string(C), {x, w, b}, 0,
          [&p](const auto& t) { return ops::conv2d(t[0], t[1], t[2], p); }, DType::Q8_0, &want, &mag);
    const std::vector<float> got = host_f32(ops::conv2d(x, w, b, p));
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i]) / mag[i]);
    EXPECT_LE(worst, 1.0);
  }
  // Larger than one im2col tile (1 MiB of rows): 48 channels, 3x3, 64x40 pixels.
  {
    const Tensor x = rand_f32(rng, {48, 64, 40, 1});
    const Tensor w = ops::convert(rand_f32(rng, {48, 3, 3, 16}, 0.1f), DType::F16);
    std::vector<double> want, mag;
    Shape on;
    conv2d_def(x, w, Tensor{}, {1, 1, 1, 1}, want, mag, on);
    EXPECT_LE(rel_err(host_f32(ops::conv2d(x, w, Tensor{}, {1, 1, 1, 1})), want), 1e-5);
  }
  // Bad shapes.
  const Tensor x = rand_f32(rng, {4, 5, 5, 1});
  EXPECT_THROW(ops::conv2d(x, rand_f32(rng, {3, 3, 3, 2}), Tensor{}), Error);  // C 3 vs 4
  EXPECT_THROW(ops::conv2d(x, rand_f32(rng, {4, 7, 7, 2}), Tensor{}), Error);  // kernel past the image
  EXPECT_THROW(ops::conv2d(x, rand_f32(rng, {4, 3, 3, 2}), Tensor{}, {0, 1, 0, 0}), Error);  // stride 0
  EXPECT_THROW(ops::conv2d(x, rand_f32(rng, {4, 3, 3, 2}), rand_f32(rng, {3, 1, 1, 1})), Error);  // bias not [OC]
}

TEST(ImageOps, Conv2dWeightFromTorchLayout) {
  std::mt19937 rng(7);
  const Tensor wt = rand_f32(rng, {3, 2, 5, 4});  // torch [OC 4, C 5, KH 2, KW 3]
  const Tensor w = ops::conv2d_weight(wt);
  EXPECT_EQ(w.ne, (Shape{5, 3, 2, 4}));
  const std::vector<float> a = host_f32(wt), b = host_f32(w);
  for (int64_t o = 0; o < 4; ++o)
    for (int64_t c = 0; c < 5; ++c)
      for (int64_t ky = 0; ky < 2; ++ky)
        for (int64_t kx = 0; kx < 3; ++kx)
          ASSERT_EQ(b[((o * 2 + ky) * 3 + kx) * 5 + c], a[((o * 5 + c) * 2 + ky) * 3 + kx]);
  check("conv2d_weight", {wt}, 0, [](const auto& t) { return ops::conv2d_weight(t[0]); });
}

// softmax(scale · q·kᵀ) · v per image and head, in double.
std::vector<double> sdpa_def(const Tensor& q, const Tensor& k, const Tensor& v, float scale) {
  const std::vector<float> qv = host_f32(ops::cont(q)), kv = host_f32(ops::cont(k)), vv = host_f32(ops::cont(v));
  const int64_t D = q.ne[0], H = q.ne[1], n_q = q.ne[2], N = q.ne[3], n_kv = k.ne[2];
  std::vector<double> out(qv.size()), s(n_kv);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < n_q; ++t) {
        const float* qr = &qv[((n * n_q + t) * H + h) * D];
        double mx = -INFINITY, z = 0;
        for (int64_t j = 0; j < n_kv; ++j) {
          double d = 0;
          for (int64_t c = 0; c < D; ++c) d += double(qr[c]) * kv[((n * n_kv + j) * H + h) * D + c];
          s[j] = d * scale;
          mx = std::max(mx, s[j]);
        }
        for (int64_t j = 0; j < n_kv; ++j) z += s[j] = std::exp(s[j] - mx);
        for (int64_t c = 0; c < D; ++c) {
          double a = 0;
          for (int64_t j = 0; j < n_kv; ++j) a += s[j] * vv[((n * n_kv + j) * H + h) * D + c];
          out[((n * n_q + t) * H + h) * D + c] = a / z;
        }
      }
  return out;
}

TEST(ImageOps, Sdpa) {
  std::mt19937 rng(8);
  struct Case {
    int64_t N, n_q, n_kv, H, D;
  };
  const Case cases[] = {
      {2, 37, 37, 3, 40},   // self-attention, SD 1.5's first level head size
      {2, 45, 7, 2, 64},    // cross-attention over a few text tokens
      {1, 19, 77, 2, 80},   // SD 2's / SDXL's head size 
      {1, 20, 300, 1, 160}, // SD 1.5's deepest level head size, keys past several blocks
      {2, 9, 13, 2, 12},    // a head size the AVX2 kernel does not take: the reference
      {1, 5, 1, 4, 8},      // one key
      {1, 131, 65, 2, 40},  // more than one 64-query tile, an odd last one; a partial last key block
  };
  for (const Case& c : cases) {
    const Tensor q = rand_f32(rng, {c.D, c.H, c.n_q, c.N}), k = rand_f32(rng, {c.D, c.H, c.n_kv, c.N}),
                 v = rand_f32(rng, {c.D, c.H, c.n_kv, c.N});
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.D));
    const std::string name = "sdpa N=" + std::to_string(c.N) + " n_q=" + std::to_string(c.n_q) +
                             " n_kv=" + std::to_string(c.n_kv) + " H=" + std::to_string(c.H) +
                             " D=" + std::to_string(c.D);
    const double e = rel_err(host_f32(ops::sdpa(q, k, v, scale)), sdpa_def(q, k, v, scale));
    std::printf("[def] %-48s cpu max_err %.3g\n", name.c_str(), e);
    EXPECT_LE(e, 1e-5) << name;
    check(name, {q, k, v}, 1e-4, [scale](const auto& t) { return ops::sdpa(t[0], t[1], t[2], scale); });
  }
  // Views into one fused projection [n, 3·H·D] (q | k | v per token).
  {
    const int64_t N = 2, n = 21, H = 2, D = 40;
    const Tensor qkv = rand_f32(rng, {3 * H * D, n, N, 1});
    const size_t f = sizeof(float);
    auto part = [&](const Tensor& t, int i) {
      return ops::view(t, {D, H, n, N}, {f, D * f, 3 * H * D * f, 3 * H * D * n * f}, i * H * D * f);
    };
    const Tensor q = part(qkv, 0), k = part(qkv, 1), v = part(qkv, 2);
    ASSERT_FALSE(q.is_contiguous());
    const float scale = 0.15f;
    const std::vector<float> got = host_f32(ops::sdpa(q, k, v, scale));
    EXPECT_LE(rel_err(got, sdpa_def(q, k, v, scale)), 1e-5);
    EXPECT_EQ(got, host_f32(ops::sdpa(ops::cont(q), ops::cont(k), ops::cont(v), scale)));
    check("sdpa views of a fused qkv", {qkv}, 1e-4, [&](const auto& t) {
      return ops::sdpa(part(t[0], 0), part(t[0], 1), part(t[0], 2), scale);
    });
  }
  const Tensor q = rand_f32(rng, {8, 2, 5, 1});
  EXPECT_THROW(ops::sdpa(q, rand_f32(rng, {8, 3, 4, 1}), rand_f32(rng, {8, 3, 4, 1}), 1.0f), Error);  // heads
  EXPECT_THROW(ops::sdpa(q, rand_f32(rng, {8, 2, 4, 1}), rand_f32(rng, {8, 2, 5, 1}), 1.0f), Error);  // n_kv
  EXPECT_THROW(ops::sdpa(q, rand_f32(rng, {8, 2, 4, 2}), rand_f32(rng, {8, 2, 4, 2}), 1.0f), Error);  // N
}

}  // namespace
