// Strided views (tensor/tensor.h ne/nb; ops.h view, permute, transpose,
// cont) and every op that takes them (ops.h "Strided"), on every device
// present: cpu, sim, and cuda when a GPU is there. Each case is checked
// against a plain scalar loop computed here over the parent's host values,
// addressed through the view's own strides; sim must give the CPU's bits.
// The ops that do not take strided inputs must refuse them, naming the op
// and the shape. Odd sizes throughout (AVX2 rows and their tails).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/thread_pool.h"
#include "tensor/half.h"
#include "tensor/ops.h"

namespace {

using kvad::Device;
using kvad::DType;
using kvad::Tensor;
namespace ops = kvad::ops;
using Shape = std::array<int64_t, 4>;
using Strides = std::array<size_t, 4>;

std::vector<Device> devices() {
  std::vector<Device> d = {Device::cpu(), Device::sim()};
  if (ops::unavailable(Device::cuda()).empty()) d.push_back(Device::cuda());
  return d;
}
bool is_cuda(Device d) { return d.type == kvad::DeviceType::CUDA; }

std::vector<float> randn(std::mt19937& rng, size_t n) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

std::vector<float> host(const Tensor& t) {
  std::vector<float> v(t.n_elements());
  ops::to_host(t, v.data());
  return v;
}

// The elements of view v of a parent whose host floats are p, row-major
// over v's shape, read through v's strides (the definition of a view).
std::vector<float> through(const std::vector<float>& p, const Tensor& parent, const Tensor& v) {
  std::vector<float> out;
  const size_t base = v.offset - parent.offset;
  for (int64_t i3 = 0; i3 < v.ne[3]; ++i3)
    for (int64_t i2 = 0; i2 < v.ne[2]; ++i2)
      for (int64_t i1 = 0; i1 < v.ne[1]; ++i1)
        for (int64_t i0 = 0; i0 < v.ne[0]; ++i0) {
          const size_t b = base + i0 * v.nb[0] + i1 * v.nb[1] + i2 * v.nb[2] + i3 * v.nb[3];
          out.push_back(p[b / sizeof(float)]);
        }
  return out;
}

// A parent tensor of shape ne on d with random values (returned in *vals).
Tensor parent(std::mt19937& rng, Shape ne, Device d, std::vector<float>* vals) {
  *vals = randn(rng, ne[0] * ne[1] * ne[2] * ne[3]);
  return ops::from_host(vals->data(), DType::F32, ne, d);
}

void expect_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error (wanted one containing '" << needle << "')";
  } catch (const kvad::Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Strided, ViewsMoveNoBytes) {
  std::mt19937 rng(1);
  std::vector<float> pv;
  const Tensor p = parent(rng, {5, 3, 7, 2}, Device::cpu(), &pv);
  EXPECT_TRUE(p.is_contiguous());
  EXPECT_EQ(p.nb, (Strides{4, 20, 60, 420}));
  const Tensor t = ops::permute(p, {2, 0, 3, 1});  // dim i of p becomes dim axes[i]
  EXPECT_EQ(t.ne, (Shape{3, 2, 5, 7}));
  EXPECT_EQ(t.nb, (Strides{20, 420, 4, 60}));
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.storage, p.storage);
  EXPECT_EQ(t.raw(), p.raw());
  const Tensor tr = ops::transpose(p.view({15, 14, 1, 1}));
  EXPECT_EQ(tr.ne, (Shape{14, 15, 1, 1}));
  EXPECT_EQ(tr.nb[0], 60u);
  EXPECT_EQ(tr.nb[1], 4u);
  // A view at an offset: its first element is there.
  const Tensor v = ops::view(p, {2, 3, 1, 1}, {8, 20, 60, 60}, 12);
  EXPECT_EQ(v.f32()[0], pv[3]);
  EXPECT_EQ(through(pv, p, v), (std::vector<float>{pv[3], pv[5], pv[8], pv[10], pv[13], pv[15]}));
  // A size-1 dimension's stride does not matter to contiguity.
  EXPECT_TRUE(ops::view(p, {5, 3, 1, 1}, {4, 20, 999 * 4, 4}).is_contiguous());
  // rows() of a strided 2-D view keeps its row stride.
  const Tensor every_other = ops::view(p, {5, 4, 1, 1}, {4, 40, 160, 160});
  const Tensor r = every_other.rows(1, 3);
  EXPECT_EQ(r.nb[1], 40u);
  EXPECT_EQ(r.f32()[0], pv[10]);
}

