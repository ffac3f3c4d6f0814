// The tiled matrix products (CpuKernels::gemm, kernels/cpu/gemm.h) against
// their definition, the loop of reference vec_dots (gemm_ref), on random
// data with odd shapes: block counts that are not a multiple of the kernels'
// four-block groups, row counts and token counts (1..9, 17) that are not a
// multiple of the tiles; and cpu::matmul end to end (threads 1..3) against
// the same loop.
//
// Tolerance: the gemm forms the reference's exact integer block sums (split
// in two halves per block) and adds the scaled terms in another order, so
// for each output, by Higham ("Accuracy and Stability of Numerical
// Algorithms", 4.2), |gemm - ref| <= 2 * (2 nb + 16) * eps * S with
// S = sum over elements of (|x| + 2|min|) * |y| (min: Q4_1's block min,
// Q4_K's sub-block dmin * m), as test_formats' VecDot. The K-quant gemms
// (Q4_K, Q6_K) form the reference's exact integer sums per lane and keep
// the float sums in lanes (gemm_kquants_avx2.cpp), under the same bound.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <random>
#include <vector>

#include "base/cpu_features.h"
#include "base/thread_pool.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/host_kernels.h"
#include "tensor/dtype.h"
#include "tensor/half.h"
#include "tensor/tensor.h"

using namespace kvad;
using cpu::CpuKernels;

namespace {

const DType kGemmFormats[] = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q8_0,
                              DType::Q4_K, DType::Q6_K, DType::F32, DType::F16};

// The K-quant gemms do the reference's float arithmetic on the same exact
// integer sums: their outputs equal the reference bit for bit.

// Random floats with a different scale per 32-element run and a few edge
// runs (zero, constant, one outlier).
std::vector<float> random_floats(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> N(0.0f, 1.0f);
  std::uniform_real_distribution<float> U(-3.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t b = 0; b < n; b += 32) {
    const int kind = static_cast<int>(rng() % 16);
    const float scale = std::pow(10.0f, U(rng));
    for (int64_t j = b; j < std::min(n, b + 32); ++j) {
      float x = N(rng) * scale;
      if (kind == 0) x = 0.0f;
      if (kind == 1) x = 0.25f * scale;
      v[static_cast<size_t>(j)] = x;
    }
    if (kind == 2) v[static_cast<size_t>(b)] = -30.0f * scale;
  }
  return v;
}

// The byte range of a block that random_quants randomizes: everything but
// the f16 super-scales (any bytes there are valid quants, 5th bits, sub-block
// scales and mins).
void random_range(DType t, size_t* begin, size_t* end) {
  *begin = 0;
  *end = dtype_info(t).block_bytes;
  switch (t) {
    case DType::Q4_0: case DType::Q5_0: case DType::Q8_0: *begin = 2; break;
    case DType::Q4_1: case DType::Q4_K: *begin = 4; break;
    case DType::Q6_K: *end = 208; break;  // ql, qh, scales; d last
    default: *end = 0; break;
  }
}
size_t header_bytes(DType t) {
  size_t b, e;
  random_range(t, &b, &e);
  return b;
}

struct Mat {
  DType type;
  int64_t n, rows;
  std::vector<uint8_t> q;  // rows of row_bytes(type, n)
  std::vector<float> f;    // dequantized (reference)
  std::vector<float> mins; // per 32 elements |min| (Q4_1), else 0
};

