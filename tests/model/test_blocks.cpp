// The shared blocks (model/blocks.h) against a plain re-statement of their
// math on small random f32 weights: the attention block with QK-norm, NeoX
// RoPE, grouped-query heads and a sliding window, batched and one token at a
// time; the gated MLP with SiLU and GELU-tanh.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/thread_pool.h"
#include "kernels/cpu/host_kernels.h"  // cpu::rope in the reference
#include "model/blocks.h"
#include "model/cache.h"
#include "tensor/ops.h"
#include "tensor/half.h"

namespace {

using kvad::Tensor;

struct Owned {
  std::vector<std::vector<float>> bufs;
  Tensor make(std::mt19937& rng, int64_t ne0, int64_t ne1, float scale, float offset = 0) {
    std::normal_distribution<float> d(0.0f, 1.0f);
    bufs.emplace_back(ne0 * ne1);
    for (float& v : bufs.back()) v = offset + scale * d(rng);
    Tensor t;
    t.type = kvad::DType::F32;
    t.ne = {ne0, ne1, 1, 1};
    t.set_contiguous_strides();
    t.data = bufs.back().data();
    return t;
  }
};

// y[o] = sum_i w[o][i] x[i] for a dense f32 Tensor.
std::vector<float> matvec(const Tensor& w, const float* x) {
  std::vector<float> y(w.ne[1]);
  for (int64_t o = 0; o < w.ne[1]; ++o) {
    double s = 0;
    for (int64_t i = 0; i < w.ne[0]; ++i) s += static_cast<double>(w.f32()[o * w.ne[0] + i]) * x[i];
    y[o] = static_cast<float>(s);
  }
  return y;
}

std::vector<float> rms(const float* x, const float* w, int64_t n, float eps) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const double s = 1.0 / std::sqrt(ss / n + eps);
  std::vector<float> y(n);
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(x[i] * s * (w ? w[i] : 1.0f));
  return y;
}

float round_f16(float v) { return kvad::f16_to_f32(kvad::f32_to_f16(v)); }

// Attention output of every token of one sequence at positions 0..n-1, stated
// directly: full softmax over the allowed positions, K/V rounded to f16 as the cache stores them.
// f16_cache: K and V rounded to f16 as the default cache stores them (else
// kept in f32, as --cache-type-k/-v f32 stores them).
std::vector<float> attention_reference(const kvad::AttentionWeights& w, const kvad::AttentionParams& p,
                                       const std::vector<float>& x, int64_t n, int64_t E, bool f16_cache = true) {
  const int64_t H = p.n_head, Hkv = p.n_head_kv, D = p.head_dim;
  std::vector<std::vector<float>> qs(n), ks(n), vs(n);
  for (int64_t t = 0; t < n; ++t) {
    const auto h = rms(&x[t * E], w.norm.f32(), E, p.norm_eps);
    qs[t] = matvec(w.wq, h.data());
    ks[t] = matvec(w.wk, h.data());
    vs[t] = matvec(w.wv, h.data());
    for (int64_t i = 0; i < H; ++i) {
      const auto r = rms(&qs[t][i * D], w.q_norm.f32(), D, p.norm_eps);
      std::copy(r.begin(), r.end(), &qs[t][i * D]);
    }
    for (int64_t i = 0; i < Hkv; ++i) {
      const auto r = rms(&ks[t][i * D], w.k_norm.f32(), D, p.norm_eps);
      std::copy(r.begin(), r.end(), &ks[t][i * D]);
    }
    kvad::cpu::rope(qs[t].data(), H, D, p.rope.n_rot, t, p.rope.freq_base, p.rope.freq_scale, p.rope.neox);
    kvad::cpu::rope(ks[t].data(), Hkv, D, p.rope.n_rot, t, p.rope.freq_base, p.rope.freq_scale, p.rope.neox);
    if (f16_cache) {
      for (float& v : ks[t]) v = round_f16(v);
      for (float& v : vs[t]) v = round_f16(v);
    }
  }
  std::vector<float> out(n * E);
  for (int64_t t = 0; t < n; ++t) {
    std::vector<float> att(H * D, 0.0f);
    const int64_t first = p.sliding_window > 0 ? std::max<int64_t>(0, t - p.sliding_window + 1) : 0;
    for (int64_t h = 0; h < H; ++h) {
      const int64_t kvh = h / (H / Hkv);
      std::vector<double> s;
      double mx = -1e300;
      for (int64_t q = first; q <= t; ++q) {
        double d = 0;
        for (int64_t i = 0; i < D; ++i) d += static_cast<double>(qs[t][h * D + i]) * ks[q][kvh * D + i];
        s.push_back(d * p.scale);
        mx = std::max(mx, s.back());
      }
      double sum = 0;
      for (double& v : s) sum += (v = std::exp(v - mx));
      for (int64_t q = first; q <= t; ++q)
        for (int64_t i = 0; i < D; ++i)
          att[h * D + i] += static_cast<float>(s[q - first] / sum * vs[q][kvh * D + i]);
    }
    const auto o = matvec(w.wo, att.data());
    std::copy(o.begin(), o.end(), &out[t * E]);
  }
  return out;
}

