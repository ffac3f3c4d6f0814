// AVX512 build of the recurrent-layer kernels (recurrent_simd_impl.h with
// 16-lane vectors; compiled with KVAD_AVX512_VNNI_FLAGS, called only after
// the run-time check of cpu_features().has_avx512_vnni(), the feature set
// those flags allow; these kernels use AVX512F only).
#include <immintrin.h>

#include "kernels/cpu/recurrent_simd_impl.h"
#include "kernels/cpu/simd_avx2.h"

namespace kvad::cpu {

namespace {

struct Avx512 {
  using T = __m512;
  static constexpr int64_t W = 16;
  static constexpr int kRegs = 32;
  static T zero() { return _mm512_setzero_ps(); }
  static T load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, T v) { _mm512_storeu_ps(p, v); }
  static T set1(float x) { return _mm512_set1_ps(x); }
  static T bcast(const float* p) { return _mm512_set1_ps(*p); }
  static T fmadd(T a, T b, T c) { return _mm512_fmadd_ps(a, b, c); }
  static T fnmadd(T a, T b, T c) { return _mm512_fnmadd_ps(a, b, c); }
  static T mul(T a, T b) { return _mm512_mul_ps(a, b); }
  static T add(T a, T b) { return _mm512_add_ps(a, b); }
  static T sub(T a, T b) { return _mm512_sub_ps(a, b); }
  static float hsum(T v) { return _mm512_reduce_add_ps(v); }
  // Two halves through the AVX2 exp (the same polynomial, lane by lane).
  static T exp(T x) {
    const __m256 lo = avx2::exp_ps(_mm512_castps512_ps256(x));
    const __m256 hi = avx2::exp_ps(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(lo)), _mm256_castps_pd(hi), 1));
  }
};

}  // namespace

void delta_recurrent_avx512(const DeltaHead& h) { recurrent_simd::delta_recurrent<Avx512>(h); }
void delta_chunk_avx512(const DeltaHead& h) { recurrent_simd::delta_chunk<Avx512>(h); }
void ssm_conv_run_avx512(const ConvRun& r) { recurrent_simd::ssm_conv_run<Avx512>(r); }

}  // namespace kvad::cpu
