// The recurrent-layer ops (tensor/ops.h ssm_conv, gated_delta_rule) against
// their definitions written out here in double precision, token by token:
// two sequences interleaved in one batch, a second call continuing from the
// state the first left, a sequence restarting at position 0; the delta
// rule's chunked form (several chunk sizes, partial last chunks) against its
// recurrent form; the sim device against the CPU. The cpu row runs its SIMD
// kernels where the CPU has them (shapes here reach their vector loops and
// tails) and the scalar references under KVAD_NO_SIMD=1 (ctest's
// test_recurrent_ops_nosimd). Definitions: Yang, Kautz &
// Hatamizadeh 2024 ("Gated Delta Networks", eq. for S_t), transformers'
// torch_recurrent_gated_delta_rule and causal_conv1d_update.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "base/error.h"
#include "tensor/ops.h"

namespace {

using kvad::DeltaRuleParams;
using kvad::Device;
using kvad::DType;
using kvad::Tensor;
namespace ops = kvad::ops;
using Shape = std::array<int64_t, 4>;

std::vector<float> randv(std::mt19937& rng, size_t n, float scale = 1.0f, float offset = 0.0f) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = offset + scale * nd(rng);
  return v;
}
Tensor on(const std::vector<float>& v, Shape ne, Device d) { return ops::from_host(v.data(), DType::F32, ne, d); }
Tensor ids_on(const std::vector<int32_t>& v, Device d) {
  return ops::from_host(v.data(), DType::I32, {static_cast<int64_t>(v.size()), 1, 1, 1}, d);
}
std::vector<float> host(const Tensor& t) {
  std::vector<float> v(t.n_elements());
  ops::to_host(t, v.data());
  return v;
}
double max_diff(const std::vector<float>& a, const std::vector<double>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}

// Two sequences: 0 at positions 0..n0-1, 1 at 0..n1-1, interleaved.
struct Batch {
  std::vector<int32_t> seq, pos;
};
Batch interleaved(int n0, int n1, int start0 = 0, int start1 = 0) {
  Batch b;
  int i0 = 0, i1 = 0;
  while (i0 < n0 || i1 < n1) {
    for (int r = 0; r < 3 && i0 < n0; ++r) b.seq.push_back(0), b.pos.push_back(start0 + i0++);
    if (i1 < n1) b.seq.push_back(1), b.pos.push_back(start1 + i1++);
  }
  return b;
}

// Head shapes: a small one (Dv shorter than any vector: the SIMD builds run
// their scalar tails) and one whose Dv = 40 is one 32-column block and a
// vector for AVX2's 8 lanes, two vectors and a tail for AVX512's 16.
struct Dims {
  int64_t Dk, Dv, Hk, Hv;
};
constexpr Dims kSmall{8, 6, 2, 4}, kWide{24, 40, 2, 4};

struct DeltaInputs {
  std::vector<float> q, k, v, g, beta;
};
DeltaInputs delta_inputs(std::mt19937& rng, int64_t n, const Dims& dm = kSmall) {
  const auto [Dk, Dv, Hk, Hv] = dm;
  DeltaInputs in;
  in.q = randv(rng, n * Hk * Dk, 0.4f);
  in.k = randv(rng, n * Hk * Dk, 0.4f);
  in.v = randv(rng, n * Hv * Dv);
  in.g = randv(rng, n * Hv, 0.3f, -0.4f);
  for (float& x : in.g) x = -std::fabs(x);  // log decay <= 0
  in.beta = randv(rng, n * Hv, 0.3f, 0.5f);
  return in;
}

// The definition, token by token, on double states S[seq][h][a][j].
// tiled: value head h reads key head h % Hk (llama.cpp's qwen35 order), else h / r.
void delta_reference(const DeltaInputs& in, const Batch& b, float scale, std::vector<std::vector<double>>& S,
                     std::vector<double>& out, bool tiled = false, const Dims& dm = kSmall) {
  const auto [Dk, Dv, Hk, Hv] = dm;
  const int64_t n = static_cast<int64_t>(b.seq.size()), r = Hv / Hk;
  out.assign(n * Hv * Dv, 0.0);
  for (int64_t t = 0; t < n; ++t) {
    std::vector<double>& St = S[b.seq[t]];
    if (b.pos[t] == 0) std::fill(St.begin(), St.end(), 0.0);
    for (int64_t h = 0; h < Hv; ++h) {
      double* s = St.data() + h * Dk * Dv;
      const int64_t kh = tiled ? h % Hk : h / r;
      const float* q = in.q.data() + (t * Hk + kh) * Dk;
      const float* k = in.k.data() + (t * Hk + kh) * Dk;
      const float* v = in.v.data() + (t * Hv + h) * Dv;
      const double decay = std::exp(double(in.g[t * Hv + h])), beta = in.beta[t * Hv + h];
      for (int64_t i = 0; i < Dk * Dv; ++i) s[i] *= decay;
      for (int64_t j = 0; j < Dv; ++j) {
        double kv = 0;
        for (int64_t a = 0; a < Dk; ++a) kv += s[a * Dv + j] * k[a];
        const double u = beta * (v[j] - kv);
        for (int64_t a = 0; a < Dk; ++a) s[a * Dv + j] += k[a] * u;
        double o = 0;
        for (int64_t a = 0; a < Dk; ++a) o += s[a * Dv + j] * q[a] * scale;
        out[(t * Hv + h) * Dv + j] = o;
      }
    }
  }
}

