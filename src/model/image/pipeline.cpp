#include "model/image/pipeline.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "base/error.h"
#include "hub/select.h"
#include "io/mapped_source.h"
#include "io/tensor_source.h"

namespace kvad::image {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::string read_text(const fs::path& p, size_t max_bytes) {
  std::error_code ec;
  if (!fs::is_regular_file(p, ec)) throw Error(p.string() + ": no such file");
  if (fs::file_size(p, ec) > max_bytes)
    throw Error(p.string() + ": larger than " + std::to_string(max_bytes >> 20) + " MiB, not a config");
  std::ifstream in(p, std::ios::binary);
  if (!in) throw Error(p.string() + ": cannot open");
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

json parse_json(const std::string& text, const std::string& name) {
  try {
    json j = json::parse(text);
    if (!j.is_object()) throw Error(name + ": not a JSON object");
    return j;
  } catch (const json::exception& e) {
    throw Error(name + ": invalid JSON: " + e.what());
  }
}

json read_json(const fs::path& p) { return parse_json(read_text(p, 16u << 20), p.string()); }

// The components each pipeline class needs, as model_index.json names them.
std::vector<std::string> needed(PipelineClass c) {
  if (c == PipelineClass::StableDiffusion) return {"unet", "vae", "text_encoder", "tokenizer", "scheduler"};
  if (c == PipelineClass::Flux)
    return {"transformer", "vae", "text_encoder", "text_encoder_2", "tokenizer", "tokenizer_2", "scheduler"};
  return {"unet", "vae", "text_encoder", "text_encoder_2", "tokenizer", "tokenizer_2", "scheduler"};
}

struct Index {
  PipelineClass cls;
  bool force_zeros = false;
};

Index parse_index(const json& j, const std::string& name) {
  if (!j.contains("_class_name") || !j["_class_name"].is_string()) throw Error(name + ": no _class_name string");
  const std::string cls = j["_class_name"].get<std::string>();
  Index ix;
  if (cls == "StableDiffusionPipeline") {
    ix.cls = PipelineClass::StableDiffusion;
  } else if (cls == "StableDiffusionXLPipeline") {
    ix.cls = PipelineClass::StableDiffusionXL;
    ix.force_zeros = true;  // StableDiffusionXLPipeline.__init__'s default
  } else if (cls == "FluxPipeline") {
    ix.cls = PipelineClass::Flux;
  } else {
    throw Error(name + ": _class_name '" + cls +
                "' is not a pipeline kvad runs (StableDiffusionPipeline, StableDiffusionXLPipeline, FluxPipeline)");
  }
  for (const std::string& c : needed(ix.cls)) {
    const bool ok = j.contains(c) && j[c].is_array() && j[c].size() == 2 && j[c][0].is_string() && j[c][1].is_string();
    if (!ok) {
      std::string list;
      for (const std::string& n : needed(ix.cls)) list += (list.empty() ? "" : ", ") + n;
      throw Error(name + ": no component " + c + " ([library, class]); " + cls + " needs " + list);
    }
  }
  if (j.contains("force_zeros_for_empty_prompt") && !j["force_zeros_for_empty_prompt"].is_null()) {
    if (!j["force_zeros_for_empty_prompt"].is_boolean())
      throw Error(name + ": force_zeros_for_empty_prompt is not true or false");
    if (ix.cls == PipelineClass::StableDiffusionXL) ix.force_zeros = j["force_zeros_for_empty_prompt"].get<bool>();
  }
  return ix;
}

}  // namespace

std::shared_ptr<const TensorSource> component_weights(const std::string& dir_name, const std::string& variant,
                                                      std::vector<std::string>* files) {
  const fs::path dir(dir_name);
  std::vector<std::string> names;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file(ec)) names.push_back(e.path().filename().string());  // follows the HF cache's links
  std::sort(names.begin(), names.end());
  const std::vector<std::string> pick = hub::pick_component_weights(names, variant);
  if (pick.size() == 1) {
    const std::string path = (dir / pick[0]).string();
    if (files) files->push_back(path);
    return safetensors_source(path);
  }
  std::string list;
  for (const std::string& f : names)
    if (f.find(".safetensors") != std::string::npos) list += (list.empty() ? "" : ", ") + f;
  if (list.empty()) throw Error(dir.string() + ": no .safetensors weights (kvad does not read .bin files)");
  throw Error(dir.string() + ": " + (pick.empty() ? "no weights" : "several weights files") + " for variant '" +
              variant + "' among " + list);
}

