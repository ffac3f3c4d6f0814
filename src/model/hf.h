// HF checkpoints (config.json + safetensors) under kvad's one naming
// (DESIGN.md seam 9). Each architecture file gives an HfNames table: which
// config.json model_type values it reads, config names → GGUF keys, and HF
// tensor names → GGUF names with any reshaping. open_hf_checkpoint puts the
// table over the checkpoint's safetensors, and the architecture then loads
// it exactly as it loads a GGUF.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "io/mapped_source.h"

namespace kvad {

class TensorSource;

/// What an architecture makes of a config.json: GGUF keys, and the tensors
/// GGUF files carry but HF configs describe in numbers (rope scaling factors).
struct HfConfig {
  Metadata md;
  std::vector<SyntheticTensor> tensors;
  /// GGUF key → "config.json <field>" it came from, so that an error about
  /// the key names the field too (TensorSource::key_name). set() fills both.
  std::map<std::string, std::string, std::less<>> fields;
  /// md[key] = v, recorded as coming from config.json `field`.
  void set(const std::string& key, const char* field, MetadataValue v) {
    md[key] = std::move(v);
    fields[key] = std::string("config.json ") + field;
  }
};

struct HfNames {
  std::vector<std::string> model_types;  ///< config.json "model_type" values this architecture reads
  /// Writes the GGUF keys of the checkpoint's config.json `cfg` into md
  /// ("{arch}.embedding_length" from "hidden_size", ...). Throws kvad::Error
  /// naming a missing or invalid field (config_int and friends do).
  void (*config)(const nlohmann::json& cfg, HfConfig& out) = nullptr;
  /// The GGUF name and transform of HF tensor `hf`; false for a name the
  /// architecture does not know (which makes the load fail, naming it);
  /// true with an empty out.name for a tensor it knows it does not need
  /// (GPT-2's stored causal masks).
  bool (*tensor)(const std::string& hf, TensorRename& out) = nullptr;
  /// HF tensors the architecture knows it does not read (listed to
  /// mapped_source as ignored, so that they do not count as unread): BERT's
  /// position_ids buffer and its next-sentence pooler, which
  /// sentence-transformers does not use either.
  std::vector<std::string> ignored = {};
  /// For an HF tensor that holds several GGUF tensors (gpt-oss's
  /// gate_up_proj, gate and up interleaved): one rule per GGUF tensor
  /// (TensorRename::lanes), and true; false for any other name, which then
  /// goes to `tensor`. nullptr: no such tensors.
  bool (*split)(const std::string& hf, std::vector<TensorRename>& out) = nullptr;
  /// Called once with the config's GGUF keys and every rule made from the
  /// checkpoint's tensors, before the view is made: for transforms that
  /// depend on the config (Qwen3.5's value heads reordered into llama.cpp's
  /// tiled order, TensorRename::head_groups), and keys that depend on the
  /// tensors (Qwen3-Next's MTP block counted in block_count, as llama.cpp's
  /// converter writes it). Throws kvad::Error. nullptr: none.
  void (*finish)(Metadata& md, std::vector<TensorRename>& rules) = nullptr;
};

/// The checkpoint in directory `dir` (config.json and model.safetensors or
/// its sharded index) as a TensorSource with GGUF names and keys, read by
/// the registry architecture whose HfNames lists config.json's model_type.
/// Throws kvad::Error naming the file and field for a malformed or
/// unsupported config.json (listing the model types kvad reads), and as
/// mapped_source for tensors nobody reads.
/// `list_only`: as mapped_source's (HF MoE experts and GPT-2's transposed
/// matrices listed, not made in memory), for the quantize-once lookup.
std::shared_ptr<const TensorSource> open_hf_checkpoint(const std::string& dir, bool list_only = false);

/// True when `dir` holds a config.json (an HF checkpoint, not a GGUF).
bool is_hf_checkpoint(const std::string& dir);

// ---- helpers for the tables --------------------------------------------

/// cfg[key] as an integer / number / string; throws kvad::Error naming
/// "config.json: key" when it is absent or of another type.
int64_t config_int(const nlohmann::json& cfg, const char* key);
double config_float(const nlohmann::json& cfg, const char* key);
/// The same with a default when the key is absent or null.
int64_t config_int(const nlohmann::json& cfg, const char* key, int64_t def);
double config_float(const nlohmann::json& cfg, const char* key, double def);
bool config_bool(const nlohmann::json& cfg, const char* key, bool def);

/// The GGUF keys every decoder has, from their usual HF names:
/// {arch}.context_length (max_position_embeddings), embedding_length
/// (hidden_size), block_count (num_hidden_layers), feed_forward_length
/// (intermediate_size), attention.head_count (num_attention_heads),
/// head_count_kv (num_key_value_heads, default the heads),
/// attention.key_length/value_length (head_dim, when given),
/// attention.layer_norm_rms_epsilon (rms_norm_eps), rope.freq_base
/// (rope_theta, or rope_parameters in transformers 5), rope.dimension_count
/// (head_dim · partial_rotary_factor), the rope scaling (model/rope.h: linear,
/// llama3 as rope_freqs.weight, yarn, longrope as rope_factors_short/long.weight,
/// with llama.cpp's keys), and general.name (_name_or_path). Throws for
/// another rope type.
void decoder_config(const std::string& arch, const nlohmann::json& cfg, HfConfig& out);
/// Most layers a config may declare (num_hidden_layers), and the largest
/// head_dim: far above any model's (a few hundred layers; head dims up to
/// 576), so that only a bad config meets them, before tables are sized by it.
inline constexpr int64_t kMaxLayers = 1 << 16, kMaxHeadDim = 1 << 16;
/// Throws kvad::Error "config.json: num_hidden_layers N is not in [1,
/// kMaxLayers]" for a count outside it.
void check_layer_count(int64_t n_layer);

/// The RoPE base of sliding-window layers: rope_parameters.sliding_attention
/// (transformers 5) or rope_local_base_freq (4.x), else `def`.
double local_rope_base(const nlohmann::json& cfg, double def);
/// Which layers use a sliding window: layer_types (transformers 5), else
/// every layer but each `sliding_window_pattern`-th (default `pattern`).
std::vector<bool> sliding_layers(const nlohmann::json& cfg, int64_t n_layer, int64_t pattern);

/// HF's sliding window: cfg's sliding_window (absent or null: def) as
/// {arch}.attention.sliding_window, written when it or def is > 0 (a file
/// without the key runs the architecture's default). Returns the window.
/// Throws kvad::Error "config.json: sliding_window must not be negative", or
/// "... must be positive for {arch}" when `required`.
int64_t hf_sliding_window(const std::string& arch, const nlohmann::json& cfg, HfConfig& out, int64_t def = 0,
                          bool required = false);

/// HF's mixture-of-experts sizes as llama.cpp's keys: {arch}.expert_count
/// (num_experts, or num_local_experts as Mixtral and transformers 5 name
/// it), expert_used_count (num_experts_per_tok), and, unless `ff_field` is
/// nullptr, expert_feed_forward_length (cfg[ff_field]: moe_intermediate_size,
/// or gpt-oss's intermediate_size). Throws kvad::Error "config.json: ..."
/// naming the field when one is missing, a count is negative, or
/// num_experts_per_tok is outside 1..the experts (with experts).
void hf_moe(const std::string& arch, const nlohmann::json& cfg, HfConfig& out,
            const char* ff_field = "moe_intermediate_size");

/// The tensors of an HF sparse MoE block of layer prefix `p` ("blk.N."),
/// `rest` the name within the layer: the router mlp.gate.weight
/// (ffn_gate_inp) and its choice bias mlp.gate.e_score_correction_bias
/// (exp_probs_b.bias, DeepSeek-V3), the experts (hf_expert_tensor), the
/// shared expert mlp.shared_expert.{gate,up,down}_proj (Qwen2-MoE,
/// Qwen3-Next; DeepSeek's mlp.shared_experts.*) as ffn_{gate,up,down}_shexp
/// and its gate mlp.shared_expert_gate (ffn_gate_inp_shexp). False for
/// another name.
bool hf_moe_tensor(const std::string& rest, const std::string& p, TensorRename& out);

/// The tensors every HF decoder names alike (transformers' Llama-style
/// modules): model.embed_tokens, model.norm, and per layer input_layernorm,
/// self_attn.{q,k,v,o}_proj (weights, and q/k/v biases), self_attn.{q,k}_norm,
/// mlp.{gate,up,down}_proj, as GGUF's token_embd, output_norm, blk.N.attn_*,
/// blk.N.ffn_*. Norm weights get `norm` (f32, or 1 + w for Gemma). `layer`:
/// the architecture's own per-layer names ({hf suffix, GGUF suffix,
/// transform}), searched first. False for a name neither knows.
struct HfLayerName {
  const char *hf, *gguf;
  TensorTransform transform;
};
bool hf_decoder_tensor(const std::string& hf, TensorTransform norm, const HfLayerName* layer, size_t n_layer,
                       TensorRename& out);

/// HF's per-expert matrices `rest` = "mlp.experts.E.{gate,up,down}_proj.weight"
/// of layer prefix `p` ("blk.N.") as part E of GGUF's stacked
/// p + ffn_{gate,up,down}_exps.weight; false for another name.
bool hf_expert_tensor(const std::string& rest, const std::string& p, TensorRename& out);

/// Splits "model.layers.12.self_attn.q_proj.weight" into 12 and
/// "self_attn.q_proj.weight"; false when `hf` is not a layer tensor.
bool hf_layer_tensor(const std::string& hf, int64_t& il, std::string& rest);

}  // namespace kvad
