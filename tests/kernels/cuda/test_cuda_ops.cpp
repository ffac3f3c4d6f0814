// CUDA ops (kernels/cuda/device_kernels.h) and the offload provider (offload.h) against
// the CPU references of the same ops (kernels/cpu). Every test skips with
// "no CUDA device: ..." when the machine has no GPU. Tolerances are stated
// per test; they are bounds chosen from the arithmetic (f32 summation order,
// bf16 operands), not measured yet: UNVERIFIED ON A GPU in this build.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/host_kernels.h"
#include "base/error.h"
#include "kernels/cuda/context.h"
#include "kernels/cuda/cpu_offload.h"
#include "kernels/cuda/offload.h"
#include "kernels/cuda/device_kernels.h"
#include "tensor/half.h"

namespace {

using kvad::DType;
using kvad::cuda::DeviceBuffer;

#define REQUIRE_CUDA_DEVICE()                          \
  do {                                                 \
    std::string why_;                                  \
    if (!kvad::cuda::available(&why_)) GTEST_SKIP() << why_; \
  } while (0)

template <class T>
DeviceBuffer up(const std::vector<T>& v) {
  DeviceBuffer b(std::max<size_t>(1, v.size() * sizeof(T)), "test");
  if (!v.empty()) kvad::cuda::copy_to_device(b.get(), v.data(), v.size() * sizeof(T), "test upload");
  return b;
}
template <class T = float>
std::vector<T> down(const DeviceBuffer& b, size_t n) {
  std::vector<T> v(n);
  kvad::cuda::copy_to_host(v.data(), b.get(), n * sizeof(T), "test download");
  return v;
}

std::vector<float> randn(std::mt19937& rng, size_t n, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// A host weight [n_out, n_in] in format t, made from random f32 values.
struct HostWeight {
  std::vector<uint8_t> bytes;
  kvad::Tensor t;
  std::vector<float> deq;  // the format's reference dequantization, [n_out, n_in]
};
HostWeight make_weight(std::mt19937& rng, DType type, int64_t n_in, int64_t n_out) {
  HostWeight w;
  const std::vector<float> f = randn(rng, n_in * n_out, 0.5f);
  const size_t rb = kvad::row_bytes(type, n_in);
  w.bytes.resize(rb * n_out);
  const auto& k = kvad::cpu::cpu_kernels(type);
  for (int64_t r = 0; r < n_out; ++r) k.from_float(&f[r * n_in], w.bytes.data() + r * rb, n_in);
  w.deq.resize(n_in * n_out);
  for (int64_t r = 0; r < n_out; ++r) k.to_float_ref(w.bytes.data() + r * rb, &w.deq[r * n_in], n_in);
  w.t.type = type;
  w.t.ne = {n_in, n_out, 1, 1};
  w.t.set_contiguous_strides();
  w.t.data = w.bytes.data();
  return w;
}

const DType kFormats[] = {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q6_K};

// matmul vs the definition: y[t, o] = Σ deq(W)[o, i] · x[t, i] in double.
// GEMV (n_tok <= 8) reads the blocks in f32: |err| <= 1e-4 · Σ|w·x| + 1e-5.
// GEMM (n_tok > 8) rounds W and x to bf16 (f16 for f16 weights), f32
// accumulation: |err| <= 1e-2 · Σ|w·x| + 1e-4 (f32 weights: 1e-4). Quantized
// weights take the default prefill path (KVAD_CUDA_GEMM, unset: the MMA GEMM).
TEST(CudaOps, MatmulMatchesReferenceAllFormats) {
  REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(1);
  const int64_t n_in = 512, n_out = 67;
  for (DType type : kFormats) {
    HostWeight w = make_weight(rng, type, n_in, n_out);
    DeviceBuffer wd = up(w.bytes);
    const kvad::cuda::DeviceMatrix m{type, n_in, n_out, wd.get()};
    for (int64_t n_tok : {1, 3, 8, 9, 40}) {
      const std::vector<float> x = randn(rng, n_tok * n_in);
      DeviceBuffer xd = up(x), yd(n_tok * n_out * sizeof(float));
      kvad::cuda::matmul(m, xd.as<float>(), n_tok, yd.as<float>());
      const std::vector<float> y = down(yd, n_tok * n_out);
      const bool gemm = n_tok > 8;
      const double rel = !gemm || type == DType::F32 ? 1e-4 : 1e-2;
      double max_err = 0;
      for (int64_t t = 0; t < n_tok; ++t)
        for (int64_t o = 0; o < n_out; ++o) {
          double s = 0, a = 0;
          for (int64_t i = 0; i < n_in; ++i) {
            s += static_cast<double>(w.deq[o * n_in + i]) * x[t * n_in + i];
            a += std::fabs(static_cast<double>(w.deq[o * n_in + i]) * x[t * n_in + i]);
          }
          const double err = std::fabs(y[t * n_out + o] - s);
          max_err = std::max(max_err, err);
          ASSERT_LE(err, rel * a + 1e-4) << kvad::dtype_name(type) << " n_tok " << n_tok << " t " << t << " o " << o;
        }
      std::printf("matmul %-5s n_tok %2lld (%s): max abs err %.3g\n", kvad::dtype_name(type),
                  static_cast<long long>(n_tok), gemm ? "gemm" : "gemv", max_err);
    }
  }
}

// gemm_mma, the prefill GEMM (W tiles dequantized to bf16 in shared memory,
// tensor-core MMA, f32 accumulators), for each quantized format on odd
// shapes: 77 rows of W (a partial second 64-row tile), 9, 33 and 130 tokens
// (partial token tiles), K = 13 blocks of Q8_0/Q4_0 (416: an odd number of
// 32-element units, so the last 64-column step is half empty) or 3 K-quant
// super-blocks (768); without split-K (1), with 3 slices forced, and with
// the automatic choice (which splits these small grids on a GPU with more
// multiprocessors than tiles). Two references in double:
//  (a) the brief's: the format's f32 dequantization × the bf16-rounded x the
//      kernel reads. The GPU also rounds W to bf16 (relative error <= 2^-9
//      per product) and accumulates in f32 (<= K·2^-24 ≈ 5e-5 relative for
//      K = 768): |err| <= 2^-8 · Σ|w·x| + 1e-5.
//  (b) the GPU's exact operands: W rounded to bf16 as well. A product of two
//      bf16 is exact in f32, so only the f32 accumulation (order, and the
//      tensor cores' internal adds) differs: |err| <= 2e-4 · Σ|w·x| + 1e-6.
//      A wrong fragment layout, tile offset or edge mask gives errors of the
//      size of the terms themselves; this bound catches those.
TEST(CudaOps, GemmMmaMatchesReference) {
  REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(11);
  const int64_t n_out = 77;
  for (DType type : {DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q6_K}) {
    const int64_t n_in = kvad::dtype_info(type).block_elems == 256 ? 768 : 416;
    HostWeight w = make_weight(rng, type, n_in, n_out);
    std::vector<float> wb(w.deq.size());
    for (size_t i = 0; i < wb.size(); ++i) wb[i] = kvad::bf16_to_f32(kvad::f32_to_bf16(w.deq[i]));
    DeviceBuffer wd = up(w.bytes);
    const kvad::cuda::DeviceMatrix m{type, n_in, n_out, wd.get()};
    for (int64_t n_tok : {9, 33, 130}) {
      const std::vector<float> xf = randn(rng, n_tok * n_in);
      std::vector<uint16_t> xh(xf.size());
      std::vector<float> x(xf.size());
      for (size_t i = 0; i < xf.size(); ++i) {
        xh[i] = kvad::f32_to_bf16(xf[i]);
        x[i] = kvad::bf16_to_f32(xh[i]);
      }
      DeviceBuffer xd = up(xh);
      for (int split : {1, 3, 0}) {
        const int splits = kvad::cuda::gemm_mma_splits(n_in, n_out, n_tok, kvad::cuda::Context::get().sm_count(), split);
        DeviceBuffer yd(n_tok * n_out * sizeof(float));
        kvad::cuda::gemm_mma(m, xd.as<uint16_t>(), n_tok, yd.as<float>(), split);
        const std::vector<float> y = down(yd, n_tok * n_out);
        double err_a = 0, err_b = 0;
        for (int64_t t = 0; t < n_tok; ++t)
          for (int64_t o = 0; o < n_out; ++o) {
            double sa = 0, sb = 0, a = 0;
            for (int64_t i = 0; i < n_in; ++i) {
              const double xi = x[t * n_in + i];
              sa += static_cast<double>(w.deq[o * n_in + i]) * xi;
              sb += static_cast<double>(wb[o * n_in + i]) * xi;
              a += std::fabs(static_cast<double>(w.deq[o * n_in + i]) * xi);
            }
            const double ea = std::fabs(y[t * n_out + o] - sa), eb = std::fabs(y[t * n_out + o] - sb);
            err_a = std::max(err_a, ea);
            err_b = std::max(err_b, eb);
            ASSERT_LE(ea, a / 256 + 1e-5) << kvad::dtype_name(type) << " n_tok " << n_tok << " split " << split
                                          << " t " << t << " o " << o;
            ASSERT_LE(eb, 2e-4 * a + 1e-6) << kvad::dtype_name(type) << " n_tok " << n_tok << " split " << split
                                           << " t " << t << " o " << o << " (vs bf16-rounded W)";
          }
        std::printf("gemm_mma %-4s K %3lld n_tok %3lld split_k %d (%d slices): max abs err %.3g, vs bf16 W %.3g\n",
                    kvad::dtype_name(type), static_cast<long long>(n_in), static_cast<long long>(n_tok), split,
                    splits, err_a, err_b);
      }
    }
  }
}

// matmul's two prefill paths for a quantized W (KVAD_CUDA_GEMM=mma|cublas,
// passed explicitly here) give the same operands (W and x rounded to bf16)
// with f32 accumulation in different orders: each within (a)'s bound of the
// f32 reference, and within 2e-4 · Σ|w·x| of each other. n_tok = 40, 1000
// rows (16 row tiles: the automatic choice splits K on an H200).
TEST(CudaOps, MatmulMmaAndCublasPathsAgree) {
  REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(12);
  const int64_t n_in = 512, n_out = 1000, n_tok = 40;
  for (DType type : {DType::Q8_0, DType::Q4_K}) {
    HostWeight w = make_weight(rng, type, n_in, n_out);
    const std::vector<float> x = randn(rng, n_tok * n_in);
    DeviceBuffer wd = up(w.bytes), xd = up(x), ym(n_tok * n_out * 4), yc(n_tok * n_out * 4);
    const kvad::cuda::DeviceMatrix m{type, n_in, n_out, wd.get()};
    kvad::cuda::matmul(m, xd.as<float>(), n_tok, ym.as<float>(), kvad::cuda::GemmPath::Mma);
    kvad::cuda::matmul(m, xd.as<float>(), n_tok, yc.as<float>(), kvad::cuda::GemmPath::Cublas);
    const std::vector<float> a = down(ym, n_tok * n_out), b = down(yc, n_tok * n_out);
    double max_diff = 0;
    for (int64_t t = 0; t < n_tok; ++t)
      for (int64_t o = 0; o < n_out; ++o) {
        double s = 0, sa = 0;
        for (int64_t i = 0; i < n_in; ++i) {
          const double xi = kvad::bf16_to_f32(kvad::f32_to_bf16(x[t * n_in + i]));
          s += static_cast<double>(w.deq[o * n_in + i]) * xi;
          sa += std::fabs(static_cast<double>(w.deq[o * n_in + i]) * xi);
        }
        const size_t k = t * n_out + o;
        max_diff = std::max(max_diff, static_cast<double>(std::fabs(a[k] - b[k])));
        ASSERT_LE(std::fabs(a[k] - s), sa / 256 + 1e-5) << kvad::dtype_name(type) << " mma t " << t << " o " << o;
        ASSERT_LE(std::fabs(b[k] - s), sa / 256 + 1e-5) << kvad::dtype_name(type) << " cublas t " << t << " o " << o;
        ASSERT_LE(std::fabs(a[k] - b[k]), 2e-4 * sa + 1e-6) << kvad::dtype_name(type) << " t " << t << " o " << o;
      }
    std::printf("matmul %-4s n_tok %lld: max |mma - cublas| %.3g\n", kvad::dtype_name(type),
                static_cast<long long>(n_tok), max_diff);
  }
}

// get_rows dequantizes with the reference's roundings: bit-exact.
TEST(CudaOps, GetRowsExact) {
  REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(2);
  const int64_t n_in = 512, n_rows = 50;
  const std::vector<int32_t> ids = {0, 49, 7, 7, 23};
  for (DType type : kFormats) {
    HostWeight w = make_weight(rng, type, n_in, n_rows);
    DeviceBuffer wd = up(w.bytes), idd = up(ids), out(ids.size() * n_in * sizeof(float));
    kvad::cuda::get_rows({type, n_in, n_rows, wd.get()}, idd.as<int32_t>(), ids.size(), out.as<float>());
    const std::vector<float> y = down(out, ids.size() * n_in);
    for (size_t i = 0; i < ids.size(); ++i)
      for (int64_t j = 0; j < n_in; ++j)
        ASSERT_EQ(y[i * n_in + j], w.deq[ids[i] * n_in + j]) << kvad::dtype_name(type) << " id " << ids[i] << " col " << j;
  }
}

// |err| <= 1e-5 · |y| + 1e-6 (f32 vs double sum of squares).
TEST(CudaOps, RmsNorm) {
  REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(3);
  const int64_t rows = 5, n = 1000;
  const std::vector<float> x = randn(rng, rows * n, 3.0f), w = randn(rng, n);
  DeviceBuffer xd = up(x), wd = up(w), yd(rows * n * 4);
  kvad::cuda::rms_norm(xd.as<float>(), wd.as<float>(), rows, n, 1e-6f, yd.as<float>());
  const std::vector<float> y = down(yd, rows * n);
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<float> ref(n);
    kvad::cpu::rms_norm(&x[r * n], w.data(), n, 1e-6f, ref.data());
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(y[r * n + i], ref[i], 1e-5 * std::fabs(ref[i]) + 1e-6);
  }
}

// Normal and NeoX pairing, partial rotation, positions up to 3000:
// |err| <= 2e-3 (theta = pos · base^(-2i/n_rot) differs by ulps of powf, times pos).
TEST(CudaOps, Rope) {
  REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(4);
  const int64_t n_tok = 4, H = 3, D = 64;
  const std::vector<int32_t> pos = {0, 1, 17, 3000};
  for (bool neox : {false, true})
    for (int64_t n_rot : {D, D / 2}) {
      std::vector<float> x = randn(rng, n_tok * H * D);
      DeviceBuffer xd = up(x), pd = up(pos);
      kvad::cuda::rope(xd.as<float>(), pd.as<int32_t>(), n_tok, H, D, n_rot, 10000.0f, 0.5f, neox);
      const std::vector<float> y = down(xd, x.size());
      for (int64_t t = 0; t < n_tok; ++t)
        kvad::cpu::rope(&x[t * H * D], H, D, n_rot, pos[t], 10000.0f, 0.5f, neox);
      for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(y[i], x[i], 2e-3) << "neox " << neox << " n_rot " << n_rot << " i " << i;
    }
}

// |err| <= 1e-5 · |ref| + 1e-6.
TEST(CudaOps, SwigluGegluAddScale) {
  REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(5);
  const int64_t n = 3001;
  const std::vector<float> g = randn(rng, n, 3.0f), u = randn(rng, n);
  for (int op = 0; op < 4; ++op) {
    std::vector<float> ref = g;
    DeviceBuffer gd = up(g), ud = up(u);
    switch (op) {
      case 0: kvad::cpu::swiglu(ref.data(), u.data(), n); kvad::cuda::swiglu(gd.as<float>(), ud.as<float>(), n); break;
      case 1: kvad::cpu::geglu(ref.data(), u.data(), n); kvad::cuda::geglu(gd.as<float>(), ud.as<float>(), n); break;
      case 2: kvad::cpu::add(ref.data(), u.data(), n); kvad::cuda::add(gd.as<float>(), ud.as<float>(), n); break;
      default: for (float& v : ref) v *= 1.5f; kvad::cuda::scale(gd.as<float>(), 1.5f, n); break;
    }
    const std::vector<float> y = down(gd, n);
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(y[i], ref[i], 1e-5 * std::fabs(ref[i]) + 1e-6) << "op " << op << " i " << i;
  }
}

// f16 and bf16 conversion: bit-exact against tensor/half.h.
TEST(CudaOps, F32ToHalfExact) {
  REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(6);
  const std::vector<float> x = randn(rng, 1000, 100.0f);
  for (bool bf16 : {false, true}) {
    DeviceBuffer xd = up(x), yd(x.size() * 2);
    kvad::cuda::f32_to_half(xd.as<float>(), yd.as<uint16_t>(), x.size(), bf16);
    const std::vector<uint16_t> y = down<uint16_t>(yd, x.size());
    for (size_t i = 0; i < x.size(); ++i)
      ASSERT_EQ(y[i], bf16 ? kvad::f32_to_bf16(x[i]) : kvad::f32_to_f16(x[i])) << i;
  }
}

// kv_write then attention (GQA 6 query heads on 2 kv heads, causal, with and
// without a sliding window, two sequences) vs cpu::attention_f16 per token:
// |err| <= 1e-4.
TEST(CudaOps, KvWriteAndAttention) {
  REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(7);
  for (int64_t D : {64, 256}) {
    const int64_t H = 6, Hkv = 2, kv_dim = Hkv * D, n_ctx = 40, n_seq = 2;
    // Sequence 0 gets 30 tokens, sequence 1 gets 5, in one batch.
    std::vector<int32_t> seq, pos;
    for (int p = 0; p < 30; ++p) { seq.push_back(0); pos.push_back(p); }
    for (int p = 0; p < 5; ++p) { seq.push_back(1); pos.push_back(p); }
    const int64_t n = seq.size();
    const std::vector<float> q = randn(rng, n * H * D), k = randn(rng, n * kv_dim), v = randn(rng, n * kv_dim);
    DeviceBuffer qd = up(q), kd = up(k), vd = up(v), sd = up(seq), pd = up(pos);
    DeviceBuffer kc(n_seq * n_ctx * kv_dim * 2), vc(n_seq * n_ctx * kv_dim * 2), od(n * H * D * 4);
    kvad::cuda::kv_write(kd.as<float>(), n, kv_dim, sd.as<int32_t>(), pd.as<int32_t>(), kc.as<uint16_t>(), n_ctx, n_seq);
    kvad::cuda::kv_write(vd.as<float>(), n, kv_dim, sd.as<int32_t>(), pd.as<int32_t>(), vc.as<uint16_t>(), n_ctx, n_seq);
    std::vector<uint16_t> kh(n_seq * n_ctx * kv_dim), vh(n_seq * n_ctx * kv_dim);
    for (int64_t t = 0; t < n; ++t) {
      const size_t row = (static_cast<size_t>(seq[t]) * n_ctx + pos[t]) * kv_dim;
      kvad::cpu::f32_to_f16_row(&k[t * kv_dim], &kh[row], kv_dim);
      kvad::cpu::f32_to_f16_row(&v[t * kv_dim], &vh[row], kv_dim);
    }
    for (int32_t window : {0, 7}) {
      const float scale = 1.0f / std::sqrt(static_cast<float>(D));
      kvad::cuda::attention(qd.as<float>(), kc.as<uint16_t>(), vc.as<uint16_t>(), sd.as<int32_t>(), pd.as<int32_t>(), n,
                            H, Hkv, D, n_ctx, n_seq, scale, window, od.as<float>());
      const std::vector<float> o = down(od, n * H * D);
      std::vector<float> ref(H * D), scratch(n_ctx);
      for (int64_t t = 0; t < n; ++t) {
        const int64_t first = window > 0 ? std::max<int64_t>(0, pos[t] - window + 1) : 0;
        const size_t row = (static_cast<size_t>(seq[t]) * n_ctx + first) * kv_dim;
        kvad::cpu::attention_f16(&q[t * H * D], &kh[row], &vh[row], pos[t] + 1 - first, kv_dim, H, Hkv, D, scale,
                                 ref.data(), scratch.data());
        for (int64_t i = 0; i < H * D; ++i)
          ASSERT_NEAR(o[t * H * D + i], ref[i], 1e-4) << "D " << D << " window " << window << " t " << t << " i " << i;
      }
    }
  }
}

// The ring layout of a sliding-window cache: slots = 9 < positions written
// (0..19, in steps of slots - window = 4 tokens as a Session would write
// them), window 5, two sequences. Each step's attention is compared with
// cpu::attention_f16 over the visible positions laid out linearly: |err| <= 1e-4.
TEST(CudaOps, RingAttentionWraps) {
  REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(13);
  const int64_t D = 64, H = 4, Hkv = 2, kv_dim = Hkv * D, slots = 9, n_seq = 2;
  const int32_t window = 5;
  DeviceBuffer kc(n_seq * slots * kv_dim * 2), vc(n_seq * slots * kv_dim * 2);
  std::vector<std::vector<uint16_t>> kh(n_seq), vh(n_seq);  // every position written, linear
  const float scale = 0.125f;
  for (int32_t p0 = 0; p0 < 20; p0 += slots - window) {
    std::vector<int32_t> seq, pos;
    for (int32_t s = 0; s < n_seq; ++s)
      for (int32_t p = p0; p < std::min(20, p0 + static_cast<int32_t>(slots - window)); ++p) {
        seq.push_back(s);
        pos.push_back(p);
      }
    const int64_t n = seq.size();
    const std::vector<float> q = randn(rng, n * H * D), k = randn(rng, n * kv_dim), v = randn(rng, n * kv_dim);
    DeviceBuffer qd = up(q), kd = up(k), vd = up(v), sd = up(seq), pd = up(pos), od(n * H * D * 4);
    kvad::cuda::kv_write(kd.as<float>(), n, kv_dim, sd.as<int32_t>(), pd.as<int32_t>(), kc.as<uint16_t>(), slots, n_seq);
    kvad::cuda::kv_write(vd.as<float>(), n, kv_dim, sd.as<int32_t>(), pd.as<int32_t>(), vc.as<uint16_t>(), slots, n_seq);
    for (int64_t t = 0; t < n; ++t) {
      auto& ks = kh[seq[t]];
      auto& vs = vh[seq[t]];
      ks.resize((pos[t] + 1) * kv_dim);
      vs.resize((pos[t] + 1) * kv_dim);
      kvad::cpu::f32_to_f16_row(&k[t * kv_dim], &ks[pos[t] * kv_dim], kv_dim);
      kvad::cpu::f32_to_f16_row(&v[t * kv_dim], &vs[pos[t] * kv_dim], kv_dim);
    }
    kvad::cuda::attention(qd.as<float>(), kc.as<uint16_t>(), vc.as<uint16_t>(), sd.as<int32_t>(), pd.as<int32_t>(), n, H,
                          Hkv, D, slots, n_seq, scale, window, od.as<float>());
    const std::vector<float> o = down(od, n * H * D);
    std::vector<float> ref(H * D), scratch(slots);
    for (int64_t t = 0; t < n; ++t) {
      const int64_t first = std::max<int64_t>(0, pos[t] - window + 1);
      kvad::cpu::attention_f16(&q[t * H * D], &kh[seq[t]][first * kv_dim], &vh[seq[t]][first * kv_dim],
                               pos[t] + 1 - first, kv_dim, H, Hkv, D, scale, ref.data(), scratch.data());
      for (int64_t i = 0; i < H * D; ++i)
        ASSERT_NEAR(o[t * H * D + i], ref[i], 1e-4) << "step at " << p0 << " t " << t << " i " << i;
    }
  }
}

// The row kernels the op table needs beyond the decoder's: rms_norm with
// 1 + w, layer_norm, softmax (rows of 1000 and of 37: more and fewer values
// than the block's 256 threads), silu, gelu, add and mul with a broadcast
// row, out-of-place rope (input unchanged), concat, the f32 gather (ids out
// of range give zeros), against the CPU references or their definitions in
// double: |err| <= 1e-5 · |ref| + 1e-6.
TEST(CudaOps, RowKernels) {
  REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(14);
  auto near = [](const std::vector<float>& got, const std::vector<double>& ref, const char* op) {
    ASSERT_EQ(got.size(), ref.size()) << op;
    for (size_t i = 0; i < ref.size(); ++i) ASSERT_NEAR(got[i], ref[i], 1e-5 * std::fabs(ref[i]) + 1e-6) << op << " i " << i;
  };
  for (int64_t n : {1000, 37}) {
    const int64_t rows = 3;
    const std::vector<float> x = randn(rng, rows * n, 2.0f), w = randn(rng, n), b = randn(rng, n);
    DeviceBuffer xd = up(x), wd = up(w), bd = up(b), yd(rows * n * 4);
    std::vector<double> ref(rows * n);
    kvad::cuda::rms_norm(xd.as<float>(), wd.as<float>(), rows, n, 1e-6f, yd.as<float>(), true);
    for (int64_t r = 0; r < rows; ++r) {
      double ss = 0;
      for (int64_t i = 0; i < n; ++i) ss += double(x[r * n + i]) * x[r * n + i];
      for (int64_t i = 0; i < n; ++i) ref[r * n + i] = x[r * n + i] / std::sqrt(ss / n + 1e-6) * (1.0 + w[i]);
    }
    near(down(yd, rows * n), ref, "rms_norm 1+w");
    kvad::cuda::layer_norm(xd.as<float>(), wd.as<float>(), bd.as<float>(), rows, n, 1e-5f, yd.as<float>());
    for (int64_t r = 0; r < rows; ++r) {
      double mean = 0, var = 0;
      for (int64_t i = 0; i < n; ++i) mean += x[r * n + i];
      mean /= n;
      for (int64_t i = 0; i < n; ++i) var += (x[r * n + i] - mean) * (x[r * n + i] - mean);
      for (int64_t i = 0; i < n; ++i) ref[r * n + i] = (x[r * n + i] - mean) / std::sqrt(var / n + 1e-5) * w[i] + b[i];
    }
    near(down(yd, rows * n), ref, "layer_norm");
    kvad::cuda::softmax(xd.as<float>(), rows, n, yd.as<float>());
    std::vector<float> sm = x;
    for (int64_t r = 0; r < rows; ++r) kvad::cpu::softmax(&sm[r * n], n);
    near(down(yd, rows * n), std::vector<double>(sm.begin(), sm.end()), "softmax");
    kvad::cuda::silu(xd.as<float>(), rows * n, yd.as<float>());
    for (int64_t i = 0; i < rows * n; ++i) ref[i] = x[i] / (1.0 + std::exp(-double(x[i])));
    near(down(yd, rows * n), ref, "silu");
    kvad::cuda::gelu(xd.as<float>(), rows * n, yd.as<float>());
    std::vector<float> ge = x;
    kvad::cpu::gelu(ge.data(), rows * n);
    near(down(yd, rows * n), std::vector<double>(ge.begin(), ge.end()), "gelu");
    kvad::cuda::add(xd.as<float>(), bd.as<float>(), rows * n, n, yd.as<float>());
    for (int64_t i = 0; i < rows * n; ++i) ref[i] = double(x[i]) + b[i % n];
    near(down(yd, rows * n), ref, "add (row broadcast)");
    kvad::cuda::mul(xd.as<float>(), bd.as<float>(), rows * n, n, yd.as<float>());
    for (int64_t i = 0; i < rows * n; ++i) ref[i] = double(x[i]) * b[i % n];
    near(down(yd, rows * n), ref, "mul (row broadcast)");
    // concat [rows, n] | [rows, 5]
    const std::vector<float> c = randn(rng, rows * 5);
    DeviceBuffer cd = up(c), jd(rows * (n + 5) * 4);
    kvad::cuda::concat(xd.as<float>(), cd.as<float>(), rows, n, 5, jd.as<float>());
    const std::vector<float> j = down(jd, rows * (n + 5));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < n + 5; ++i)
        ASSERT_EQ(j[r * (n + 5) + i], i < n ? x[r * n + i] : c[r * 5 + i - n]) << "concat r " << r << " i " << i;
    // f32 gather: rows 2, 0, an id past the end, -1.
    const std::vector<int32_t> ids = {2, 0, 3, -1};
    DeviceBuffer idd = up(ids), gd(ids.size() * n * 4);
    kvad::cuda::get_rows_f32(xd.as<float>(), rows, n, idd.as<int32_t>(), ids.size(), gd.as<float>());
    const std::vector<float> g = down(gd, ids.size() * n);
    for (size_t i = 0; i < ids.size(); ++i)
      for (int64_t e = 0; e < n; ++e)
        ASSERT_EQ(g[i * n + e], ids[i] >= 0 && ids[i] < rows ? x[ids[i] * n + e] : 0.0f) << "get_rows_f32 " << i;
  }
  // rope out of place, partial rotary (head_dim 48, n_rot 32): x unchanged.
  const int64_t n_tok = 3, H = 2, D = 48;
  const std::vector<int32_t> pos = {0, 5, 1000};
  std::vector<float> x = randn(rng, n_tok * H * D);
  DeviceBuffer xd = up(x), pd = up(pos), yd(x.size() * 4);
  kvad::cuda::rope(xd.as<float>(), pd.as<int32_t>(), n_tok, H, D, 32, 10000.0f, 1.0f, true, yd.as<float>());
  const std::vector<float> y = down(yd, x.size()), x_after = down(xd, x.size());
  EXPECT_EQ(x_after, x) << "rope wrote its input";
  for (int64_t t = 0; t < n_tok; ++t) kvad::cpu::rope(&x[t * H * D], H, D, 32, pos[t], 10000.0f, 1.0f, true);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(y[i], x[i], 2e-3) << "rope i " << i;
}

