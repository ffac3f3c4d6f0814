// The CPU kernels row of the format tables (DESIGN.md seams 1 and 2).
//
// Every format has scalar reference kernels (the definition) and dispatched
// kernels, which are the AVX2+FMA versions when the CPU has them
// (base/cpu_features.h) and the references otherwise. Tests compare the two
// on random data.
#pragma once
#include <cstddef>
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
/// Tiled matrix product of nr weight rows (w, ldw bytes apart) and nc
/// activation rows (y, ldy bytes apart), n elements each:
///   out[c * ldo + r] = vec_dot(n, w + r * ldw, y + c * ldy),  r < nr, c < nc,
/// up to float summation order. y holds rows of the vec_dot_type, or, when
/// the format has a gemm_pack, rows that gemm_pack made from them.
using GemmFn = void (*)(int64_t n, const void* w, size_t ldw, int64_t nr, const void* y, size_t ldy,
                        int64_t nc, float* out, int64_t ldo);
/// Repacks n_rows activation rows of the vec_dot_type (n elements, ldx bytes
/// apart) into the layout a gemm reads (rows ldp >= gemm_packed_bytes(n) apart).
using GemmPackFn = void (*)(int64_t n, const void* x, size_t ldx, int64_t n_rows, void* dst, size_t ldp);

struct CpuKernels {
  ToFloatFn to_float = nullptr;
  FromFloatFn from_float = nullptr;
  VecDotFn vec_dot = nullptr;
  ToFloatFn to_float_ref = nullptr;
  FromFloatFn from_float_ref = nullptr;
  VecDotFn vec_dot_ref = nullptr;
  /// Tiled matrix product for many activation rows at once (prefill), or
  /// nullptr when the format has none (matmul then loops over vec_dot). The
  /// dispatched entry reads rows packed by gemm_pack when that is set.
  GemmFn gemm = nullptr;
  GemmPackFn gemm_pack = nullptr;
  size_t (*gemm_packed_bytes)(int64_t n) = nullptr;  ///< bytes of a packed row of n elements
  /// The definition: a loop of vec_dot_ref over unpacked vec_dot_type rows.
  GemmFn gemm_ref = nullptr;
};

/// Kernels for a format. Throws kvad::Error naming the format when kvad has
/// no CPU kernels for it. Entries a format lacks (e.g. vec_dot of an
/// activation-only format) are nullptr.
const CpuKernels& cpu_kernels(DType t);

/// True when cpu_kernels(t) has to_float and vec_dot.
bool has_cpu_kernels(DType t);

}  // namespace kvad::cpu
