// The arithmetic of a diffusers text-to-image pipeline around its models:
// moving latents between torch's NCHW order (which torch.randn and the
// schedulers' noise are drawn in) and kvad's channels-last image tensors,
// classifier-free guidance, and the last step from the VAE's output to
// 8-bit pixels. Each is element-wise float32 in diffusers' order of
// operations (compiled without fused multiply-adds), so results equal
// torch's to the bit.
//
// Source: diffusers 0.42 pipelines/stable_diffusion/pipeline_stable_diffusion.py
// (__call__: noise_pred_uncond + guidance_scale * (noise_pred_text -
// noise_pred_uncond)), image_processor.py (VaeImageProcessor.denormalize:
// (image / 2 + 0.5).clamp(0, 1); numpy_to_pil: (images * 255).round()).
#pragma once
#include <cstdint>
#include <span>

namespace kvad::diffusion {

/// The dims of a batch of latents or images: n images of c channels, h rows of w pixels.
struct ImageDims {
  int64_t n = 1, c = 4, h = 0, w = 0;
  int64_t count() const { return n * c * h * w; }
};

/// torch's NCHW order (index ((n·C + c)·H + y)·W + x) to kvad's channels-last
/// tensor ne {C, W, H, N} (index ((n·H + y)·W + x)·C + c). `src` and `dst`
/// hold d.count() values and do not overlap. Throws kvad::Error for sizes
/// other than d.count().
void nchw_to_cwhn(std::span<const float> src, std::span<float> dst, const ImageDims& d);
/// The inverse: ne {C, W, H, N} to NCHW.
void cwhn_to_nchw(std::span<const float> src, std::span<float> dst, const ImageDims& d);

/// FluxPipeline._pack_latents: NCHW latents d (h, w even) as 2×2 patches,
/// [n, (h/2)·(w/2), c·4] row-major (patch (y, x) at row y·(w/2) + x, its
/// features c·4 + dy·2 + dx) -- the memory of the tokens tensor ne {c·4,
/// (h/2)·(w/2), n}. Throws kvad::Error for odd sides or sizes other than d.count().
void pack_latents(std::span<const float> nchw, std::span<float> packed, const ImageDims& d);
/// FluxPipeline._unpack_latents, the inverse.
void unpack_latents(std::span<const float> packed, std::span<float> nchw, const ImageDims& d);

/// Classifier-free guidance (Ho & Salimans 2022):
/// out[i] = uncond[i] + scale · (cond[i] - uncond[i]), each operation rounded
/// to float32 as torch does. `out` may alias `uncond` or `cond`. Throws
/// kvad::Error for sizes that differ.
void guidance_combine(std::span<const float> uncond, std::span<const float> cond, float scale,
                      std::span<float> out);

/// The VAE's output x (~[-1, 1]) as a byte: round(clamp(x / 2 + 0.5, 0, 1) · 255),
/// rounding half to even as numpy does; NaN gives 0.
uint8_t to_u8(float x);
/// to_u8 of each value; sizes equal (kvad::Error otherwise).
void to_rgb8(std::span<const float> x, std::span<uint8_t> out);

}  // namespace kvad::diffusion