// Two device ops chained with no host read between them (rms_norm, then
// matmul on its output), read once at the end: |err| as the GEMV bound.
TEST(CudaOps, ChainWithoutHostRoundTrip) {
  REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(8);
  const int64_t n_in = 256, n_out = 33;
  HostWeight w = make_weight(rng, DType::Q8_0, n_in, n_out);
  const std::vector<float> x = randn(rng, n_in, 4.0f);
  DeviceBuffer wd = up(w.bytes), xd = up(x), nd(n_in * 4), yd(n_out * 4);
  kvad::cuda::rms_norm(xd.as<float>(), nullptr, 1, n_in, 1e-5f, nd.as<float>());
  kvad::cuda::matmul({DType::Q8_0, n_in, n_out, wd.get()}, nd.as<float>(), 1, yd.as<float>());
  const std::vector<float> y = down(yd, n_out);
  std::vector<float> nrm(n_in);
  kvad::cpu::rms_norm(x.data(), nullptr, n_in, 1e-5f, nrm.data());
  for (int64_t o = 0; o < n_out; ++o) {
    double s = 0, a = 0;
    for (int64_t i = 0; i < n_in; ++i) {
      s += static_cast<double>(w.deq[o * n_in + i]) * nrm[i];
      a += std::fabs(static_cast<double>(w.deq[o * n_in + i]) * nrm[i]);
    }
    ASSERT_NEAR(y[o], s, 1e-4 * a + 1e-5) << o;
  }
}