namespace {

std::string dims(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

// Shapes (outermost first, as the configs' reference code creates them)
// that the configs fix, against the tensors.
class ShapeCheck {
 public:
  explicit ShapeCheck(const TensorSource& s) : s_(s) {}
  void expect(const std::string& name, std::vector<int64_t> shape, const std::string& why) const {
    const SourceTensor* t = s_.find(name);
    if (!t) throw Error(s_.path() + ": missing tensor " + name + " (" + why + ")");
    if (t->shape != shape)
      throw Error(s_.path() + ": tensor " + s_.tensor_name(name) + " has shape " + dims(t->shape) +
                  ", the config gives " + dims(shape) + " (" + why + ")");
  }
  void absent(const std::string& name, const std::string& why) const {
    if (s_.find(name)) throw Error(s_.path() + ": tensor " + s_.tensor_name(name) + " is present, " + why);
  }

 private:
  const TensorSource& s_;
};

void check_clip(const ShapeCheck& c, const std::string& p, const ClipTextConfig& t, const std::string& cfg) {
  const std::string m = p + "text_model.";
  const std::string n = std::to_string(t.num_hidden_layers);
  c.expect(m + "embeddings.token_embedding.weight", {t.vocab_size, t.hidden_size},
           cfg + " vocab_size " + std::to_string(t.vocab_size) + ", hidden_size " + std::to_string(t.hidden_size));
  c.expect(m + "embeddings.position_embedding.weight", {t.max_position_embeddings, t.hidden_size},
           cfg + " max_position_embeddings " + std::to_string(t.max_position_embeddings));
  c.expect(m + "encoder.layers." + std::to_string(t.num_hidden_layers - 1) + ".mlp.fc1.weight",
           {t.intermediate_size, t.hidden_size},
           cfg + " num_hidden_layers " + n + ", intermediate_size " + std::to_string(t.intermediate_size));
  c.absent(m + "encoder.layers." + n + ".layer_norm1.weight", "but " + cfg + " num_hidden_layers is " + n);
  if (t.with_projection)
    c.expect(p + "text_projection.weight", {t.projection_dim, t.hidden_size},
             cfg + " projection_dim " + std::to_string(t.projection_dim));
}

void check_flux(const ShapeCheck& c, const FluxTransformerConfig& t, const std::string& cfg);
void check_unet(const ShapeCheck& c, const UNet2DConditionConfig& u, const std::string& unet_cfg);
void check_vae(const ShapeCheck& c, const AutoencoderKLConfig& v, const std::string& vae_cfg);

void check_shapes(const Pipeline& pl, const std::string& unet_cfg, const std::string& vae_cfg,
                  const std::string& te_cfg, const std::string& te2_cfg) {
  const ShapeCheck c(*pl.weights);
  if (pl.transformer) check_flux(c, *pl.transformer, unet_cfg);
  else check_unet(c, pl.unet, unet_cfg);
  check_vae(c, pl.vae, vae_cfg);
  check_clip(c, "text_encoder.", pl.text_encoder, te_cfg);
  if (pl.text_encoder_2) check_clip(c, "text_encoder_2.", *pl.text_encoder_2, te2_cfg);
}

void check_flux(const ShapeCheck& c, const FluxTransformerConfig& t, const std::string& cfg) {
  const int64_t d = t.inner_dim();
  const std::string w = cfg + " num_attention_heads " + std::to_string(t.num_attention_heads) +
                        " × attention_head_dim " + std::to_string(t.attention_head_dim);
  c.expect("transformer.x_embedder.weight", {d, t.in_channels}, w + ", in_channels " + std::to_string(t.in_channels));
  c.expect("transformer.context_embedder.weight", {d, t.joint_attention_dim},
           cfg + " joint_attention_dim " + std::to_string(t.joint_attention_dim));
  c.expect("transformer.time_text_embed.text_embedder.linear_1.weight", {d, t.pooled_projection_dim},
           cfg + " pooled_projection_dim " + std::to_string(t.pooled_projection_dim));
  c.expect("transformer.proj_out.weight", {t.out_channels, d}, cfg + " out_channels " + std::to_string(t.out_channels));
  const std::string nl = std::to_string(t.num_layers), ns = std::to_string(t.num_single_layers);
  c.expect("transformer.transformer_blocks." + std::to_string(t.num_layers - 1) + ".attn.to_q.weight", {d, d},
           cfg + " num_layers " + nl);
  c.absent("transformer.transformer_blocks." + nl + ".attn.to_q.weight", "but " + cfg + " num_layers is " + nl);
  c.expect("transformer.single_transformer_blocks." + std::to_string(t.num_single_layers - 1) + ".attn.to_q.weight",
           {d, d}, cfg + " num_single_layers " + ns);
  c.absent("transformer.single_transformer_blocks." + ns + ".attn.to_q.weight",
           "but " + cfg + " num_single_layers is " + ns);
  if (t.guidance_embeds)
    c.expect("transformer.time_text_embed.guidance_embedder.linear_1.weight", {d, 256}, cfg + " guidance_embeds");
  else
    c.absent("transformer.time_text_embed.guidance_embedder.linear_1.weight", "but " + cfg + " guidance_embeds is false");
}

void check_unet(const ShapeCheck& c, const UNet2DConditionConfig& u, const std::string& unet_cfg) {
  const int64_t c0 = u.block_out_channels[0];
  c.expect(
      "unet.conv_in.weight", {c0, u.in_channels, 3, 3},
      unet_cfg + " block_out_channels[0] " + std::to_string(c0) + ", in_channels " + std::to_string(u.in_channels));
  c.expect("unet.conv_out.weight", {u.out_channels, c0, 3, 3},
           unet_cfg + " out_channels " + std::to_string(u.out_channels));
  c.expect("unet.time_embedding.linear_1.weight", {4 * c0, c0},
           unet_cfg + " block_out_channels[0] " + std::to_string(c0));
  for (size_t i = 0; i < u.down_block_types.size(); ++i) {
    const std::string b = "unet.down_blocks." + std::to_string(i) + ".";
    const int64_t ci = u.block_out_channels[i], cin = i ? u.block_out_channels[i - 1] : c0;
    c.expect(b + "resnets.0.conv1.weight", {ci, cin, 3, 3},
             unet_cfg + " block_out_channels[" + std::to_string(i) + "] " + std::to_string(ci));
    if (!has_attention(u.down_block_types[i])) continue;
    const std::string a = b + "attentions.0.";
    const std::string nt = std::to_string(u.transformer_layers_per_block[i]);
    c.expect(a + "proj_in.weight",
             u.use_linear_projection ? std::vector<int64_t>{ci, ci} : std::vector<int64_t>{ci, ci, 1, 1},
             unet_cfg + " use_linear_projection " + (u.use_linear_projection ? "true" : "false"));
    c.expect(a + "transformer_blocks." + std::to_string(u.transformer_layers_per_block[i] - 1) + ".attn2.to_k.weight",
             {ci, u.cross_attention_dim},
             unet_cfg + " cross_attention_dim " + std::to_string(u.cross_attention_dim) +
                 ", transformer_layers_per_block[" + std::to_string(i) + "] " + nt);
    c.absent(a + "transformer_blocks." + nt + ".norm1.weight",
             "but " + unet_cfg + " transformer_layers_per_block[" + std::to_string(i) + "] is " + nt);
  }
  if (u.addition_embed_type == "text_time")
    c.expect(
        "unet.add_embedding.linear_1.weight", {4 * c0, u.projection_class_embeddings_input_dim},
        unet_cfg + " projection_class_embeddings_input_dim " + std::to_string(u.projection_class_embeddings_input_dim));
  else
    c.absent("unet.add_embedding.linear_1.weight", "but " + unet_cfg + " has no addition_embed_type");
}

void check_vae(const ShapeCheck& c, const AutoencoderKLConfig& v, const std::string& vae_cfg) {
  const int64_t v0 = v.block_out_channels[0], vl = v.block_out_channels.back(), z = v.latent_channels;
  c.expect("vae.encoder.conv_in.weight", {v0, v.in_channels, 3, 3},
           vae_cfg + " block_out_channels[0] " + std::to_string(v0) + ", in_channels " + std::to_string(v.in_channels));
  c.expect("vae.encoder.conv_out.weight", {2 * z, vl, 3, 3}, vae_cfg + " latent_channels " + std::to_string(z));
  c.expect("vae.decoder.conv_in.weight", {vl, z, 3, 3}, vae_cfg + " latent_channels " + std::to_string(z));
  c.expect("vae.decoder.conv_out.weight", {v.out_channels, v0, 3, 3},
           vae_cfg + " out_channels " + std::to_string(v.out_channels));
  if (v.use_quant_conv) c.expect("vae.quant_conv.weight", {2 * z, 2 * z, 1, 1}, vae_cfg + " use_quant_conv");
  if (v.use_post_quant_conv) c.expect("vae.post_quant_conv.weight", {z, z, 1, 1}, vae_cfg + " use_post_quant_conv");
}

// What the configs must agree on between components.
void check_configs(const Pipeline& pl, const std::string& unet_cfg) {
  const std::string& u = unet_cfg;
  if (pl.pipeline_class == PipelineClass::Flux) {
    const FluxTransformerConfig& t = *pl.transformer;
    if (t.in_channels != 4 * pl.vae.latent_channels || t.out_channels != t.in_channels)
      throw Error(u + ": in_channels " + std::to_string(t.in_channels) + " and out_channels " +
                  std::to_string(t.out_channels) + " are not 4 × the VAE's latent_channels " +
                  std::to_string(pl.vae.latent_channels) + " (FluxPipeline packs 2×2 latent patches)");
    if (t.pooled_projection_dim != pl.text_encoder.hidden_size)
      throw Error(u + ": pooled_projection_dim " + std::to_string(t.pooled_projection_dim) +
                  " is not the CLIP text encoder's hidden_size " + std::to_string(pl.text_encoder.hidden_size));
    return;
  }
  if (pl.pipeline_class == PipelineClass::StableDiffusion) {
    if (pl.unet.cross_attention_dim != pl.text_encoder.hidden_size)
      throw Error(u + ": cross_attention_dim " + std::to_string(pl.unet.cross_attention_dim) +
                  " is not the text encoder's hidden_size " + std::to_string(pl.text_encoder.hidden_size));
    return;
  }
  const ClipTextConfig& t2 = *pl.text_encoder_2;
  if (!t2.with_projection)
    throw Error(u + ": StableDiffusionXLPipeline's text_encoder_2 is not a CLIPTextModelWithProjection");
  if (pl.unet.cross_attention_dim != pl.text_encoder.hidden_size + t2.hidden_size)
    throw Error(u + ": cross_attention_dim " + std::to_string(pl.unet.cross_attention_dim) +
                " is not the text encoders' hidden_size " + std::to_string(pl.text_encoder.hidden_size) + " + " +
                std::to_string(t2.hidden_size));
  if (pl.unet.addition_embed_type != "text_time")
    throw Error(u + ": StableDiffusionXLPipeline needs addition_embed_type text_time");
  if (pl.unet.projection_class_embeddings_input_dim != 6 * pl.unet.addition_time_embed_dim + t2.projection_dim)
    throw Error(u + ": projection_class_embeddings_input_dim " +
                std::to_string(pl.unet.projection_class_embeddings_input_dim) + " is not 6 × addition_time_embed_dim " +
                std::to_string(pl.unet.addition_time_embed_dim) + " + text_encoder_2's projection_dim " +
                std::to_string(t2.projection_dim));
}

// Configs of the components, from a diffusers folder's files or kvad's base JSON.
struct Configs {
  Index index;
  json unet, vae, te, te2;
  std::string unet_name, vae_name, te_name, te2_name;
  std::string scheduler, scheduler_name;
};

Configs folder_configs(const fs::path& dir) {
  Configs c;
  const fs::path mi = dir / "model_index.json";
  c.index = parse_index(read_json(mi), mi.string());
  for (const std::string& comp : needed(c.index.cls)) {
    std::error_code ec;
    if (!fs::is_directory(dir / comp, ec))
      throw Error(dir.string() + ": component " + comp + " of model_index.json has no folder " + comp + "/");
  }
  auto cfg = [&](const char* comp, json& j, std::string& name) {
    const fs::path p = dir / comp / "config.json";
    name = p.string();
    j = read_json(p);
  };
  cfg(c.index.cls == PipelineClass::Flux ? "transformer" : "unet", c.unet, c.unet_name);
  cfg("vae", c.vae, c.vae_name);
  cfg("text_encoder", c.te, c.te_name);
  if (c.index.cls != PipelineClass::StableDiffusion) cfg("text_encoder_2", c.te2, c.te2_name);
  const fs::path sc = dir / "scheduler" / "scheduler_config.json";
  c.scheduler_name = sc.string();
  c.scheduler = read_text(sc, 1u << 20);
  return c;
}

Configs shipped_configs(LdmLayout layout) {
  const std::string name = std::string("kvad's ") + (layout == LdmLayout::SD15 ? "sd15" : "sdxl") + ".json";
  const json j = parse_json(base_configs(layout), name);
  Configs c;
  c.index = parse_index(j.at("model_index"), name + " model_index");
  c.unet = j.at("unet"), c.unet_name = name + " unet";
  c.vae = j.at("vae"), c.vae_name = name + " vae";
  c.te = j.at("text_encoder"), c.te_name = name + " text_encoder";
  if (j.contains("text_encoder_2")) c.te2 = j.at("text_encoder_2"), c.te2_name = name + " text_encoder_2";
  c.scheduler = j.at("scheduler").dump(), c.scheduler_name = name + " scheduler";
  return c;
}

void apply(Pipeline& pl, const Configs& c) {
  pl.pipeline_class = c.index.cls;
  pl.force_zeros_for_empty_prompt = c.index.force_zeros;
  if (c.index.cls == PipelineClass::Flux) {
    pl.transformer = parse_flux_config(c.unet, c.unet_name);
    pl.t5_config = c.te2.dump();
    pl.t5_config_name = c.te2_name;
  } else {
    pl.unet = parse_unet_config(c.unet, c.unet_name);
  }
  pl.vae = parse_vae_config(c.vae, c.vae_name);
  pl.text_encoder = parse_clip_text_config(c.te, c.te_name);
  if (c.index.cls == PipelineClass::StableDiffusionXL) pl.text_encoder_2 = parse_clip_text_config(c.te2, c.te2_name);
  pl.scheduler_config = c.scheduler;
  pl.scheduler_config_name = c.scheduler_name;
}

// A diffusers VAE folder as a source under "vae." names (old attention names renamed).
std::shared_ptr<const TensorSource> vae_source(const fs::path& dir, const std::string& variant,
                                               std::vector<std::string>& files) {
  std::shared_ptr<const TensorSource> raw = component_weights(dir.string(), variant, &files);
  std::vector<std::string> names;
  for (const SourceTensor& t : raw->tensors()) names.push_back(t.name);
  std::vector<TensorRename> old = deprecated_vae_names(names);
  if (old.empty()) return raw;
  std::vector<TensorRename> rules = old;
  for (const SourceTensor& t : raw->tensors())
    if (std::none_of(old.begin(), old.end(), [&](const TensorRename& r) { return r.base == t.name; })) {
      TensorRename r;
      r.name = r.base = t.name;
      rules.push_back(std::move(r));
    }
  return mapped_source(raw, rules, {});
}

Pipeline open_folder(const fs::path& dir, const PipelineOptions& o) {
  Pipeline pl;
  pl.path = dir.string();
  const Configs c = folder_configs(dir);
  apply(pl, c);
  std::string vae_cfg = c.vae_name;
  if (!o.vae.empty()) {
    vae_cfg = (fs::path(o.vae) / "config.json").string();
    pl.vae = parse_vae_config(read_json(vae_cfg), vae_cfg);
  }
  std::vector<std::pair<std::string, std::shared_ptr<const TensorSource>>> parts;
  std::vector<std::string>& f = pl.weight_files;
  const bool flux = pl.pipeline_class == PipelineClass::Flux;
  if (flux)
    parts.emplace_back("transformer.", component_weights((dir / "transformer").string(), o.variant, &f));
  else
    parts.emplace_back("unet.", component_weights((dir / "unet").string(), o.variant, &f));
  parts.emplace_back("vae.", vae_source(o.vae.empty() ? dir / "vae" : fs::path(o.vae), o.variant, f));
  parts.emplace_back("text_encoder.", component_weights((dir / "text_encoder").string(), o.variant, &f));
  if (pl.text_encoder_2 || flux)
    parts.emplace_back("text_encoder_2.", component_weights((dir / "text_encoder_2").string(), o.variant, &f));
  pl.weights = prefixed_source(std::move(parts), pl.path);
  pl.tokenizer = (dir / "tokenizer").string();
  if (pl.text_encoder_2 || flux) pl.tokenizer_2 = (dir / "tokenizer_2").string();
  check_configs(pl, c.unet_name);
  check_shapes(pl, c.unet_name, vae_cfg, c.te_name, c.te2_name);
  return pl;
}

Pipeline open_single(const fs::path& file, const PipelineOptions& o) {
  Pipeline pl;
  pl.path = file.string();
  pl.single_file = true;
  pl.weight_files.push_back(pl.path);
  std::shared_ptr<const TensorSource> raw = safetensors_source(pl.path);
  const LdmLayout layout = detect_ldm_layout(*raw);
  pl.layout = layout;
  const Configs c = o.config.empty() ? shipped_configs(layout) : folder_configs(o.config);
  const PipelineClass want =
      layout == LdmLayout::SD15 ? PipelineClass::StableDiffusion : PipelineClass::StableDiffusionXL;
  if (c.index.cls != want)
    throw Error(pl.path + ": an " + layout_name(layout) + " checkpoint, but " + o.config + " is a " +
                pipeline_class_name(c.index.cls));
  apply(pl, c);
  if (!o.config.empty()) {
    pl.tokenizer = (fs::path(o.config) / "tokenizer").string();
    if (pl.text_encoder_2) pl.tokenizer_2 = (fs::path(o.config) / "tokenizer_2").string();
  }
  std::string vae_cfg = c.vae_name;
  if (!o.vae.empty()) {
    vae_cfg = (fs::path(o.vae) / "config.json").string();
    pl.vae = parse_vae_config(read_json(vae_cfg), vae_cfg);
  }
  LdmNames names = ldm_names(layout, *raw, pl.unet, pl.vae);
  if (!names.has_vae && o.vae.empty())
    throw Error(pl.path + ": has no VAE (first_stage_model.*); give one (a diffusers vae folder)");
  if (!o.vae.empty()) {  // the file's own VAE gives way to the one asked for
    std::vector<TensorRename> keep;
    for (TensorRename& r : names.rules) {
      if (r.name.starts_with("vae."))
        names.ignored.push_back(r.base);
      else
        keep.push_back(std::move(r));
    }
    names.rules = std::move(keep);
  }
  std::shared_ptr<const TensorSource> view = mapped_source(raw, names.rules, {}, names.ignored);
  if (o.vae.empty()) {
    pl.weights = view;
  } else {
    std::vector<std::pair<std::string, std::shared_ptr<const TensorSource>>> parts;
    parts.emplace_back("", view);
    parts.emplace_back("vae.", vae_source(o.vae, "", pl.weight_files));
    pl.weights = prefixed_source(std::move(parts), pl.path);
  }
  check_configs(pl, c.unet_name);
  check_shapes(pl, c.unet_name, vae_cfg, c.te_name, c.te2_name);
  return pl;
}

}  // namespace

const char* pipeline_class_name(PipelineClass c) {
  switch (c) {
    case PipelineClass::StableDiffusion: return "StableDiffusionPipeline";
    case PipelineClass::StableDiffusionXL: return "StableDiffusionXLPipeline";
    case PipelineClass::Flux: return "FluxPipeline";
  }
  return "?";
}

bool is_diffusers_folder(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::exists(fs::path(path) / "model_index.json", ec);
}

Pipeline open_pipeline(const std::string& path, const PipelineOptions& o) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    if (!fs::exists(fs::path(path) / "model_index.json", ec))
      throw Error(path + ": not a diffusers pipeline folder (no model_index.json)");
    return open_folder(path, o);
  }
  if (!fs::is_regular_file(path, ec)) throw Error(path + ": no such file or folder");
  return open_single(path, o);
}

}  // namespace kvad::image
