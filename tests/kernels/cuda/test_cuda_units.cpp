// The CUDA kernels' format readers (kernels/cuda/units.h), compiled for the
// host, against the CPU references (to_float_ref): every unit of every row
// must match bit for bit. Needs no GPU and no nvcc: it checks the port of
// the block layouts (the part of the GPU code most likely to be wrong) on
// every machine, the same source the device compiles.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "base/error.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cuda/gemm_tile.h"
#include "kernels/cuda/device_kernels.h"
#include "kernels/cuda/units.h"

namespace {

using kvad::DType;

template <DType T>
void check_format(std::mt19937& rng) {
  const int64_t n = 1024, rows = 7;
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> f(n * rows);
  for (float& v : f) v = nd(rng);
  f[5] = 0.0f;
  f[300] = 40.0f;  // a large outlier in one block
  const auto& k = kvad::cpu::cpu_kernels(T);
  const size_t rb = kvad::row_bytes(T, n);
  std::vector<uint8_t> q(rb * rows);
  std::vector<float> ref(n);
  for (int64_t r = 0; r < rows; ++r) {
    k.from_float(&f[r * n], q.data() + r * rb, n);
    k.to_float_ref(q.data() + r * rb, ref.data(), n);
    for (int64_t u = 0; u < n / 32; ++u) {
      float w[32];
      kvad::cuda::fmt::Fmt<T>::unit(q.data() + r * rb, u, w);
      for (int j = 0; j < 32; ++j) {
        uint32_t a, b;
        std::memcpy(&a, &w[j], 4);
        std::memcpy(&b, &ref[u * 32 + j], 4);
        ASSERT_EQ(a, b) << kvad::dtype_name(T) << " row " << r << " unit " << u << " elem " << j << ": " << w[j]
                        << " vs " << ref[u * 32 + j];
      }
    }
  }
}

TEST(CudaUnits, MatchCpuReferencesBitForBit) {
  std::mt19937 rng(11);
  check_format<DType::F32>(rng);
  check_format<DType::F16>(rng);
  check_format<DType::BF16>(rng);
  check_format<DType::Q8_0>(rng);
  check_format<DType::Q4_0>(rng);
  check_format<DType::Q4_K>(rng);
  check_format<DType::Q6_K>(rng);
}

// The host logic of the prefill GEMM (device_kernels.h, header-only): the
// KVAD_CUDA_GEMM parser and gemm_mma's split-K choice. No GPU needed.
TEST(CudaGemmChoice, EnvParser) {
  using kvad::cuda::GemmPath;
  EXPECT_EQ(kvad::cuda::parse_gemm_path(nullptr), GemmPath::Mma);
  EXPECT_EQ(kvad::cuda::parse_gemm_path(""), GemmPath::Mma);
  EXPECT_EQ(kvad::cuda::parse_gemm_path("mma"), GemmPath::Mma);
  EXPECT_EQ(kvad::cuda::parse_gemm_path("cublas"), GemmPath::Cublas);
  EXPECT_THROW(kvad::cuda::parse_gemm_path("cuBLAS2"), kvad::Error);
}

TEST(CudaGemmChoice, SplitK) {
  using kvad::cuda::gemm_mma_splits;
  const int sms = 132;  // H200
  // 0.5B shape at n_tok 512: 4864 rows -> 76 x 8 = 608 tiles >= 132: no split.
  EXPECT_EQ(gemm_mma_splits(896, 4864, 512, sms), 1);
  // 896 rows (down projection, K 4864): 14 x 8 = 112 tiles < 132: 2 slices.
  EXPECT_EQ(gemm_mma_splits(4864, 896, 512, sms), 2);
  // 9 tokens, 896 rows, K 896 (14 K steps): 14 tiles -> ceil(132/14) = 10, capped at 14/2 = 7.
  EXPECT_EQ(gemm_mma_splits(896, 896, 9, sms), 7);
  // Forced counts: 1 never splits; at most one slice per 64-column K step.
  EXPECT_EQ(gemm_mma_splits(4864, 896, 9, sms, 1), 1);
  EXPECT_EQ(gemm_mma_splits(416, 77, 9, sms, 3), 3);
  EXPECT_EQ(gemm_mma_splits(416, 77, 9, sms, 100), 7);  // 13 units -> 7 steps
  // Tiny K: no split (k_steps / 2 == 0 -> 1).
  EXPECT_EQ(gemm_mma_splits(32, 77, 9, sms), 1);
}

// The MMA GEMM's data movement (gemm_tile.h: the kernel's own x/W tile
// loaders, fragment origins, output stores and K slices) run on the host for
// every block, slice and thread, with each warp's wmma calls replaced by a
// loop that follows wmma's documented semantics: load_matrix_sync of a
// row-major A reads A(r, k) = p[r·ldm + k], of a column-major B reads
// B(k, c) = p[c·ldm + k]; store_matrix_sync row-major writes C(r, c) to
// p[r·ldm + c]; mma_sync adds A·B in f32. Odd shapes (77 rows, 9 and 130
// tokens, K with an odd number of units), 1, 3 and the automatic number of
// slices. Against the definition on the same bf16 operands in double:
// |err| <= 1e-4 · Σ|w·x| (f32 sums of at most 768 exact products). Output
// buffers start as NaN, so an element never stored, or read from an unwritten
// part of a tile, fails. This checks the index arithmetic of the kernel on
// every machine; the tensor cores themselves only test_cuda_ops on a GPU.
template <DType T>
void emulate_gemm_mma(int64_t n_in, int64_t n_out, int64_t n_tok, std::mt19937& rng) {
  using namespace kvad::cuda::mma_tile;
  using kvad::cuda::kMmaTileM;
  using kvad::cuda::kMmaTileN;
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const size_t rb = kvad::row_bytes(T, n_in);
  const auto& k = kvad::cpu::cpu_kernels(T);
  std::vector<float> f(n_in * n_out), deq(n_in * n_out);
  for (float& v : f) v = 0.5f * nd(rng);
  std::vector<uint8_t> W(rb * n_out);
  for (int64_t r = 0; r < n_out; ++r) {
    k.from_float(&f[r * n_in], W.data() + r * rb, n_in);
    k.to_float_ref(W.data() + r * rb, &deq[r * n_in], n_in);
  }
  std::vector<uint16_t> x(n_tok * n_in);
  for (uint16_t& v : x) v = kvad::f32_to_bf16(nd(rng));
  auto bf = [](uint16_t h) { return kvad::bf16_to_f32(h); };
  const int64_t n_bx = (n_out + kMmaTileN - 1) / kMmaTileN, n_by = (n_tok + kMmaTileM - 1) / kMmaTileM;
  for (int split : {1, 3, 0}) {
    const int slices = kvad::cuda::gemm_mma_splits(n_in, n_out, n_tok, 132, split);
    std::vector<float> partial(slices * n_tok * n_out, std::numeric_limits<float>::quiet_NaN());
    alignas(128) uint8_t smem[kSmemBytes];
    for (int64_t bx = 0; bx < n_bx; ++bx)
      for (int64_t by = 0; by < n_by; ++by)
        for (int z = 0; z < slices; ++z) {
          const int64_t n0 = bx * kMmaTileN, m0 = by * kMmaTileM;
          auto* xs = reinterpret_cast<uint16_t*>(smem);
          uint16_t* ws = xs + kMmaTileM * kLd;
          std::vector<float> acc(4 * 2 * 2 * 16 * 16, 0.0f);  // [warp][i][j][r][c]
          int64_t sb, se;
          kvad::cuda::mma_tile::slice(n_in, z, slices, &sb, &se);
          ASSERT_LT(sb, se) << "empty slice " << z << " of " << slices;
          for (int64_t s = sb; s < se; ++s) {
            std::memset(smem, 0xff, sizeof smem);  // NaN bf16 wherever a loader leaves a gap
            for (int tid = 0; tid < kThreads; ++tid) {
              load_x(x.data(), n_in, n_tok, m0, s * kvad::cuda::kMmaTileK, tid, xs);
              load_w<T>(W.data(), rb, n_in, n_out, n0, s, tid, ws);
            }
            for (int warp = 0; warp < 4; ++warp)
              for (int kk = 0; kk < kvad::cuda::kMmaTileK; kk += 16)
                for (int i = 0; i < 2; ++i)
                  for (int j = 0; j < 2; ++j) {
                    const uint16_t* a = xs + a_origin(warp, i, kk);
                    const uint16_t* b = ws + b_origin(warp, j, kk);
                    float* c = &acc[((warp * 2 + i) * 2 + j) * 256];
                    for (int r = 0; r < 16; ++r)
                      for (int cc = 0; cc < 16; ++cc) {
                        float sum = c[r * 16 + cc];
                        for (int q = 0; q < 16; ++q) sum += bf(a[r * kLd + q]) * bf(b[cc * kLd + q]);
                        c[r * 16 + cc] = sum;
                      }
                  }
          }
          float* cs = reinterpret_cast<float*>(smem);
          std::memset(smem, 0xff, sizeof smem);
          for (int warp = 0; warp < 4; ++warp)
            for (int i = 0; i < 2; ++i)
              for (int j = 0; j < 2; ++j)
                for (int r = 0; r < 16; ++r)
                  for (int cc = 0; cc < 16; ++cc)
                    cs[c_origin(warp, i, j) + r * kLdC + cc] = acc[((warp * 2 + i) * 2 + j) * 256 + r * 16 + cc];
          for (int tid = 0; tid < kThreads; ++tid)
            store_out(cs, n_tok, n_out, m0, n0, tid, partial.data() + z * n_tok * n_out);
        }
    double max_err = 0;
    for (int64_t t = 0; t < n_tok; ++t)
      for (int64_t o = 0; o < n_out; ++o) {
        float y = partial[t * n_out + o];
        for (int z = 1; z < slices; ++z) y += partial[z * n_tok * n_out + t * n_out + o];
        double ref = 0, a = 0;
        for (int64_t i = 0; i < n_in; ++i) {
          const double p = static_cast<double>(bf(kvad::f32_to_bf16(deq[o * n_in + i]))) * bf(x[t * n_in + i]);
          ref += p;
          a += std::fabs(p);
        }
        const double err = std::fabs(y - ref);
        max_err = std::max(max_err, err);
        ASSERT_LE(err, 1e-4 * a) << kvad::dtype_name(T) << " n_tok " << n_tok << " slices " << slices << " t " << t
                                 << " o " << o << " (y " << y << ", ref " << ref << ")";
      }
    std::printf("emulated gemm_mma %-4s K %lld, %lld x %lld, %d slice(s): max abs err %.3g\n", kvad::dtype_name(T),
                static_cast<long long>(n_in), static_cast<long long>(n_tok), static_cast<long long>(n_out), slices,
                max_err);
  }
}

TEST(CudaGemmTile, HostEmulationMatchesDefinition) {
  std::mt19937 rng(21);
  for (int64_t n_tok : {9, 130}) {
    emulate_gemm_mma<DType::Q8_0>(416, 77, n_tok, rng);
    emulate_gemm_mma<DType::Q4_0>(416, 77, n_tok, rng);
    emulate_gemm_mma<DType::Q4_K>(768, 77, n_tok, rng);
    emulate_gemm_mma<DType::Q6_K>(768, 77, n_tok, rng);
  }
}

}  // namespace
