// The recurrent-layer kernels' SIMD builds (src/kernels/cpu/recurrent_avx2.cpp,
// recurrent_avx512.cpp: recurrent_simd_impl.h with 8 and 16 lanes) against
// their scalar references (recurrent.cpp), on shapes that exercise every
// tail: Dv not a multiple of 4 vectors or of one, Dk odd, chunks whose
// length is not a multiple of the 4-row register block, convolution channel
// ranges that end mid-vector and more taps than the SIMD builds keep in
// registers. Also each SIMD chunked form against the reference recurrent
// form (the two forms of one recurrence). Each build is skipped where the
// CPU lacks it (or under KVAD_NO_SIMD). The references themselves are checked against
// double-precision definitions in tests/tensor/test_recurrent_ops.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "base/cpu_features.h"
#include "kernels/cpu/recurrent_kernels.h"

namespace {

using kvad::cpu::ConvRun;
using kvad::cpu::DeltaHead;

struct HeadData {
  int64_t Dk, Dv, L;
  std::vector<float> q, k, v, g, beta, S, o;
  std::vector<const float*> qp, kp, vp;
  std::vector<float*> op;

  HeadData(int64_t dk, int64_t dv, int64_t l, uint32_t seed) : Dk(dk), Dv(dv), L(l) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::uniform_real_distribution<float> ud(0.0f, 1.0f);
    auto unit_rows = [&](std::vector<float>& x) {  // L2-normalised rows, as the model gives them
      x.resize(L * Dk);
      for (int64_t i = 0; i < L; ++i) {
        double n2 = 0;
        for (int64_t a = 0; a < Dk; ++a) n2 += double(x[i * Dk + a] = nd(rng)) * x[i * Dk + a];
        for (int64_t a = 0; a < Dk; ++a) x[i * Dk + a] /= static_cast<float>(std::sqrt(n2));
      }
    };
    unit_rows(q);
    unit_rows(k);
    v.resize(L * Dv);
    for (float& x : v) x = nd(rng);
    g.resize(L), beta.resize(L);
    for (float& x : g) x = -2.0f * ud(rng);  // log decay <= 0
    for (float& x : beta) x = ud(rng);
    S.resize(Dk * Dv);
    for (float& x : S) x = 0.3f * nd(rng);  // a state from earlier tokens
    o.assign(L * Dv, -7.0f);
    for (int64_t i = 0; i < L; ++i) {
      qp.push_back(q.data() + i * Dk);
      kp.push_back(k.data() + i * Dk);
      vp.push_back(v.data() + i * Dv);
      op.push_back(o.data() + i * Dv);
    }
  }
  DeltaHead head() {
    return {Dk, Dv, S.data(), qp.data(), kp.data(), vp.data(), g.data(), beta.data(), op.data(), L,
            1.0f / std::sqrt(static_cast<float>(Dk))};
  }
};

double max_rel(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, m = 1e-3;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, double(std::fabs(b[i])));
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, double(std::fabs(a[i] - b[i])));
  return d / m;
}

// A SIMD build of the three kernels, and whether this CPU runs it.
struct Isa {
  const char* name;
  bool available;
  void (*recurrent)(const DeltaHead&);
  void (*chunk)(const DeltaHead&);
  void (*conv)(const ConvRun&);
};
std::vector<Isa> isas() {
  const auto& f = kvad::cpu_features();
  return {{"avx2", f.has_avx2_fma(), &kvad::cpu::delta_recurrent_avx2, &kvad::cpu::delta_chunk_avx2,
           &kvad::cpu::ssm_conv_run_avx2},
          {"avx512", f.has_avx512_vnni(), &kvad::cpu::delta_recurrent_avx512, &kvad::cpu::delta_chunk_avx512,
           &kvad::cpu::ssm_conv_run_avx512}};
}

struct Shape {
  int64_t Dk, Dv;
};
// Real (128 x 128), tails in Dv (for 8 lanes 44 = 32 + 8 + 4, 6 < 8,
// 13 = 8 + 5; for 16 lanes 80 = 64 + 16, 44 = 2 x 16 + 12), odd Dk.
const Shape kShapes[] = {{128, 128}, {20, 44}, {8, 6}, {3, 13}, {16, 8}, {33, 40}, {5, 80}, {7, 67}};