TEST(Strided, ViewErrors) {
  std::mt19937 rng(2);
  std::vector<float> pv;
  const Tensor p = parent(rng, {6, 4, 1, 1}, Device::cpu(), &pv);
  expect_error([&] { ops::view(p, {6, 4, 1, 1}, {4, 24, 96, 96}, 4); }, "reaches past");
  expect_error([&] { ops::view(p, {3, 2, 1, 1}, {6, 24, 48, 48}); }, "multiples of the element");
  expect_error([&] { ops::permute(p, {0, 0, 1, 2}); }, "not a permutation");
  const Tensor t = ops::transpose(p);
  expect_error([&] { (void)t.view({24, 1, 1, 1}); }, "cannot be reshaped");
  // Every op that does not take strided inputs refuses one, naming itself and the shape.
  expect_error([&] { ops::rms_norm(t, Tensor{}, 1e-6f); }, "rms_norm: input [4, 6] nb [24, 4] is strided");
  expect_error([&] { ops::softmax(t); }, "softmax: input");
  expect_error([&] { ops::matmul(t, p); }, "matmul: input");
  expect_error([&] { ops::matmul(p.view({4, 6, 1, 1}), t); }, "matmul: input");
  expect_error([&] { ops::copy(t); }, "copy: input");
  std::vector<float> out(24);
  expect_error([&] { ops::to_host(t, out.data()); }, "to_host: input");
  expect_error([&] { ops::to(t, Device::sim()); }, "to: input");
  // Blocks stay whole and in dimension 0.
  std::vector<float> big = randn(rng, 64 * 3);
  const Tensor q8 = ops::convert(ops::from_host(big.data(), DType::F32, {64, 3, 1, 1}, Device::cpu()), DType::Q8_0);
  expect_error([&] { ops::transpose(q8); }, "blocks stay in dimension 0");
  expect_error([&] { ops::view(q8, {16, 3, 1, 1}, {34, 68, 204, 204}); }, "whole, contiguous blocks");
}