// The key-head mapping (grouped h / r, tiled h % Hk) is a parameter; with Hk
// = 2 and Hv = 4 the two differ for heads 1 and 2, so the kernel run with the
// other mapping than the reference's fails (checked below).
void check_delta_rule(bool tiled, const Dims& dm) {
  const auto [Dk, Dv, Hk, Hv] = dm;
  std::mt19937 rng(7);
  const float scale = 1.0f / std::sqrt(float(Dk));
  // Call 1: sequence 0 from 0 (40 tokens), sequence 1 from 0 (13); call 2
  // continues sequence 0 (17 more) and restarts sequence 1 at 0 (9).
  const Batch b1 = interleaved(40, 13), b2 = interleaved(17, 9, 40, 0);
  const DeltaInputs in1 = delta_inputs(rng, b1.seq.size(), dm), in2 = delta_inputs(rng, b2.seq.size(), dm);
  std::vector<std::vector<double>> S(2, std::vector<double>(Hv * Dk * Dv, 0.0));
  std::vector<double> want1, want2;
  delta_reference(in1, b1, scale, S, want1, tiled, dm);
  delta_reference(in2, b2, scale, S, want2, tiled, dm);
  for (Device d : {Device::cpu(), Device::sim()})
    for (int64_t chunk : {0, 1, 3, 5, 16, 64}) {
      SCOPED_TRACE(d.str() + " chunk " + std::to_string(chunk));
      Tensor state = ops::empty(DType::F32, {Hv * Dk * Dv, 2, 1, 1}, d);  // garbage: pos 0 zeroes it
      DeltaRuleParams p;
      p.scale = scale;
      p.chunk = chunk;
      p.tiled_heads = tiled;
      std::vector<std::vector<float>> got;
      for (const auto& [in, b] : {std::pair{&in1, &b1}, std::pair{&in2, &b2}}) {
        const int64_t n = static_cast<int64_t>(b->seq.size());
        const Tensor o = ops::gated_delta_rule(on(in->q, {Dk, Hk, n, 1}, d), on(in->k, {Dk, Hk, n, 1}, d),
                                               on(in->v, {Dv, Hv, n, 1}, d), on(in->g, {Hv, n, 1, 1}, d),
                                               on(in->beta, {Hv, n, 1, 1}, d), state, ids_on(b->seq, d),
                                               ids_on(b->pos, d), p);
        got.push_back(host(o));
      }
      EXPECT_LT(max_diff(got[0], want1), 2e-5);
      EXPECT_LT(max_diff(got[1], want2), 2e-5);
      std::vector<double> s_want;
      for (const auto& s : S) s_want.insert(s_want.end(), s.begin(), s.end());
      EXPECT_LT(max_diff(host(state), s_want), 2e-5);
    }
}

TEST(RecurrentOps, GatedDeltaRuleMatchesDefinitionInBothForms) {
  for (const Dims& dm : {kSmall, kWide}) {
    SCOPED_TRACE("Dk " + std::to_string(dm.Dk) + " Dv " + std::to_string(dm.Dv));
    check_delta_rule(false, dm);
  }
}
TEST(RecurrentOps, GatedDeltaRuleTiledHeadsMatchDefinitionInBothForms) {
  for (const Dims& dm : {kSmall, kWide}) {
    SCOPED_TRACE("Dk " + std::to_string(dm.Dk) + " Dv " + std::to_string(dm.Dv));
    check_delta_rule(true, dm);
  }
}

// The wrong mapping is far off: the test above can fail.
TEST(RecurrentOps, GatedDeltaRuleHeadMappingsDiffer) {
  const auto [Dk, Dv, Hk, Hv] = kSmall;
  std::mt19937 rng(7);
  const Batch b = interleaved(20, 5);
  const DeltaInputs in = delta_inputs(rng, b.seq.size());
  std::vector<std::vector<double>> S(2, std::vector<double>(Hv * Dk * Dv, 0.0));
  std::vector<double> grouped;
  delta_reference(in, b, 1.0f, S, grouped, false);
  const int64_t n = static_cast<int64_t>(b.seq.size());
  const Device d = Device::cpu();
  Tensor state = ops::empty(DType::F32, {Hv * Dk * Dv, 2, 1, 1}, d);
  DeltaRuleParams p;
  p.tiled_heads = true;
  const Tensor o = ops::gated_delta_rule(on(in.q, {Dk, Hk, n, 1}, d), on(in.k, {Dk, Hk, n, 1}, d),
                                         on(in.v, {Dv, Hv, n, 1}, d), on(in.g, {Hv, n, 1, 1}, d),
                                         on(in.beta, {Hv, n, 1, 1}, d), state, ids_on(b.seq, d), ids_on(b.pos, d), p);
  EXPECT_GT(max_diff(host(o), grouped), 1e-2);
}

