// Every op of the table (tensor/backend.h) on every device present, against
// the CPU row as the reference (ggml's test-backend-ops is the model; DESIGN.md
// seam 2). Odd sizes and edge cases included: single tokens, row counts that
// are not multiples of any tile, partial rotary, GQA, sliding windows whose
// ring wraps, several sequences in one batch, every weight format matmul and
// get_rows take. `sim` runs the CPU kernels behind the device boundary, so
// its results must be bit-identical; `cuda` (when a GPU is present) must be
// within each op's tolerance. Every case prints its max error.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/thread_pool.h"
#include "tensor/half.h"
#include "tensor/ops.h"
#include "op_check.h"

namespace {

using kvad::Device;
using kvad::DType;
using kvad::DeviceType;
using kvad::Error;
using kvad::AttentionOpParams;
using kvad::Tensor;
namespace ops = kvad::ops;
using namespace kvad::op_test;

TEST(Ops, SimIsAlwaysPresent) {
  EXPECT_EQ(ops::unavailable(Device::sim()), "");
  EXPECT_EQ(ops::unavailable(Device::cpu()), "");
  EXPECT_TRUE(ops::has_format(Device::sim(), DType::Q4_K));
}

// y = x · Wᵀ in double from the dequantized weights, and the bound a device
// must meet against it: 1e-2 · Σ|w·x| + 1e-4 per output (test_cuda_ops' bound).
void exact_matmul(const Tensor& x, const Tensor& w, std::vector<double>& y, std::vector<double>& bound) {
  const auto xv = host_f32(x), wv = host_f32(ops::convert(w, DType::F32));
  const int64_t n = w.ne[0], n_out = w.ne[1], n_tok = x.ne[1];
  y.assign(n_tok * n_out, 0);
  bound.assign(n_tok * n_out, 0);
  for (int64_t t = 0; t < n_tok; ++t)
    for (int64_t o = 0; o < n_out; ++o) {
      double s = 0, a = 0;
      for (int64_t i = 0; i < n; ++i) {
        s += double(wv[o * n + i]) * xv[t * n + i];
        a += std::fabs(double(wv[o * n + i]) * xv[t * n + i]);
      }
      y[t * n_out + o] = s;
      bound[t * n_out + o] = 1e-2 * a + 1e-4;
    }
}

TEST(Ops, Matmul) {
  std::mt19937 rng(1);
  for (DType wt : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0,
                   DType::Q4_K, DType::Q6_K, DType::IQ4_NL}) {
    const int64_t n_in = kvad::dtype_info(wt).block_elems == 256 ? 512 : 96;
    for (int64_t n_tok : {1, 3, 17}) {
      const Tensor w = ops::convert(rand_f32(rng, {n_in, 33, 1, 1}, 0.1f), wt);
      const Tensor x = rand_f32(rng, {n_in, n_tok, 1, 1});
      std::vector<double> exact, bound;
      exact_matmul(x, w, exact, bound);
      check(std::string("matmul ") + kvad::dtype_name(wt) + " n_tok=" + std::to_string(n_tok), {x, w}, 0,
            [](const std::vector<Tensor>& a) { return ops::matmul(a[0], a[1]); }, wt, &exact, &bound);
    }
  }
}

TEST(Ops, MatmulMultiAndBias) {
  std::mt19937 rng(2);
  const Tensor x = rand_f32(rng, {64, 5, 1, 1});
  const Tensor w1 = ops::convert(rand_f32(rng, {64, 40, 1, 1}, 0.1f), DType::Q8_0);
  const Tensor w2 = ops::convert(rand_f32(rng, {64, 24, 1, 1}, 0.1f), DType::Q8_0);
  const Tensor b = rand_f32(rng, {24, 1, 1, 1});
  for (int i = 0; i < 2; ++i)
    check("matmul_multi part " + std::to_string(i), {x, w1, w2}, 5e-2,
          [i](const std::vector<Tensor>& a) { return ops::matmul_multi(a[0], {&a[1], &a[2]})[i]; });
  check("matmul + bias", {x, w2, b}, 5e-2, [](const std::vector<Tensor>& a) { return ops::matmul(a[0], a[1], &a[2]); });
  // matmul_multi equals separate products bit for bit on the CPU.
  const auto both = ops::matmul_multi(x, {&w1, &w2});
  EXPECT_EQ(host_f32(both[0]), host_f32(ops::matmul(x, w1)));
  EXPECT_EQ(host_f32(both[1]), host_f32(ops::matmul(x, w2)));
}

