#include "model/image/configs.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "model/image/config_json.h"

namespace kvad::image {

using json = nlohmann::json;

namespace {

using namespace config;

std::vector<std::string> get_strings(const json& cfg, const char* key, std::vector<std::string> def,
                                     const std::string& name) {
  if (!present(cfg, key)) return def;
  const json& v = cfg[key];
  if (!v.is_array() || v.empty() || v.size() > 16) throw Error(name + ": " + key + " is not a list of 1 to 16 names");
  std::vector<std::string> out;
  for (const json& s : v) {
    if (!s.is_string()) throw Error(name + ": " + key + " is not a list of names");
    out.push_back(s.get<std::string>());
  }
  return out;
}

// An integer, or a list of them with one per block (`n`); an integer is
// repeated, as diffusers does for attention_head_dim and
// transformer_layers_per_block.
std::vector<int64_t> per_block(const json& cfg, const char* key, int64_t def, size_t n, const std::string& name) {
  if (!present(cfg, key)) return std::vector<int64_t>(n, def);
  const json& v = cfg[key];
  if (v.is_number_integer()) return std::vector<int64_t>(n, get_int(cfg, key, def, name));
  if (!v.is_array() || v.size() != n)
    throw Error(name + ": " + key + " is neither an integer nor a list of " + std::to_string(n) +
                " (one per down block)");
  std::vector<int64_t> out;
  for (size_t i = 0; i < n; ++i) {
    json one = {{key, v[i]}};
    out.push_back(get_int(one, key, def, name + " " + key + "[" + std::to_string(i) + "]"));
  }
  return out;
}

std::vector<int64_t> int_list(const json& cfg, const char* key, std::vector<int64_t> def, const std::string& name) {
  if (!present(cfg, key)) return def;
  const json& v = cfg[key];
  if (!v.is_array() || v.empty() || v.size() > 16)
    throw Error(name + ": " + key + " is not a list of 1 to 16 integers");
  std::vector<int64_t> out;
  for (size_t i = 0; i < v.size(); ++i) {
    json one = {{key, v[i]}};
    out.push_back(get_int(one, key, 1, name + " " + key + "[" + std::to_string(i) + "]"));
  }
  return out;
}

void check_types(const std::vector<std::string>& types, std::initializer_list<const char*> known, const char* key,
                 const std::string& name) {
  for (const std::string& t : types)
    if (std::find_if(known.begin(), known.end(), [&](const char* k) { return t == k; }) == known.end()) {
      std::string list;
      for (const char* k : known) list += (list.empty() ? "" : ", ") + std::string(k);
      throw Error(name + ": " + key + " '" + t + "' is not a block type kvad runs (" + list + ")");
    }
}

void check_groups(const std::vector<int64_t>& channels, int64_t groups, const std::string& name) {
  for (int64_t c : channels)
    if (c % groups != 0)
      throw Error(name + ": block_out_channels " + std::to_string(c) + " is not a multiple of norm_num_groups " +
                  std::to_string(groups));
}

}  // namespace

bool has_attention(const std::string& t) { return t == "CrossAttnDownBlock2D" || t == "CrossAttnUpBlock2D"; }

ClipTextConfig parse_clip_text_config(const json& cfg, const std::string& name) {
  if (!cfg.is_object()) throw Error(name + ": not a JSON object");
  ClipTextConfig c;
  c.vocab_size = get_int(cfg, "vocab_size", c.vocab_size, name);
  c.hidden_size = get_int(cfg, "hidden_size", c.hidden_size, name);
  c.intermediate_size = get_int(cfg, "intermediate_size", c.intermediate_size, name);
  c.projection_dim = get_int(cfg, "projection_dim", c.projection_dim, name);
  c.num_hidden_layers = get_int(cfg, "num_hidden_layers", c.num_hidden_layers, name);
  c.num_attention_heads = get_int(cfg, "num_attention_heads", c.num_attention_heads, name);
  c.max_position_embeddings = get_int(cfg, "max_position_embeddings", c.max_position_embeddings, name);
  c.hidden_act = get_string(cfg, "hidden_act", c.hidden_act, name);
  if (c.hidden_act != "quick_gelu" && c.hidden_act != "gelu")
    throw Error(name + ": hidden_act '" + c.hidden_act + "' is not one kvad runs (quick_gelu, gelu)");
  c.layer_norm_eps = get_float(cfg, "layer_norm_eps", c.layer_norm_eps, name);
  c.pad_token_id = get_int(cfg, "pad_token_id", c.pad_token_id, name, 0);
  c.bos_token_id = get_int(cfg, "bos_token_id", c.bos_token_id, name, 0);
  c.eos_token_id = get_int(cfg, "eos_token_id", c.eos_token_id, name, 0);
  if (c.hidden_size % c.num_attention_heads != 0)
    throw Error(name + ": hidden_size " + std::to_string(c.hidden_size) + " is not a multiple of num_attention_heads " +
                std::to_string(c.num_attention_heads));
  std::string cls = get_string(cfg, "_class_name", "", name);
  if (cls.empty() && present(cfg, "architectures") && cfg["architectures"].is_array() &&
      !cfg["architectures"].empty() && cfg["architectures"][0].is_string())
    cls = cfg["architectures"][0].get<std::string>();
  if (cls != "CLIPTextModel" && cls != "CLIPTextModelWithProjection")
    throw Error(name + ": architectures '" + cls + "' is not a CLIP text encoder kvad runs (CLIPTextModel, " +
                "CLIPTextModelWithProjection)");
  c.with_projection = cls == "CLIPTextModelWithProjection";
  return c;
}

UNet2DConditionConfig parse_unet_config(const json& cfg, const std::string& name) {
  if (!cfg.is_object()) throw Error(name + ": not a JSON object");
  UNet2DConditionConfig c;
  c.sample_size = get_int(cfg, "sample_size", c.sample_size, name);
  c.in_channels = get_int(cfg, "in_channels", c.in_channels, name);
  c.out_channels = get_int(cfg, "out_channels", c.out_channels, name);
  c.center_input_sample = get_bool(cfg, "center_input_sample", false, name);
  c.flip_sin_to_cos = get_bool(cfg, "flip_sin_to_cos", true, name);
  c.freq_shift = get_int(cfg, "freq_shift", 0, name, 0);
  c.down_block_types =
      get_strings(cfg, "down_block_types",
                  {"CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"}, name);
  c.up_block_types = get_strings(cfg, "up_block_types",
                                 {"UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"}, name);
  check_types(c.down_block_types, {"CrossAttnDownBlock2D", "DownBlock2D"}, "down_block_types", name);
  check_types(c.up_block_types, {"CrossAttnUpBlock2D", "UpBlock2D"}, "up_block_types", name);
  c.mid_block_type = get_string(cfg, "mid_block_type", c.mid_block_type, name);
  if (c.mid_block_type != "UNetMidBlock2DCrossAttn")
    throw Error(name + ": mid_block_type '" + c.mid_block_type + "' is not one kvad runs (UNetMidBlock2DCrossAttn)");
  const size_t n = c.down_block_types.size();
  c.block_out_channels = int_list(cfg, "block_out_channels", {320, 640, 1280, 1280}, name);
  if (c.block_out_channels.size() != n || c.up_block_types.size() != n)
    throw Error(name + ": block_out_channels, down_block_types and up_block_types have " +
                std::to_string(c.block_out_channels.size()) + ", " + std::to_string(n) + " and " +
                std::to_string(c.up_block_types.size()) + " entries; they must be equal");
  c.layers_per_block = get_int(cfg, "layers_per_block", c.layers_per_block, name);
  if (present(cfg, "layers_per_block") && !cfg["layers_per_block"].is_number_integer())
    throw Error(name + ": layers_per_block is not an integer (per-block counts are not supported)");
  c.downsample_padding = get_int(cfg, "downsample_padding", 1, name, 0);
  c.mid_block_scale_factor = get_float(cfg, "mid_block_scale_factor", 1, name);
  c.act_fn = get_string(cfg, "act_fn", "silu", name);
  if (c.act_fn != "silu") throw Error(name + ": act_fn '" + c.act_fn + "' is not one kvad runs (silu)");
  c.norm_num_groups = get_int(cfg, "norm_num_groups", 32, name);
  c.norm_eps = get_float(cfg, "norm_eps", 1e-5, name);
  check_groups(c.block_out_channels, c.norm_num_groups, name);
  if (present(cfg, "cross_attention_dim") && cfg["cross_attention_dim"].is_array())
    throw Error(name + ": cross_attention_dim per block is not supported");
  c.cross_attention_dim = get_int(cfg, "cross_attention_dim", 1280, name);
  c.transformer_layers_per_block = per_block(cfg, "transformer_layers_per_block", 1, n, name);
  const char* heads = present(cfg, "num_attention_heads") ? "num_attention_heads" : "attention_head_dim";
  c.num_attention_heads = per_block(cfg, heads, 8, n, name);
  for (size_t i = 0; i < n; ++i)
    if (c.block_out_channels[i] % c.num_attention_heads[i] != 0)
      throw Error(name + ": block_out_channels[" + std::to_string(i) + "] " + std::to_string(c.block_out_channels[i]) +
                  " is not a multiple of " + heads + " " + std::to_string(c.num_attention_heads[i]) +
                  " (the heads of that block)");
  c.use_linear_projection = get_bool(cfg, "use_linear_projection", false, name);
  c.upcast_attention = get_bool(cfg, "upcast_attention", false, name);
  c.addition_embed_type = get_string(cfg, "addition_embed_type", "", name);
  if (!c.addition_embed_type.empty() && c.addition_embed_type != "text_time")
    throw Error(name + ": addition_embed_type '" + c.addition_embed_type + "' is not one kvad runs (text_time)");
  if (c.addition_embed_type == "text_time") {
    c.addition_time_embed_dim = get_int(cfg, "addition_time_embed_dim", 0, name);
    c.projection_class_embeddings_input_dim = get_int(cfg, "projection_class_embeddings_input_dim", 0, name);
    if (c.addition_time_embed_dim == 0 || c.projection_class_embeddings_input_dim == 0)
      throw Error(name +
                  ": addition_embed_type text_time needs addition_time_embed_dim and "
                  "projection_class_embeddings_input_dim");
  }
  for (const char* unsupported : {"class_embed_type", "encoder_hid_dim", "time_cond_proj_dim", "num_class_embeds"})
    if (present(cfg, unsupported)) throw Error(name + ": " + unsupported + " is not supported");
  for (const char* kernel : {"conv_in_kernel", "conv_out_kernel"})
    if (get_int(cfg, kernel, 3, name) != 3) throw Error(name + ": " + kernel + " other than 3 is not supported");
  if (get_string(cfg, "resnet_time_scale_shift", "default", name) != "default")
    throw Error(name + ": resnet_time_scale_shift other than default is not supported");
  if (get_string(cfg, "time_embedding_type", "positional", name) != "positional")
    throw Error(name + ": time_embedding_type other than positional is not supported");
  if (get_bool(cfg, "dual_cross_attention", false, name) || get_bool(cfg, "only_cross_attention", false, name))
    throw Error(name + ": dual_cross_attention and only_cross_attention are not supported");
  return c;
}

AutoencoderKLConfig parse_vae_config(const json& cfg, const std::string& name) {
  if (!cfg.is_object()) throw Error(name + ": not a JSON object");
  AutoencoderKLConfig c;
  c.in_channels = get_int(cfg, "in_channels", 3, name);
  c.out_channels = get_int(cfg, "out_channels", 3, name);
  c.latent_channels = get_int(cfg, "latent_channels", 4, name);
  c.down_block_types = get_strings(cfg, "down_block_types", {"DownEncoderBlock2D"}, name);
  c.up_block_types = get_strings(cfg, "up_block_types", {"UpDecoderBlock2D"}, name);
  check_types(c.down_block_types, {"DownEncoderBlock2D"}, "down_block_types", name);
  check_types(c.up_block_types, {"UpDecoderBlock2D"}, "up_block_types", name);
  c.block_out_channels = int_list(cfg, "block_out_channels", {64}, name);
  if (c.block_out_channels.size() != c.down_block_types.size() || c.up_block_types.size() != c.down_block_types.size())
    throw Error(name + ": block_out_channels, down_block_types and up_block_types have " +
                std::to_string(c.block_out_channels.size()) + ", " + std::to_string(c.down_block_types.size()) +
                " and " + std::to_string(c.up_block_types.size()) + " entries; they must be equal");
  c.layers_per_block = get_int(cfg, "layers_per_block", 1, name);
  c.act_fn = get_string(cfg, "act_fn", "silu", name);
  if (c.act_fn != "silu") throw Error(name + ": act_fn '" + c.act_fn + "' is not one kvad runs (silu)");
  c.norm_num_groups = get_int(cfg, "norm_num_groups", 32, name);
  check_groups(c.block_out_channels, c.norm_num_groups, name);
  c.sample_size = get_int(cfg, "sample_size", 32, name);
  c.scaling_factor = get_float(cfg, "scaling_factor", 0.18215, name);
  if (!(c.scaling_factor > 0)) throw Error(name + ": scaling_factor must be positive");
  c.shift_factor = get_float(cfg, "shift_factor", 0.0, name);
  if (!std::isfinite(c.shift_factor) || !std::isfinite(c.scaling_factor))
    throw Error(name + ": scaling_factor and shift_factor must be finite");
  c.force_upcast = get_bool(cfg, "force_upcast", true, name);
  c.use_quant_conv = get_bool(cfg, "use_quant_conv", true, name);
  c.use_post_quant_conv = get_bool(cfg, "use_post_quant_conv", true, name);
  c.mid_block_add_attention = get_bool(cfg, "mid_block_add_attention", true, name);
  return c;
}

}  // namespace kvad::image
