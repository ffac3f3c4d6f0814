// TEMPORARY: the declaration the VAE helper is writing (its own header
// replaces this one when it is merged into main); removed before that merge.
#pragma once
#include <cstdint>

#include "model/image/configs.h"
#include "model/weights.h"
#include "tensor/tensor.h"

namespace kvad::image {
struct VaeTiling {
  int64_t tile = 0;
  int64_t overlap = 0;
};
class AutoencoderKL {
 public:
  AutoencoderKL(const WeightScope& scope, const AutoencoderKLConfig& c);
  Tensor decode(const Tensor& z, const VaeTiling& tiling = {}) const;
  Tensor encode(const Tensor& x) const;
  int64_t downscale() const;
};
}  // namespace kvad::image