TEST(Ops, ElementWise) {
  std::mt19937 rng(3);
  const Tensor a = rand_f32(rng, {37, 5, 1, 1}), b = rand_f32(rng, {37, 5, 1, 1}), row = rand_f32(rng, {37, 1, 1, 1});
  check("add", {a, b}, 1e-6, [](const auto& t) { return ops::add(t[0], t[1]); });
  check("add row broadcast", {a, row}, 1e-6, [](const auto& t) { return ops::add(t[0], t[1]); });
  check("mul", {a, b}, 1e-6, [](const auto& t) { return ops::mul(t[0], t[1]); });
  check("mul row broadcast", {a, row}, 1e-6, [](const auto& t) { return ops::mul(t[0], t[1]); });
  check("scale", {a}, 1e-6, [](const auto& t) { return ops::scale(t[0], -0.37f); });
  check("silu", {a}, 1e-5, [](const auto& t) { return ops::silu(t[0]); });
  check("gelu", {a}, 1e-5, [](const auto& t) { return ops::gelu(t[0]); });
  check("swiglu", {a, b}, 1e-5, [](const auto& t) { return ops::swiglu(t[0], t[1]); });
  check("geglu", {a, b}, 1e-5, [](const auto& t) { return ops::geglu(t[0], t[1]); });
  check("softmax", {a}, 1e-5, [](const auto& t) { return ops::softmax(t[0]); });
  check("concat", {a, rand_f32(rng, {11, 5, 1, 1})}, 0, [](const auto& t) { return ops::concat(t[0], t[1]); });
  check("copy", {a}, 0, [](const auto& t) { return ops::copy(t[0]); });
  // Element-wise ops over more than one chunk of the CPU row's parallel split.
  const Tensor big = rand_f32(rng, {1000, 70, 1, 1}), big2 = rand_f32(rng, {1000, 70, 1, 1});
  check("add 70000", {big, big2}, 1e-6, [](const auto& t) { return ops::add(t[0], t[1]); });
}

TEST(Ops, Norms) {
  std::mt19937 rng(4);
  const Tensor x = rand_f32(rng, {72, 7, 1, 1}, 2.0f, 0.5f), w = rand_f32(rng, {72, 1, 1, 1}, 0.2f, 1.0f),
               b = rand_f32(rng, {72, 1, 1, 1});
  check("rms_norm", {x, w}, 1e-5, [](const auto& t) { return ops::rms_norm(t[0], t[1], 1e-6f); });
  check("rms_norm 1+w", {x, w}, 1e-5,
        [](const auto& t) { return ops::rms_norm(t[0], t[1], 1e-6f, ops::NormWeight::OnePlus); });
  check("rms_norm no weight", {x}, 1e-5, [](const auto& t) { return ops::rms_norm(t[0], Tensor{}, 1e-6f); });
  check("layer_norm", {x, w, b}, 1e-5, [](const auto& t) { return ops::layer_norm(t[0], t[1], t[2], 1e-5f); });
  // The definitions, on the CPU.
  const auto xv = host_f32(x), wv = host_f32(w), y = host_f32(ops::rms_norm(x, w, 1e-6f, ops::NormWeight::OnePlus));
  double ss = 0;
  for (int i = 0; i < 72; ++i) ss += double(xv[i]) * xv[i];
  for (int i = 0; i < 72; ++i) EXPECT_NEAR(y[i], xv[i] / std::sqrt(ss / 72 + 1e-6) * (1 + wv[i]), 1e-5);
}

TEST(Ops, Rope) {
  std::mt19937 rng(5);
  const Tensor pos = ids_tensor({0, 1, 7, 300, 4095});
  for (bool neox : {false, true})
    for (int64_t n_rot : {32, 16}) {  // full and partial rotary
      const Tensor x = rand_f32(rng, {32, 3, 5, 1});
      kvad::RopeParams p;
      p.n_rot = n_rot;
      p.freq_scale = n_rot == 16 ? 0.5f : 1.0f;
      p.neox = neox;
      // 1e-3: at position 4095 one ulp of a frequency moves the result ~2e-4.
      check(std::string("rope ") + (neox ? "neox" : "norm") + " n_rot=" + std::to_string(n_rot), {x, pos}, 1e-3,
            [p](const auto& t) { return ops::rope(t[0], t[1], p); });
      // Dims past n_rot pass through.
      if (n_rot < 32) {
        const auto xv = host_f32(x), y = host_f32(ops::rope(x, pos, p));
        for (int64_t i = 0; i < 15; ++i)
          for (int64_t c = n_rot; c < 32; ++c) EXPECT_EQ(y[i * 32 + c], xv[i * 32 + c]);
      }
    }
}

// Per-pair divisors and a factor on cos/sin (Llama 3, YaRN, LongRoPE; ggml's
// rope_ext freq_factors and attn_factor): every backend against the definition.
TEST(Ops, RopeFreqFactors) {
  std::mt19937 rng(15);
  const Tensor pos = ids_tensor({0, 3, 100});
  const Tensor x = rand_f32(rng, {16, 2, 3, 1});
  const std::vector<float> ff = {1.0f, 1.5f, 2.0f, 4.0f, 8.0f, 0.5f};
  const Tensor f = kvad::ops::from_host(ff.data(), DType::F32, {6, 1, 1, 1}, Device::cpu());
  auto run = [](const auto& t) {
    kvad::RopeParams p;
    p.n_rot = 12;  // partial: dims 12..15 pass through
    p.neox = true;
    p.freq_factors = t[2];
    p.attn_factor = 1.25f;
    return ops::rope(t[0], t[1], p);
  };
  check("rope freq_factors", {x, pos, f}, 1e-4, run);
  const auto xv = host_f32(x), y = host_f32(run(std::vector<Tensor>{x, pos, f}));
  const int p_of[3] = {0, 3, 100};
  for (int t = 0; t < 3; ++t)
    for (int h = 0; h < 2; ++h) {
      const float* v = &xv[(t * 2 + h) * 16];
      const float* o = &y[(t * 2 + h) * 16];
      for (int i = 0; i < 6; ++i) {
        const double th = p_of[t] * std::pow(10000.0, -2.0 * i / 12) / ff[i];
        EXPECT_NEAR(o[i], 1.25 * (v[i] * std::cos(th) - v[i + 6] * std::sin(th)), 1e-4);
        EXPECT_NEAR(o[i + 6], 1.25 * (v[i] * std::sin(th) + v[i + 6] * std::cos(th)), 1e-4);
      }
      for (int i = 12; i < 16; ++i) EXPECT_EQ(o[i], v[i]);
    }
  kvad::RopeParams bad;
  bad.n_rot = 12;
  bad.freq_factors = kvad::ops::from_host(ff.data(), DType::F32, {5, 1, 1, 1}, Device::cpu());
  EXPECT_THROW(ops::rope(x, pos, bad), kvad::Error);  // not n_rot/2 factors
}

