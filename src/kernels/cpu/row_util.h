// Internal to the CPU row (its entries: format_ops.cpp, elementwise.cpp,
// row_ops.cpp, attention.cpp, moe.cpp, ...): the pool ops split work
// over, and the host addresses of a CPU or sim tensor's bytes.
#pragma once
#include <cstdint>

#include "base/thread_pool.h"
#include "tensor/ops.h"
#include "tensor/tensor.h"

namespace kvad::cpu::row {

/// ops::current_pool(), or a one-thread pool of this thread's own.
inline ThreadPool& pool() {
  if (ThreadPool* p = ops::current_pool()) return *p;
  static thread_local ThreadPool solo(1);
  return solo;
}

inline const float* in(const Tensor& t) { return static_cast<const float*>(t.raw()); }
inline float* out(const Tensor& t) { return static_cast<float*>(t.raw()); }
inline const int32_t* ids(const Tensor& t) { return static_cast<const int32_t*>(t.raw()); }

}  // namespace kvad::cpu::row
