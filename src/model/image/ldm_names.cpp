#include "model/image/ldm_names.h"

#include <algorithm>
#include <string>
#include <utility>

#include "base/error.h"
#include "io/tensor_source.h"

namespace kvad::image {

namespace {

using std::string;

bool starts(const string& s, const string& p) { return s.compare(0, p.size(), p) == 0; }

enum class Slot { Plain, UnetResnet, VaeResnet, VaeAttention, Transformer };

struct Prefix {
  string ldm, diffusers;
  Slot slot;
};

// Inner names of a ResBlock (ldm openaimodel.ResBlock → diffusers ResnetBlock2D).
const std::pair<const char*, const char*> kUnetResnet[] = {
    {"in_layers.0.", "norm1."},  {"in_layers.2.", "conv1."},  {"emb_layers.1.", "time_emb_proj."},
    {"out_layers.0.", "norm2."}, {"out_layers.3.", "conv2."}, {"skip_connection.", "conv_shortcut."}};
// ldm's VAE ResnetBlock differs from diffusers' only in its shortcut's name.
const std::pair<const char*, const char*> kVaeResnet[] = {{"norm1.", "norm1."},
                                                          {"conv1.", "conv1."},
                                                          {"norm2.", "norm2."},
                                                          {"conv2.", "conv2."},
                                                          {"nin_shortcut.", "conv_shortcut."}};
// ldm's VAE AttnBlock (1×1 convolutions) → diffusers' Attention (linears).
const std::pair<const char*, const char*> kVaeAttention[] = {
    {"norm.", "group_norm."}, {"q.", "to_q."}, {"k.", "to_k."}, {"v.", "to_v."}, {"proj_out.", "to_out.0."}};

// The UNet's blocks as ldm's openaimodel.UNetModel numbers them:
// input_blocks[0] is conv_in; each level has layers_per_block slots
// [ResBlock, (SpatialTransformer)] and, but the last, a Downsample slot; the
// middle block is [ResBlock, SpatialTransformer, ResBlock]; output_blocks
// has layers_per_block + 1 slots a level, the level's last with an Upsample
// after the ResBlock and the transformer (but the last level's).
std::vector<Prefix> unet_prefixes(const UNet2DConditionConfig& c) {
  std::vector<Prefix> p = {
      {"time_embed.0.", "time_embedding.linear_1.", Slot::Plain},
      {"time_embed.2.", "time_embedding.linear_2.", Slot::Plain},
      {"label_emb.0.0.", "add_embedding.linear_1.", Slot::Plain},
      {"label_emb.0.2.", "add_embedding.linear_2.", Slot::Plain},
      {"input_blocks.0.0.", "conv_in.", Slot::Plain},
      {"out.0.", "conv_norm_out.", Slot::Plain},
      {"out.2.", "conv_out.", Slot::Plain},
      {"middle_block.0.", "mid_block.resnets.0.", Slot::UnetResnet},
      {"middle_block.1.", "mid_block.attentions.0.", Slot::Transformer},
      {"middle_block.2.", "mid_block.resnets.1.", Slot::UnetResnet},
  };
  const size_t n = c.down_block_types.size();
  const string L = std::to_string(c.layers_per_block);
  int64_t k = 1;
  for (size_t i = 0; i < n; ++i) {
    const string d = "down_blocks." + std::to_string(i) + ".";
    for (int64_t j = 0; j < c.layers_per_block; ++j, ++k) {
      const string in = "input_blocks." + std::to_string(k) + ".";
      p.push_back({in + "0.", d + "resnets." + std::to_string(j) + ".", Slot::UnetResnet});
      if (has_attention(c.down_block_types[i]))
        p.push_back({in + "1.", d + "attentions." + std::to_string(j) + ".", Slot::Transformer});
    }
    if (i + 1 < n)
      p.push_back({"input_blocks." + std::to_string(k++) + ".0.op.", d + "downsamplers.0.conv.", Slot::Plain});
  }
  k = 0;
  for (size_t i = 0; i < n; ++i) {
    const string u = "up_blocks." + std::to_string(i) + ".";
    const bool attn = has_attention(c.up_block_types[i]);
    for (int64_t j = 0; j <= c.layers_per_block; ++j, ++k) {
      const string out = "output_blocks." + std::to_string(k) + ".";
      p.push_back({out + "0.", u + "resnets." + std::to_string(j) + ".", Slot::UnetResnet});
      if (attn) p.push_back({out + "1.", u + "attentions." + std::to_string(j) + ".", Slot::Transformer});
      if (j == c.layers_per_block && i + 1 < n)
        p.push_back({out + (attn ? "2." : "1."), u + "upsamplers.0.", Slot::Plain});
    }
  }
  return p;
}

// ldm's VAE Encoder/Decoder: down.i.block.j / down.i.downsample, the decoder's
// up levels numbered from the bottom (diffusers' up_blocks.i is up.{n-1-i}),
// with layers_per_block + 1 resnets each; mid.block_1, mid.attn_1, mid.block_2.
std::vector<Prefix> vae_prefixes(const AutoencoderKLConfig& c) {
  std::vector<Prefix> p = {
      {"quant_conv.", "quant_conv.", Slot::Plain},
      {"post_quant_conv.", "post_quant_conv.", Slot::Plain},
  };
  const size_t n = c.block_out_channels.size();
  for (const char* part : {"encoder.", "decoder."}) {
    const string e = part;
    p.push_back({e + "conv_in.", e + "conv_in.", Slot::Plain});
    p.push_back({e + "conv_out.", e + "conv_out.", Slot::Plain});
    p.push_back({e + "norm_out.", e + "conv_norm_out.", Slot::Plain});
    p.push_back({e + "mid.block_1.", e + "mid_block.resnets.0.", Slot::VaeResnet});
    p.push_back({e + "mid.block_2.", e + "mid_block.resnets.1.", Slot::VaeResnet});
    p.push_back({e + "mid.attn_1.", e + "mid_block.attentions.0.", Slot::VaeAttention});
  }
  for (size_t i = 0; i < n; ++i) {
    const string si = std::to_string(i), up = std::to_string(n - 1 - i);
    for (int64_t j = 0; j < c.layers_per_block; ++j)
      p.push_back({"encoder.down." + si + ".block." + std::to_string(j) + ".",
                   "encoder.down_blocks." + si + ".resnets." + std::to_string(j) + ".", Slot::VaeResnet});
    for (int64_t j = 0; j <= c.layers_per_block; ++j)
      p.push_back({"decoder.up." + up + ".block." + std::to_string(j) + ".",
                   "decoder.up_blocks." + si + ".resnets." + std::to_string(j) + ".", Slot::VaeResnet});
    if (i + 1 < n) {
      p.push_back(
          {"encoder.down." + si + ".downsample.", "encoder.down_blocks." + si + ".downsamplers.0.", Slot::Plain});
      p.push_back({"decoder.up." + up + ".upsample.", "decoder.up_blocks." + si + ".upsamplers.0.", Slot::Plain});
    }
  }
  return p;
}

// Views a [C, C, 1, 1] convolution as the [C, C] linear diffusers has, or
// the reverse (as diffusers' loader reshapes proj_in/proj_out).
void view_as(TensorRename& r, const SourceTensor& t, bool linear) {
  if (linear && t.n_dims == 4 && t.ne[0] == 1 && t.ne[1] == 1) {
    r.view_ne = {t.ne[2], t.ne[3], 1, 1};
    r.view_dims = 2;
  } else if (!linear && t.n_dims == 2) {
    r.view_ne = {1, 1, t.ne[0], t.ne[1]};
    r.view_dims = 4;
  }
}

bool inner(const string& rest, const std::pair<const char*, const char*>* table, size_t n, string& out) {
  for (size_t i = 0; i < n; ++i)
    if (starts(rest, table[i].first))
      return out = table[i].second + rest.substr(std::char_traits<char>::length(table[i].first)), true;
  return false;
}

// `rest` of a component whose blocks `prefixes` lists, as its diffusers name.
bool by_prefix(const string& rest, const std::vector<Prefix>& prefixes, string& out, Slot& slot) {
  const Prefix* best = nullptr;
  for (const Prefix& p : prefixes)
    if (starts(rest, p.ldm) && (!best || p.ldm.size() > best->ldm.size())) best = &p;
  if (!best) return false;
  const string tail = rest.substr(best->ldm.size());
  slot = best->slot;
  switch (best->slot) {
    case Slot::UnetResnet:
      if (!inner(tail, kUnetResnet, std::size(kUnetResnet), out)) return false;
      break;
    case Slot::VaeResnet:
      if (!inner(tail, kVaeResnet, std::size(kVaeResnet), out)) return false;
      break;
    case Slot::VaeAttention:
      if (!inner(tail, kVaeAttention, std::size(kVaeAttention), out)) return false;
      break;
    case Slot::Plain:  // a convolution or linear; the samplers' one under conv.
      if (tail != "weight" && tail != "bias" && tail != "conv.weight" && tail != "conv.bias") return false;
      out = tail;
      break;
    case Slot::Transformer:
      out = tail;  // ldm's SpatialTransformer and diffusers' Transformer2DModel name their insides alike
      break;
  }
  out = best->diffusers + out;
  return true;
}

// OpenCLIP's text tower (open_clip.CLIP's transformer, token_embedding,
// positional_embedding, ln_final, text_projection) as transformers'
// CLIPTextModelWithProjection.
bool openclip(const string& rest, const string& base, std::vector<TensorRename>& rules, std::vector<string>& ignored) {
  const string p = "text_encoder_2.";
  auto add = [&](const string& name, TensorTransform t = TensorTransform::None) {
    TensorRename r;
    r.name = p + name;
    r.base = base;
    r.transform = t;
    rules.push_back(std::move(r));
    return true;
  };
  if (rest == "token_embedding.weight") return add("text_model.embeddings.token_embedding.weight");
  if (rest == "positional_embedding") return add("text_model.embeddings.position_embedding.weight");
  if (rest == "ln_final.weight" || rest == "ln_final.bias") return add("text_model.final_layer_norm." + rest.substr(9));
  if (rest == "text_projection") return add("text_projection.weight", TensorTransform::Transpose);
  if (rest == "logit_scale" || rest == "attn_mask") return ignored.push_back(base), true;
  const string rb = "transformer.resblocks.";
  if (!starts(rest, rb)) return false;
  size_t j = rb.size(), k = j;
  while (k < rest.size() && rest[k] >= '0' && rest[k] <= '9') ++k;
  if (k == j || k - j > 4 || k >= rest.size() || rest[k] != '.') return false;
  const string layer = "text_model.encoder.layers." + rest.substr(j, k - j) + ".", tail = rest.substr(k + 1);
  static const std::pair<const char*, const char*> kBlock[] = {{"ln_1.", "layer_norm1."},
                                                               {"ln_2.", "layer_norm2."},
                                                               {"mlp.c_fc.", "mlp.fc1."},
                                                               {"mlp.c_proj.", "mlp.fc2."},
                                                               {"attn.out_proj.", "self_attn.out_proj."}};
  string out;
  if (inner(tail, kBlock, std::size(kBlock), out)) return add(layer + out);
  for (const char* kind : {"weight", "bias"}) {
    if (tail != string("attn.in_proj_") + kind) continue;
    const char* qkv[] = {"q", "k", "v"};
    for (int c = 0; c < 3; ++c) {
      TensorRename r;
      r.name = p + layer + "self_attn." + qkv[c] + "_proj." + kind;
      r.base = base;
      r.chunks = 3;
      r.chunk = c;
      rules.push_back(std::move(r));
    }
    return true;
  }
  return false;
}

// The DDPM buffers ldm's LatentDiffusion registers (betas, the cumulative
// alphas and the posterior's terms) and its logvar: the scheduler computes
// them from its config.
const char* const kScheduleBuffers[] = {"betas",
                                        "alphas_cumprod",
                                        "alphas_cumprod_prev",
                                        "sqrt_alphas_cumprod",
                                        "sqrt_one_minus_alphas_cumprod",
                                        "log_one_minus_alphas_cumprod",
                                        "sqrt_recip_alphas_cumprod",
                                        "sqrt_recipm1_alphas_cumprod",
                                        "posterior_variance",
                                        "posterior_log_variance_clipped",
                                        "posterior_mean_coef1",
                                        "posterior_mean_coef2",
                                        "logvar"};

}  // namespace

const char* layout_name(LdmLayout l) { return l == LdmLayout::SD15 ? "SD 1.5" : "SDXL"; }

LdmLayout detect_ldm_layout(const TensorSource& file) {
  bool unet = false, sd1_text = false, sd2_text = false, xl0 = false, xl1 = false, xl_refiner = false;
  for (const SourceTensor& t : file.tensors()) {
    const string& n = t.name;
    unet |= starts(n, "model.diffusion_model.input_blocks.0.0.");
    sd1_text |= starts(n, "cond_stage_model.transformer.");
    sd2_text |= starts(n, "cond_stage_model.model.");
    xl0 |= starts(n, "conditioner.embedders.0.transformer.");
    xl1 |= starts(n, "conditioner.embedders.1.model.");
    xl_refiner |= starts(n, "conditioner.embedders.0.model.");
  }
  const string& path = file.path();
  if (!unet) {
    string first;
    for (size_t i = 0; i < file.tensors().size() && i < 3; ++i) first += (i ? ", " : "") + file.tensors()[i].name;
    throw Error(path + ": not a Stable Diffusion checkpoint kvad knows (no model.diffusion_model.input_blocks.0.0.*; " +
                std::to_string(file.tensors().size()) + " tensors" + (first.empty() ? "" : ": " + first + ", ...") +
                ")");
  }
  if (xl0 && xl1) return LdmLayout::SDXL;
  if (sd1_text && !xl0 && !xl1) return LdmLayout::SD15;
  if (sd2_text)
    throw Error(path + ": a Stable Diffusion 2.x checkpoint (cond_stage_model.model.*), which kvad does not run");
  if (xl_refiner)
    throw Error(path + ": an SDXL refiner checkpoint (conditioner.embedders.0.model.*), which kvad does not run");
  throw Error(path +
              ": a UNet without the text encoders of SD 1.5 (cond_stage_model.transformer.*) or SDXL "
              "(conditioner.embedders.0.transformer.* and conditioner.embedders.1.model.*)");
}

LdmNames ldm_names(LdmLayout layout, const TensorSource& file, const UNet2DConditionConfig& unet,
                   const AutoencoderKLConfig& vae) {
  LdmNames out;
  const std::vector<Prefix> up = unet_prefixes(unet), vp = vae_prefixes(vae);
  const string text1 =
      layout == LdmLayout::SD15 ? "cond_stage_model.transformer." : "conditioner.embedders.0.transformer.";
  for (const SourceTensor& t : file.tensors()) {
    const string& n = t.name;
    if (std::find(std::begin(kScheduleBuffers), std::end(kScheduleBuffers), n) != std::end(kScheduleBuffers) ||
        starts(n, "model_ema.") || n.ends_with(".embeddings.position_ids")) {
      out.ignored.push_back(n);
      continue;
    }
    TensorRename r;
    r.base = n;
    string name;
    Slot slot = Slot::Plain;
    bool ok = false;
    if (starts(n, "model.diffusion_model.")) {
      ok = by_prefix(n.substr(22), up, name, slot);
      if (ok && slot == Slot::Transformer && (name.ends_with("proj_in.weight") || name.ends_with("proj_out.weight")))
        view_as(r, t, unet.use_linear_projection);
      r.name = "unet." + name;
    } else if (starts(n, "first_stage_model.")) {
      ok = by_prefix(n.substr(18), vp, name, slot);
      if (ok && slot == Slot::VaeAttention && !name.ends_with("group_norm.weight")) view_as(r, t, true);
      r.name = "vae." + name;
      out.has_vae = true;
    } else if (starts(n, text1)) {
      // transformers' CLIPTextModel state dict; checkpoints made before
      // transformers 4.? lack the text_model. level.
      const string rest = n.substr(text1.size());
      ok = !rest.empty();
      r.name = "text_encoder." + (starts(rest, "text_model.") ? rest : "text_model." + rest);
    } else if (layout == LdmLayout::SDXL && starts(n, "conditioner.embedders.1.model.")) {
      if (openclip(n.substr(30), n, out.rules, out.ignored)) continue;
    }
    if (!ok) {
      const char* where = layout == LdmLayout::SD15
                              ? "model.diffusion_model.*, first_stage_model.*, cond_stage_model.transformer.*"
                              : "model.diffusion_model.*, first_stage_model.*, conditioner.embedders.{0,1}.*";
      throw Error(file.path() + ": tensor " + n + " is not part of the " + layout_name(layout) +
                  " pipeline its configs describe (kvad reads " + where + "; UNet: " +
                  std::to_string(unet.down_block_types.size()) + " blocks of " + std::to_string(unet.layers_per_block) +
                  " resnets, VAE: " + std::to_string(vae.block_out_channels.size()) + " levels of " +
                  std::to_string(vae.layers_per_block) + ")");
    }
    out.rules.push_back(std::move(r));
  }
  return out;
}

std::vector<TensorRename> deprecated_vae_names(const std::vector<std::string>& names) {
  static const std::pair<const char*, const char*> kOld[] = {
      {"query.", "to_q."}, {"key.", "to_k."}, {"value.", "to_v."}, {"proj_attn.", "to_out.0."}};
  std::vector<TensorRename> out;
  for (const string& n : names) {
    const size_t at = n.find("mid_block.attentions.0.");
    if (at == string::npos) continue;
    const size_t tail = at + 23;
    string now;
    if (!inner(n.substr(tail), kOld, std::size(kOld), now)) continue;
    TensorRename r;
    r.base = n;
    r.name = n.substr(0, tail) + now;
    out.push_back(std::move(r));
  }
  return out;
}

std::string unet_ldm_name(const std::string& diffusers, const UNet2DConditionConfig& c) {
  // The prefixes of unet_prefixes with each ResBlock's inner names spelled out,
  // read from the diffusers side; the longest match wins.
  const std::vector<Prefix> prefixes = unet_prefixes(c);
  string best_d, best_l;
  auto consider = [&](const string& d, const string& l) {
    if (starts(diffusers, d) && d.size() > best_d.size()) best_d = d, best_l = l;
  };
  for (const Prefix& p : prefixes) {
    if (p.slot == Slot::UnetResnet) {
      for (const auto& [ldm, dif] : kUnetResnet) consider(p.diffusers + dif, p.ldm + ldm);
    } else {  // the transformers' insides and the upsamplers' conv. keep their names
      consider(p.diffusers, p.ldm);
    }
  }
  if (best_d.empty()) return "";
  return best_l + diffusers.substr(best_d.size());
}

}  // namespace kvad::image