// Mixture of experts: routing, per-expert products and the weighted sum,
// against their definitions on the CPU and bit for bit on sim (CUDA has no
// row for them yet and says so).
TEST(Ops, MixtureOfExperts) {
  std::mt19937 rng(21);
  const int64_t n_tok = 5, n_exp = 6, k = 2, n_in = 32, n_out = 8;
  const Tensor logits = rand_f32(rng, {n_exp, n_tok, 1, 1}, 2.0f);
  const Tensor w = ops::convert(rand_f32(rng, {n_in, n_out, n_exp, 1}), DType::F32);
  const Tensor x = rand_f32(rng, {n_in, 1, n_tok, 1});
  const ops::MoeRoute r = ops::moe_route(logits, k, true);
  const Tensor y = ops::matmul_id(x, w, r.ids);
  const Tensor s = ops::moe_sum(y, r.weights);
  const auto lv = host_f32(logits), wv = host_f32(w), xv = host_f32(x), yv = host_f32(y), sv = host_f32(s),
             rw = host_f32(r.weights);
  std::vector<int32_t> ids(n_tok * k);
  ops::to_host(r.ids, ids.data());
  for (int64_t t = 0; t < n_tok; ++t) {
    std::vector<double> p(n_exp);
    double mx = -1e30, z = 0;
    for (int64_t e = 0; e < n_exp; ++e) mx = std::max(mx, double(lv[t * n_exp + e]));
    for (int64_t e = 0; e < n_exp; ++e) z += p[e] = std::exp(lv[t * n_exp + e] - mx);
    std::vector<int> order(n_exp);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });
    const double top = p[order[0]] + p[order[1]];
    for (int64_t j = 0; j < k; ++j) {
      EXPECT_EQ(ids[t * k + j], order[j]);
      EXPECT_NEAR(rw[t * k + j], p[order[j]] / top, 1e-6);
    }
    for (int64_t n = 0; n < n_out; ++n) {
      double want = 0;
      for (int64_t j = 0; j < k; ++j) {
        double dot = 0;
        for (int64_t i = 0; i < n_in; ++i) dot += double(xv[t * n_in + i]) * wv[(ids[t * k + j] * n_out + n) * n_in + i];
        EXPECT_NEAR(yv[(t * k + j) * n_out + n], dot, 1e-4);
        want += rw[t * k + j] * dot;
      }
      EXPECT_NEAR(sv[t * n_out + n], want, 1e-4);
    }
  }
  // sim: the same bits.
  const Device sim = Device::sim();
  const ops::MoeRoute rs = ops::moe_route(ops::to(logits, sim), k, true);
  const Tensor ss = ops::moe_sum(ops::matmul_id(ops::to(x, sim), ops::to(w, sim), rs.ids), rs.weights);
  EXPECT_EQ(host_f32(ss), sv);
  // Bad input.
  EXPECT_THROW(ops::moe_route(logits, n_exp + 1, true), kvad::Error);
  const Tensor bad = ids_tensor({0, 9, 1, 1, 2, 2, 3, 3, 4, 4});
  EXPECT_THROW(ops::matmul_id(x, w, bad.view({2, 5, 1, 1})), kvad::Error);       // expert 9 of 6
  EXPECT_THROW(ops::matmul_id(rand_f32(rng, {16, 1, n_tok, 1}), w, r.ids), kvad::Error);  // n_in
  EXPECT_THROW(ops::moe_sum(y, ops::moe_route(logits, 3, true).weights), kvad::Error);    // k
}