struct AttnCase {
  int64_t E = 48, H = 4, Hkv = 2, D = 16, n = 11;
  Owned own;
  kvad::AttentionWeights w;
  kvad::AttentionParams p;
  std::vector<float> x;

  explicit AttnCase(int32_t window) {
    std::mt19937 rng(7);
    w.norm = own.make(rng, E, 1, 0.1f, 1.0f);
    w.wq = own.make(rng, E, H * D, 0.2f);
    w.wk = own.make(rng, E, Hkv * D, 0.2f);
    w.wv = own.make(rng, E, Hkv * D, 0.2f);
    w.wo = own.make(rng, H * D, E, 0.2f);
    w.q_norm = own.make(rng, D, 1, 0.3f, 1.0f);
    w.k_norm = own.make(rng, D, 1, 0.3f, 1.0f);
    p.n_head = H;
    p.n_head_kv = Hkv;
    p.head_dim = D;
    p.rope.n_rot = D;
    p.rope.freq_base = 10000.0f;
    p.rope.neox = true;
    p.scale = 1.0f / std::sqrt(static_cast<float>(D));
    p.norm_eps = 1e-6f;
    p.sliding_window = window;
    own.make(rng, E, n, 1.0f);
    x = own.bufs.back();
  }
};

// The block over a one-layer cache: the whole sequence in one batch, or one
// token per call with a cache sized for single-token batches (a sliding
// window then keeps a ring of window + 1 positions, which wraps).
kvad::LayerCaches make_cache(const AttnCase& c, int64_t n_batch, kvad::KVTypes kv = {}) {
  kvad::LayerSpec spec;
  spec.k_dim = spec.v_dim = c.Hkv * c.D;
  spec.window = c.p.sliding_window;
  return kvad::LayerCaches({spec}, 32, 1, n_batch, kvad::Device::cpu(), kv);
}

void run_block(AttnCase& c, kvad::LayerCaches& cache, int64_t t0, int64_t n, float* out) {
  std::vector<int32_t> tok(n, 0), pos(n), seq(n, 0);
  for (int64_t t = 0; t < n; ++t) pos[t] = static_cast<int32_t>(t0 + t);
  kvad::BatchView b{tok.data(), pos.data(), seq.data(), n, nullptr, 0};
  const kvad::BatchIds ids = kvad::upload_batch(b, kvad::Device::cpu());
  const kvad::Tensor x = kvad::ops::wrap_host(&c.x[t0 * c.E], kvad::DType::F32, {c.E, n, 1, 1});
  kvad::ops::to_host(kvad::attention_block(c.w, c.p, cache.kv(0), ids, x), out);
  cache.advance(b);
}

std::vector<float> run_batched(AttnCase& c, kvad::KVTypes kv = {}) {
  kvad::ThreadPool pool(2);
  kvad::ops::PoolScope scope(pool);
  kvad::LayerCaches cache = make_cache(c, c.n, kv);
  std::vector<float> out(c.n * c.E);
  run_block(c, cache, 0, c.n, out.data());
  return out;
}

std::vector<float> run_one_by_one(AttnCase& c, kvad::KVTypes kv = {}) {
  kvad::ThreadPool pool(2);
  kvad::ops::PoolScope scope(pool);
  kvad::LayerCaches cache = make_cache(c, 1, kv);
  std::vector<float> out(c.n * c.E);
  for (int64_t t = 0; t < c.n; ++t) run_block(c, cache, t, 1, &out[t * c.E]);
  return out;
}

void expect_close(const std::vector<float>& a, const std::vector<float>& b, double tol) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], tol) << "element " << i;
}

}  // namespace

