// The CPU (and sim) row's element-wise entries: binary, scale, unary, glu
// and swiglu_oai (tensor/ops.h; shapes as documented there). Each takes
// strided inputs (tensor/backend.h): binary through strided.h's kernels,
// the others by gathering a view into their output first.
#pragma once
#include <cstdint>

#include "tensor/backend.h"
#include "tensor/tensor.h"

namespace kvad::cpu {

void binary(Binary op, const Tensor& a, const Tensor& b, const Tensor& o);
void scale(const Tensor& x, float s, const Tensor& o);
void unary(Unary op, const Tensor& x, const Tensor& o);
void glu(Unary op, const Tensor& g, const Tensor& u, const Tensor& o);
void swiglu_oai(const Tensor& g, const Tensor& u, float alpha, float limit, const Tensor& o);

}  // namespace kvad::cpu
