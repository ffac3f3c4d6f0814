// FLUX.1's denoiser (Black Forest Labs 2024; diffusers 0.35
// models/transformers/transformer_flux.py, FluxTransformer2DModel), an MMDiT
// over 2×2-packed latent patches (the pipeline packs them, see
// engine/flux_painter.h) and T5 text tokens:
//
//   img = x_embedder(latents)                       [N, n_img, inner]   inner = heads · head_dim
//   txt = context_embedder(t5_hidden)               [N, n_txt, inner]
//   temb = TimestepEmbedding(Timesteps(t·1000)) (+ guidance_embedder(Timesteps(g·1000)) when guidance_embeds)
//          + text_embedder(pooled CLIP)             [N, inner]   (Timesteps: 256, flip_sin_to_cos, shift 0)
//   rope = FluxPosEmbed(cat(txt_ids, img_ids))      txt ids 0, img ids (0, row, col)
//   num_layers double-stream blocks (mmdit::DoubleStreamBlock) over (img, txt)
//   x = cat(txt, img); num_single_layers single-stream blocks:
//     (shift, scale, gate) = norm.linear(SiLU(temb)); h = modulate(LN(x), shift, scale)
//     x = x + gate · proj_out(cat(attn(h), gelu_tanh(proj_mlp(h))))
//   img = x[n_txt:]; (scale, shift) = norm_out.linear(SiLU(temb))
//   out = proj_out(LN(img) · (1 + scale) + shift)   [N, n_img, patch² · out_channels]
//
// Weights by their diffusers names under the scope ("transformer." in a
// pipeline): x_embedder, context_embedder, time_text_embed.{timestep_embedder,
// guidance_embedder, text_embedder}, transformer_blocks.I.*,
// single_transformer_blocks.I.{norm.linear, attn.*, proj_mlp, proj_out},
// norm_out.linear, proj_out.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/image/configs.h"
#include "model/image/layers.h"
#include "model/image/mmdit_blocks.h"
#include "model/image/unet_blocks.h"

namespace kvad::image {

class FluxTransformer2D {
 public:
  /// Takes the weights under `s` (diffusers' names). Throws kvad::Error as
  /// WeightScope::get does for a missing tensor or a shape other than the
  /// config's.
  FluxTransformer2D(const WeightScope& s, const FluxTransformerConfig& c);

  struct Input {
    Tensor hidden_states;          ///< packed latents {in_channels, n_img, N} f32
    Tensor encoder_hidden_states;  ///< T5 hidden states {joint_attention_dim, n_txt, N} f32
    Tensor pooled_projections;     ///< CLIP pooled {pooled_projection_dim, N} f32
    float timestep = 0;            ///< diffusers' `timestep` argument: the scheduler's t / 1000 (multiplied by 1000 inside)
    std::optional<float> guidance; ///< the guidance scale (multiplied by 1000 inside); needed iff guidance_embeds
    std::vector<float> txt_ids, img_ids;  ///< n_txt and n_img rows of axes_dims_rope.size() positions (shared by the batch)
  };
  /// The noise prediction (flow velocity) {out_channels, n_img, N} f32 on the
  /// weights' device. Throws kvad::Error for inputs whose shapes do not fit
  /// the config, ids of the wrong count, a non-finite timestep, or guidance
  /// given without guidance_embeds or missing with it.
  Tensor forward(const Input& in) const;

  const FluxTransformerConfig& config() const { return c_; }
  Device device() const { return dev_; }

 private:
  struct SingleBlock {
    mmdit::AdaLNModulation norm;
    mmdit::JointAttention attn;
    Linear proj_mlp, proj_out;
  };
  FluxTransformerConfig c_;
  Device dev_;
  Linear x_embedder_, context_embedder_, proj_out_;
  std::unique_ptr<unet::TimestepEmbedding> timestep_embedder_, guidance_embedder_, text_embedder_;
  std::vector<mmdit::DoubleStreamBlock> double_;
  std::vector<SingleBlock> single_;
  mmdit::AdaLNModulation norm_out_;
};

}  // namespace kvad::image