// rows x n in format t; random_quants: every quant byte random (all values,
// Q8_0's -128 included), scales kept.
Mat make(DType t, int64_t n, int64_t rows, bool random_quants, std::mt19937& rng) {
  const CpuKernels& k = cpu::cpu_kernels(t);
  const size_t rb = row_bytes(t, n);
  Mat m{t, n, rows, std::vector<uint8_t>(rb * rows), std::vector<float>(n * rows),
        std::vector<float>(n / 32 * rows, 0.0f)};
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<float> x = random_floats(n, rng);
    uint8_t* row = m.q.data() + r * rb;
    k.from_float_ref(x.data(), row, n);
    const size_t bb = dtype_info(t).block_bytes;
    size_t rb0, rb1;
    random_range(t, &rb0, &rb1);
    if (random_quants)
      for (size_t b = 0; b < rb; b += bb)
        for (size_t j = rb0; j < rb1; ++j) row[b + j] = static_cast<uint8_t>(rng());
    k.to_float_ref(row, m.f.data() + r * n, n);
    if (t == DType::Q4_1)
      for (int64_t b = 0; b < n / 32; ++b)
        m.mins[r * (n / 32) + b] = std::fabs(f16_to_f32(reinterpret_cast<const cpu::block_q4_1*>(row)[b].m));
    if (t == DType::Q4_K) {
      // Sub-block mins -dmin * m_j: the row dequantized with every quant 0.
      std::vector<uint8_t> zq(row, row + rb);
      for (size_t b = 0; b < rb; b += bb) std::memset(&zq[b + offsetof(cpu::block_q4_K, qs)], 0, cpu::QK_K / 2);
      std::vector<float> z(n);
      k.to_float_ref(zq.data(), z.data(), n);
      for (int64_t b = 0; b < n / 32; ++b) m.mins[r * (n / 32) + b] = std::fabs(z[b * 32]);
    }
  }
  return m;
}

// S of (weight row r, activation row c), see the header.
double S(const Mat& w, int64_t r, const Mat& a, int64_t c) {
  double s = 0;
  for (int64_t i = 0; i < w.n; ++i)
    s += (std::fabs(w.f[r * w.n + i]) + (i / 32 < w.n / 32 ? 2.0 * w.mins[r * (w.n / 32) + i / 32] : 0.0)) *
         std::fabs(a.f[c * a.n + i]);  // F32 rows need not be whole 32-element runs (no mins there)
  return s * 1.001;
}

}  // namespace

TEST(Gemm, SimdMatchesReference) {
  std::mt19937 rng(11);
  int checked = 0;
  for (DType t : kGemmFormats) {
    const CpuKernels& k = cpu::cpu_kernels(t);
    ASSERT_NE(k.gemm_ref, nullptr) << dtype_name(t);
    if (!k.gemm) continue;  // no SIMD here (KVAD_NO_SIMD=1 or an old CPU)
    const DType vt = dtype_info(t).vec_dot_type;
    double worst = 0;
    const int64_t be = dtype_info(t).block_elems;
    // F32, F16 (blocks of 1): lengths around the 8-lane steps, MiniLM's 384 and 1536.
    const std::vector<int64_t> nbs = be == 32  ? std::vector<int64_t>{1, 2, 3, 4, 5, 7, 8, 9, 18, 48}
                                     : be == 1 ? std::vector<int64_t>{1, 7, 8, 9, 31, 64, 100, 384, 1536}
                                               : std::vector<int64_t>{1, 2, 3, 6};
    for (int64_t nb : nbs) {
      const int64_t n = nb * be;
      for (int64_t nr : {1, 3, 7, 16}) {
        for (int64_t nc : {1, 2, 3, 4, 5, 6, 7, 8, 9, 17}) {
          const bool rq = (nr + nc) % 2 == 1;
          const Mat w = make(t, n, nr, rq, rng);
          const Mat a = make(vt, n, nc, false, rng);
          const size_t ldy = row_bytes(vt, n);
          std::vector<float> ref(nc * nr), got(nc * (nr + 1), -7.0f);
          k.gemm_ref(n, w.q.data(), row_bytes(t, n), nr, a.q.data(), ldy, nc, ref.data(), nr);
          std::vector<uint8_t> packed;
          const void* y = a.q.data();
          size_t ld = ldy;
          if (k.gemm_pack) {
            ld = k.gemm_packed_bytes(n);
            packed.assign(ld * nc, 0xAB);
            k.gemm_pack(n, a.q.data(), ldy, nc, packed.data(), ld);
            y = packed.data();
          }
          // Output stride nr + 1: the gemm must leave the gaps alone.
          k.gemm(n, w.q.data(), row_bytes(t, n), nr, y, ld, nc, got.data(), nr + 1);
          for (int64_t c = 0; c < nc; ++c) {
            ASSERT_EQ(got[c * (nr + 1) + nr], -7.0f) << dtype_name(t) << " wrote outside the tile";
            for (int64_t r = 0; r < nr; ++r) {
              const double s = S(w, r, a, c);
              const double tol = 2.0 * (2.0 * nb + 16.0) * FLT_EPSILON * s + 1e-35;
              const double e = std::fabs(static_cast<double>(got[c * (nr + 1) + r]) - ref[c * nr + r]);
              ASSERT_LE(e, tol) << dtype_name(t) << " nb=" << nb << " nr=" << nr << " nc=" << nc << " r=" << r
                                << " c=" << c << " ref=" << ref[c * nr + r] << " got=" << got[c * (nr + 1) + r];
              if (s > 0) worst = std::max(worst, e / (FLT_EPSILON * s));
              ++checked;
            }
          }
        }
      }
    }
    std::printf("%-5s gemm: |simd-ref| <= %.2f eps*S\n", dtype_name(t), worst);
  }
  std::printf("%d outputs checked\n", checked);
}