TEST(RecurrentOps, SsmConvMatchesDefinition) {
  std::mt19937 rng(3);
  const int64_t C = 37, K = 4;  // 37: whole vectors and a tail for 8 and 16 lanes
  const std::vector<float> w = randv(rng, C * K);
  const Batch b1 = interleaved(11, 5), b2 = interleaved(6, 4, 11, 0);
  const std::vector<float> x1 = randv(rng, b1.seq.size() * C), x2 = randv(rng, b2.seq.size() * C);
  // The definition: each sequence's inputs with K-1 zeros before position 0.
  std::vector<std::vector<std::vector<float>>> hist(2);  // per sequence, its inputs by position
  auto reference = [&](const std::vector<float>& x, const Batch& b) {
    std::vector<double> out(x.size());
    for (size_t t = 0; t < b.seq.size(); ++t) {
      auto& h = hist[b.seq[t]];
      if (b.pos[t] == 0) h.clear();
      h.emplace_back(x.begin() + t * C, x.begin() + (t + 1) * C);
      for (int64_t c = 0; c < C; ++c) {
        double acc = 0;
        for (int64_t j = 0; j < K; ++j) {
          const int64_t p = static_cast<int64_t>(h.size()) - K + j;
          if (p >= 0) acc += double(w[c * K + j]) * h[p][c];
        }
        out[t * C + c] = acc;
      }
    }
    return out;
  };
  const std::vector<double> want1 = reference(x1, b1), want2 = reference(x2, b2);
  for (Device d : {Device::cpu(), Device::sim()}) {
    SCOPED_TRACE(d.str());
    const Tensor wt = on(w, {K, C, 1, 1}, d);
    Tensor state = ops::empty(DType::F32, {(K - 1) * C, 2, 1, 1}, d);
    const int64_t n1 = static_cast<int64_t>(b1.seq.size()), n2 = static_cast<int64_t>(b2.seq.size());
    EXPECT_LT(max_diff(host(ops::ssm_conv(on(x1, {C, n1, 1, 1}, d), wt, state, ids_on(b1.seq, d), ids_on(b1.pos, d))),
                       want1), 1e-5);
    EXPECT_LT(max_diff(host(ops::ssm_conv(on(x2, {C, n2, 1, 1}, d), wt, state, ids_on(b2.seq, d), ids_on(b2.pos, d))),
                       want2), 1e-5);
  }
}

TEST(RecurrentOps, BadInputsAreErrors) {
  const Device d = Device::cpu();
  const Tensor x = ops::empty(DType::F32, {4, 3, 1, 1}, d), w = ops::empty(DType::F32, {3, 4, 1, 1}, d);
  Tensor state = ops::empty(DType::F32, {2 * 4, 1, 1, 1}, d);
  auto expect_error = [](auto f, const char* what) {
    try {
      f();
      ADD_FAILURE() << "no error for " << what;
    } catch (const kvad::Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  expect_error([&] { ops::ssm_conv(x, w, state, ids_on({0, 0, 0}, d), ids_on({0, 2, 3}, d)); }, "consecutive");
  expect_error([&] { ops::ssm_conv(x, w, state, ids_on({0, 1, 0}, d), ids_on({0, 0, 1}, d)); }, "outside the state");
  expect_error([&] { ops::ssm_conv(x, w, ops::empty(DType::F32, {5, 1, 1, 1}, d), ids_on({0, 0, 0}, d),
                                   ids_on({0, 1, 2}, d)); }, "(K - 1) · C");
  const auto [Dk, Dv, Hk, Hv] = kSmall;
  const Tensor q = ops::empty(DType::F32, {Dk, 3, 2, 1}, d), v = ops::empty(DType::F32, {Dv, Hv, 2, 1}, d);
  const Tensor g = ops::empty(DType::F32, {Hv, 2, 1, 1}, d);
  Tensor st = ops::empty(DType::F32, {Hv * Dk * Dv, 1, 1, 1}, d);
  expect_error([&] { ops::gated_delta_rule(q, q, v, g, g, st, ids_on({0, 0}, d), ids_on({0, 1}, d), {}); },
               "multiple of Hk");
}

}  // namespace
