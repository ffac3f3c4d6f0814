// TEMPORARY: the declaration the UNet helper is writing (its own header
// replaces this one when it is merged into main); removed before that merge.
#pragma once
#include "model/image/configs.h"
#include "model/weights.h"
#include "tensor/tensor.h"

namespace kvad::image {
struct UNetAddedCond {
  Tensor text_embeds;  // ne {projection_dim, N} f32
  Tensor time_ids;     // ne {6, N} f32
};
class UNet2DCondition {
 public:
  UNet2DCondition(const WeightScope& scope, const UNet2DConditionConfig& c);
  Tensor forward(const Tensor& sample, float timestep, const Tensor& encoder_hidden_states,
                 const UNetAddedCond* added) const;
};
}  // namespace kvad::image
