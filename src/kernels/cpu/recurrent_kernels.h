// Internal to the CPU row (recurrent.cpp, its SIMD builds and the kernel
// tests): the per-head kernels of the gated delta rule and the per-run
// kernel of the short convolution, as scalar references (recurrent.cpp, the
// definitions), AVX2+FMA versions (recurrent_avx2.cpp, called only when
// cpu_features().has_avx2_fma()) and AVX512 versions (recurrent_avx512.cpp,
// only when cpu_features().has_avx512_vnni()); both SIMD builds are
// recurrent_simd_impl.h. They agree up to float summation order;
// tests/kernels/cpu/test_recurrent_kernels.cpp compares them on shapes with
// tails.
#pragma once
#include <cstdint>

namespace kvad::cpu {

/// One value head's work in gated_delta_rule (tensor/ops.h): Dk × Dv state S
/// (Dk rows of Dv floats), L tokens whose q, k (Dk floats), v (Dv floats)
/// and output o (Dv floats) are given by row pointers; g (log decay) and
/// beta per token.
struct DeltaHead {
  int64_t Dk = 0, Dv = 0;
  float* S = nullptr;
  const float* const* q = nullptr;
  const float* const* k = nullptr;
  const float* const* v = nullptr;
  const float* g = nullptr;
  const float* beta = nullptr;
  float* const* o = nullptr;
  int64_t L = 0;
  float scale = 1.0f;
};

/// Token by token: S ← e^g S; u = β (v − Sᵀk); S ← S + k uᵀ; o = Sᵀq · scale.
void delta_recurrent_ref(const DeltaHead& h);
void delta_recurrent_avx2(const DeltaHead& h);
void delta_recurrent_avx512(const DeltaHead& h);
/// The L tokens as one chunk of the parallel form (the WY form of Yang et
/// al. 2024, section 3): the same recurrence up to rounding. L >= 1.
void delta_chunk_ref(const DeltaHead& h);
void delta_chunk_avx2(const DeltaHead& h);
void delta_chunk_avx512(const DeltaHead& h);

/// One sequence's tokens through the short convolution (tensor/ops.h
/// ssm_conv) for channels [c0, c1): x and out rows of C floats, token tok[i]
/// at x + tok[i]·C; w [C, K] (K taps per channel, the newest last); st the
/// sequence's K−1 rows of C older inputs (oldest first), updated.
struct ConvRun {
  int64_t C = 0, K = 0, c0 = 0, c1 = 0;
  const float* w = nullptr;
  float* st = nullptr;
  const float* x = nullptr;
  float* out = nullptr;
  const int64_t* tok = nullptr;
  int64_t n_tok = 0;
};
void ssm_conv_run_ref(const ConvRun& r);
/// SIMD for 2 <= K <= kConvMaxTapsSimd (the reference otherwise).
void ssm_conv_run_avx2(const ConvRun& r);
void ssm_conv_run_avx512(const ConvRun& r);
constexpr int64_t kConvMaxTapsSimd = 8;

}  // namespace kvad::cpu
