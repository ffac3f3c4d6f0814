// The CUDA kernels' format readers (kernels/cuda/units.h), compiled for the
// host, against the CPU references (to_float_ref): every unit of every row
// must match bit for bit. Needs no GPU and no nvcc: it checks the port of
// the block layouts (the part of the GPU code most likely to be wrong) on
// every machine, the same source the device compiles.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/kernels.h"
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

}  // namespace
