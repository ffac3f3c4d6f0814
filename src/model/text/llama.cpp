// Llama (Touvron et al. 2023, "LLaMA"; GGUF architecture "llama"), which
// SmolLM and Mistral files also use, and its variants Qwen2/2.5 (GGUF "qwen2":
// Q/K/V biases; Bai et al. 2023 "Qwen Technical Report", transformers'
// modeling_qwen2.py) and Qwen3 (GGUF "qwen3": per-head RMSNorm of q and k
// before RoPE, no biases; Qwen Team 2025, modeling_qwen3.py) as flags of the
// same decoder: pre-norm decoder blocks of
//   x = x + Wo · Attn(RoPE(Wq · n), RoPE(Wk · n), Wv · n),  n = RMSNorm(x) ⊙ attn_norm
//   x = x + Wdown · (SiLU(Wgate · n) ⊙ Wup · n),            n = RMSNorm(x) ⊙ ffn_norm
// (q, k, v with their biases when the file has them; q and k RMSNormed per
// head when it has attn_q_norm/attn_k_norm), then RMSNorm ⊙ output_norm and
// the output head (tied to token_embd when the file has no output.weight).
// Tensor names as llama.cpp's GGUF converter writes them (token_embd,
// blk.N.attn_q, ...). RoPE: GGUF llama files pair adjacent dims (the
// converter stores Q and K rows permuted for that); qwen2/qwen3 files and
// every HF checkpoint (read through the HfNames tables below) keep HF's
// layout and rotate halves (NeoX pairing, rotate_half), which is the same
// rotation of the unpermuted rows.
//
// Shared options (model/rope.h): linear, Llama 3 (rope_freqs.weight), YaRN
// and LongRoPE scaling. Mistral (Jiang et al. 2023; HF model_type "mistral",
// which llama.cpp converts to GGUF "llama") is Llama with a sliding window:
// `llama.attention.sliding_window` W > 0 makes every layer attend to
// positions (p - W, p] (HF's sliding_window; llama.cpp reads that key for
// other architectures, and runs llama files without a window). With
// `{arch}.attention.sliding_window_pattern`, an array of one bool per layer
// (llama.cpp's per-layer form, gguf-py add_sliding_window_pattern), only
// the layers marked true are windowed: Qwen2's use_sliding_window, where
// transformers windows layer i when i >= max_window_layers (or as the
// config's layer_types say).
//
// Phi-3/3.5 (Abdin et al. 2024, "Phi-3 Technical Report"; modeling_phi3.py;
// GGUF "phi3") is the same decoder with fused projections: attn_qkv
// [n_embd → q | k | v] and ffn_up [n_embd → gate | up], used as row views;
// NeoX rotary, often partial (rope.dimension_count < head_dim), LongRoPE
// factors and a sliding window (`phi3.attention.sliding_window`).
//
// Qwen3-MoE (GGUF "qwen3moe"; modeling_qwen3_moe.py) is Qwen3 whose
// feed-forward is the shared sparse MoE block (blocks.h moe_ffn: softmax
// router, top-k experts, optionally renormalised) in every layer that has a
// router (ffn_gate_inp); a layer without one (HF mlp_only_layers, or off
// decoder_sparse_step) keeps the dense MLP. Keys as llama.cpp's:
// {arch}.expert_count, expert_used_count, expert_feed_forward_length;
// kvad.moe.norm_topk_prob 0 turns the renormalisation off (llama.cpp always
// renormalises qwen3moe).
//
// Qwen2-MoE (GGUF "qwen2moe"; transformers' modeling_qwen2_moe.py, llama.cpp's
// src/models/qwen2moe.cpp; Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B) is Qwen2 (q/k/v
// biases) with that MoE block plus a shared expert behind a per-token
// sigmoid gate:
//   x = x + MoE(n) + σ(w_shexp · n) · Wdown_sh · (SiLU(Wgate_sh · n) ⊙ Wup_sh · n)
// (ffn_{gate,up,down}_shexp of width {arch}.expert_shared_feed_forward_length,
// the gate ffn_gate_inp_shexp [n_embd]; blocks.h moe_experts). Its router
// is not renormalised unless kvad.moe.norm_topk_prob is 1 (HF
// norm_topk_prob, default false; llama.cpp never renormalises qwen2moe).
// Dense layers (HF mlp_only_layers, decoder_sparse_step) keep Qwen2's MLP
// of feed_forward_length; llama.cpp's loader takes only all-sparse files.
// Without the expert widths (early GGUFs) they are llama.cpp's fallbacks:
// feed_forward_length / expert_used_count and feed_forward_length.
//
// Mixtral (Jiang et al. 2024, "Mixtral of Experts"; transformers'
// modeling_mixtral.py; Mixtral-8x7B / 8x22B and their fine-tunes) is Llama
// (Mistral's attention) whose every feed-forward is that MoE block: softmax
// router ffn_gate_inp, top expert_used_count (2) of expert_count (8) experts,
// their weights renormalised to sum 1 (MixtralTopKRouter), SwiGLU experts.
// llama.cpp's converter writes it as GGUF "llama" with llama.expert_count,
// llama.expert_used_count and the merged ffn_{gate,up,down}_exps, and no
// expert_feed_forward_length: the experts are feed_forward_length wide, as
// llama.cpp's llama graph reads them (a file that has the key is taken at it).
#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "base/error.h"
#include "io/tensor_source.h"
#include "model/blocks.h"
#include "model/cache.h"
#include "model/hf.h"
#include "model/hparams.h"
#include "model/model.h"
#include "model/registry.h"
#include "model/rope.h"
#include "model/weights.h"
#include "tensor/ops.h"