TEST(Blocks, AttentionMatchesReferenceFullCausal) {
  AttnCase c(0);
  const auto want = attention_reference(c.w, c.p, c.x, c.n, c.E);
  expect_close(run_batched(c), want, 2e-3);
  expect_close(run_one_by_one(c), want, 2e-3);
}

TEST(Blocks, AttentionMatchesReferenceSlidingWindow) {
  for (int32_t window : {1, 3, 10}) {
    SCOPED_TRACE(window);
    AttnCase c(window);
    const auto want = attention_reference(c.w, c.p, c.x, c.n, c.E);
    const auto batched = run_batched(c);
    expect_close(batched, want, 2e-3);
    expect_close(run_one_by_one(c), want, 2e-3);
    // The window matters: the last token's output differs from full attention's.
    AttnCase full(0);
    const auto f = run_batched(full);
    double d = 0;
    for (int64_t i = (c.n - 1) * c.E; i < c.n * c.E; ++i) d = std::max(d, std::fabs(double(f[i]) - batched[i]));
    EXPECT_GT(d, 1e-3);
  }
}

// --cache-type-k/-v f32: K and V kept exactly, so the block matches the
// unrounded definition ~20x closer than the f16 cache's 2e-3 allows (measured
// 2e-6 vs 4e-4), full and sliding-window (a ring that wraps one by one); a
// mixed cache (f32 keys, f16 values) matches the reference that rounds V only.
TEST(Blocks, AttentionWithF32CacheMatchesTheUnroundedReference) {
  const kvad::KVTypes f32{kvad::DType::F32, kvad::DType::F32};
  for (int32_t window : {0, 3}) {
    SCOPED_TRACE(window);
    AttnCase c(window);
    const auto exact = attention_reference(c.w, c.p, c.x, c.n, c.E, /*f16_cache=*/false);
    expect_close(run_batched(c, f32), exact, 1e-4);
    expect_close(run_one_by_one(c, f32), exact, 1e-4);
    // The f16 cache is measurably further from it.
    const auto f16 = run_batched(c);
    double d = 0;
    for (size_t i = 0; i < f16.size(); ++i) d = std::max(d, std::fabs(double(f16[i]) - exact[i]));
    EXPECT_GT(d, 1e-4);
  }
  AttnCase c(0);
  const auto both_f16 = attention_reference(c.w, c.p, c.x, c.n, c.E, true);
  const auto none_f16 = attention_reference(c.w, c.p, c.x, c.n, c.E, false);
  const auto mixed = run_batched(c, {kvad::DType::F32, kvad::DType::F16});
  double to_f16 = 0, to_f32 = 0;
  for (size_t i = 0; i < mixed.size(); ++i) {
    to_f16 = std::max(to_f16, std::fabs(double(mixed[i]) - both_f16[i]));
    to_f32 = std::max(to_f32, std::fabs(double(mixed[i]) - none_f16[i]));
  }
  EXPECT_GT(to_f16, 0.0);  // not the f16 cache
  EXPECT_GT(to_f32, 0.0);  // nor the f32 one
}

TEST(Blocks, WindowAtLeastContextEqualsFullAttention) {
  AttnCase w(11), full(0);
  EXPECT_EQ(run_batched(w), run_batched(full));
}

TEST(Blocks, GatedMlpSiluAndGeluTanh) {
  std::mt19937 rng(3);
  Owned own;
  const int64_t E = 32, F = 48, n = 3;
  kvad::MlpWeights w;
  w.norm = own.make(rng, E, 1, 0.1f, 1.0f);
  w.gate = own.make(rng, E, F, 0.3f);
  w.up = own.make(rng, E, F, 0.3f);
  w.down = own.make(rng, F, E, 0.3f);
  own.make(rng, E, n, 1.0f);
  const std::vector<float> x = own.bufs.back();
  for (auto act : {kvad::Activation::SiLU, kvad::Activation::GELU_tanh}) {
    std::vector<float> out(n * E);
    const kvad::Tensor xt = kvad::ops::wrap_host(x.data(), kvad::DType::F32, {E, n, 1, 1});
    kvad::ops::to_host(kvad::gated_mlp(w, act, 1e-6f, xt), out.data());
    for (int64_t t = 0; t < n; ++t) {
      const auto h = rms(&x[t * E], w.norm.f32(), E, 1e-6f);
      auto g = matvec(w.gate, h.data());
      const auto u = matvec(w.up, h.data());
      for (int64_t i = 0; i < F; ++i) {
        const double v = g[i];
        const double a = act == kvad::Activation::SiLU
                             ? v / (1 + std::exp(-v))
                             : 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
        g[i] = static_cast<float>(a * u[i]);
      }
      const auto want = matvec(w.down, g.data());
      for (int64_t i = 0; i < E; ++i) ASSERT_NEAR(out[t * E + i], want[i], 1e-4) << t << "," << i;
    }
  }
}

