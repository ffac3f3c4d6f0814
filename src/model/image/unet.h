// The denoiser of Stable Diffusion 1.5 and SDXL: diffusers' UNet2DConditionModel
// (Rombach et al. 2022, "High-Resolution Image Synthesis with Latent Diffusion
// Models"; Podell et al. 2023, "SDXL"), the blocks SD 1.5 and SDXL use, as
// diffusers 0.42 computes them (models/unets/unet_2d_condition.py,
// models/unets/unet_2d_blocks.py, models/resnet.py, models/attention.py,
// models/attention_processor.py, models/embeddings.py,
// models/transformers/transformer_2d.py, models/downsampling.py,
// models/upsampling.py). Images are ne {C, W, H, N} (tensor/ops.h); GN is
// GroupNorm(norm_num_groups), eps norm_eps unless said.
//
//   Timesteps (get_timestep_embedding, half = dim / 2):
//     f_k = exp(-ln(10000) · k / (half - freq_shift)),  a_k = t · f_k,  k < half
//     proj(t) = [cos a, sin a] with flip_sin_to_cos, else [sin a, cos a]  (zero-padded to an odd dim)
//   TimestepEmbedding: L2(silu(L1(x)))                 dim block_out_channels[0] → 4 · that (temb)
//   emb = time_embedding(proj_{C0}(t))
//     SDXL (addition_embed_type "text_time"): emb += add_embedding(
//       [text_embeds, proj_{addition_time_embed_dim}(each of the 6 time_ids) flattened])
//   ResnetBlock2D(x, emb), Cin → Cout:
//     h = conv1_3x3(silu(GN(x))) + time_emb_proj(silu(emb))     (per sample, over every pixel)
//     h = conv2_3x3(silu(GN(h)))
//     out = (shortcut(x) + h) / output_scale_factor    shortcut: 1×1 conv_shortcut when Cin ≠ Cout
//   Transformer2DModel(x, ctx), C channels, heads h, head dim C / h:
//     t = proj_in(GN_{eps 1e-6}(x)) over the pixels   (1×1 conv, or Linear with use_linear_projection)
//     per BasicTransformerBlock:  t += attn1(LN1(t));  t += attn2(LN2(t), ctx);  t += FF(LN3(t))
//       attn(x, c): softmax(q kᵀ / √head_dim) v per head, q = Wq x, k = Wk c, v = Wv c (no biases;
//                   c = x for attn1), then to_out (with bias)
//       FF(x) = W2 · (a ⊙ gelu_erf(g)) + b2,  [a, g] = W1 x + b1 (GEGLU, 4·C inner)
//     out = proj_out(t) + x
//   Downsample2D: conv 3×3 stride 2, padding downsample_padding (0: pad right and bottom by 1 first)
//   Upsample2D: nearest ×2 (interpolated to the skip's size when the input's sides are not
//     multiples of 2^(up-samplers): the ceil-rounded down path), then conv 3×3
//   forward:
//     h = conv_in(sample) (2·sample - 1 first with center_input_sample); skips = [h]
//     down block i (layers_per_block resnets [+ transformer_layers_per_block[i]-deep
//       Transformer2DModels, heads num_attention_heads[i]]): per layer h = res(h); h = attn(h);
//       skips += h; then, but for the last block, h = down(h); skips += h
//     mid: h = res(h); h = attn(h) (heads, depth of the last block); h = res(h)
//       (its resnets' output_scale_factor: mid_block_scale_factor)
//     up block i (reversed channels, heads and depths; layers_per_block + 1 resnets):
//       per layer h = res(concat_channels(h, skips.pop())); h = attn(h); then, but for the
//       last block, h = up(h)
//     out = conv_out(silu(GN(h)))
//
// Attention is computed in f32 whatever upcast_attention says (which only
// changes f16 runs of diffusers). Weights take the format the device keeps
// them in (model/weights.h); activations are f32.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "model/image/configs.h"
#include "model/weights.h"
#include "tensor/tensor.h"

namespace kvad::image {

/// SDXL's added conditions (addition_embed_type "text_time").
struct UNetAddedCond {
  Tensor text_embeds;  ///< pooled text_embeds, ne {projection_dim, N} f32
  Tensor time_ids;     ///< add_time_ids, ne {6, N} f32 (original h, w, crop top, left, target h, w)
};

namespace unet {
struct Blocks;
}

class UNet2DCondition {
 public:
  /// Takes the weights under `scope` (diffusers names: "conv_in.weight", ...),
  /// e.g. WeightLoader.root().sub("unet"). Throws kvad::Error as
  /// WeightScope::get does for a missing tensor or a shape other than the
  /// config gives.
  UNet2DCondition(const WeightScope& scope, const UNet2DConditionConfig& c);
  ~UNet2DCondition();
  UNet2DCondition(UNet2DCondition&&) noexcept;
  UNet2DCondition& operator=(UNet2DCondition&&) noexcept;

  /// One denoiser call. sample ne {in_channels, W, H, N} f32 (already
  /// scale_model_input'd); timestep: one value for all N samples (finite);
  /// encoder_hidden_states ne {cross_attention_dim, n_ctx, N} f32; added:
  /// required iff c.addition_embed_type == "text_time", else nullptr.
  /// Every input on device(). Returns ne {out_channels, W, H, N} f32 (the
  /// predicted noise, or v, as the checkpoint was trained).
  /// Throws kvad::Error, naming the input and its shape, for shapes or
  /// formats that do not fit, inputs on another device, a missing or
  /// unexpected `added`, or a non-finite timestep.
  Tensor forward(const Tensor& sample, float timestep, const Tensor& encoder_hidden_states,
                 const UNetAddedCond* added) const;

  const UNet2DConditionConfig& config() const { return c_; }
  Device device() const { return dev_; }

 private:
  UNet2DConditionConfig c_;
  Device dev_;
  std::unique_ptr<unet::Blocks> b_;
};

}  // namespace kvad::image