// matmul hands the gemm its tokens in tiles (rows_product): each output must
// be the same bits whichever tokens share its call. Every format, all tokens
// at once against each token alone; lengths with and without a tail.
TEST(Gemm, OutputsIndependentOfTokenGrouping) {
  std::mt19937 rng(9);
  for (DType t : kGemmFormats) {
    const CpuKernels& k = cpu::cpu_kernels(t);
    if (!k.gemm) continue;
    const DType vt = dtype_info(t).vec_dot_type;
    const int64_t be = dtype_info(t).block_elems;
    for (int64_t n : {be == 1 ? int64_t{100} : 2 * be, be == 1 ? int64_t{384} : 6 * be}) {
      const int64_t nr = 7, nc = 17;
      const Mat w = make(t, n, nr, false, rng), a = make(vt, n, nc, false, rng);
      const size_t ldy = row_bytes(vt, n), ld = k.gemm_pack ? k.gemm_packed_bytes(n) : ldy;
      std::vector<uint8_t> y(ld * nc);
      if (k.gemm_pack) k.gemm_pack(n, a.q.data(), ldy, nc, y.data(), ld);
      else std::memcpy(y.data(), a.q.data(), ldy * nc);
      std::vector<float> all(nc * nr), one(nc * nr);
      k.gemm(n, w.q.data(), row_bytes(t, n), nr, y.data(), ld, nc, all.data(), nr);
      for (int64_t c = 0; c < nc; ++c) k.gemm(n, w.q.data(), row_bytes(t, n), nr, y.data() + c * ld, ld, 1, one.data() + c * nr, nr);
      for (int64_t i = 0; i < nc * nr; ++i)
        ASSERT_EQ(std::memcmp(&all[i], &one[i], 4), 0) << dtype_name(t) << " n=" << n << " i=" << i;
    }
  }
}

// The f16 gemm widens each weight in registers: on f32 activations it gives
// gemm_f32's bits on the widened weights (conv2d's f16 product relies on it
// to keep the f32 path's results). Random f16 weights, odd lengths, row and
// token counts around the 4 x 3 tiles.
TEST(Gemm, F16IsF32OnWidenedWeights) {
  const CpuKernels& k16 = cpu::cpu_kernels(DType::F16);
  const CpuKernels& k32 = cpu::cpu_kernels(DType::F32);
  if (!k16.gemm || !k32.gemm) GTEST_SKIP() << "no SIMD gemm here";
  std::mt19937 rng(5);
  for (int64_t n : {1, 7, 8, 9, 100, 2880}) {
    for (int64_t nr : {1, 4, 5, 11}) {
      for (int64_t nc : {1, 3, 4, 8}) {
        std::vector<uint16_t> w16(n * nr);
        std::vector<float> w32(n * nr);
        const std::vector<float> wf = random_floats(n * nr, rng), y = random_floats(n * nc, rng);
        for (int64_t i = 0; i < n * nr; ++i) w32[i] = f16_to_f32(w16[i] = f32_to_f16(wf[i]));
        std::vector<float> a(nc * nr), b(nc * nr);
        k16.gemm(n, w16.data(), n * 2, nr, y.data(), n * 4, nc, a.data(), nr);
        k32.gemm(n, w32.data(), n * 4, nr, y.data(), n * 4, nc, b.data(), nr);
        for (int64_t i = 0; i < nc * nr; ++i)
          ASSERT_EQ(std::memcmp(&a[i], &b[i], 4), 0) << "n=" << n << " nr=" << nr << " nc=" << nc << " i=" << i;
      }
    }
  }
}

