// The CPU (and sim) row's entries for strided inputs (tensor/backend.h
// "Strided"; tensor/ops.h cont, matmul_batched, and the element-wise ops on
// views). A row of a strided tensor is ne[0] elements nb[0] bytes apart,
// rows at i1·nb[1] + i2·nb[2] + i3·nb[3]; outputs are contiguous.
#pragma once
#include <cstdint>

#include "tensor/backend.h"
#include "tensor/tensor.h"

namespace kvad::cpu {

/// Row r (dims 1..3 in order) of x, ne[0] elements, copied contiguous to dst
/// (row_bytes(x.type, ne[0]) bytes). x: any strides; a block format's
/// blocks contiguous (nb[0] its block bytes).
void gather_row(const Tensor& x, int64_t r, void* dst);
/// All of x copied contiguous to dst (x.n_bytes() bytes), rows split over the pool.
void cont_to(const Tensor& x, void* dst);
/// The row entry: out = x, contiguous.
void cont(const Tensor& x, const Tensor& out);

/// out = a op b, a and b of out's shape with any strides (0 where
/// broadcast). Rows whose inner elements are contiguous in both run the
/// AVX2 kernel when the CPU has it; the others the scalar loop.
void binary_strided(Binary op, const Tensor& a, const Tensor& b, const Tensor& out);
/// The scalar reference and the AVX2 kernel of one contiguous row:
/// o[i] = a[i] op b[i], n elements (o may alias a or b).
void binary_row_ref(Binary op, int64_t n, const float* a, const float* b, float* o);
void binary_row_avx2(Binary op, int64_t n, const float* a, const float* b, float* o);  // strided_avx2.cpp

/// Rows of a and b (any strides) joined into out [rows, na + nb].
void concat_strided(const Tensor& a, const Tensor& b, const Tensor& out);

/// y[b] = x[b] · W[b]ᵀ (ops.h matmul_batched): x [B, n_tok, n_in] f32 with
/// nb[0] = 4 and any nb[1], nb[2] (0: one x for every batch), converted once
/// to W's dot partner; one parallel loop over (batch, block of W rows) runs
/// the format's gemm (or vec_dot) as matmul_id does for one expert, so each
/// y[b] equals matmul_id's product with ids b bit for bit.
void matmul_batched(const Tensor& x, const Tensor& w, const Tensor& out);

}  // namespace kvad::cpu