TEST(Blocks, GeluTanhValues) {
  // gelu_pytorch_tanh at a few points (torch.nn.functional.gelu(x, approximate="tanh")).
  float x[] = {-3.0f, -1.0f, 0.0f, 0.5f, 2.0f};
  const float want[] = {-0.0036373f, -0.1588080f, 0.0f, 0.3457140f, 1.9545977f};
  float y[5];
  kvad::ops::to_host(kvad::ops::gelu(kvad::ops::wrap_host(x, kvad::DType::F32, {5, 1, 1, 1})), y);
  for (int i = 0; i < 5; ++i) EXPECT_NEAR(y[i], want[i], 1e-6) << i;
}

// ops::swiglu/geglu on the CPU row as dispatched (AVX2: sigmoid through a polynomial e^x, with
// 0.5 (1 + tanh z) = sigmoid(2z) for GELU; scalar tail for n % 8) against
// their definitions in double, over x in [-30, 30] (both saturated ends) and
// n = 1003. Tolerance: 3e-6 relative to max(1, |x u|) (a few f32 roundings
// of a relative error ~2e-7 in e^x).
TEST(Blocks, GluKernelsMatchTheDefinition) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> ux(-30.0f, 30.0f), uu(-2.0f, 2.0f);
  const int64_t n = 1003;
  std::vector<float> x(n), u(n);
  for (auto& v : x) v = ux(rng);
  for (int i = 0; i < 40; ++i) x[i] = -1.0f + 0.05f * i;  // the curved part near 0
  for (auto& v : u) v = uu(rng);
  for (bool gelu : {false, true}) {
    std::vector<float> g(n);
    const kvad::Tensor xt = kvad::ops::wrap_host(x.data(), kvad::DType::F32, {n, 1, 1, 1});
    const kvad::Tensor ut = kvad::ops::wrap_host(u.data(), kvad::DType::F32, {n, 1, 1, 1});
    kvad::ops::to_host(gelu ? kvad::ops::geglu(xt, ut) : kvad::ops::swiglu(xt, ut), g.data());
    double max_err = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double v = x[i];
      const double a = gelu ? 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)))
                            : v / (1 + std::exp(-v));
      const double err = std::fabs(g[i] - a * u[i]) / std::max(1.0, std::fabs(v * u[i]));
      max_err = std::max(max_err, err);
    }
    EXPECT_LT(max_err, 3e-6) << (gelu ? "geglu" : "swiglu");
  }
}

// Cache::copy_prefix: a full layer copies positions 0..n-1; a ring copies
// its slots and refuses when it moved past what position n reads.
// bytes_per_token reflects the formats: f32 keys and values take twice the
// bytes of f16 ones; other formats and names are clear errors.
TEST(Cache, KVTypesSetTheBytesAndOthersAreRefused) {
  kvad::LayerSpec full, ring;
  full.k_dim = 64;
  full.v_dim = 32;
  ring = full;
  ring.window = 4;
  const std::vector<kvad::LayerSpec> specs{full, ring};
  const kvad::LayerCaches f16(specs, 32, 2, 4, kvad::Device::cpu(), {});
  const kvad::LayerCaches f32(specs, 32, 2, 4, kvad::Device::cpu(), {kvad::DType::F32, kvad::DType::F32});
  const kvad::LayerCaches k32(specs, 32, 2, 4, kvad::Device::cpu(), {kvad::DType::F32, kvad::DType::F16});
  // Full layer: 32 rows of 64 + 32 values; ring: 8 rows; 2 sequences.
  EXPECT_EQ(f16.bytes(), size_t(2) * (32 + 8) * (64 + 32) * 2);
  EXPECT_EQ(f32.bytes(), 2 * f16.bytes());
  EXPECT_EQ(k32.bytes(), size_t(2) * (32 + 8) * (64 * 4 + 32 * 2));
  EXPECT_EQ(f32.bytes_per_token(), 2 * f16.bytes_per_token());
  EXPECT_EQ(f16.bytes_per_token(), f16.bytes() / 64);
  try {
    kvad::LayerCaches bad(specs, 32, 2, 4, kvad::Device::cpu(), {kvad::DType::Q8_0, kvad::DType::F16});
    ADD_FAILURE() << "a q8_0 cache was accepted";
  } catch (const kvad::Error& e) {
    EXPECT_NE(std::string(e.what()).find("q8_0 is not supported; accepted: f16, f32"), std::string::npos) << e.what();
  }
  EXPECT_EQ(kvad::kv_cache_type("f16", "--cache-type-k"), kvad::DType::F16);
  EXPECT_EQ(kvad::kv_cache_type("f32", "--cache-type-v"), kvad::DType::F32);
  try {
    kvad::kv_cache_type("q4_0", "--cache-type-v");
    ADD_FAILURE() << "q4_0 was accepted";
  } catch (const kvad::Error& e) {
    EXPECT_EQ(std::string(e.what()), "--cache-type-v: 'q4_0' is not a KV cache type kvad has; accepted: f16 (default), f32");
  }
}

