// The blocks of UNet2DCondition (model/image/unet.h, whose comment gives
// their equations and sources), each taking its weights by its diffusers
// names under a WeightScope. Internal to model/image.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "model/image/configs.h"
#include "model/image/layers.h"

namespace kvad::image::unet {

/// diffusers' Timesteps / get_timestep_embedding: values [n] (ne {1, n}, f32)
/// → [n, dim] f32 sinusoidal embeddings on the values' device.
Tensor timestep_proj(const Tensor& values, int64_t dim, bool flip_sin_to_cos, int64_t freq_shift);

/// TimestepEmbedding: linear_2(silu(linear_1(x))). x [n, n_in] → [n, n_out].
struct TimestepEmbedding {
  Linear l1, l2;
  TimestepEmbedding(const WeightScope& s, int64_t n_in, int64_t n_out);
  Tensor operator()(const Tensor& x) const;
};

/// ResnetBlock2D (resnet_time_scale_shift "default", no up/down sampling).
struct ResnetBlock2D {
  GroupNorm norm1, norm2;
  Conv2d conv1, conv2;
  Linear time_emb_proj;
  std::optional<Conv2d> conv_shortcut;
  float output_scale_factor = 1;
  int64_t out = 0;
  ResnetBlock2D(const WeightScope& s, int64_t in, int64_t out, int64_t temb, const UNet2DConditionConfig& c,
                double output_scale_factor = 1);
  /// x {in, W, H, N}; temb_act: silu(emb) [N or 1, temb] → {out, W, H, N}.
  Tensor operator()(const Tensor& x, const Tensor& temb_act) const;
};

/// diffusers' Attention with AttnProcessor2_0, no biases on q, k, v.
struct Attention {
  Linear to_q, to_k, to_v, to_out;
  int64_t heads = 1, dim = 0;
  Attention(const WeightScope& s, int64_t dim, int64_t context_dim, int64_t heads);
  /// x: tokens {dim, n, N}; ctx: {context_dim, m, N}, or nullptr for
  /// self-attention → {dim, n, N}.
  Tensor operator()(const Tensor& x, const Tensor* ctx) const;
};

/// BasicTransformerBlock (norm_type "layer_norm", GEGLU feed-forward).
struct BasicTransformerBlock {
  LayerNorm norm1, norm2, norm3;
  Attention attn1, attn2;
  Linear ff_in, ff_out;
  BasicTransformerBlock(const WeightScope& s, int64_t dim, int64_t context_dim, int64_t heads);
  Tensor operator()(const Tensor& x, const Tensor& ctx) const;
};

/// Transformer2DModel over an image (continuous input).
struct Transformer2D {
  GroupNorm norm;
  Linear proj_in, proj_out;
  std::vector<BasicTransformerBlock> blocks;
  Transformer2D(const WeightScope& s, int64_t channels, int64_t heads, int64_t layers,
                const UNet2DConditionConfig& c);
  /// x {C, W, H, N}, ctx {context_dim, m, N} → {C, W, H, N}.
  Tensor operator()(const Tensor& x, const Tensor& ctx) const;
};

/// One down, mid or up block: resnets, each followed by its transformer
/// when the block has attention, and the down/up-sampler's conv.
struct Block {
  std::vector<ResnetBlock2D> resnets;
  std::vector<Transformer2D> attentions;  ///< empty, or one per resnet (mid: one fewer)
  std::optional<Conv2d> sampler;          ///< downsamplers.0.conv / upsamplers.0.conv
  int64_t downsample_padding = 1;
};

/// Downsample2D: x {C, W, H, N} → {C, ⌈W/2⌉, ⌈H/2⌉, N} (padding 1; padding 0
/// pads right and bottom first).
Tensor downsample(const Conv2d& conv, const Tensor& x, int64_t padding);
/// Upsample2D: nearest ×2, cut to (w, h) when that is smaller, then the conv.
Tensor upsample(const Conv2d& conv, const Tensor& x, int64_t w, int64_t h);

/// Every block of the UNet, as UNet2DConditionModel names them.
struct Blocks {
  Conv2d conv_in, conv_out;
  GroupNorm conv_norm_out;
  std::optional<TimestepEmbedding> time_embedding, add_embedding;
  std::vector<Block> down, up;
  Block mid;
  Blocks(const WeightScope& s, const UNet2DConditionConfig& c);
};

}  // namespace kvad::image::unet
