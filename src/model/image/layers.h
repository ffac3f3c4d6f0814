// The torch.nn modules the image models are built of (nn.Linear, nn.Conv2d,
// nn.GroupNorm, nn.LayerNorm as diffusers and transformers use them), each
// taking its weights by its torch names ("weight", "bias") under a
// WeightScope, in the image layout of tensor/ops.h: an image is ne {C, W, H,
// N} (channels-last), a token matrix ne {features, tokens}.
#pragma once
#include <cstdint>
#include <string>

#include "model/weights.h"
#include "tensor/ops.h"
#include "tensor/tensor.h"

namespace kvad::image {

/// A vector weight (norm, bias) `name` of n values as f32: a checkpoint's
/// fp16 variant stores them as f16, and the ops read them as floats.
/// Throws kvad::Error as WeightScope::get for a missing tensor or another shape.
Tensor vector_f32(const WeightScope& s, const std::string& name, int64_t n);

/// nn.Linear(n_in, n_out, bias): y = x · Wᵀ + b. x: [rows, n_in] (ne {n_in,
/// rows}) f32 contiguous; y: [rows, n_out]. Weight torch [n_out, n_in].
/// `as_conv1x1`: the weight is an nn.Conv2d(n_in, n_out, 1)'s [n_out, n_in,
/// 1, 1] (the same product over pixels; diffusers' Transformer2DModel with
/// use_linear_projection false).
struct Linear {
  Tensor w, b;  ///< b empty without a bias
  Linear() = default;
  Linear(const WeightScope& s, int64_t n_in, int64_t n_out, bool bias, bool as_conv1x1 = false);
  Tensor operator()(const Tensor& x) const { return ops::matmul(x, w, b ? &b : nullptr); }
};

/// nn.Conv2d(n_in, n_out, k, stride, padding) with a bias: ops::conv2d on an
/// image {n_in, W, H, N} → {n_out, OW, OH, N}. Weight torch [n_out, n_in, k, k]
/// (f32, f16, bf16), or, in a block format (q8_0), already in ops::conv2d's
/// layout {n_in, k, k, n_out} as the quantize-once cache writes it
/// (model/image/quantize_pipeline.h); the same for Linear's as_conv1x1.
struct Conv2d {
  Tensor w, b;
  Conv2dParams p;
  Conv2d() = default;
  Conv2d(const WeightScope& s, int64_t n_in, int64_t n_out, int64_t k, int64_t stride, int64_t padding);
  Tensor operator()(const Tensor& x) const { return ops::conv2d(x, w, b, p); }
};

/// nn.GroupNorm(groups, C, eps) with affine weights, on an image {C, W, H, N}.
struct GroupNorm {
  Tensor w, b;
  int64_t groups = 32;
  float eps = 1e-5f;
  GroupNorm() = default;
  GroupNorm(const WeightScope& s, int64_t groups, int64_t channels, double eps);
  Tensor operator()(const Tensor& x) const { return ops::group_norm(x, groups, w, b, eps); }
};

/// nn.LayerNorm(n, eps) with affine weights, on each row of [rows, n].
struct LayerNorm {
  Tensor w, b;
  float eps = 1e-5f;
  LayerNorm() = default;
  LayerNorm(const WeightScope& s, int64_t n, double eps);
  Tensor operator()(const Tensor& x) const { return ops::layer_norm(x, w, b, eps); }
};

}  // namespace kvad::image
