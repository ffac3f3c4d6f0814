// The config.json of each component of a Stable Diffusion pipeline, read
// into structs whose fields carry the HF names (diffusers' and transformers'
// config attributes), with the defaults the reference classes give a key the
// file does not hold.
//
// Source: diffusers 0.42 models/unets/unet_2d_condition.py
// (UNet2DConditionModel.__init__), models/autoencoders/autoencoder_kl.py
// (AutoencoderKL.__init__), models/transformers/transformer_flux.py
// (FluxTransformer2DModel.__init__); transformers 5 models/clip/configuration_clip.py
// (CLIPTextConfig).
#pragma once
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace kvad::image {

/// transformers' CLIPTextConfig (CLIPTextModel, CLIPTextModelWithProjection).
struct ClipTextConfig {
  int64_t vocab_size = 49408;
  int64_t hidden_size = 512;
  int64_t intermediate_size = 2048;
  int64_t projection_dim = 512;
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 8;
  int64_t max_position_embeddings = 77;
  std::string hidden_act = "quick_gelu";  ///< "quick_gelu" (openai CLIP) or "gelu" (OpenCLIP bigG)
  double layer_norm_eps = 1e-5;
  int64_t pad_token_id = 1, bos_token_id = 49406, eos_token_id = 49407;
  /// CLIPTextModelWithProjection (architectures / _class_name): a
  /// text_projection [projection_dim, hidden_size] without bias.
  bool with_projection = false;
};

/// diffusers' UNet2DConditionModel config, the fields SD 1.5 and SDXL use.
/// Per-block lists are expanded to one value per down block.
struct UNet2DConditionConfig {
  int64_t sample_size = 64;
  int64_t in_channels = 4, out_channels = 4;
  bool center_input_sample = false, flip_sin_to_cos = true;
  int64_t freq_shift = 0;
  std::vector<std::string> down_block_types, up_block_types;
  std::string mid_block_type = "UNetMidBlock2DCrossAttn";
  std::vector<int64_t> block_out_channels;
  int64_t layers_per_block = 2;
  int64_t downsample_padding = 1;
  double mid_block_scale_factor = 1;
  std::string act_fn = "silu";
  int64_t norm_num_groups = 32;
  double norm_eps = 1e-5;
  int64_t cross_attention_dim = 1280;
  std::vector<int64_t> transformer_layers_per_block;  ///< per down block
  /// Heads per down block. diffusers' attention_head_dim, which SD 1.5 and
  /// SDXL use as the head count (num_attention_heads absent: "the naming
  /// is a mistake" in unet_2d_condition.py); num_attention_heads when given.
  std::vector<int64_t> num_attention_heads;
  bool use_linear_projection = false, upcast_attention = false;
  std::string addition_embed_type;  ///< "" or "text_time" (SDXL)
  int64_t addition_time_embed_dim = 0, projection_class_embeddings_input_dim = 0;
};

/// diffusers' AutoencoderKL config.
struct AutoencoderKLConfig {
  int64_t in_channels = 3, out_channels = 3, latent_channels = 4;
  std::vector<std::string> down_block_types, up_block_types;
  std::vector<int64_t> block_out_channels;
  int64_t layers_per_block = 1;
  std::string act_fn = "silu";
  int64_t norm_num_groups = 32;
  int64_t sample_size = 32;
  double scaling_factor = 0.18215;
  /// FLUX's VAE: the pipeline decodes latents / scaling_factor + shift_factor
  /// (and encodes (mean - shift_factor) · scaling_factor); 0 for SD (null in its config).
  double shift_factor = 0;
  bool force_upcast = true, use_quant_conv = true, use_post_quant_conv = true, mid_block_add_attention = true;
};

/// diffusers' FluxTransformer2DModel config (transformer/config.json).
struct FluxTransformerConfig {
  int64_t patch_size = 1;
  int64_t in_channels = 64, out_channels = 64;  ///< out_channels null: in_channels
  int64_t num_layers = 19, num_single_layers = 38;
  int64_t attention_head_dim = 128, num_attention_heads = 24;
  int64_t joint_attention_dim = 4096, pooled_projection_dim = 768;
  bool guidance_embeds = false;
  std::vector<int64_t> axes_dims_rope{16, 56, 56};
  int64_t inner_dim() const { return attention_head_dim * num_attention_heads; }
};

/// Reads a parsed transformer/config.json; `name` prefixes errors. Throws
/// kvad::Error "NAME: FIELD ..." for a field of the wrong type or out of
/// range, a patch_size other than 1 (FluxPipeline packs 2×2 patches itself),
/// or axes_dims_rope that do not sum to attention_head_dim or hold odd dims.
FluxTransformerConfig parse_flux_config(const nlohmann::json& cfg, const std::string& name);

/// Each reads a parsed config.json; `name` (its path) prefixes errors.
/// Throws kvad::Error "NAME: FIELD ..." for a field of the wrong type, a
/// count or width outside 1..2^20, a block type kvad does not know (listing
/// those it does), per-block lists whose length is not the block count,
/// channels not a multiple of norm_num_groups, or heads that do not divide
/// the channels of their block.
ClipTextConfig parse_clip_text_config(const nlohmann::json& cfg, const std::string& name);
UNet2DConditionConfig parse_unet_config(const nlohmann::json& cfg, const std::string& name);
AutoencoderKLConfig parse_vae_config(const nlohmann::json& cfg, const std::string& name);

/// True for a UNet down/up block type with cross-attention transformers
/// ("CrossAttnDownBlock2D", "CrossAttnUpBlock2D").
bool has_attention(const std::string& block_type);

}  // namespace kvad::image