TEST(Cache, CopyPrefixFullAndRing) {
  for (const kvad::DType kv : {kvad::DType::F16, kvad::DType::F32}) {
    SCOPED_TRACE(kvad::dtype_name(kv));
    kvad::LayerSpec full, ring;
    full.k_dim = full.v_dim = 8;
    ring = full;
    ring.window = 4;  // with n_batch 2: 6 slots
    kvad::LayerCaches cache({full, ring}, 32, 2, 2, kvad::Device::cpu(), {kv, kv});
    const int32_t cur = 20;
    // Sequence 0 holds positions 0..19; row values encode (layer, position).
    for (int il = 0; il < 2; ++il) {
      kvad::KVLayer& L = cache.kv(il);
      for (int32_t p = 0; p < cur; ++p) {
        std::vector<float> row(8, static_cast<float>(il * 100 + p));
        const int32_t s = 0;
        const kvad::Tensor x = kvad::ops::wrap_host(row.data(), kvad::DType::F32, {8, 1, 1, 1});
        const kvad::Tensor ts = kvad::ops::wrap_host(&s, kvad::DType::I32, {1, 1, 1, 1});
        const kvad::Tensor tp = kvad::ops::wrap_host(&p, kvad::DType::I32, {1, 1, 1, 1});
        kvad::ops::kv_store(L.k, x, ts, tp, L.slots);
        kvad::ops::kv_store(L.v, x, ts, tp, L.slots);
      }
    }
    std::vector<int32_t> tok(cur, 0), pos(cur), seq(cur, 0);
    for (int32_t p = 0; p < cur; ++p) pos[p] = p;
    cache.advance({tok.data(), pos.data(), seq.data(), cur, nullptr, 0});
    ASSERT_EQ(cache.cached(0), cur);
    // The ring holds 14..19; position 10 reads 7..9: gone.
    EXPECT_FALSE(cache.copy_prefix(0, 1, 10));
    EXPECT_EQ(cache.cached(1), 0);
    EXPECT_FALSE(cache.copy_prefix(0, 1, cur + 1));  // more than src holds
    EXPECT_FALSE(cache.copy_prefix(0, 0, 5));        // onto itself
    // Position 18 reads 15..17: there.
    ASSERT_TRUE(cache.copy_prefix(0, 1, 18));
    EXPECT_EQ(cache.cached(1), 18);
    EXPECT_EQ(cache.cached(0), cur);
    auto value = [&](int il, bool k, int64_t row) {
      const kvad::KVLayer& L = cache.kv(il);
      if (kv == kvad::DType::F32) {
        std::vector<float> f(static_cast<size_t>(L.k.n_bytes() / 4));
        kvad::ops::to_host(k ? L.k : L.v, f.data());
        return f[static_cast<size_t>(row * 8)];
      }
      std::vector<uint16_t> h(static_cast<size_t>(L.k.n_bytes() / 2));
      kvad::ops::to_host(k ? L.k : L.v, h.data());
      return kvad::f16_to_f32(h[static_cast<size_t>(row * 8)]);
    };
    for (int32_t p = 0; p < 18; ++p) {
      EXPECT_EQ(value(0, true, 32 + p), static_cast<float>(p)) << p;  // full: row 32 + p
      EXPECT_EQ(value(0, false, 32 + p), static_cast<float>(p)) << p;
    }
    for (int32_t p = 15; p < 18; ++p) EXPECT_EQ(value(1, true, 6 + p % 6), static_cast<float>(100 + p)) << p;
  }
}
