// The CUDA row's kernels for strided tensors (tensor/ops.h cont). Device
// pointers; submitted to the compute stream, returning at once (ops.h).
#pragma once
#include <cstddef>
#include <cstdint>

namespace kvad::cuda {

/// A strided tensor's layout for the kernels: ne elements per dimension,
/// nb byte strides (tensor/tensor.h), elem bytes per element (1, 2, 4 or 8).
struct StridedLayout {
  int64_t ne[4];
  int64_t nb[4];
  int elem;
};

/// dst (contiguous, n = Π ne elements) = the elements of src laid out as `l`
/// (ggml_cont; the CPU reference is kernels/cpu/strided.cpp cont). Throws
/// kvad::Error for an element size it has no kernel for.
void cont(const void* src, const StridedLayout& l, void* dst);

/// out (contiguous f32, la's shape) = a + b (mul false) or a ⊙ b (mul true),
/// a and b f32 laid out as la and lb: the same ne, any byte strides (0 where
/// broadcast; the CPU reference is kernels/cpu/strided.cpp binary_strided).
void binary_strided(bool mul, const void* a, const StridedLayout& la, const void* b, const StridedLayout& lb,
                    float* out);

}  // namespace kvad::cuda
