#include "model/image/layers.h"

#include "io/tensor_source.h"

namespace kvad::image {

namespace {

// A kernel stored in a block format is in conv2d's layout {C, KW, KH, OC}
// already (the quantize-once cache writes it so: model/image/quantize_pipeline.h).
bool in_conv_layout(const WeightScope& s) {
  const SourceTensor* t = s.find("weight");
  return t && dtype_info(t->type).block_elems > 1;
}

}  // namespace

Tensor vector_f32(const WeightScope& s, const std::string& name, int64_t n) {
  Tensor t = s.get(name, {n});
  return t.type == DType::F32 ? t : ops::convert(t, DType::F32);
}

Linear::Linear(const WeightScope& s, int64_t n_in, int64_t n_out, bool bias, bool as_conv1x1) {
  if (!as_conv1x1) w = s.get("weight", {n_in, n_out});
  else if (in_conv_layout(s)) w = s.get("weight", {n_in, 1, 1, n_out}).view({n_in, n_out, 1, 1});
  else w = s.get("weight", {1, 1, n_in, n_out}).view({n_in, n_out, 1, 1});
  if (bias) b = vector_f32(s, "bias", n_out);
}

Conv2d::Conv2d(const WeightScope& s, int64_t n_in, int64_t n_out, int64_t k, int64_t stride, int64_t padding)
    : w(in_conv_layout(s) ? s.get("weight", {n_in, k, k, n_out}) : ops::conv2d_weight(s.get("weight", {k, k, n_in, n_out}))),
      b(vector_f32(s, "bias", n_out)) {
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
