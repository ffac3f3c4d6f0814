#include "kernels/cpu/vec.h"

#include <cmath>

#include "base/cpu_features.h"
#include "tensor/half.h"

namespace kvad::cpu {

const VecOps& vec_ops_avx2();  // vec_avx2.cpp

static float dot_f16_f32_ref(int64_t n, const uint16_t* a, const float* b) {
  float s = 0;
  for (int64_t i = 0; i < n; ++i) s += f16_to_f32(a[i]) * b[i];
  return s;
}
static void axpy_f16_ref(int64_t n, float s, const uint16_t* x, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] += s * f16_to_f32(x[i]);
}
static void f32_to_f16_ref(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = f32_to_f16(x[i]);
}

static void swiglu_ref(float* g, const float* u, int64_t n) {
  for (int64_t i = 0; i < n; ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}
static void geglu_ref(float* g, const float* u, int64_t n) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  constexpr float kA = 0.044715f;
  for (int64_t i = 0; i < n; ++i) {
    const float x = g[i];
    g[i] = 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * (1.0f + kA * x * x))) * u[i];
  }
}

static void gelu_erf_ref(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * 0.70710678118654752f));
}
static void geglu_erf_ref(float* g, const float* u, int64_t n) {
  for (int64_t i = 0; i < n; ++i) g[i] = 0.5f * g[i] * (1.0f + std::erf(g[i] * 0.70710678118654752f)) * u[i];
}
static void quick_gelu_ref(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] / (1.0f + std::exp(-1.702f * x[i]));
}

const VecOps& vec_ops_ref() {
  static const VecOps ops{dot_f16_f32_ref, axpy_f16_ref, f32_to_f16_ref, swiglu_ref, geglu_ref,
                          gelu_erf_ref,    geglu_erf_ref, quick_gelu_ref};
  return ops;
}

const VecOps& vec_ops() {
  static const VecOps& ops = cpu_features().has_avx2_fma() ? vec_ops_avx2() : vec_ops_ref();
  return ops;
}

}  // namespace kvad::cpu
