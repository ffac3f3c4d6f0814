// AVX2+FMA build of the recurrent-layer kernels (recurrent_simd_impl.h with
// 8-lane vectors; compiled with KVAD_AVX2_FLAGS, called only after the
// run-time check of cpu_features().has_avx2_fma()).
#include <immintrin.h>

#include "kernels/cpu/recurrent_simd_impl.h"
#include "kernels/cpu/simd_avx2.h"

namespace kvad::cpu {

namespace {

struct Avx2 {
  using T = __m256;
  static constexpr int64_t W = 8;
  static constexpr int kRegs = 16;
  static T zero() { return _mm256_setzero_ps(); }
  static T load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, T v) { _mm256_storeu_ps(p, v); }
  static T set1(float x) { return _mm256_set1_ps(x); }
  static T bcast(const float* p) { return _mm256_broadcast_ss(p); }
  static T fmadd(T a, T b, T c) { return _mm256_fmadd_ps(a, b, c); }
  static T fnmadd(T a, T b, T c) { return _mm256_fnmadd_ps(a, b, c); }
  static T mul(T a, T b) { return _mm256_mul_ps(a, b); }
  static T add(T a, T b) { return _mm256_add_ps(a, b); }
  static T sub(T a, T b) { return _mm256_sub_ps(a, b); }
  static float hsum(T v) { return avx2::hsum(v); }
  static T exp(T x) { return avx2::exp_ps(x); }
};

}  // namespace

void delta_recurrent_avx2(const DeltaHead& h) { recurrent_simd::delta_recurrent<Avx2>(h); }
void delta_chunk_avx2(const DeltaHead& h) { recurrent_simd::delta_chunk<Avx2>(h); }
void ssm_conv_run_avx2(const ConvRun& r) { recurrent_simd::ssm_conv_run<Avx2>(r); }

}  // namespace kvad::cpu
