// The CPU kernels row of the format tables (DESIGN.md seams 1 and 2).
//
// Every format has scalar reference kernels (the definition) and dispatched
// kernels, which are the AVX2+FMA versions when the CPU has them
// (base/cpu_features.h) and the references otherwise. Tests compare the two
// on random data.
#pragma once
#include <cstdint>

#include "tensor/dtype.h"

namespace kvad::cpu {

/// Converts n elements (n % block_elems == 0) of a row in the format to f32.
using ToFloatFn = void (*)(const void* src, float* dst, int64_t n);
/// Quantizes n f32 values (n % block_elems == 0) into the format.
using FromFloatFn = void (*)(const float* src, void* dst, int64_t n);
/// Dot product of n elements: `x` a row in the weight format, `y` a row in
/// the format's vec_dot_type (DTypeInfo). n % block_elems == 0.
using VecDotFn = float (*)(int64_t n, const void* x, const void* y);

struct CpuKernels {
  ToFloatFn to_float = nullptr;
  FromFloatFn from_float = nullptr;
  VecDotFn vec_dot = nullptr;
  ToFloatFn to_float_ref = nullptr;
  FromFloatFn from_float_ref = nullptr;
  VecDotFn vec_dot_ref = nullptr;
};

/// Kernels for a format. Throws kvad::Error naming the format when kvad has
/// no CPU kernels for it. Entries a format lacks (e.g. vec_dot of an
/// activation-only format) are nullptr.
const CpuKernels& cpu_kernels(DType t);

/// True when cpu_kernels(t) has to_float and vec_dot.
bool has_cpu_kernels(DType t);

}  // namespace kvad::cpu
