// TEMPORARY, removed before main (with the UNet and the VAE) is merged in:
// lets the Painter link while those two are written elsewhere. Every call
// throws, so nothing can paint with it.
#include "base/error.h"
#include "model/image/unet.h"
#include "model/image/vae.h"

namespace kvad::image {
UNet2DCondition::UNet2DCondition(const WeightScope&, const UNet2DConditionConfig&) {
  throw Error("this build has no UNet yet (model/image/unet.cpp is not merged)");
}
Tensor UNet2DCondition::forward(const Tensor&, float, const Tensor&, const UNetAddedCond*) const {
  throw Error("this build has no UNet yet");
}
AutoencoderKL::AutoencoderKL(const WeightScope&, const AutoencoderKLConfig&) {
  throw Error("this build has no VAE yet (model/image/vae.cpp is not merged)");
}
Tensor AutoencoderKL::decode(const Tensor&, const VaeTiling&) const { throw Error("this build has no VAE yet"); }
Tensor AutoencoderKL::encode(const Tensor&) const { throw Error("this build has no VAE yet"); }
int64_t AutoencoderKL::downscale() const { return 8; }
}  // namespace kvad::image
