// The CPU row's latent-attention inner loop (kernels/cpu/mla.h): the AVX2
// block against its scalar reference on random data, with a ring that wraps,
// one to eight heads, a single position and long runs (DESIGN.md seam 2).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "base/cpu_features.h"
#include "kernels/cpu/mla.h"

namespace {

TEST(LatentAttention, Avx2MatchesReference) {
  if (!kvad::cpu_features().has_avx2_fma()) GTEST_SKIP() << "no AVX2+FMA (or KVAD_NO_SIMD)";
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  struct Case {
    int nh;
    int64_t D, n_v, slots, first, m;
  };
  for (const Case c : {Case{1, 40, 32, 64, 0, 1}, Case{3, 40, 32, 64, 5, 40}, Case{8, 576, 512, 300, 250, 300},
                       Case{5, 72, 64, 16, 9, 16}}) {
    std::vector<float> q(c.nh * c.D), cache(c.slots * c.D), out_ref(c.nh * c.n_v), out_simd(c.nh * c.n_v),
        w(c.nh * c.m);
    for (float& x : q) x = nd(rng);
    for (float& x : cache) x = nd(rng);
    kvad::cpu::LatentBlock b;
    b.nh = c.nh;
    for (int h = 0; h < c.nh; ++h) b.q[h] = &q[h * c.D];
    b.base = cache.data();
    b.slots = c.slots;
    b.first = c.first;
    b.m = c.m;
    b.D = c.D;
    b.n_v = c.n_v;
    b.scale = 0.3f;
    b.w = w.data();
    for (int h = 0; h < c.nh; ++h) b.out[h] = &out_ref[h * c.n_v];
    kvad::cpu::latent_block_ref(b);
    for (int h = 0; h < c.nh; ++h) b.out[h] = &out_simd[h * c.n_v];
    kvad::cpu::latent_block_avx2(b);
    double d = 0, mx = 0;
    for (size_t i = 0; i < out_ref.size(); ++i) {
      d = std::max(d, static_cast<double>(std::fabs(out_ref[i] - out_simd[i])));
      mx = std::max(mx, static_cast<double>(std::fabs(out_ref[i])));
    }
    EXPECT_LT(d / mx, 1e-5) << "nh " << c.nh << " D " << c.D << " m " << c.m;
  }
  std::vector<float> a(37), v(37), y(37, 1.0f), y_ref(37, 1.0f);
  double dot_ref = 0;
  for (int i = 0; i < 37; ++i) {
    a[i] = nd(rng);
    v[i] = nd(rng);
    dot_ref += static_cast<double>(a[i]) * v[i];
    y_ref[i] += 0.5f * a[i];
  }
  EXPECT_NEAR(kvad::cpu::dot_f32_avx2(a.data(), v.data(), 37), dot_ref, 1e-4);
  kvad::cpu::axpy_f32_avx2(0.5f, a.data(), y.data(), 37);
  for (int i = 0; i < 37; ++i) EXPECT_FLOAT_EQ(y[i], y_ref[i]);
}

}  // namespace