TEST(Strided, Cont) {
  std::mt19937 rng(3);
  kvad::ThreadPool pool(3);
  ops::PoolScope scope(pool);
  for (const Device d : devices()) {
    std::vector<float> pv;
    const Tensor p = parent(rng, {5, 3, 7, 2}, d, &pv);
    const std::vector<Tensor> views = {
        ops::permute(p, {2, 0, 3, 1}),
        ops::permute(p, {1, 0, 2, 3}),
        ops::transpose(p.view({21, 10, 1, 1})),
        ops::view(p, {3, 37, 1, 1}, {8, 12, 0, 0}, 4),      // overlapping rows
        ops::view(p, {4, 5, 3, 1}, {0, 4, 20, 0}),          // each element repeated along dim 0
        ops::view(p, {1, 5, 1, 1}, {4, 84, 4, 4}, 8),       // a column
    };
    for (const Tensor& v : views) {
      const Tensor c = ops::cont(v);
      EXPECT_TRUE(c.is_contiguous());
      EXPECT_EQ(c.ne, v.ne);
      EXPECT_EQ(host(c), through(pv, p, v)) << d.str() << " " << shape_str(v);
    }
    EXPECT_EQ(ops::cont(p).storage, p.storage) << "cont of a contiguous tensor is the tensor";
    // 2-byte and 4-byte integer elements.
    std::vector<uint16_t> h(6 * 5);
    for (size_t i = 0; i < h.size(); ++i) h[i] = kvad::f32_to_f16(pv[i]);
    const Tensor f16 = ops::from_host(h.data(), DType::F16, {6, 5, 1, 1}, d);
    const Tensor f16t = ops::cont(ops::transpose(f16));
    std::vector<uint16_t> got(30);
    ops::to_host(f16t, got.data());
    for (int64_t i = 0; i < 5; ++i)
      for (int64_t j = 0; j < 6; ++j) EXPECT_EQ(got[j * 5 + i], h[i * 6 + j]) << d.str();
    std::vector<int32_t> iv(12);
    for (int i = 0; i < 12; ++i) iv[i] = i * 7 - 20;
    const Tensor it = ops::cont(ops::transpose(ops::from_host(iv.data(), DType::I32, {4, 3, 1, 1}, d)));
    std::vector<int32_t> ig(12);
    ops::to_host(it, ig.data());
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 4; ++j) EXPECT_EQ(ig[j * 3 + i], iv[i * 4 + j]) << d.str();
    // Rows of a quantized tensor (whole blocks), every other one.
    std::vector<float> big = randn(rng, 64 * 6);
    const Tensor q8 = ops::convert(ops::from_host(big.data(), DType::F32, {64, 6, 1, 1}, Device::cpu()), DType::Q8_0);
    const Tensor qv = ops::view(ops::to(q8, d), {64, 3, 1, 1}, {34, 2 * 68, 6 * 68, 6 * 68}, 68);
    if (is_cuda(d)) {
      expect_error([&] { ops::cont(qv); }, "element formats only");
    } else {
      const Tensor qc = ops::cont(qv);
      std::vector<uint8_t> qb(qc.n_bytes()), all(q8.n_bytes());
      ops::to_host(qc, qb.data());
      ops::to_host(q8, all.data());
      for (int r = 0; r < 3; ++r) EXPECT_EQ(0, std::memcmp(&qb[r * 68], &all[(2 * r + 1) * 68], 68)) << d.str();
    }
  }
}

// out[i] = f(a[i], b[i]) over the broadcast shape, from the operands' host values.
std::vector<float> broadcast_ref(const std::vector<float>& a, Shape an, const std::vector<float>& b, Shape bn,
                                 const std::function<float(float, float)>& f, Shape* on) {
  Shape o;
  for (int i = 0; i < 4; ++i) o[i] = std::max(an[i], bn[i]);
  *on = o;
  std::vector<float> out;
  auto idx = [](Shape n, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    return (((n[3] > 1 ? i3 : 0) * n[2] + (n[2] > 1 ? i2 : 0)) * n[1] + (n[1] > 1 ? i1 : 0)) * n[0] +
           (n[0] > 1 ? i0 : 0);
  };
  for (int64_t i3 = 0; i3 < o[3]; ++i3)
    for (int64_t i2 = 0; i2 < o[2]; ++i2)
      for (int64_t i1 = 0; i1 < o[1]; ++i1)
        for (int64_t i0 = 0; i0 < o[0]; ++i0) out.push_back(f(a[idx(an, i0, i1, i2, i3)], b[idx(bn, i0, i1, i2, i3)]));
  return out;
}

