#include "model/image/layers.h"

namespace kvad::image {

Tensor vector_f32(const WeightScope& s, const std::string& name, int64_t n) {
  Tensor t = s.get(name, {n});
  return t.type == DType::F32 ? t : ops::convert(t, DType::F32);
}

Linear::Linear(const WeightScope& s, int64_t n_in, int64_t n_out, bool bias, bool as_conv1x1) {
  w = as_conv1x1 ? s.get("weight", {1, 1, n_in, n_out}).view({n_in, n_out, 1, 1}) : s.get("weight", {n_in, n_out});
  if (bias) b = vector_f32(s, "bias", n_out);
}

Conv2d::Conv2d(const WeightScope& s, int64_t n_in, int64_t n_out, int64_t k, int64_t stride, int64_t padding)
    : w(ops::conv2d_weight(s.get("weight", {k, k, n_in, n_out}))), b(vector_f32(s, "bias", n_out)) {
  p.stride_w = p.stride_h = stride;
  p.pad_w = p.pad_h = padding;
}

GroupNorm::GroupNorm(const WeightScope& s, int64_t groups_, int64_t channels, double eps_)
    : w(vector_f32(s, "weight", channels)),
      b(vector_f32(s, "bias", channels)),
      groups(groups_),
      eps(static_cast<float>(eps_)) {}

LayerNorm::LayerNorm(const WeightScope& s, int64_t n, double eps_)
    : w(vector_f32(s, "weight", n)), b(vector_f32(s, "bias", n)), eps(static_cast<float>(eps_)) {}

}  // namespace kvad::image