// matmul_id in the formats the MoE layers of GGUF files use, against its
// definition as the products of each expert's matrix with the activation
// rows of the slots that chose it, gathered in slot order (ops::matmul, the
// same conversion of the activations and the same gemm): equal bit for bit.
// Rows per token (n_x = 1) and per slot (n_x = k); 1..3 threads; a batch
// where one expert is chosen by every token and one by none; row counts
// that are not a multiple of the gemm's tiles; Q5_1 has no gemm (vec_dot).
TEST(Ops, MatmulIdEqualsPerExpertMatmuls) {
  std::mt19937 rng(33);
  const int64_t n_exp = 9, k = 3, n_in = 512, n_out = 40;
  for (DType t : {DType::F32, DType::F16, DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q6_K, DType::Q5_1}) {
    const Tensor w = ops::convert(rand_f32(rng, {n_in, n_out, n_exp, 1}, 0.1f), t);
    for (int64_t n_tok : {1, 7, 37}) {
      std::vector<int32_t> idv(n_tok * k);
      for (int64_t i = 0; i < n_tok; ++i) {
        std::vector<int32_t> e(n_exp - 1);
        std::iota(e.begin(), e.end(), 0);  // expert 8 is never chosen
        std::shuffle(e.begin() + 1, e.end(), rng);  // expert 0 by every token, first
        for (int64_t j = 0; j < k; ++j) idv[i * k + j] = e[j];
        std::swap(idv[i * k], idv[i * k + (i % k)]);  // at varying slots
      }
      const Tensor ids = ops::from_host(idv.data(), DType::I32, {k, n_tok, 1, 1}, Device::cpu());
      for (int64_t n_x : {int64_t{1}, k}) {
        const Tensor x = rand_f32(rng, {n_in, n_x, n_tok, 1});
        const std::vector<float> xv = host_f32(x);
        std::vector<float> want(n_tok * k * n_out, NAN);
        for (int64_t e = 0; e < n_exp; ++e) {
          std::vector<int64_t> slots;
          for (int64_t s = 0; s < n_tok * k; ++s)
            if (idv[s] == e) slots.push_back(s);
          if (slots.empty()) continue;
          std::vector<float> g;
          for (int64_t s : slots) {
            const float* r = &xv[((s / k) * n_x + (n_x == 1 ? 0 : s % k)) * n_in];
            g.insert(g.end(), r, r + n_in);
          }
          const Tensor gx = ops::from_host(g.data(), DType::F32, {n_in, static_cast<int64_t>(slots.size()), 1, 1},
                                           Device::cpu());
          const std::vector<float> ye = host_f32(ops::matmul(gx, w.rows(e * n_out, (e + 1) * n_out)));
          for (size_t i = 0; i < slots.size(); ++i)
            std::copy(&ye[i * n_out], &ye[(i + 1) * n_out], &want[slots[i] * n_out]);
        }
        for (int nth : {1, 2, 3}) {
          kvad::ThreadPool pool(nth);
          ops::PoolScope scope(pool);
          EXPECT_EQ(host_f32(ops::matmul_id(x, w, ids)), want)
              << dtype_name(t) << " n_tok=" << n_tok << " n_x=" << n_x << " threads=" << nth;
        }
      }
    }
  }
}

TEST(Ops, GetRows) {
  std::mt19937 rng(6);
  const Tensor ids = ids_tensor({4, 0, 9, 4});
  for (DType t : {DType::F32, DType::F16, DType::Q8_0, DType::Q4_K, DType::Q6_K}) {
    const int64_t n = kvad::dtype_info(t).block_elems == 256 ? 256 : 96;
    const Tensor table = ops::convert(rand_f32(rng, {n, 10, 1, 1}), t);
    check(std::string("get_rows ") + kvad::dtype_name(t), {table, ids}, 1e-6,
          [](const auto& a) { return ops::get_rows(a[0], a[1]); }, t);
  }
  EXPECT_THROW(ops::get_rows(rand_f32(rng, {8, 3, 1, 1}), ids_tensor({3})), kvad::Error);
}

// kv_store then attention over one layer's caches: two sequences in one batch,
// GQA (4 query heads over 2 kv heads), full causal and a window with a ring
// smaller than the positions written (it wraps); caches f16, f32, and f32
// keys with f16 values (--cache-type-k/-v).
TEST(Ops, KvStoreAndAttention) {
  std::mt19937 rng(7);
  const int64_t D = 32, H = 4, Hkv = 2;
  struct Case {
    const char* name;
    int32_t window;
    int64_t slots;
  };
  const std::pair<DType, DType> kv_types[] = {
      {DType::F16, DType::F16}, {DType::F32, DType::F32}, {DType::F32, DType::F16}};
  for (const auto& [tk, tv] : kv_types) {
    for (const Case c : {Case{"full", 0, 40}, Case{"window 5, ring 9", 5, 9}, Case{"window 3, ring 40", 3, 40}}) {
      const std::string types = std::string(" k ") + kvad::dtype_name(tk) + " v " + kvad::dtype_name(tv);
      // Sequence 0 holds positions 0..19, sequence 1 positions 0..6 (written in
      // steps of at most slots - window tokens, as a Session would).
      std::vector<int32_t> seq, pos;
      const Tensor kc0 = ops::empty(tk, {Hkv * D, 2 * c.slots, 1, 1}, Device::cpu());
      const Tensor vc0 = ops::empty(tv, {Hkv * D, 2 * c.slots, 1, 1}, Device::cpu());
      std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>> steps;
      const int32_t step = c.window ? static_cast<int32_t>(c.slots - c.window) : 20;
      for (int32_t p0 = 0; p0 < 20; p0 += step) {
        std::vector<int32_t> s, p;
        for (int32_t q = p0; q < std::min(20, p0 + step); ++q) s.push_back(0), p.push_back(q);
        for (int32_t q = p0; q < std::min(7, p0 + step); ++q) s.push_back(1), p.push_back(q);
        steps.push_back({s, p});
      }
      for (size_t i = 0; i < steps.size(); ++i) {
        const int64_t n = static_cast<int64_t>(steps[i].first.size());
        const Tensor q = rand_f32(rng, {D, H, n, 1}), k = rand_f32(rng, {Hkv * D, n, 1, 1}),
                     v = rand_f32(rng, {Hkv * D, n, 1, 1});
        const Tensor st = ids_tensor(steps[i].first), pt = ids_tensor(steps[i].second);
        const kvad::AttentionOpParams ap{0.17f, c.window, c.slots};
        // Caches carry state across steps: each device keeps its own pair.
        static std::vector<Tensor> dev_k, dev_v;
        if (i == 0) {
          dev_k.clear();
          dev_v.clear();
          for (const Device d : devices()) {
            dev_k.push_back(ops::empty(tk, kc0.ne, d));
            dev_v.push_back(ops::empty(tv, vc0.ne, d));
          }
        }
        int di = -1;
        check(std::string("attention ") + c.name + types + " step " + std::to_string(i), {q, k, v, st, pt}, 1e-4,
              [&](const std::vector<Tensor>& a) {
                const bool cpu = a[0].device().is_cpu();
                if (!cpu) ++di;
                const Tensor& kc = cpu ? kc0 : dev_k[di];
                const Tensor& vc = cpu ? vc0 : dev_v[di];
                ops::kv_store(kc, a[1], a[3], a[4], c.slots);
                ops::kv_store(vc, a[2], a[3], a[4], c.slots);
                return ops::attention(a[0], kc, vc, a[3], a[4], ap);
              });
      }
    }
  }
}