// The AVX512-VNNI build of the K-quant gemms (gemm_kquants_avx512.cpp, the
// one cpu_kernels dispatches to on such CPUs, so SimdMatchesReference checks
// it against the reference there) gives the AVX2 build's bits: the same
// exact integer sums, the same float steps. Random quants (every byte of
// the quant, scale and min fields) and activations, and every quant at its
// extreme; odd row and token counts. Skipped on CPUs without AVX512-VNNI.
TEST(Gemm, Avx512VnniEqualsAvx2) {
  if (!cpu_features().has_avx512_vnni()) GTEST_SKIP() << "no AVX512-VNNI on this CPU";
  std::mt19937 rng(17);
  const struct {
    DType t;
    cpu::GemmFn avx2, vnni;
  } kernels[] = {{DType::Q4_K, cpu::gemm::avx2::gemm_q4_K, cpu::gemm::avx512vnni::gemm_q4_K},
                 {DType::Q6_K, cpu::gemm::avx2::gemm_q6_K, cpu::gemm::avx512vnni::gemm_q6_K}};
  for (const auto& kk : kernels) {
    const CpuKernels& k = cpu::cpu_kernels(kk.t);
    for (int64_t nb : {1, 3, 8})
      for (int64_t nr : {1, 5, 16})
        for (int64_t nc : {1, 3, 7, 8, 9, 17, 32}) {
          const int64_t n = nb * 256;
          for (bool extreme : {false, true}) {
            Mat w = make(kk.t, n, nr, true, rng);
            if (extreme)  // all quants at their largest (the scales stay random)
              for (int64_t b = 0; b < nb * nr; ++b) {
                uint8_t* blk = w.q.data() + b * dtype_info(kk.t).block_bytes;
                if (kk.t == DType::Q4_K) std::memset(blk + offsetof(cpu::block_q4_K, qs), 0xFF, 128);
                else std::memset(blk, 0xFF, 192);  // Q6_K ql, qh
              }
            const Mat a = make(DType::Q8_K, n, nc, false, rng);
            const size_t ldy = row_bytes(DType::Q8_K, n), ld = k.gemm_packed_bytes(n);
            std::vector<uint8_t> packed(ld * nc);
            cpu::gemm::avx2::pack_q8_Kx(n, a.q.data(), ldy, nc, packed.data(), ld);
            std::vector<float> y1(nc * nr, -1.0f), y2(nc * nr, -2.0f);
            kk.avx2(n, w.q.data(), row_bytes(kk.t, n), nr, packed.data(), ld, nc, y1.data(), nr);
            kk.vnni(n, w.q.data(), row_bytes(kk.t, n), nr, packed.data(), ld, nc, y2.data(), nr);
            for (size_t i = 0; i < y1.size(); ++i)  // bit for bit, NaN and inf included
              ASSERT_EQ(std::memcmp(&y1[i], &y2[i], sizeof(float)), 0)
                  << dtype_name(kk.t) << " nb=" << nb << " nr=" << nr << " nc=" << nc << " i=" << i
                  << " avx2=" << y1[i] << " vnni=" << y2[i];
          }
        }
  }
}