namespace kvad {
namespace {

/// Llama's own hyper-parameters beside the decoder keys (hparams.h): the
/// sliding window, the experts, and the RoPE pairing: NeoX for qwen2/qwen3, and for llama when kvad.rope.neox is set
/// (HF checkpoints; absent in GGUF files).
struct LlamaParams {
  bool rope_neox = false;
  int32_t sliding_window = 0;  ///< {arch}.attention.sliding_window; 0: full attention
  std::vector<bool> swa;       ///< per layer: windowed ({arch}.attention.sliding_window_pattern; all when absent)
  MoeHParams moe;              ///< the expert_* keys (Mixtral, Qwen2-MoE, Qwen3-MoE layers)
};

struct Layer {
  AttentionWeights attn;  // attn_norm, attn_q/k/v (or attn_qkv), attn_output
  MlpWeights ffn;         // ffn_norm, ffn_gate/up/down (or ffn_up fused), when dense
  MoeWeights moe;         // ffn_norm, ffn_gate_inp, ffn_{gate,up,down}_exps, when sparse
  bool sparse = false;
};

class Llama final : public Model {
 public:
  Llama(std::shared_ptr<const TensorSource> src, const DeviceOptions& o) : Model(src) {
    cfg_.rope_neox = hp_.arch != "llama" || src->get_int("kvad.rope.neox", 0) != 0;
    const SlidingWindow window = read_sliding_window(*src, hp_);
    cfg_.sliding_window = window.window;
    cfg_.swa = window.layers;
    MoeHParams& m = cfg_.moe;
    m = read_moe(*src, hp_, /*norm_topk_default=*/hp_.arch != "qwen2moe");
    // qwen2moe files from before the converter wrote the expert widths
    // (early Qwen1.5-MoE GGUFs): llama.cpp's fallbacks, n_ff / k for the
    // experts (5632 / 4 = 1408) and n_ff for the shared expert.
    if (hp_.arch == "qwen2moe" && m.n_ff_exp == 0 && m.n_expert_used > 0) m.n_ff_exp = hp_.n_ff / m.n_expert_used;
    if (hp_.arch == "qwen2moe" && m.n_ff_shexp == 0) m.n_ff_shexp = hp_.n_ff;
    // Mixtral's llama files: the experts are feed_forward_length wide.
    if (hp_.arch == "llama" && m.n_ff_exp == 0 && m.n_expert > 0) m.n_ff_exp = hp_.n_ff;
    hp_.n_vocab = read_vocab(*src, hp_);
    WeightLoader wl = open_weights(o);
    name_dims(wl, hp_, m);
    const DecoderEnds ends = load_decoder_ends(wl.root(), hp_, Head::OwnOrTied, {holds_embedding(), holds_head()});
    tok_embd_ = ends.tok_embd, output_norm_ = ends.output_norm, output_ = ends.output;
    rope_ = load_rope_scaling(*src, wl, hp_, cfg_.rope_neox);
    layers_.resize(hp_.n_layer);
    for (int64_t il = stage_first(); il < stage_last(); ++il) load_layer(wl.layer(il), layers_[il]);
    finish_loading(wl);
    attn_ = read_attention(*src, hp_);
    attn_.sliding_window = cfg_.sliding_window;
  }