TEST(Strided, AddMulBroadcastAndViews) {
  std::mt19937 rng(4);
  kvad::ThreadPool pool(2);
  ops::PoolScope scope(pool);
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{37, 5, 3, 1}, {37, 1, 1, 1}},  // one row over every row
      {{37, 5, 3, 1}, {1, 5, 3, 1}},   // one value per row ([c, 1])
      {{1, 5, 1, 1}, {37, 5, 1, 1}},   // a the smaller
      {{37, 1, 1, 1}, {1, 9, 1, 1}},   // an outer sum
      {{9, 4, 3, 2}, {1, 1, 1, 1}},    // a scalar
      {{41, 6, 1, 1}, {41, 6, 1, 1}},  // same shapes
  };
  for (const Device d : devices())
    for (const auto& [an, bn] : shapes)
      for (int op = 0; op < 2; ++op) {
        std::vector<float> av, bv;
        const Tensor a = parent(rng, an, d, &av), b = parent(rng, bn, d, &bv);
        const auto f = op == 0 ? std::function<float(float, float)>([](float x, float y) { return x + y; })
                               : std::function<float(float, float)>([](float x, float y) { return x * y; });
        Shape on;
        const std::vector<float> want = broadcast_ref(av, an, bv, bn, f, &on);
        const auto run = [&] { return op == 0 ? ops::add(a, b) : ops::mul(a, b); };
        const Tensor o = run();
        EXPECT_EQ(o.ne, on);
        EXPECT_EQ(host(o), want) << d.str() << " " << shape_str(a) << " " << shape_str(b);
      }
  // Permuted and transposed operands (a non-unit inner stride), odd sizes.
  for (const Device d : devices()) {
    std::vector<float> av, bv;
    const Tensor a = parent(rng, {13, 11, 3, 1}, d, &av), b = parent(rng, {11, 13, 3, 1}, d, &bv);
    const Tensor at = ops::permute(a, {1, 0, 2, 3});  // ne {11, 13, 3}, inner stride 52 bytes
    const std::vector<float> x = through(av, a, at), y = bv;
    std::vector<float> sum(x.size()), prod(x.size());
    for (size_t i = 0; i < x.size(); ++i) sum[i] = x[i] + y[i], prod[i] = x[i] * y[i];
    EXPECT_EQ(host(ops::add(at, b)), sum) << d.str();
    EXPECT_EQ(host(ops::mul(b, at)), prod) << d.str();
    // A column broadcast over a transposed operand: [c, 1] with stride 0.
    std::vector<float> cv;
    const Tensor c = parent(rng, {1, 13, 3, 1}, d, &cv);
    std::vector<float> want(x.size());
    for (int64_t i2 = 0; i2 < 3; ++i2)
      for (int64_t i1 = 0; i1 < 13; ++i1)
        for (int64_t i0 = 0; i0 < 11; ++i0) {
          const size_t i = (i2 * 13 + i1) * 11 + i0;
          want[i] = x[i] + cv[i2 * 13 + i1];
        }
    EXPECT_EQ(host(ops::add(at, c)), want) << d.str();
  }
}

