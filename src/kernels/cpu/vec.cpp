#include "kernels/cpu/vec.h"

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

const VecOps& vec_ops_ref() {
  static const VecOps ops{dot_f16_f32_ref, axpy_f16_ref, f32_to_f16_ref};
  return ops;
}

const VecOps& vec_ops() {
  static const VecOps& ops = cpu_features().has_avx2_fma() ? vec_ops_avx2() : vec_ops_ref();
  return ops;
}

}  // namespace kvad::cpu