// Block sums at the int16 limits: all quants at their extremes.
TEST(Gemm, ExtremeQuants) {
  for (DType t : kGemmFormats) {
    const CpuKernels& k = cpu::cpu_kernels(t);
    if (!k.gemm || dtype_info(t).block_elems != 32) continue;
    const DType vt = dtype_info(t).vec_dot_type;
    const int64_t n = 7 * 32, nr = 2, nc = 3;
    std::vector<float> xw(n * nr), xa(n * nc);
    for (int64_t i = 0; i < n * nr; ++i) xw[i] = (i / 32) % 2 ? 1.0f : -1.0f;  // saturates every block
    for (int64_t i = 0; i < n * nc; ++i) xa[i] = (i / 32) % 3 ? -1.0f : 1.0f;
    const size_t wb = row_bytes(t, n), yb = row_bytes(vt, n);
    std::vector<uint8_t> qw(wb * nr), qa(yb * nc);
    for (int64_t r = 0; r < nr; ++r) k.from_float_ref(&xw[r * n], &qw[r * wb], n);
    // Row 0: every quant at its largest magnitude (Q8_0: -128; 4/5-bit: all ones).
    const size_t bb = dtype_info(t).block_bytes, hb = header_bytes(t);
    for (int64_t b = 0; b < n / 32; ++b) std::memset(&qw[b * bb + hb], t == DType::Q8_0 ? 0x80 : 0xFF, bb - hb);
    for (int64_t c = 0; c < nc; ++c) cpu::cpu_kernels(vt).from_float_ref(&xa[c * n], &qa[c * yb], n);
    std::vector<float> ref(nr * nc), got(nr * nc);
    k.gemm_ref(n, qw.data(), wb, nr, qa.data(), yb, nc, ref.data(), nr);
    std::vector<uint8_t> packed(k.gemm_packed_bytes(n) * nc);
    k.gemm_pack(n, qa.data(), yb, nc, packed.data(), k.gemm_packed_bytes(n));
    k.gemm(n, qw.data(), wb, nr, packed.data(), k.gemm_packed_bytes(n), nc, got.data(), nr);
    for (int64_t i = 0; i < nr * nc; ++i)
      EXPECT_NEAR(got[i], ref[i], 1e-5 * std::fabs(ref[i]) + 1e-6) << dtype_name(t) << " i=" << i;
  }
}

// cpu::matmul end to end: formats with a gemm and without, tokens 1..67,
// 1..3 threads, against reference vec_dots of the same quantized activations.
TEST(Matmul, MatchesReferenceDots) {
  std::mt19937 rng(12);
  const DType formats[] = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q8_0, DType::Q4_K,
                           DType::Q6_K, DType::Q5_1, DType::F16,  DType::F32};
  for (int nth : {1, 2, 3}) {
    ThreadPool pool(nth);
    for (DType t : formats) {
      const CpuKernels& k = cpu::cpu_kernels(t);
      const DType vt = dtype_info(t).vec_dot_type;
      for (int64_t n_tok : {1, 2, 5, 9, 64, 67}) {
        const int64_t n = dtype_info(t).block_elems == 256 ? 3 * 256 : 18 * 32, n_out = 45;
        const Mat w = make(t, n, n_out, false, rng);
        const std::vector<float> x = random_floats(n * n_tok, rng);
        Tensor wt;
        wt.name = "w";
        wt.type = t;
        wt.ne = {n, n_out, 1, 1};
        wt.set_contiguous_strides();
        wt.data = w.q.data();
        std::vector<float> y(n_tok * n_out);
        cpu::matmul(pool, wt, x.data(), n_tok, y.data());

        // The reference: activations quantized by the reference quantizer
        // (the dispatched one is bit-identical, test_formats), reference dots.
        Mat a{vt, n, n_tok, std::vector<uint8_t>(row_bytes(vt, n) * n_tok), std::vector<float>(n * n_tok), {}};
        for (int64_t c = 0; c < n_tok; ++c) {
          uint8_t* row = a.q.data() + c * row_bytes(vt, n);
          if (vt == DType::F32) std::memcpy(row, &x[c * n], n * 4);
          else cpu::cpu_kernels(vt).from_float_ref(&x[c * n], row, n);
          cpu::cpu_kernels(vt).to_float_ref(row, &a.f[c * n], n);
        }
        for (int64_t c = 0; c < n_tok; ++c) {
          for (int64_t r = 0; r < n_out; ++r) {
            const float ref = k.vec_dot_ref(n, w.q.data() + r * row_bytes(t, n), a.q.data() + c * row_bytes(vt, n));
            const double nterms = dtype_info(t).quantized ? 2.0 * (n / 32) : n / 8.0;
            const double tol = 2.0 * (nterms + 16.0) * FLT_EPSILON * S(w, r, a, c) + 1e-35;
            ASSERT_LE(std::fabs(static_cast<double>(y[c * n_out + r]) - ref), tol)
                << dtype_name(t) << " threads=" << nth << " n_tok=" << n_tok << " r=" << r << " c=" << c;
          }
        }
      }
    }
  }
}

