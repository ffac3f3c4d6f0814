// The CPU (and sim) row's entries that work on each row of their input on
// its own: rms_norm, layer_norm, rope, softmax, concat and slice
// (tensor/ops.h; shapes as documented there).
#pragma once
#include <cstdint>

#include "tensor/backend.h"
#include "tensor/tensor.h"

namespace kvad::cpu {

void rms_norm(const Tensor& x, const Tensor* w, float eps, bool one_plus, const Tensor& o);
void layer_norm(const Tensor& x, const Tensor* w, const Tensor* b, float eps, const Tensor& o);
void rope(const Tensor& x, const Tensor& pos, const RopeParams& p, const Tensor& o);
void softmax(const Tensor& x, const Tensor& o);
void concat(const Tensor& a, const Tensor& b, const Tensor& o);
void slice(const Tensor& x, int64_t off, const Tensor& o);

}  // namespace kvad::cpu