TEST(Strided, UnaryScaleAndGlus) {
  std::mt19937 rng(5);
  kvad::ThreadPool pool(2);
  ops::PoolScope scope(pool);
  const auto silu = [](float v) { return v / (1.0f + std::exp(-v)); };
  const auto gelu = [](float v) {
    return 0.5f * v * (1.0f + std::tanh(0.7978845608028654f * v * (1.0f + 0.044715f * v * v)));
  };
  struct U {
    const char* name;
    std::function<Tensor(const Tensor&)> op;
    std::function<float(float)> ref;
  };
  const std::vector<U> unary = {
      {"silu", ops::silu, silu},
      {"gelu", ops::gelu, gelu},
      {"gelu_erf", ops::gelu_erf, [](float v) { return 0.5f * v * (1.0f + std::erf(v * 0.70710678118654752f)); }},
      {"sigmoid", ops::sigmoid, [](float v) { return 1.0f / (1.0f + std::exp(-v)); }},
      {"softplus", ops::softplus, [](float v) { return v > 20.0f ? v : std::log1p(std::exp(v)); }},
      {"scale", [](const Tensor& t) { return ops::scale(t, -0.37f); }, [](float v) { return v * -0.37f; }},
  };
  for (const Device d : devices()) {
    std::vector<float> pv, qv;
    const Tensor p = parent(rng, {19, 7, 3, 1}, d, &pv), q = parent(rng, {7, 19, 3, 1}, d, &qv);
    const Tensor v = ops::permute(p, {1, 0, 2, 3});  // ne {7, 19, 3}, inner stride 76 bytes
    const Tensor w = ops::view(q, {7, 19, 3, 1}, {4, 28, 532, 1596});  // q as it is, seen as a view
    const std::vector<float> x = through(pv, p, v);
    for (const U& u : unary) {
      if (is_cuda(d)) {
        expect_error([&] { u.op(v); }, "the CUDA row takes contiguous inputs only");
        continue;
      }
      const std::vector<float> got = host(u.op(v));
      double err = 0;
      for (size_t i = 0; i < x.size(); ++i)
        err = std::max(err, std::fabs(double(got[i]) - u.ref(x[i])) / std::max(1.0, std::fabs(double(u.ref(x[i])))));
      std::printf("[strided] %-9s %-4s max_err %.3g\n", u.name, d.str().c_str(), err);
      EXPECT_LE(err, 1e-6) << u.name << " " << d.str();
      // The same bits as the op on the contiguous copy.
      EXPECT_EQ(got, host(u.op(ops::cont(v)))) << u.name << " " << d.str();
    }
    if (is_cuda(d)) {
      expect_error([&] { ops::swiglu(v, w); }, "swiglu: the CUDA row takes contiguous inputs only");
      continue;
    }
    const std::vector<float> y = qv;
    const std::vector<float> sw = host(ops::swiglu(v, w)), sw2 = host(ops::swiglu(w, v)), ge = host(ops::geglu(v, w));
    const std::vector<float> oai = host(ops::swiglu_oai(v, w, 1.702f, 7.0f));
    double e1 = 0, e2 = 0, e3 = 0, e4 = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      e1 = std::max(e1, std::fabs(double(sw[i]) - silu(x[i]) * y[i]));
      e2 = std::max(e2, std::fabs(double(sw2[i]) - silu(y[i]) * x[i]));
      e3 = std::max(e3, std::fabs(double(ge[i]) - gelu(x[i]) * y[i]));
      const float g = std::min(x[i], 7.0f), u = std::clamp(y[i], -7.0f, 7.0f);
      e4 = std::max(e4, std::fabs(double(oai[i]) - (u + 1.0f) * (g / (1.0f + std::exp(-1.702f * g)))));
    }
    std::printf("[strided] glus      %-4s max_err %.3g %.3g %.3g %.3g\n", d.str().c_str(), e1, e2, e3, e4);
    EXPECT_LE(std::max({e1, e2, e3, e4}), 1e-5) << d.str();
    EXPECT_EQ(sw, host(ops::swiglu(ops::cont(v), ops::cont(w)))) << d.str();
    EXPECT_EQ(ge, host(ops::geglu(ops::cont(v), w))) << d.str();
  }
}

TEST(Strided, Concat) {
  std::mt19937 rng(6);
  for (const Device d : devices()) {
    // a: a permuted per-head product [H, n, R] seen as [n, H, R]; b: one
    // row per token repeated over the heads (stride 0).
    const int64_t H = 3, n = 5, R = 7, P = 4;
    std::vector<float> av, bv;
    const Tensor a = parent(rng, {R, n, H, 1}, d, &av), b = parent(rng, {P, n, 1, 1}, d, &bv);
    const Tensor ap = ops::permute(a, {0, 2, 1, 3});            // ne {R, H, n}
    const Tensor bb = ops::view(b, {P, H, n, 1}, {4, 0, P * 4, P * 4 * n});
    if (is_cuda(d)) {
      expect_error([&] { ops::concat(ap, bb); }, "concat: the CUDA row takes contiguous inputs only");
      continue;
    }
    const std::vector<float> got = host(ops::concat(ap, bb));  // [n·H, R + P]
    ASSERT_EQ(got.size(), size_t(n * H * (R + P)));
    for (int64_t t = 0; t < n; ++t)
      for (int64_t h = 0; h < H; ++h) {
        const float* row = &got[(t * H + h) * (R + P)];
        for (int64_t i = 0; i < R; ++i) EXPECT_EQ(row[i], av[(h * n + t) * R + i]);
        for (int64_t i = 0; i < P; ++i) EXPECT_EQ(row[R + i], bv[t * P + i]);
      }
  }
}