// The CPU attention against its definition: softmax over the visible
// positions of f16-rounded keys and values (an f32 cache: unrounded), for
// the window ring that wraps.
TEST(Ops, AttentionMatchesDefinition) {
  for (const DType kv : {DType::F16, DType::F32}) {
    SCOPED_TRACE(kvad::dtype_name(kv));
    std::mt19937 rng(8);
    const int64_t D = 16, H = 2, slots = 6;
    const int32_t window = 4;
    const Tensor kc = ops::empty(kv, {D, slots, 1, 1}, Device::cpu());
    const Tensor vc = ops::empty(kv, {D, slots, 1, 1}, Device::cpu());
    std::vector<std::vector<float>> ks, vs;
    for (int32_t p = 0; p < 15; ++p) {
      const Tensor q = rand_f32(rng, {D, H, 1, 1}), k = rand_f32(rng, {D, 1, 1, 1}), v = rand_f32(rng, {D, 1, 1, 1});
      const Tensor st = ids_tensor({0}), pt = ids_tensor({p});
      ops::kv_store(kc, k, st, pt, slots);
      ops::kv_store(vc, v, st, pt, slots);
      ks.push_back(host_f32(k));
      vs.push_back(host_f32(v));
      if (kv == DType::F16)
        for (auto* a : {&ks.back(), &vs.back()})
          for (float& x : *a) x = kvad::f16_to_f32(kvad::f32_to_f16(x));
      const auto out = host_f32(ops::attention(q, kc, vc, st, pt, {0.25f, window, slots}));
      const auto qv = host_f32(q);
      for (int64_t h = 0; h < H; ++h) {
        std::vector<double> s;
        double mx = -1e300, sum = 0;
        for (int32_t j = std::max(0, p - window + 1); j <= p; ++j) {
          double d = 0;
          for (int64_t i = 0; i < D; ++i) d += double(qv[h * D + i]) * ks[j][i];
          s.push_back(0.25 * d);
          mx = std::max(mx, s.back());
        }
        for (double& x : s) sum += (x = std::exp(x - mx));
        for (int64_t i = 0; i < D; ++i) {
          double want = 0;
          for (int32_t j = std::max(0, p - window + 1), r = 0; j <= p; ++j, ++r) want += s[r] / sum * vs[j][i];
          ASSERT_NEAR(out[h * D + i], want, 1e-5) << "pos " << p << " head " << h;
        }
      }
    }
  }
}

// Exact GELU (encoders: BERT) against its definition on the CPU, bit for
// bit on sim, within 1e-5 on CUDA.
TEST(Ops, GeluErfMatchesDefinition) {
  std::mt19937 rng(12);
  const Tensor x = rand_f32(rng, {333, 3, 1, 1}, 6.0f);
  const auto xv = host_f32(x), y = host_f32(ops::gelu_erf(x));
  double worst = 0;
  for (size_t i = 0; i < xv.size(); ++i) {
    const double want = 0.5 * xv[i] * (1.0 + std::erf(xv[i] / std::sqrt(2.0)));
    worst = std::max(worst, std::abs(y[i] - want));
  }
  std::printf("gelu_erf: max |err| %.3g\n", worst);
  EXPECT_LT(worst, 1e-5);
  for (const Device& d : devices()) {
    if (d.type == DeviceType::CPU) continue;
    if (d.type == DeviceType::Sim) {
      EXPECT_EQ(host_f32(ops::gelu_erf(ops::to(x, d))), y);
    } else {
      EXPECT_LE(max_err(y, host_f32(ops::gelu_erf(ops::to(x, d)))), 1e-5) << d.str();
    }
  }
}