  void load_layer(const WeightScope& blk, Layer& L) {
    const int64_t E = hp_.n_embd, D = hp_.head_dim, F = hp_.n_ff;
    const int64_t q_dim = hp_.n_head * D, kv_dim = hp_.n_head_kv * D;
    const MoeHParams& m = cfg_.moe;
    // Fused projections (Phi-3) where the file has them.
    L.attn = blk.has("attn_qkv.weight") ? load_fused_attention_weights(blk, E, q_dim, kv_dim)
                                        : load_attention_weights(blk, E, q_dim, kv_dim, D);
    L.sparse = blk.has("ffn_gate_inp.weight");
    if (!L.sparse) {
      L.ffn = blk.has("ffn_gate.weight") ? load_mlp_weights(blk, E, F) : load_fused_mlp_weights(blk, E, F);
      return;
    }
    require_experts(*source_, hp_, m, blk.name("ffn_gate_inp.weight"));
    L.moe = load_moe_weights(blk, E, m.n_ff_exp, m.n_expert);
    if (hp_.arch == "qwen2moe") {  // the gated shared expert, as llama.cpp requires it
      load_moe_shared(blk, E, m.n_ff_shexp, m.n_expert, L.moe);
      if (!L.moe.gate_inp_shexp)
        throw Error(blk.path() + ": missing tensor " + blk.name("ffn_gate_inp_shexp.weight") + " (the shared expert's gate)");
    }
  }

  std::unique_ptr<Cache> make_cache(int32_t n_ctx, int n_seq, int64_t n_batch, KVTypes types) const override {
    const int64_t kv_dim = hp_.n_head_kv * hp_.head_dim;
    std::vector<LayerSpec> specs(static_cast<size_t>(hp_.n_layer));
    for (size_t il = 0; il < specs.size(); ++il)
      specs[il] = KeyValueSpec{kv_dim, kv_dim, cfg_.swa[il] ? cfg_.sliding_window : 0};
    return std::make_unique<LayerCaches>(specs, n_ctx, n_seq, n_batch, device_, types, held_layers());
  }

 protected:
  // This stage's decoder blocks over a batch: x [n, n_embd] in (empty: the
  // token embeddings) and out, before the final norm.
  Tensor blocks(LayerCaches& cache, const BatchIds& ids, Tensor x) const {
    // This call's attention parameters: the rope for the cache's context,
    // with and without the window.
    AttentionParams full = attn_;
    full.rope = rope_.at(cache.n_ctx());
    full.sliding_window = 0;
    AttentionParams windowed = full;
    windowed.sliding_window = cfg_.sliding_window;
    if (!x) x = ops::get_rows(tok_embd_, ids.token);  // [n, n_embd]
    for (int64_t il = stage_first(); il < stage_last(); ++il) {
      const Layer& L = layers_[il];
      x = ops::add(x, attention_block(L.attn, cfg_.swa[il] ? windowed : full, cache.kv(il), ids, x));
      x = ops::add(x, L.sparse ? moe_ffn(L.moe, cfg_.moe, x) : gated_mlp(L.ffn, Activation::SiLU, hp_.norm_eps, x, ids.lora.get()));
    }
    return x;
  }