TEST(Strided, MatmulBatched) {
  std::mt19937 rng(7);
  const int64_t B = 3, k = 40, n_out = 9;
  for (DType wt : {DType::F32, DType::F16})
    for (int64_t n_tok : {1, 5, 21})
      for (const Device d : devices()) {
        std::vector<float> xv, wv;
        const Tensor xp = parent(rng, {k, B, n_tok, 1}, Device::cpu(), &xv);  // [n_tok, B, k]
        const Tensor w32 = parent(rng, {k, n_out, B, 1}, Device::cpu(), &wv);
        const Tensor w = ops::to(ops::convert(w32, wt), d);
        const Tensor x = ops::permute(ops::to(xp, d), {0, 2, 1, 3});  // [B, n_tok, k], strided
        const auto round = [&](float v) { return wt == DType::F16 ? kvad::f16_to_f32(kvad::f32_to_f16(v)) : v; };
        if (is_cuda(d)) {
          expect_error([&] { ops::matmul_batched(x, w); }, "not implemented on cuda");
          continue;
        }
        for (bool shared : {false, true}) {
          // shared: one x (batch 0's rows) for every batch, through stride 0.
          const Tensor xs = shared ? ops::view(ops::to(xp, d), {k, n_tok, B, 1}, {4, size_t(4 * k * B), 0, 0}) : x;
          const std::vector<float> got = host(ops::matmul_batched(xs, w));
          ASSERT_EQ(got.size(), size_t(B * n_tok * n_out));
          double worst = 0;
          for (int64_t b = 0; b < B; ++b)
            for (int64_t t = 0; t < n_tok; ++t)
              for (int64_t o = 0; o < n_out; ++o) {
                double ref = 0, mag = 0;
                for (int64_t i = 0; i < k; ++i) {
                  const double xi = round(xv[(t * B + (shared ? 0 : b)) * k + i]);
                  const double wi = round(wv[(b * n_out + o) * k + i]);
                  ref += xi * wi;
                  mag += std::fabs(xi * wi);
                }
                worst = std::max(worst, std::fabs(got[(b * n_tok + t) * n_out + o] - ref) / (1e-6 * mag + 1e-30));
              }
          std::printf("[strided] matmul_batched %s n_tok %2lld %s %-4s max |err| / (1e-6 Σ|x·w|) %.3g\n",
                      kvad::dtype_name(wt), static_cast<long long>(n_tok), shared ? "shared x" : "        ",
                      d.str().c_str(), worst);
          EXPECT_LE(worst, 1.0) << d.str();
          // Bit for bit what matmul_id gives with ids b (MLA's per-head products before).
          std::vector<float> xc(B * n_tok * k);
          for (int64_t t = 0; t < n_tok; ++t)
            for (int64_t b = 0; b < B; ++b)
              std::copy_n(&xv[(t * B + (shared ? 0 : b)) * k], k, &xc[(t * B + b) * k]);
          std::vector<int32_t> ids(B * n_tok);
          for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i % B);
          const Tensor yid = ops::matmul_id(ops::from_host(xc.data(), DType::F32, {k, B, n_tok, 1}, d), w,
                                            ops::from_host(ids.data(), DType::I32, {B, n_tok, 1, 1}, d));
          const std::vector<float> want = host(ops::cont(ops::permute(yid, {0, 2, 1, 3})));
          EXPECT_EQ(got, want) << d.str() << " " << kvad::dtype_name(wt) << " n_tok " << n_tok;
        }
      }
  std::vector<float> v(8 * 4);
  const Tensor x = ops::from_host(v.data(), DType::F32, {8, 2, 2, 1}, Device::cpu());
  expect_error([&] { ops::matmul_batched(ops::transpose(x), x); }, "strided rows");
  expect_error([&] { ops::matmul_batched(x, ops::transpose(x)); }, "matmul_batched: input");
  expect_error([&] { ops::matmul_batched(x, x.view({8, 4, 1, 1})); }, "is not [B, n_tok, n_in]");
}

}  // namespace
