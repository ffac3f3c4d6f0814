// The CPU (and sim) row's multi-head latent attention (tensor/ops.h
// attention_latent; shapes as documented there).
#pragma once

#include "tensor/backend.h"
#include "tensor/tensor.h"

namespace kvad::cpu {

void attention_latent(const Tensor& q, const Tensor& cache, const Tensor& seq, const Tensor& pos,
                      const AttentionOpParams& p, const Tensor& out);

void attention_seq(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pos, float scale,
                   const Tensor& out);

}  // namespace kvad::cpu
