// The CPU (and sim) row's mixture-of-experts entries (tensor/ops.h
// moe_route, matmul_id, moe_sum; shapes as documented there).
#pragma once
#include <cstdint>

#include "tensor/backend.h"
#include "tensor/tensor.h"

namespace kvad::cpu {

void moe_route(const Tensor& logits, const MoeRouteParams& p, const Tensor& ids, const Tensor& weights);
void matmul_id(const Tensor& x, const Tensor& w, const Tensor& ids, const Tensor& out);
void moe_sum(const Tensor& y, const Tensor& weights, const Tensor& out);

}  // namespace kvad::cpu
