// Small vector helpers used by the ops, scalar reference plus AVX2.
#pragma once
#include <cstdint>

namespace kvad::cpu {

struct VecOps {
  /// sum_i f16(a[i]) * b[i]
  float (*dot_f16_f32)(int64_t n, const uint16_t* a, const float* b);
  /// y[i] += s * f16(x[i])
  void (*axpy_f16)(int64_t n, float s, const uint16_t* x, float* y);
  /// y[i] = f16(x[i]) with round to nearest even
  void (*f32_to_f16)(const float* x, uint16_t* y, int64_t n);
  /// g[i] = silu(g[i]) * u[i], silu(x) = x / (1 + e^-x)
  void (*swiglu)(float* g, const float* u, int64_t n);
  /// g[i] = gelu_tanh(g[i]) * u[i], gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
  void (*geglu)(float* g, const float* u, int64_t n);
  /// x[i] = gelu_erf(x[i]) = 0.5 x (1 + erf(x / sqrt 2)), in place. The AVX2
  /// version evaluates erfc by Numerical Recipes' erfcc (fractional error
  /// < 1.2e-7) with avx2::exp_ps: within ~4e-7 of the reference's std::erf.
  void (*gelu_erf)(float* x, int64_t n);
  /// g[i] = gelu_erf(g[i]) * u[i]
  void (*geglu_erf)(float* g, const float* u, int64_t n);
  /// x[i] = x[i] / (1 + e^(-1.702 x[i])), in place (CLIP's quick_gelu)
  void (*quick_gelu)(float* x, int64_t n);
};

/// Scalar references.
const VecOps& vec_ops_ref();
/// Dispatched: AVX2+F16C when the CPU has them (base/cpu_features.h).
const VecOps& vec_ops();

}  // namespace kvad::cpu
