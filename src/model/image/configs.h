// The config.json of each component of a Stable Diffusion pipeline, read
// into structs whose fields carry the HF names (diffusers' and transformers'
// config attributes), with the defaults the reference classes give a key the
// file does not hold.
//
// Source: diffusers 0.42 models/unets/unet_2d_condition.py
// (UNet2DConditionModel.__init__), models/autoencoders/autoencoder_kl.py
// (AutoencoderKL.__init__); transformers 5 models/clip/configuration_clip.py
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
  bool force_upcast = true, use_quant_conv = true, use_post_quant_conv = true, mid_block_add_attention = true;
};

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
