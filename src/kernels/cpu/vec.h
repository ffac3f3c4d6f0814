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
};

/// Scalar references.
const VecOps& vec_ops_ref();
/// Dispatched: AVX2+F16C when the CPU has them (base/cpu_features.h).
const VecOps& vec_ops();

}  // namespace kvad::cpu