// gpt-oss's ops against their definitions on the CPU (transformers'
// eager_attention_forward with sinks, GptOssExperts._apply_gate), bit for
// bit on sim; the CUDA row has neither yet and must refuse them.
TEST(Ops, AttentionSinksMatchDefinition) {
  std::mt19937 rng(21);
  const int64_t D = 16, H = 4, Hkv = 2, n = 11, slots = 16;
  const std::vector<float> sink = {-1.0f, 0.5f, 3.0f, -6.0f};
  const Tensor q = rand_f32(rng, {D, H, n, 1}, 2.0f), k = rand_f32(rng, {D * Hkv, n, 1, 1});
  const Tensor v = rand_f32(rng, {D * Hkv, n, 1, 1});
  std::vector<int32_t> seq(n, 0), pos(n);
  for (int32_t i = 0; i < n; ++i) pos[i] = i;
  for (int32_t window : {0, 4}) {
    auto run = [&](Device d) {
      const Tensor kc = ops::empty(DType::F16, {D * Hkv, slots, 1, 1}, d);
      const Tensor vc = ops::empty(DType::F16, {D * Hkv, slots, 1, 1}, d);
      const Tensor st = ops::to(ids_tensor(seq), d), pt = ops::to(ids_tensor(pos), d);
      ops::kv_store(kc, ops::to(k, d), st, pt, slots);
      ops::kv_store(vc, ops::to(v, d), st, pt, slots);
      AttentionOpParams ap;
      ap.scale = 0.25f;
      ap.window = window;
      ap.slots = slots;
      ap.sinks = ops::from_host(sink.data(), DType::F32, {H, 1, 1, 1}, d);
      return host_f32(ops::attention(ops::to(q, d), kc, vc, st, pt, ap));
    };
    const auto out = run(Device::cpu());
    const auto qv = host_f32(q), kv = host_f32(k), vv = host_f32(v);
    auto h16 = [](float x) { return double(kvad::f16_to_f32(kvad::f32_to_f16(x))); };
    double worst = 0;
    for (int64_t t = 0; t < n; ++t)
      for (int64_t h = 0; h < H; ++h) {
        const int64_t kvh = h / (H / Hkv), first = window ? std::max<int64_t>(0, t - window + 1) : 0;
        std::vector<double> s;
        double mx = sink[h], sum = 0;
        for (int64_t j = first; j <= t; ++j) {
          double d = 0;
          for (int64_t i = 0; i < D; ++i) d += double(qv[(t * H + h) * D + i]) * h16(kv[j * D * Hkv + kvh * D + i]);
          s.push_back(0.25 * d);
          mx = std::max(mx, s.back());
        }
        sum = std::exp(sink[h] - mx);
        for (double& x : s) sum += (x = std::exp(x - mx));
        for (int64_t i = 0; i < D; ++i) {
          double want = 0;
          for (int64_t j = first; j <= t; ++j) want += s[j - first] / sum * h16(vv[j * D * Hkv + kvh * D + i]);
          worst = std::max(worst, std::abs(want - out[(t * H + h) * D + i]));
        }
      }
    std::printf("attention with sinks, window %d: max |err| %.3g\n", window, worst);
    EXPECT_LT(worst, 1e-5);
    for (const Device& d : devices()) {
      if (d.type == DeviceType::CPU) continue;
      if (d.type == DeviceType::Sim) {
        EXPECT_EQ(run(d), out);
      } else {
        EXPECT_THROW(run(d), Error) << d.str();
      }
    }
  }
  // One sink per query head, no more, no fewer.
  const Tensor kc = ops::empty(DType::F16, {D * Hkv, slots, 1, 1}, Device::cpu());
  AttentionOpParams bad;
  bad.scale = 0.25f;
  bad.slots = slots;
  bad.sinks = ops::from_host(sink.data(), DType::F32, {H - 1, 1, 1, 1}, Device::cpu());
  EXPECT_THROW(ops::attention(q, kc, kc, ids_tensor(seq), ids_tensor(pos), bad), Error);
}

