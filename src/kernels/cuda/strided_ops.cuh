// The device kernels of kernels/cuda/strided.h, #included at the end of
// kernels.cu (nvcc's only translation unit in kvad; it uses that file's
// blocks helpers and stream_for, in the same anonymous namespace).
#pragma once
#include "kernels/cuda/strided.h"

namespace kvad::cuda {

namespace {

// One thread per output element i (row-major over ne): reads the element at
// Σ i_k · nb[k] of src.
template <class T>
__global__ void cont_kernel(const uint8_t* __restrict__ src, StridedLayout l, int64_t n, T* __restrict__ dst) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t r = i;
    const int64_t i0 = r % l.ne[0];
    r /= l.ne[0];
    const int64_t i1 = r % l.ne[1];
    r /= l.ne[1];
    const int64_t i2 = r % l.ne[2], i3 = r / l.ne[2];
    dst[i] = *reinterpret_cast<const T*>(src + i0 * l.nb[0] + i1 * l.nb[1] + i2 * l.nb[2] + i3 * l.nb[3]);
  }
}

__global__ void binary_strided_kernel(bool mul, const uint8_t* __restrict__ a, StridedLayout la,
                                      const uint8_t* __restrict__ b, StridedLayout lb, int64_t n,
                                      float* __restrict__ out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t r = i;
    const int64_t i0 = r % la.ne[0];
    r /= la.ne[0];
    const int64_t i1 = r % la.ne[1];
    r /= la.ne[1];
    const int64_t i2 = r % la.ne[2], i3 = r / la.ne[2];
    const float x = *reinterpret_cast<const float*>(a + i0 * la.nb[0] + i1 * la.nb[1] + i2 * la.nb[2] + i3 * la.nb[3]);
    const float y = *reinterpret_cast<const float*>(b + i0 * lb.nb[0] + i1 * lb.nb[1] + i2 * lb.nb[2] + i3 * lb.nb[3]);
    out[i] = mul ? x * y : x + y;
  }
}

}  // namespace

void binary_strided(bool mul, const void* a, const StridedLayout& la, const void* b, const StridedLayout& lb,
                    float* out) {
  const int64_t n = la.ne[0] * la.ne[1] * la.ne[2] * la.ne[3];
  if (n <= 0) return;
  Stream st = stream_for(mul ? "mul (strided)" : "add (strided)");
  binary_strided_kernel<<<capped_blocks(n, 256), 256, 0, st>>>(mul, static_cast<const uint8_t*>(a), la,
                                                                static_cast<const uint8_t*>(b), lb, n, out);
  Context::get().check(mul ? "mul (strided)" : "add (strided)");
}

void cont(const void* src, const StridedLayout& l, void* dst) {
  const int64_t n = l.ne[0] * l.ne[1] * l.ne[2] * l.ne[3];
  if (n <= 0) return;
  Stream st = stream_for("cont");
  const auto* s = static_cast<const uint8_t*>(src);
  const unsigned grid = capped_blocks(n, 256);
  switch (l.elem) {
    case 1: cont_kernel<uint8_t><<<grid, 256, 0, st>>>(s, l, n, static_cast<uint8_t*>(dst)); break;
    case 2: cont_kernel<uint16_t><<<grid, 256, 0, st>>>(s, l, n, static_cast<uint16_t*>(dst)); break;
    case 4: cont_kernel<uint32_t><<<grid, 256, 0, st>>>(s, l, n, static_cast<uint32_t*>(dst)); break;
    case 8: cont_kernel<uint64_t><<<grid, 256, 0, st>>>(s, l, n, static_cast<uint64_t*>(dst)); break;
    default: throw Error("cuda::cont: no kernel for " + std::to_string(l.elem) + "-byte elements");
  }
  Context::get().check("cont");
}

}  // namespace kvad::cuda
