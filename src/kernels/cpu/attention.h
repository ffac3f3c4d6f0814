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
/// Attention without a mask or cache (ops.h sdpa): tiles of up to
/// AttentionRows::kMax queries of one image and head over all its keys.
void sdpa(const Tensor& q, const Tensor& k, const Tensor& v, float scale, const Tensor& o);

}  // namespace kvad::cpu
