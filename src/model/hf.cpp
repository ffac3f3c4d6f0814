#include "model/hf.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "io/safetensors.h"
#include "io/tensor_source.h"
#include "model/registry.h"
#include "model/rope.h"

namespace kvad {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {
const json& field(const json& cfg, const char* key) {
  if (!cfg.is_object() || !cfg.contains(key) || cfg[key].is_null())
    throw Error(std::string("config.json: missing field ") + key);
  return cfg[key];
}
}  // namespace

int64_t config_int(const json& cfg, const char* key) {
  const json& v = field(cfg, key);
  if (!v.is_number_integer()) throw Error(std::string("config.json: ") + key + " is not an integer");
  return v.get<int64_t>();
}
double config_float(const json& cfg, const char* key) {
  const json& v = field(cfg, key);
  if (!v.is_number()) throw Error(std::string("config.json: ") + key + " is not a number");
  return v.get<double>();
}
int64_t config_int(const json& cfg, const char* key, int64_t def) {
  return cfg.is_object() && cfg.contains(key) && !cfg[key].is_null() ? config_int(cfg, key) : def;
}
double config_float(const json& cfg, const char* key, double def) {
  return cfg.is_object() && cfg.contains(key) && !cfg[key].is_null() ? config_float(cfg, key) : def;
}

bool config_bool(const json& cfg, const char* key, bool def) {
  if (!cfg.is_object() || !cfg.contains(key) || cfg[key].is_null()) return def;
  if (!cfg[key].is_boolean()) throw Error(std::string("config.json: ") + key + " is not true or false");
  return cfg[key].get<bool>();
}

void check_layer_count(int64_t n_layer) {
  // More than any checkpoint has (the largest have a few hundred); a larger
  // count is a bad config, refused before per-layer tables are sized by it.
  if (n_layer <= 0 || n_layer > kMaxLayers)
    throw Error("config.json: num_hidden_layers " + std::to_string(n_layer) + " is not in [1, " +
                std::to_string(kMaxLayers) + "]");
}

void decoder_config(const std::string& a, const json& cfg, HfConfig& out) {
  Metadata& md = out.md;
  md["general.architecture"] = a;
  if (cfg.contains("_name_or_path") && cfg["_name_or_path"].is_string())
    md["general.name"] = cfg["_name_or_path"].get<std::string>();
  const int64_t n_head = config_int(cfg, "num_attention_heads");
  // Counts the rest is sized by: refused here, before a table is made from them.
  if (n_head <= 0) throw Error("config.json: num_attention_heads must be positive");
  if (config_int(cfg, "hidden_size") <= 0) throw Error("config.json: hidden_size must be positive");
  check_layer_count(config_int(cfg, "num_hidden_layers"));
  out.set(a + ".context_length", "max_position_embeddings", config_int(cfg, "max_position_embeddings", 2048));
  out.set(a + ".embedding_length", "hidden_size", config_int(cfg, "hidden_size"));
  out.set(a + ".block_count", "num_hidden_layers", config_int(cfg, "num_hidden_layers"));
  // Checked against token_embd's rows (read_vocab), as transformers refuses
  // a checkpoint whose embedding has another size.
  if (cfg.contains("vocab_size") && !cfg["vocab_size"].is_null())
    out.set(a + ".vocab_size", "vocab_size", config_int(cfg, "vocab_size"));
  // Absent from a MoE config without dense layers (Qwen3.5-MoE).
  if (cfg.contains("intermediate_size") || !cfg.contains("num_experts"))
    out.set(a + ".feed_forward_length", "intermediate_size", config_int(cfg, "intermediate_size"));
  out.set(a + ".attention.head_count", "num_attention_heads", n_head);
  out.set(a + ".attention.head_count_kv", "num_key_value_heads", config_int(cfg, "num_key_value_heads", n_head));
  const int64_t head_dim = config_int(cfg, "head_dim", config_int(cfg, "hidden_size") / n_head);
  // The rope tables made from the config are head_dim / 2 long.
  if (head_dim <= 0 || head_dim > kMaxHeadDim)
    throw Error("config.json: head_dim " + std::to_string(head_dim) + " is not in [1, " + std::to_string(kMaxHeadDim) +
                "]");
  if (cfg.contains("head_dim") && !cfg["head_dim"].is_null()) {
    out.set(a + ".attention.key_length", "head_dim", config_int(cfg, "head_dim"));
    out.set(a + ".attention.value_length", "head_dim", config_int(cfg, "head_dim"));
  }
  out.set(a + ".attention.layer_norm_rms_epsilon", "rms_norm_eps", config_float(cfg, "rms_norm_eps", 1e-6));
  // RoPE: transformers <= 4 writes rope_theta and rope_scaling; 5 writes
  // rope_parameters {rope_theta, rope_type, factor}, or one such object per
  // layer type (Gemma 3: full_attention / sliding_attention).
  json rope = cfg.contains("rope_parameters") && cfg["rope_parameters"].is_object() ? cfg["rope_parameters"] : json();
  if (rope.is_object() && rope.contains("full_attention")) rope = rope["full_attention"];
  if (!rope.is_object()) {
    rope = cfg.contains("rope_scaling") && cfg["rope_scaling"].is_object() ? cfg["rope_scaling"] : json::object();
    if (cfg.contains("rope_theta")) rope["rope_theta"] = cfg["rope_theta"];
  }
  md[a + ".rope.freq_base"] = config_float(rope, "rope_theta", 10000.0);
  // Partial rotary (Phi-3/4, GPT-NeoX): the first head_dim · factor dims rotate.
  const double partial = config_float(rope, "partial_rotary_factor", config_float(cfg, "partial_rotary_factor", 1.0));
  if (!(partial > 0 && partial <= 1)) throw Error("config.json: partial_rotary_factor must be in (0, 1]");
  const int64_t n_rot = static_cast<int64_t>(head_dim * partial);
  if (n_rot != head_dim) md[a + ".rope.dimension_count"] = n_rot;
  hf_rope_scaling(a, rope, cfg, n_rot, out);
}

int64_t hf_sliding_window(const std::string& arch, const json& cfg, HfConfig& out, int64_t def, bool required) {
  const int64_t window = config_int(cfg, "sliding_window", def);
  if (window < 0) throw Error("config.json: sliding_window must not be negative");
  if (required && window == 0) throw Error("config.json: sliding_window must be positive for " + arch);
  if (window > 0 || def > 0) out.set(arch + ".attention.sliding_window", "sliding_window", window);
  return window;
}

void hf_moe(const std::string& a, const json& cfg, HfConfig& out, const char* ff_field) {
  const char* count = cfg.contains("num_experts") && !cfg["num_experts"].is_null() ? "num_experts" : "num_local_experts";
  if (!cfg.contains(count) || cfg[count].is_null()) throw Error("config.json: missing field num_experts (or num_local_experts)");
  const int64_t n = config_int(cfg, count), k = config_int(cfg, "num_experts_per_tok");
  if (n < 0) throw Error(std::string("config.json: ") + count + " must not be negative");
  if (n > 0 && (k <= 0 || k > n))
    throw Error(std::string("config.json: num_experts_per_tok must be in 1..") + count + " (" + std::to_string(n) +
                "), is " + std::to_string(k) + " (" + a + ".expert_used_count)");
  out.set(a + ".expert_count", count, n);
  out.set(a + ".expert_used_count", "num_experts_per_tok", k);
  if (ff_field) out.set(a + ".expert_feed_forward_length", ff_field, config_int(cfg, ff_field));
}

bool hf_moe_tensor(const std::string& rest, const std::string& p, TensorRename& r) {
  using T = TensorTransform;
  auto to = [&](const std::string& gguf, T t) { return r.name = p + gguf, r.transform = t, true; };
  if (rest == "mlp.gate.weight") return to("ffn_gate_inp.weight", T::None);
  if (rest == "mlp.gate.e_score_correction_bias") return to("exp_probs_b.bias", T::ToF32);
  if (rest == "mlp.shared_expert_gate.weight") return to("ffn_gate_inp_shexp.weight", T::None);
  for (const char* shared : {"mlp.shared_expert.", "mlp.shared_experts."})  // DeepSeek's plural
    for (const char* proj : {"gate", "up", "down"})
      if (rest == std::string(shared) + proj + "_proj.weight") return to(std::string("ffn_") + proj + "_shexp.weight", T::None);
  return hf_expert_tensor(rest, p, r);
}

double local_rope_base(const json& cfg, double def) {
  if (cfg.contains("rope_parameters") && cfg["rope_parameters"].is_object() &&
      cfg["rope_parameters"].contains("sliding_attention"))
    return config_float(cfg["rope_parameters"]["sliding_attention"], "rope_theta", def);
  return config_float(cfg, "rope_local_base_freq", def);
}

std::vector<bool> sliding_layers(const json& cfg, int64_t n_layer, int64_t pattern) {
  check_layer_count(n_layer);
  std::vector<bool> local(n_layer);
  if (cfg.contains("layer_types") && cfg["layer_types"].is_array()) {
    const json& lt = cfg["layer_types"];
    if (static_cast<int64_t>(lt.size()) != n_layer) throw Error("config.json: layer_types does not list every layer");
    for (int64_t i = 0; i < n_layer; ++i) {
      if (!lt[i].is_string()) throw Error("config.json: layer_types[" + std::to_string(i) + "] is not a string");
      const std::string t = lt[i].get<std::string>();
      if (t != "sliding_attention" && t != "full_attention")
        throw Error("config.json: layer_types[" + std::to_string(i) + "] '" + t + "' is not supported");
      local[i] = t == "sliding_attention";
    }
    return local;
  }
  const int64_t p = config_int(cfg, "sliding_window_pattern", config_int(cfg, "_sliding_window_pattern", pattern));
  for (int64_t i = 0; i < n_layer; ++i) local[i] = p > 0 && (i + 1) % p != 0;
  return local;
}

bool hf_layer_tensor(const std::string& hf, int64_t& il, std::string& rest) {
  static const std::string prefix = "model.layers.";
  if (hf.compare(0, prefix.size(), prefix) != 0) return false;
  size_t i = prefix.size(), j = i;
  while (j < hf.size() && hf[j] >= '0' && hf[j] <= '9') ++j;
  if (j == i || j - i > 6 || j >= hf.size() || hf[j] != '.') return false;
  il = std::stoll(hf.substr(i, j - i));
  rest = hf.substr(j + 1);
  return true;
}

bool hf_expert_tensor(const std::string& rest, const std::string& p, TensorRename& r) {
  static const std::string ex = "mlp.experts.";
  if (rest.compare(0, ex.size(), ex) != 0) return false;
  size_t j = ex.size(), k = j;
  while (k < rest.size() && rest[k] >= '0' && rest[k] <= '9') ++k;
  if (k == j || k - j > 6 || k >= rest.size() || rest[k] != '.') return false;
  const std::string w = rest.substr(k + 1);
  const char* g = w == "gate_proj.weight" ? "ffn_gate_exps.weight"
                  : w == "up_proj.weight" ? "ffn_up_exps.weight"
                  : w == "down_proj.weight" ? "ffn_down_exps.weight" : nullptr;
  if (!g) return false;
  r.name = p + g;
  r.transform = TensorTransform::None;
  r.part = std::stoll(rest.substr(j, k - j));
  return true;
}

bool hf_decoder_tensor(const std::string& hf, TensorTransform norm, const HfLayerName* layer, size_t n_layer,
                       TensorRename& r) {
  using T = TensorTransform;
  if (hf == "model.embed_tokens.weight") return r.name = "token_embd.weight", r.transform = T::None, true;
  if (hf == "model.norm.weight") return r.name = "output_norm.weight", r.transform = norm, true;
  int64_t il;
  std::string rest;
  if (!hf_layer_tensor(hf, il, rest)) return false;
  const HfLayerName common[] = {
      {"input_layernorm.weight", "attn_norm.weight", norm},
      {"self_attn.q_proj.weight", "attn_q.weight", T::None},
      {"self_attn.k_proj.weight", "attn_k.weight", T::None},
      {"self_attn.v_proj.weight", "attn_v.weight", T::None},
      {"self_attn.o_proj.weight", "attn_output.weight", T::None},
      {"self_attn.q_proj.bias", "attn_q.bias", T::ToF32},
      {"self_attn.k_proj.bias", "attn_k.bias", T::ToF32},
      {"self_attn.v_proj.bias", "attn_v.bias", T::ToF32},
      {"self_attn.q_norm.weight", "attn_q_norm.weight", norm},
      {"self_attn.k_norm.weight", "attn_k_norm.weight", norm},
      {"mlp.gate_proj.weight", "ffn_gate.weight", T::None},
      {"mlp.up_proj.weight", "ffn_up.weight", T::None},
      {"mlp.down_proj.weight", "ffn_down.weight", T::None},
  };
  const std::string p = "blk." + std::to_string(il) + ".";
  for (size_t i = 0; i < n_layer; ++i)
    if (rest == layer[i].hf) return r.name = p + layer[i].gguf, r.transform = layer[i].transform, true;
  for (const HfLayerName& n : common)
    if (rest == n.hf) return r.name = p + n.gguf, r.transform = n.transform, true;
  return false;
}

bool is_hf_checkpoint(const std::string& dir) {
  std::error_code ec;
  return fs::is_directory(dir, ec) && fs::is_regular_file(fs::path(dir) / "config.json", ec);
}

std::shared_ptr<const TensorSource> open_hf_checkpoint(const std::string& dir, bool list_only) {
  const fs::path cfg_path = fs::path(dir) / "config.json";
  std::ifstream in(cfg_path, std::ios::binary);
  if (!in) throw Error(cfg_path.string() + ": cannot open");
  json cfg;
  try {
    // Config files are small; a cap keeps a hostile one from costing memory.
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (text.size() > (16u << 20)) throw Error(cfg_path.string() + ": larger than 16 MiB, not a config");
    cfg = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(cfg_path.string() + ": invalid JSON: " + e.what());
  }
  if (!cfg.is_object() || !cfg.contains("model_type") || !cfg["model_type"].is_string())
    throw Error(cfg_path.string() + ": no model_type string");
  const std::string model_type = cfg["model_type"].get<std::string>();
  const ArchEntry* entry = nullptr;
  std::string known;
  for (const ArchEntry& a : architectures()) {
    if (!a.hf) continue;
    for (const std::string& t : a.hf->model_types) {
      known += (known.empty() ? "" : ", ") + t;
      if (t == model_type) entry = &a;
    }
  }
  if (!entry)
    throw Error(cfg_path.string() + ": model_type '" + model_type + "' is not supported (kvad reads: " + known + ")");
  HfConfig hc;
  try {
    entry->hf->config(cfg, hc);
  } catch (const Error& e) {
    // The config helpers name the file themselves ("config.json: ..."): once.
    std::string what = e.what();
    if (what.rfind("config.json: ", 0) == 0) what.erase(0, 13);
    throw Error(cfg_path.string() + ": " + what);
  } catch (const nlohmann::json::exception& e) {
    // A field of another JSON type than the architecture reads it as.
    throw Error(cfg_path.string() + ": a field has the wrong type (" + e.what() + ")");
  }
  std::shared_ptr<const TensorSource> raw = safetensors_source(dir);
  // Block-scaled FP8 checkpoints (DeepSeek-V3/R1's quantization_config
  // {quant_method "fp8", fmt "e4m3", weight_block_size [128, 128]}): each
  // F8_E4M3 matrix W with a W_scale_inv beside it is dequantized as
  // fp8(W) · W_scale_inv per block, and W_scale_inv counts as read.
  bool fp8 = false;
  int64_t block_rows = 128, block_cols = 128;
  if (cfg.contains("quantization_config") && cfg["quantization_config"].is_object()) {
    const json& q = cfg["quantization_config"];
    const std::string method = q.value("quant_method", std::string());
    // OpenAI's MXFP4 experts (gpt-oss): the architecture's table repacks
    // their _blocks and _scales (TensorTransform::Mxfp4).
    const bool mxfp4 = method == "mxfp4" && model_type == "gpt_oss";
    if (method != "fp8" && !mxfp4)
      throw Error(cfg_path.string() + ": quantization_config.quant_method '" + method +
                  "' is not supported (kvad reads fp8 with block scales, and mxfp4 for gpt_oss)");
  }
  if (cfg.contains("quantization_config") && cfg["quantization_config"].is_object() &&
      cfg["quantization_config"].value("quant_method", std::string()) == "fp8") {
    const json& q = cfg["quantization_config"];
    if (q.value("fmt", std::string("e4m3")) != "e4m3")
      throw Error(cfg_path.string() + ": quantization_config.fmt must be e4m3");
    if (q.contains("weight_block_size")) {
      const json& bs = q["weight_block_size"];
      if (!bs.is_array() || bs.size() != 2 || !bs[0].is_number_integer() || !bs[1].is_number_integer() ||
          bs[0].get<int64_t>() <= 0 || bs[1].get<int64_t>() <= 0)
        throw Error(cfg_path.string() + ": quantization_config.weight_block_size is not two positive integers");
      block_rows = bs[0].get<int64_t>();
      block_cols = bs[1].get<int64_t>();
    }
    fp8 = true;
  }
  std::vector<TensorRename> rules;
  std::vector<std::string> ignored;
  for (const SourceTensor& t : raw->tensors()) {
    if (fp8 && t.name.ends_with("_scale_inv") && raw->find(t.name.substr(0, t.name.size() - 10))) continue;
    if (std::find(entry->hf->ignored.begin(), entry->hf->ignored.end(), t.name) != entry->hf->ignored.end()) {
      ignored.push_back(t.name);
      continue;
    }
    std::vector<TensorRename> parts;
    if (entry->hf->split && entry->hf->split(t.name, parts)) {
      for (TensorRename& r : parts) {
        r.base = t.name;
        rules.push_back(std::move(r));
      }
      continue;
    }
    TensorRename r;
    if (!entry->hf->tensor(t.name, r))
      throw Error(raw->path() + ": tensor " + t.name + " is not read by architecture " + entry->name);
    if (r.name.empty()) {
      ignored.push_back(t.name);
      continue;
    }
    r.base = t.name;
    if (fp8 && t.stored_dtype == "F8_E4M3" && raw->find(t.name + "_scale_inv")) {
      if (r.transform != TensorTransform::None)
        throw Error(raw->path() + ": tensor " + t.name + " is FP8 where architecture " + entry->name +
                    " expects a vector it converts");
      r.transform = TensorTransform::Fp8BlockScaled;
      r.scale = t.name + "_scale_inv";
      r.block_rows = block_rows;
      r.block_cols = block_cols;
    }
    rules.push_back(std::move(r));
  }
  if (entry->hf->finish) {
    try {
      entry->hf->finish(hc.md, rules);
    } catch (const Error& e) {
      throw Error(cfg_path.string() + ": " + e.what());
    }
  }
  return mapped_source(std::move(raw), rules, std::move(hc.md), ignored, std::move(hc.tensors), list_only,
                       std::move(hc.fields));
}

}  // namespace kvad