// Offload: results equal the GEMV bound; x changed right after submission
// does not change the result (the copy at submit is the reader fence); with
// every slot busy try_matmul returns nullopt (the caller runs on the CPU).
TEST(CudaOffload, FenceAndSlotExhaustion) {
  REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(9);
  const int64_t n_in = 256, n_out = 40, n_tok = 2;
  HostWeight w = make_weight(rng, DType::Q4_0, n_in, n_out);
  kvad::cuda::Offload off(2);
  std::vector<float> x = randn(rng, n_tok * n_in);
  const std::vector<float> x0 = x;
  std::vector<float> y1(n_tok * n_out), y2(n_tok * n_out), y3(n_tok * n_out);
  auto t1 = off.try_matmul(w.t, x.data(), n_tok, y1.data());
  ASSERT_TRUE(t1.has_value());
  std::fill(x.begin(), x.end(), 1e6f);  // after submission: must not be seen
  auto t2 = off.try_matmul(w.t, x0.data(), n_tok, y2.data());
  ASSERT_TRUE(t2.has_value());
  EXPECT_EQ(off.busy_slots(), 2);
  auto t3 = off.try_matmul(w.t, x0.data(), n_tok, y3.data());
  EXPECT_FALSE(t3.has_value()) << "all slots busy: the op must fall back to the CPU, not queue";
  t1->wait();
  t2->wait();
  EXPECT_EQ(off.busy_slots(), 0);
  EXPECT_TRUE(off.resident(w.t));
  for (int64_t i = 0; i < n_tok * n_out; ++i) ASSERT_EQ(y1[i], y2[i]) << i;
  for (int64_t t = 0; t < n_tok; ++t)
    for (int64_t o = 0; o < n_out; ++o) {
      double s = 0, a = 0;
      for (int64_t i = 0; i < n_in; ++i) {
        s += static_cast<double>(w.deq[o * n_in + i]) * x0[t * n_in + i];
        a += std::fabs(static_cast<double>(w.deq[o * n_in + i]) * x0[t * n_in + i]);
      }
      ASSERT_NEAR(y1[t * n_out + o], s, 1e-4 * a + 1e-5);
    }
  // A format without CUDA kernels is not offloaded.
  HostWeight w41 = make_weight(rng, DType::Q4_1, n_in, n_out);
  EXPECT_FALSE(off.try_matmul(w41.t, x0.data(), n_tok, y3.data()).has_value());
}