  void forward_impl(LayerCaches& cache, const BatchView& b, Tensor& x, float* logits) const override {
    const BatchIds ids = upload_batch(b, device_);
    x = blocks(cache, ids, x);
    if (holds_head()) decoder_logits(x, ids, output_norm_, hp_.norm_eps, output_, logits);
  }

  // LlamaModel's last_hidden_state (after the final norm), for pooling.
  void hidden_impl(LayerCaches& cache, const BatchView& b, float* hidden) const override {
    const BatchIds ids = upload_batch(b, device_);
    const Tensor x = blocks(cache, ids, Tensor{});
    if (b.n_out == 0) return;
    const Tensor rows = b.n_out == b.n ? x : ops::get_rows(x, ids.out);
    ops::to_host(ops::rms_norm(rows, output_norm_, hp_.norm_eps), hidden);
  }

 private:
  LlamaParams cfg_;
  Tensor tok_embd_, output_norm_, output_;
  std::vector<Layer> layers_;
  AttentionParams attn_;  // every layer's; rope and window chosen per call
  RopeScaling rope_;
};

// HF names (transformers' LlamaForCausalLM) → GGUF names.
// Mistral's checkpoints are Llama's plus sliding_window (null: none).
void hf_config(const nlohmann::json& cfg, HfConfig& out) {
  decoder_config("llama", cfg, out);
  out.md["kvad.rope.neox"] = int64_t{1};
  hf_sliding_window("llama", cfg, out);
}

// Qwen2's (and Qwen2-MoE's) sliding window as transformers' Qwen2Config
// reads it: none unless use_sliding_window (released Qwen2.5 configs carry
// a sliding_window with use_sliding_window false); then the layers
// layer_types marks "sliding_attention", or without layer_types (Qwen2
// only: `max_window_layers_ok`) those with index >= max_window_layers
// (default 28), attend to sliding_window positions. Written as
// {arch}.attention.sliding_window and the per-layer bool array
// {arch}.attention.sliding_window_pattern.
void qwen2_sliding_window(const std::string& arch, const nlohmann::json& cfg, HfConfig& out, bool max_window_layers_ok) {
  if (!config_bool(cfg, "use_sliding_window", false)) return;
  if (hf_sliding_window(arch, cfg, out) == 0) return;  // null: no window, as transformers
  const int64_t n_layer = config_int(cfg, "num_hidden_layers");
  std::vector<bool> swa(static_cast<size_t>(n_layer));
  if (cfg.contains("layer_types") && !cfg["layer_types"].is_null()) {
    if (!cfg["layer_types"].is_array()) throw Error("config.json: layer_types is not a list");
    swa = sliding_layers(cfg, n_layer, 0);
  } else if (!max_window_layers_ok) {
    throw Error("config.json: use_sliding_window needs layer_types for qwen2_moe");
  } else {
    const int64_t first = config_int(cfg, "max_window_layers", 28);
    if (first < 0) throw Error("config.json: max_window_layers must not be negative");
    for (int64_t il = 0; il < n_layer; ++il) swa[static_cast<size_t>(il)] = il >= first;
  }
  out.md[arch + ".attention.sliding_window_pattern"] = swa;
}

// Qwen2 and Qwen3 checkpoints name their tensors as Llama's do (the biases
// and QK-norm weights are in the shared table); only the GGUF architecture
// differs.
void hf_config_qwen2(const nlohmann::json& cfg, HfConfig& out) {
  decoder_config("qwen2", cfg, out);
  qwen2_sliding_window("qwen2", cfg, out, /*max_window_layers_ok=*/true);
}
void hf_config_qwen3(const nlohmann::json& cfg, HfConfig& out) { decoder_config("qwen3", cfg, out); }

void hf_config_phi3(const nlohmann::json& cfg, HfConfig& out) {
  decoder_config("phi3", cfg, out);
  hf_sliding_window("phi3", cfg, out);
}

bool hf_tensor_phi3(const std::string& hf, TensorRename& r) {
  using T = TensorTransform;
  static const HfLayerName kLayer[] = {
      {"post_attention_layernorm.weight", "ffn_norm.weight", T::ToF32},
      {"self_attn.qkv_proj.weight", "attn_qkv.weight", T::None},
      {"mlp.gate_up_proj.weight", "ffn_up.weight", T::None},
  };
  if (hf == "lm_head.weight") return r.name = "output.weight", r.transform = T::None, true;
  return hf_decoder_tensor(hf, T::ToF32, kLayer, std::size(kLayer), r);
}

bool hf_tensor(const std::string& hf, TensorRename& r) {
  static const HfLayerName kLayer[] = {{"post_attention_layernorm.weight", "ffn_norm.weight", TensorTransform::ToF32}};
  if (hf == "lm_head.weight") return r.name = "output.weight", r.transform = TensorTransform::None, true;
  return hf_decoder_tensor(hf, TensorTransform::ToF32, kLayer, std::size(kLayer), r);
}

void hf_config_qwen3moe(const nlohmann::json& cfg, HfConfig& out) {
  decoder_config("qwen3moe", cfg, out);
  hf_moe("qwen3moe", cfg, out);
  if (!config_bool(cfg, "norm_topk_prob", true)) out.md["kvad.moe.norm_topk_prob"] = int64_t{0};
  if (config_int(cfg, "shared_expert_intermediate_size", 0) > 0)
    throw Error("config.json: shared experts are not supported for qwen3_moe");
}

// Experts: model.layers.N.mlp.experts.E.{gate,up,down}_proj.weight stacked
// into the 3-D blk.N.ffn_{gate,up,down}_exps.weight; the router mlp.gate;
// Qwen2-MoE's shared expert and its gate (hf_moe_tensor).
bool hf_tensor_qwen3moe(const std::string& hf, TensorRename& r) {
  int64_t il;
  std::string rest;
  if (hf_layer_tensor(hf, il, rest) && hf_moe_tensor(rest, "blk." + std::to_string(il) + ".", r)) return true;
  return hf_tensor(hf, r);
}

// Qwen2-MoE (transformers' Qwen2MoeConfig): Qwen2's decoder keys, the MoE
// sizes as llama.cpp's converter writes them (Qwen2MoeModel), and
// kvad.moe.norm_topk_prob (0 unless norm_topk_prob). A layer is sparse
// unless mlp_only_layers lists it or (i + 1) % decoder_sparse_step != 0,
// which the checkpoint's tensors already say (mlp.gate present or not).
// use_sliding_window: the layers layer_types marks "sliding_attention"
// (transformers 5 writes layer_types; without it the window is refused).
void hf_config_qwen2moe(const nlohmann::json& cfg, HfConfig& out) {
  decoder_config("qwen2moe", cfg, out);
  hf_moe("qwen2moe", cfg, out);
  const int64_t f_sh = config_int(cfg, "shared_expert_intermediate_size");
  if (f_sh <= 0) throw Error("config.json: shared_expert_intermediate_size must be positive");
  out.set("qwen2moe.expert_shared_feed_forward_length", "shared_expert_intermediate_size", f_sh);
  out.md["kvad.moe.norm_topk_prob"] = int64_t{config_bool(cfg, "norm_topk_prob", false) ? 1 : 0};
  qwen2_sliding_window("qwen2moe", cfg, out, /*max_window_layers_ok=*/false);
}

// Mixtral (transformers' MixtralConfig): Llama's keys (Mistral's
// sliding_window, null in Mixtral's configs: none) plus the experts as
// llama.cpp's converter writes them: llama.expert_count (num_local_experts),
// llama.expert_used_count (num_experts_per_tok); the experts' width is
// feed_forward_length (intermediate_size). Router always renormalised.
// Llama's and Mistral's configs (model_type llama, mistral) go to hf_config
// alone: one table reads the three, as they are one GGUF architecture.
void hf_config_mixtral(const nlohmann::json& cfg, HfConfig& out) {
  hf_config(cfg, out);
  if (!cfg.contains("model_type") || cfg["model_type"] != "mixtral") return;
  if (config_int(cfg, "num_local_experts") <= 0) throw Error("config.json: num_local_experts must be positive");
  hf_moe("llama", cfg, out, /*ff_field=*/nullptr);
}

// Mixtral's checkpoints: model.layers.N.block_sparse_moe.gate.weight (the
// router, [n_expert, n_embd]) and block_sparse_moe.experts.E.{w1,w2,w3}.weight
// (gate, down, up of expert E), stacked into blk.N.ffn_{gate,down,up}_exps
// as llama.cpp's converter does; transformers 5 saves them so (its in-memory
// mlp.experts.gate_up_proj is converted back). Names under mlp. (as
// Qwen3-MoE's) are taken too.
bool hf_tensor_mixtral(const std::string& hf, TensorRename& r) {
  int64_t il;
  std::string rest;
  if (hf_layer_tensor(hf, il, rest)) {
    const std::string p = "blk." + std::to_string(il) + ".";
    static const std::string moe = "block_sparse_moe.";
    if (rest == moe + "gate.weight") return r.name = p + "ffn_gate_inp.weight", r.transform = TensorTransform::None, true;
    static const std::string ex = moe + "experts.";
    if (rest.compare(0, ex.size(), ex) == 0) {
      size_t k = ex.size();
      while (k < rest.size() && rest[k] >= '0' && rest[k] <= '9') ++k;
      const std::string w = k < rest.size() ? rest.substr(k) : "";
      const char* g = w == ".w1.weight" ? "ffn_gate_exps.weight"
                      : w == ".w2.weight" ? "ffn_down_exps.weight"
                      : w == ".w3.weight" ? "ffn_up_exps.weight" : nullptr;
      if (g && k > ex.size() && k - ex.size() <= 6) {
        r.name = p + g;
        r.transform = TensorTransform::None;
        r.part = std::stoll(rest.substr(ex.size(), k - ex.size()));
        return true;
      }
      return false;
    }
  }
  return hf_tensor_qwen3moe(hf, r);
}

}  // namespace

extern const HfNames kLlamaHfNames, kQwen2HfNames, kQwen3HfNames, kPhi3HfNames, kQwen3MoeHfNames, kQwen2MoeHfNames;
const HfNames kLlamaHfNames = {{"llama", "mistral", "mixtral"}, &hf_config_mixtral, &hf_tensor_mixtral};
const HfNames kQwen2HfNames = {{"qwen2"}, &hf_config_qwen2, &hf_tensor};
const HfNames kQwen3HfNames = {{"qwen3"}, &hf_config_qwen3, &hf_tensor};
const HfNames kPhi3HfNames = {{"phi3"}, &hf_config_phi3, &hf_tensor_phi3};
const HfNames kQwen3MoeHfNames = {{"qwen3_moe"}, &hf_config_qwen3moe, &hf_tensor_qwen3moe};
const HfNames kQwen2MoeHfNames = {{"qwen2_moe"}, &hf_config_qwen2moe, &hf_tensor_qwen3moe};

std::unique_ptr<Model> load_llama(std::shared_ptr<const TensorSource> src, const DeviceOptions& o) {
  return std::make_unique<Llama>(std::move(src), o);
}

}  // namespace kvad