void check_recurrent(const Isa& isa) {
  uint32_t seed = 1;
  for (const Shape& s : kShapes)
    for (int64_t L : {1, 7}) {
      SCOPED_TRACE("Dk " + std::to_string(s.Dk) + " Dv " + std::to_string(s.Dv) + " L " + std::to_string(L));
      HeadData ref(s.Dk, s.Dv, L, seed), simd(s.Dk, s.Dv, L, seed);
      ++seed;
      kvad::cpu::delta_recurrent_ref(ref.head());
      isa.recurrent(simd.head());
      EXPECT_LT(max_rel(simd.o, ref.o), 1e-5);
      EXPECT_LT(max_rel(simd.S, ref.S), 1e-5);
    }
}

void check_chunk(const Isa& isa) {
  uint32_t seed = 100;
  for (const Shape& s : kShapes)
    for (int64_t L : {1, 3, 6, 37, 64}) {
      SCOPED_TRACE("Dk " + std::to_string(s.Dk) + " Dv " + std::to_string(s.Dv) + " L " + std::to_string(L));
      HeadData ref(s.Dk, s.Dv, L, seed), simd(s.Dk, s.Dv, L, seed), rec(s.Dk, s.Dv, L, seed);
      ++seed;
      kvad::cpu::delta_chunk_ref(ref.head());
      isa.chunk(simd.head());
      kvad::cpu::delta_recurrent_ref(rec.head());
      EXPECT_LT(max_rel(simd.o, ref.o), 2e-5);
      EXPECT_LT(max_rel(simd.S, ref.S), 2e-5);
      EXPECT_LT(max_rel(simd.o, rec.o), 2e-5);
      EXPECT_LT(max_rel(simd.S, rec.S), 2e-5);
    }
}

void check_conv(const Isa& isa) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t C = 61, n = 9;
  // Tokens of the run scattered in the batch (another sequence's in between).
  const std::vector<int64_t> tok = {0, 2, 3, 5, 6, 7, 8};
  for (int64_t K : {2, 4, 5, 8, 9})  // 9 > kConvMaxTapsSimd: the SIMD entries fall back to the reference
    for (auto [c0, c1] : {std::pair<int64_t, int64_t>{0, 61}, {3, 27}, {8, 16}, {40, 45}, {5, 58}}) {
      SCOPED_TRACE("K " + std::to_string(K) + " channels " + std::to_string(c0) + ".." + std::to_string(c1));
      std::vector<float> w(C * K), x(n * C), st(C * (K - 1));
      for (float& f : w) f = nd(rng);
      for (float& f : x) f = nd(rng);
      for (float& f : st) f = nd(rng);
      std::vector<float> st_ref = st, st_simd = st, out_ref(n * C, -3.0f), out_simd(n * C, -3.0f);
      const ConvRun base{C, K, c0, c1, w.data(), nullptr, x.data(), nullptr, tok.data(),
                         static_cast<int64_t>(tok.size())};
      ConvRun r = base, s = base;
      r.st = st_ref.data(), r.out = out_ref.data();
      s.st = st_simd.data(), s.out = out_simd.data();
      kvad::cpu::ssm_conv_run_ref(r);
      isa.conv(s);
      EXPECT_LT(max_rel(out_simd, out_ref), 1e-6);
      EXPECT_EQ(st_simd, st_ref);  // the state is moved, not computed
      // Channels outside [c0, c1) and tokens outside the run are untouched.
      for (int64_t t = 0; t < n; ++t) {
        for (int64_t c = 0; c < C; ++c) {
          if (c < c0 || c >= c1 || t == 1 || t == 4) {
            EXPECT_EQ(out_simd[t * C + c], -3.0f);
          }
        }
      }
    }
}

// Runs check on every SIMD build this CPU has; false when it has none.
bool each_isa(void (*check)(const Isa&)) {
  bool ran = false;
  for (const Isa& isa : isas()) {
    if (!isa.available) continue;
    SCOPED_TRACE(isa.name);
    check(isa);
    ran = true;
  }
  return ran;
}

TEST(RecurrentKernels, DeltaRecurrentSimdMatchesReference) {
  if (!each_isa(&check_recurrent)) GTEST_SKIP() << "no AVX2+FMA (or KVAD_NO_SIMD)";
}

TEST(RecurrentKernels, DeltaChunkSimdMatchesReferenceAndRecurrentForm) {
  if (!each_isa(&check_chunk)) GTEST_SKIP() << "no AVX2+FMA (or KVAD_NO_SIMD)";
}

TEST(RecurrentKernels, SsmConvSimdMatchesReference) {
  if (!each_isa(&check_conv)) GTEST_SKIP() << "no AVX2+FMA (or KVAD_NO_SIMD)";
}

}  // namespace
