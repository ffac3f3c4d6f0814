// A cheap preview of a latent: each latent pixel mapped to an RGB colour by a
// fixed linear map, rgb = A·z + b (A [3, C], b [3]), fitted by least squares
// to the VAE's decoded image averaged over each latent pixel's f × f block
// (tools/fit_latent_preview.py; the idea of the "latent RGB factors" previews
// of SD front ends). No decoder runs: a w × h latent gives a w × h picture.
//
// The tables kvad ships were fitted on its own tiny random test VAEs
// (tests/fixtures/image_pipelines: sd15/vae for 4 channels, vae_wide for 16),
// because no real SD / SDXL VAE (nor TAESD) weights could be fetched where
// they were made. They explain little of those VAEs' images (R² 0.5–2.5 %
// for the 4-channel one, 11–37 % for the 16-channel one, per colour channel
// on held-out pairs): they show the latent's structure in colour, not the
// picture a real VAE will decode. Re-running the script on a real VAE gives
// the table to put in their place.
#pragma once
#include <cstdint>
#include <vector>

#include "tensor/tensor.h"

namespace kvad::image {

/// The preview of sample `sample` of `latent` (ne {C, w, h, N} f32, on any
/// device; the latent as the UNet sees it: latent_dist.mean · scaling_factor,
/// C = 4 (SD 1.5, SDXL) or 16): RGB8, w · h pixels row by row from the top, 3
/// bytes each, round((A·z + b + 1) · 127.5) clamped to 0..255 (the decoded
/// image's [-1, 1] range; a NaN gives 0). Throws kvad::Error for another channel count or
/// type, an empty latent, or a sample outside 0..N-1.
std::vector<uint8_t> latent_preview_rgb(const Tensor& latent, int64_t sample = 0);

}  // namespace kvad::image
