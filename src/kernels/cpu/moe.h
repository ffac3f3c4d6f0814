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

struct CpuKernels;
/// Activation row x (n floats) → dst in the weight format's dot-partner
/// layout: vt's from_float (kv), then kw's gemm packing when `pack`; the
/// bytes cpu::matmul's conversion gives (matmul_id, matmul_batched).
void convert_row(const CpuKernels& kw, const CpuKernels& kv, DType vt, bool pack, const float* x, int64_t n,
                 uint8_t* dst);

}  // namespace kvad::cpu
