// The CPU (and sim) row's entries over tensors in any weight format, through
// the format table (kernels.h): matmul, get_rows and convert (tensor/ops.h;
// shapes as documented there).
#pragma once
#include <cstdint>

#include "tensor/backend.h"
#include "tensor/tensor.h"

namespace kvad::cpu {

void matmul(const Tensor& x, const Tensor* const* w, const Tensor* o, int n);
void get_rows(const Tensor& table, const Tensor& id, const Tensor& o);
void convert(const Tensor& src, const Tensor& dst);

}  // namespace kvad::cpu