// Gemma 2's attention logit soft-capping (transformers' Gemma2Attention
// eager path: s = scale · q·k, s ← c·tanh(s/c), then the causal / sliding
// mask and softmax) against that definition on the CPU, an f32 cache, with
// and without a window; bit for bit on sim; the CUDA row refuses it. The cap
// (2) lies inside the scores' range (|s| up to ~6), so dropping it moves the
// output by far more than the tolerance (checked: `uncapped`).
TEST(Ops, AttentionSoftcapMatchesDefinition) {
  std::mt19937 rng(23);
  const int64_t D = 32, H = 4, Hkv = 2, n = 13, slots = 16;
  const float cap = 2.0f, scale = 0.5f;
  const Tensor q = rand_f32(rng, {D, H, n, 1}, 1.5f), k = rand_f32(rng, {D * Hkv, n, 1, 1});
  const Tensor v = rand_f32(rng, {D * Hkv, n, 1, 1});
  std::vector<int32_t> seq(n, 0), pos(n);
  for (int32_t i = 0; i < n; ++i) pos[i] = i;
  for (int32_t window : {0, 5}) {
    auto run = [&](Device d, float c) {
      const Tensor kc = ops::empty(DType::F32, {D * Hkv, slots, 1, 1}, d);
      const Tensor vc = ops::empty(DType::F32, {D * Hkv, slots, 1, 1}, d);
      const Tensor st = ops::to(ids_tensor(seq), d), pt = ops::to(ids_tensor(pos), d);
      ops::kv_store(kc, ops::to(k, d), st, pt, slots);
      ops::kv_store(vc, ops::to(v, d), st, pt, slots);
      AttentionOpParams ap;
      ap.scale = scale;
      ap.window = window;
      ap.slots = slots;
      ap.softcap = c;
      return host_f32(ops::attention(ops::to(q, d), kc, vc, st, pt, ap));
    };
    const auto out = run(Device::cpu(), cap), uncapped = run(Device::cpu(), 0.0f);
    const auto qv = host_f32(q), kv = host_f32(k), vv = host_f32(v);
    double worst = 0, moved = 0, top = 0;
    for (int64_t t = 0; t < n; ++t)
      for (int64_t h = 0; h < H; ++h) {
        const int64_t kvh = h / (H / Hkv), first = window ? std::max<int64_t>(0, t - window + 1) : 0;
        std::vector<double> s;
        double mx = -1e300, sum = 0;
        for (int64_t j = first; j <= t; ++j) {
          double d = 0;
          for (int64_t i = 0; i < D; ++i) d += double(qv[(t * H + h) * D + i]) * kv[j * D * Hkv + kvh * D + i];
          top = std::max(top, std::abs(scale * d));
          s.push_back(cap * std::tanh(scale * d / cap));
          mx = std::max(mx, s.back());
        }
        for (double& x : s) sum += (x = std::exp(x - mx));
        for (int64_t i = 0; i < D; ++i) {
          double want = 0;
          for (int64_t j = first; j <= t; ++j) want += s[j - first] / sum * vv[j * D * Hkv + kvh * D + i];
          const size_t o = (t * H + h) * D + i;
          worst = std::max(worst, std::abs(want - out[o]));
          moved = std::max(moved, std::abs(want - uncapped[o]));
        }
      }
    std::printf("attention with soft-cap %g, window %d: max |err| %.3g (without the cap %.3g; max |score| %.3g)\n",
                cap, window, worst, moved, top);
    EXPECT_LT(worst, 1e-5);
    EXPECT_GT(moved, 1e-2);
    for (const Device& d : devices()) {
      if (d.type == DeviceType::CPU) continue;
      if (d.type == DeviceType::Sim) {
        EXPECT_EQ(run(d, cap), out);
      } else {
        EXPECT_THROW(run(d, cap), Error) << d.str();
      }
    }
  }
  // A cap must be finite and >= 0.
  const Tensor kc = ops::empty(DType::F32, {D * Hkv, slots, 1, 1}, Device::cpu());
  for (float c : {-1.0f, std::numeric_limits<float>::infinity(), std::nanf("")}) {
    AttentionOpParams bad;
    bad.scale = scale;
    bad.slots = slots;
    bad.softcap = c;
    EXPECT_THROW(ops::attention(q, kc, kc, ids_tensor(seq), ids_tensor(pos), bad), Error) << c;
  }
}

TEST(Ops, SwigluOaiMatchesDefinition) {
  std::mt19937 rng(22);
  const Tensor g = rand_f32(rng, {67, 5, 1, 1}, 12.0f), u = rand_f32(rng, {67, 5, 1, 1}, 12.0f);
  const auto gv = host_f32(g), uv = host_f32(u), y = host_f32(ops::swiglu_oai(g, u, 1.702f, 7.0f));
  double worst = 0;
  int clamped = 0;
  for (size_t i = 0; i < gv.size(); ++i) {
    const double x = std::min(double(gv[i]), 7.0), up = std::clamp(double(uv[i]), -7.0, 7.0);
    clamped += gv[i] > 7 || std::abs(uv[i]) > 7;
    const double want = (up + 1) * x / (1 + std::exp(-1.702 * x));
    worst = std::max(worst, std::abs(y[i] - want) / std::max(1.0, std::abs(want)));
  }
  std::printf("swiglu_oai: max rel err %.3g, %d of %zu inputs clamped\n", worst, clamped, gv.size());
  EXPECT_LT(worst, 1e-6);
  EXPECT_GT(clamped, 50);
  for (const Device& d : devices()) {
    if (d.type == DeviceType::CPU) continue;
    if (d.type == DeviceType::Sim) {
      EXPECT_EQ(host_f32(ops::swiglu_oai(ops::to(g, d), ops::to(u, d), 1.702f, 7.0f)), y);
    } else {
      EXPECT_THROW(ops::swiglu_oai(ops::to(g, d), ops::to(u, d), 1.702f, 7.0f), Error) << d.str();
    }
  }
}