// cpu::matmul_multi equals one cpu::matmul per weight bit for bit: weights
// that share the activation rows (Q4_0 + Q8_0 + Q5_0 on Q8_0 rows; Q4_K +
// Q6_K on Q8_K rows), weights that do not (Q4_1 on Q8_1 + Q8_0), and row
// counts that leave partial chunks, over 1 and 2 threads.
TEST(Matmul, MultiEqualsSeparateMatmuls) {
  std::mt19937 rng(21);
  const std::vector<std::vector<DType>> groups = {
      {DType::Q4_0, DType::Q8_0, DType::Q5_0}, {DType::Q4_K, DType::Q6_K}, {DType::Q4_1, DType::Q8_0}};
  for (int nth : {1, 2}) {
    ThreadPool pool(nth);
    for (const auto& g : groups)
      for (int64_t n_tok : {1, 7, 33}) {
        const int64_t n = 3 * 256;
        std::vector<Mat> ws;
        std::vector<Tensor> ts(g.size());
        std::vector<std::vector<float>> y1(g.size()), y2(g.size());
        for (size_t i = 0; i < g.size(); ++i) ws.push_back(make(g[i], n, 37 + 29 * static_cast<int64_t>(i), false, rng));
        for (size_t i = 0; i < g.size(); ++i) {
          ts[i].type = g[i];
          ts[i].ne = {n, ws[i].rows, 1, 1};
          ts[i].set_contiguous_strides();
          ts[i].data = ws[i].q.data();
          y1[i].assign(n_tok * ws[i].rows, 0.0f);
          y2[i].assign(n_tok * ws[i].rows, 1.0f);
        }
        const std::vector<float> x = random_floats(n * n_tok, rng);
        for (size_t i = 0; i < g.size(); ++i) cpu::matmul(pool, ts[i], x.data(), n_tok, y1[i].data());
        if (g.size() == 2)
          cpu::matmul_multi(pool, {{&ts[0], y2[0].data()}, {&ts[1], y2[1].data()}}, x.data(), n_tok);
        else
          cpu::matmul_multi(pool, {{&ts[0], y2[0].data()}, {&ts[1], y2[1].data()}, {&ts[2], y2[2].data()}},
                            x.data(), n_tok);
        for (size_t i = 0; i < g.size(); ++i)
          EXPECT_EQ(y1[i], y2[i]) << dtype_name(g[i]) << " threads=" << nth << " n_tok=" << n_tok;
      }
  }
}