// The offload work gate is host logic: tested everywhere, device or not.
TEST(CudaOffloadGate, ByWorkFormatAndResidency) {
  std::mt19937 rng(10);
  HostWeight q8 = make_weight(rng, DType::Q8_0, 256, 64), q41 = make_weight(rng, DType::Q4_1, 256, 64);
  kvad::cuda::OffloadGate g;
  g.min_work = 256 * 64 * 100;          // 100 tokens when not resident
  g.min_work_resident = 256 * 64 * 10;  // 10 tokens when resident
  EXPECT_FALSE(g.admits(q8.t, 99, false, 0));
  EXPECT_TRUE(g.admits(q8.t, 100, false, 0));
  EXPECT_FALSE(g.admits(q8.t, 9, true, 0));
  EXPECT_TRUE(g.admits(q8.t, 10, true, 0));
  EXPECT_FALSE(g.admits(q41.t, 1000, false, 0)) << "q4_1 has no CUDA kernels";
  g.formats = {DType::Q4_K};
  EXPECT_FALSE(g.admits(q8.t, 1000, false, 0)) << "format not in KVAD_GPU_FORMATS";
  g.formats.clear();
  g.max_resident_bytes = q8.bytes.size() - 1;
  EXPECT_FALSE(g.admits(q8.t, 1000, false, 0)) << "would pass KVAD_GPU_MAX_RESIDENT_MB";
  EXPECT_TRUE(g.admits(q8.t, 1000, true, q8.bytes.size())) << "already resident: no new bytes";

  setenv("KVAD_GPU_MIN_WORK", "12345", 1);
  setenv("KVAD_GPU_FORMATS", "q8_0,Q4_K", 1);
  const kvad::cuda::OffloadGate e = kvad::cuda::OffloadGate::from_env();
  EXPECT_EQ(e.min_work, 12345);
  ASSERT_EQ(e.formats.size(), 2u);
  EXPECT_EQ(e.formats[1], DType::Q4_K);
  setenv("KVAD_GPU_FORMATS", "q4_1", 1);
  EXPECT_THROW(kvad::cuda::OffloadGate::from_env(), kvad::Error);
  setenv("KVAD_GPU_MIN_WORK", "lots", 1);
  unsetenv("KVAD_GPU_FORMATS");
  EXPECT_THROW(kvad::cuda::OffloadGate::from_env(), kvad::Error);
  unsetenv("KVAD_GPU_MIN_WORK");
}

// Without a device the provider says so, as kvad::Error, with the reason.
TEST(CudaContext, NoDeviceIsAClearError) {
  std::string why;
  if (kvad::cuda::available(&why)) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_EQ(why.rfind("no CUDA device", 0), 0u) << why;
  EXPECT_THROW(kvad::cuda::Context::get(), kvad::Error);
}

}  // namespace