TEST(Ops, BidirectionalAttentionMatchesDefinition) {
  std::mt19937 rng(13);
  // Three sequences of 5, 1 and 19 tokens in one call, GQA 4 query heads over 2.
  const int64_t D = 16, H = 4, Hkv = 2, slots = 24;
  const std::vector<int32_t> lens = {5, 1, 19};
  std::vector<int32_t> seq, pos;
  for (int32_t s = 0; s < 3; ++s)
    for (int32_t p = 0; p < lens[s]; ++p) seq.push_back(s), pos.push_back(p);
  const int64_t n = static_cast<int64_t>(seq.size());
  const Tensor q = rand_f32(rng, {D, H, n, 1}), k = rand_f32(rng, {D * Hkv, n, 1, 1}), v = rand_f32(rng, {D * Hkv, n, 1, 1});
  auto run = [&](Device d) {
    const Tensor kc = ops::empty(DType::F16, {D * Hkv, 3 * slots, 1, 1}, d);
    const Tensor vc = ops::empty(DType::F16, {D * Hkv, 3 * slots, 1, 1}, d);
    const Tensor st = ops::to(ids_tensor(seq), d), pt = ops::to(ids_tensor(pos), d);
    ops::kv_store(kc, ops::to(k, d), st, pt, slots);
    ops::kv_store(vc, ops::to(v, d), st, pt, slots);
    AttentionOpParams ap;
    ap.scale = 0.25f;
    ap.slots = slots;
    ap.causal = false;
    return host_f32(ops::attention(ops::to(q, d), kc, vc, st, pt, ap));
  };
  const auto out = run(Device::cpu());
  auto kv = host_f32(k), vv = host_f32(v);
  for (auto* a : {&kv, &vv})
    for (float& x : *a) x = kvad::f16_to_f32(kvad::f32_to_f16(x));
  const auto qv = host_f32(q);
  double worst = 0;
  for (int64_t t = 0; t < n; ++t) {
    int64_t t0 = t;  // first token of t's sequence
    while (t0 > 0 && seq[t0 - 1] == seq[t]) --t0;
    const int64_t len = lens[seq[t]];
    for (int64_t h = 0; h < H; ++h) {
      const int64_t kh = h / (H / Hkv);
      std::vector<double> s(len);
      double mx = -1e300, sum = 0;
      for (int64_t j = 0; j < len; ++j) {
        double d = 0;
        for (int64_t i = 0; i < D; ++i) d += double(qv[(t * H + h) * D + i]) * kv[(t0 + j) * D * Hkv + kh * D + i];
        mx = std::max(mx, s[j] = 0.25 * d);
      }
      for (double& x : s) sum += (x = std::exp(x - mx));
      for (int64_t i = 0; i < D; ++i) {
        double want = 0;
        for (int64_t j = 0; j < len; ++j) want += s[j] / sum * vv[(t0 + j) * D * Hkv + kh * D + i];
        worst = std::max(worst, std::abs(out[(t * H + h) * D + i] - want));
      }
    }
  }
  std::printf("bidirectional attention: max |err| %.3g\n", worst);
  EXPECT_LT(worst, 1e-5);
  for (const Device& d : devices()) {
    if (d.type == DeviceType::CPU) continue;
    if (d.type == DeviceType::Sim) {
      EXPECT_EQ(run(d), out);
    } else {
      EXPECT_THROW(run(d), Error) << d.str();
    }
  }
  // A sliding window cannot be bidirectional; a sequence past the ring is refused.
  const Tensor kc = ops::empty(DType::F16, {D * Hkv, 3 * slots, 1, 1}, Device::cpu());
  AttentionOpParams bad;
  bad.scale = 0.25f, bad.slots = slots, bad.causal = false, bad.window = 4;
  EXPECT_THROW(ops::attention(q, kc, kc, ids_tensor(seq), ids_tensor(pos), bad), Error);
  std::vector<int32_t> far = pos;
  far.back() = static_cast<int32_t>(slots);
  bad.window = 0;
  EXPECT_THROW(ops::attention(q, kc, kc, ids_tensor(seq), ids_tensor(far), bad), Error);
}

TEST(Ops, Errors) {
  std::mt19937 rng(9);
  const Tensor a = rand_f32(rng, {8, 2, 1, 1}), b = rand_f32(rng, {9, 2, 1, 1});
  EXPECT_THROW(ops::add(a, b), kvad::Error);                              // shapes
  EXPECT_THROW(ops::add(a, ops::to(a, Device::sim())), kvad::Error);      // devices
  EXPECT_THROW(ops::matmul(a, b), kvad::Error);                           // inner dims
  kvad::RopeParams r8;
  r8.n_rot = 8;
  EXPECT_THROW(ops::rope(a.view({8, 1, 2, 1}), ids_tensor({0}), r8), kvad::Error);  // positions
  EXPECT_THROW(Device::parse("tpu"), kvad::Error);
  // A KV cache is f16 or f32 (--cache-type-k/-v), nothing else.
  const Tensor bf = ops::empty(DType::BF16, {8, 4, 1, 1}, Device::cpu());
  try {
    ops::kv_store(bf, rand_f32(rng, {8, 1, 1, 1}), ids_tensor({0}), ids_tensor({0}), 4);
    ADD_FAILURE() << "kv_store into a bf16 cache was accepted";
  } catch (const kvad::Error& e) {
    EXPECT_NE(std::string(e.what()).find("cache must be f16 or f32, is bf16"), std::string::npos) << e.what();
  }
  EXPECT_EQ(Device::parse("cuda:1"), Device::cuda(1));
}

TEST(Ops, SimCountsTransfers) {
  std::mt19937 rng(10);
  const Tensor a = rand_f32(rng, {16, 4, 1, 1});
  ops::reset_transfer_stats();
  const Tensor s = ops::to(a, Device::sim());
  const Tensor r = ops::add(ops::scale(s, 2.0f), s);  // stays on the device
  std::vector<float> out(64);
  ops::to_host(r, out.data());
  const ops::TransferStats st = ops::transfer_stats(kvad::DeviceType::Sim);
  EXPECT_EQ(st.to_device, 1);
  EXPECT_EQ(st.to_device_bytes, 64 * 4);
  EXPECT_EQ(st.to_host, 1);
  EXPECT_EQ(st.to_host_bytes, 64 * 4);
  const auto av = host_f32(a);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(out[i], av[i] * 2.0f + av[i]);
}

}  // namespace
