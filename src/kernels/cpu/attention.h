// The CPU (and sim) row's key/value cache entries: kv_store and attention
// (tensor/ops.h; shapes as documented there). The kernels over one tile of
// query rows are host_kernels.h's attention_rows (reference) and
// attention_avx2.cpp's.
#pragma once
#include <cstdint>

#include "tensor/backend.h"
#include "tensor/tensor.h"

namespace kvad::cpu {

void kv_store(const Tensor& cache, const Tensor& x, const Tensor& seq, const Tensor& pos, int64_t slots);
void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& seq, const Tensor& pos,
               const AttentionOpParams& p, const Tensor& o);
/// Attention without a mask or cache (ops.h sdpa): tiles of queries of one
/// image and head over all its keys; sdpa_tile_avx2 when the CPU has AVX2 and
/// D % 8 == 0, D <= 256, else attention_rows_ref (the reference) in tiles of
/// AttentionRows::kMax.
void sdpa(const Tensor& q, const Tensor& k, const Tensor& v, float scale, const Tensor& o);

/// Query rows per sdpa_tile_avx2 call.
inline constexpr int kSdpaMaxRows = 64;
/// out_r = softmax(scale · q_r · Kᵀ) · V for n_rows <= kSdpaMaxRows query
/// rows q[r] (D f32 each) over n_kv keys and values, row j of K at
/// k + j·kv_stride, of V at v + j·kv_stride (f32). D % 8 == 0, D <= 256.
/// The same function as attention_rows_ref with first 0, last n_kv - 1, up
/// to float rounding (sdpa_avx2.cpp).
void sdpa_tile_avx2(const float* const* q, float* const* out, int n_rows, const float* k, const float* v,
                    int64_t kv_stride, int64_t n_kv, int64_t D, float scale);

}  // namespace kvad::cpu