// cpu::attention_rows (the tiled online-softmax kernel on AVX2, the
// per-row reference without it) against the definition computed here in
// double: out_r = Σ_p softmax_p(scale · q_r·k_p) v_p over p in [first_r, last_r],
// for K and V caches each f16 or f32 (--cache-type-k/-v). Head dims
// 64/128/256 take the AVX2 path, 40 the tiled path with a 5-register tail, 36
// the reference; rows have different causal ranges and sliding windows that
// start inside a key block, and ranges that cross several 32-key blocks;
// with and without attention sinks (gpt-oss: one more logit per row in the
// softmax's denominator, some larger than every score), and with and without
// logit soft-capping (Gemma 2: s ← c·tanh(s/c), c = 1.5 below the largest
// scores, so a kernel that skipped it would be off by far more than 2e-5).
// Tolerance 2e-5 absolute: outputs are convex combinations of |v| <= 1; the
// exponential is a 6-term polynomial (relative error ~2e-7) and sums run over
// at most 300 terms in f32.
TEST(Attention, RowsMatchTheDefinition) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int64_t D : {64, 128, 256, 40, 36}) {
    const int64_t n_pos = 300, stride = D * 3;  // three KV heads per row, use head 1
    std::vector<float> k32(n_pos * stride), v32(n_pos * stride);
    std::vector<uint16_t> k16(n_pos * stride), v16(n_pos * stride);
    for (auto& x : k32) x = u(rng);
    for (auto& x : v32) x = u(rng);
    for (size_t i = 0; i < k32.size(); ++i) k16[i] = f32_to_f16(k32[i]), v16[i] = f32_to_f16(v32[i]);
    for (int kv : {0, 1, 2, 3}) {
      const bool k_f32 = kv & 1, v_f32 = kv & 2;
      const cpu::KVRows kr = k_f32 ? cpu::KVRows{k32.data(), true} : cpu::KVRows{k16.data(), false};
      const cpu::KVRows vr = v_f32 ? cpu::KVRows{v32.data(), true} : cpu::KVRows{v16.data(), false};
      // Value c of cache row p of head 1, as the cache holds it.
      auto kval = [&](int64_t p, int64_t c) -> double {
        const size_t i = p * stride + D + c;
        return k_f32 ? k32[i] : f16_to_f32(k16[i]);
      };
      auto vval = [&](int64_t p, int64_t c) -> double {
        const size_t i = p * stride + D + c;
        return v_f32 ? v32[i] : f16_to_f32(v16[i]);
      };
      for (int n_rows : {1, 7, 16})
      for (bool sinks : {false, true})
      for (float cap : {0.0f, 1.5f}) {
        std::vector<float> q(n_rows * D), out(n_rows * D), out_ref(n_rows * D);
        for (auto& x : q) x = 3.0f * u(rng);
        cpu::AttentionRows rows, rows_ref;
        rows.n = rows_ref.n = n_rows;
        for (int r = 0; r < n_rows; ++r) {
          const int64_t last = n_pos - 1 - 13 * r;
          const int64_t first = r % 3 == 1 ? std::max<int64_t>(0, last - 45 - r) : 0;  // some windows
          rows.q[r] = rows_ref.q[r] = &q[r * D];
          rows.out[r] = &out[r * D];
          rows_ref.out[r] = &out_ref[r * D];
          rows.first[r] = rows_ref.first[r] = first;
          rows.last[r] = rows_ref.last[r] = last;
          rows.sink[r] = rows_ref.sink[r] = 4.0f * u(rng) + (r % 4 == 3 ? 6.0f : 0.0f);
        }
        rows.sinks = rows_ref.sinks = sinks;
        rows.softcap = rows_ref.softcap = cap;
        const float scale = 1.0f / std::sqrt(static_cast<float>(D));
        cpu::attention_rows(rows, kr.offset(D), vr.offset(D), stride, D, scale);
        cpu::attention_rows_ref(rows_ref, kr.offset(D), vr.offset(D), stride, D, scale);
        double max_err = 0, max_err_ref = 0;
        for (int r = 0; r < n_rows; ++r) {
          std::vector<double> s;
          double mx = sinks ? rows.sink[r] : -1e300, sum = 0;
          for (int64_t p = rows.first[r]; p <= rows.last[r]; ++p) {
            double d = 0;
            for (int64_t c = 0; c < D; ++c) d += static_cast<double>(q[r * D + c]) * kval(p, c);
            const double sc = cap > 0 ? cap * std::tanh(d * scale / cap) : d * scale;
            s.push_back(sc);
            mx = std::max(mx, sc);
          }
          if (sinks) sum = std::exp(rows.sink[r] - mx);
          for (double& x : s) sum += (x = std::exp(x - mx));
          for (int64_t c = 0; c < D; ++c) {
            double o = 0;
            for (size_t i = 0; i < s.size(); ++i) o += s[i] / sum * vval(rows.first[r] + static_cast<int64_t>(i), c);
            max_err = std::max(max_err, std::fabs(o - out[r * D + c]));
            max_err_ref = std::max(max_err_ref, std::fabs(o - out_ref[r * D + c]));
          }
        }
        EXPECT_LT(max_err, 2e-5) << "D=" << D << " rows=" << n_rows << " k_f32=" << k_f32 << " v_f32=" << v_f32
                                 << " sinks=" << sinks << " cap=" << cap;
        EXPECT_LT(max_err_ref, 2e-5) << "D=" << D << " rows=" << n_rows << " k_f32=" << k_f32 << " v_f32=" << v_f32
                                     << " sinks=" << sinks << " cap=" << cap;
      }
    }
  }
}
