// Gemma 3, text decoder (Gemma Team 2025, "Gemma 3 Technical Report"; HF
// transformers modeling_gemma3.py; GGUF architecture "gemma3"), and Gemma 2
// (Gemma Team 2024, "Gemma 2: Improving Open Language Models at a Practical
// Size"; modeling_gemma2.py; GGUF "gemma2"), whose differences are listed
// under "Gemma 2" below. Decoder blocks with a norm before and after each sub-block:
//   x = x · sqrt(n_embd)                                  (embedding scale)
//   x = x + RMSNorm(Wo · Attn(q, k, v)) ⊙ post_attention_norm
//         q = RoPE(RMSNorm_h(Wq · n) ⊙ attn_q_norm), k = RoPE(RMSNorm_h(Wk · n) ⊙ attn_k_norm),
//         v = Wv · n,  n = RMSNorm(x) ⊙ attn_norm
//   x = x + RMSNorm(Wdown · (GELU_tanh(Wgate · n) ⊙ Wup · n)) ⊙ post_ffw_norm,  n = RMSNorm(x) ⊙ ffn_norm
// then RMSNorm ⊙ output_norm and the output head tied to token_embd (used
// in its stored format; no dense copy). RMSNorm_h normalizes each head's
// head_dim values (QK-norm, which replaces Gemma 2's attention soft-capping);
// Gemma 3 has no final logit soft-capping either.
//
// Local and global layers: five sliding-window layers (window
// `gemma3.attention.sliding_window`, RoPE base 10 000, no RoPE scaling) then
// one global layer (RoPE base `gemma3.rope.freq_base`, 1e6, and the file's
// rope scaling, model/rope.h: linear `rope.scaling.factor` on 4B and larger): layer il is global when
// il % 6 == 5, as llama.cpp decides for gemma3 GGUFs (set_swa_pattern(6),
// rope_freq_base_train_swa = 10000). A file without a sliding window runs
// every layer as global. A local layer's cache keeps only a ring of
// window + n_batch positions (model/cache.h).
//
// Conventions of the GGUF files (llama.cpp's convert_hf_to_gguf.py):
//  - Gemma's RMSNorm computes x̂ · (1 + w); the converter stores w + 1, so
//    the stored norm weights multiply x̂ as they are (checked against
//    llama.cpp by tests/engine/test_reference_gemma3.cpp).
//  - Q and K are not permuted: RoPE rotates the halves (NeoX / HF rotate_half).
//  - Attention scale: query_pre_attn_scalar^-1/2, which is head_dim
//    (`gemma3.attention.key_length`) for every size but 27B, where HF's config
//    has n_embd / n_head (llama.cpp's rule; GGUF has no key for it).
//
// Gemma 2 (llama.cpp's llama_model_gemma2, transformers' Gemma2Model):
//  - no QK-norm; instead attention logit soft-capping: each score
//    s = scale · q·k becomes c · tanh(s / c) before the mask and softmax
//    (`gemma2.attn_logit_softcapping`, 50 when absent, as llama.cpp);
//  - final logit soft-capping: logits ← c · tanh(logits / c)
//    (`gemma2.final_logit_softcapping`, 30 when absent);
//  - sliding-window and global layers alternate, the window on the even
//    layers (llama.cpp's set_swa_pattern(2); HF's layer_types: layer i slides
//    when (i + 1) % 2 != 0); `gemma2.attention.sliding_window` is 4096 when
//    absent (llama.cpp's default);
//  - one RoPE (base `gemma2.rope.freq_base`, and scaling) for both kinds of
//    layer (llama.cpp: rope_freq_base_train_swa = rope_freq_base_train unless
//    `gemma2.rope.freq_base_swa` says otherwise);
//  - the 27B exception of the attention scale is told by 46 layers.
//  A soft-cap of 0 (HF null) means none.
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

constexpr int64_t kSlidingWindowPattern = 6;  // Gemma 3: 5 local layers, then 1 global
constexpr int64_t kGemma2Pattern = 2;         // Gemma 2: local, global, local, ...
constexpr float kLocalRopeBase = 10000.0f;    // Gemma 3's local layers
constexpr int64_t kGemma2Window = 4096;       // llama.cpp's default n_swa for gemma2
constexpr float kGemma2AttnSoftcap = 50.0f;   // llama.cpp's defaults, and HF Gemma2Config's
constexpr float kGemma2FinalSoftcap = 30.0f;

/// Gemma 2's and 3's own hyper-parameters beside the decoder keys: the
/// sliding-window layers and (Gemma 2) the soft-caps.
struct Gemma3Params {
  bool gemma2 = false;         ///< GGUF architecture "gemma2"
  SlidingWindow swa;           ///< {arch}.attention.sliding_window; pattern 6 (Gemma 3) or 2 (Gemma 2)
  float attn_softcap = 0;      ///< gemma2.attn_logit_softcapping; 0: none
  float final_softcap = 0;     ///< gemma2.final_logit_softcapping; 0: none
  bool is_global(int64_t il) const { return swa.at(il) == 0; }
};

// A soft-cap key: absent gives def; it must be finite and >= 0 (0: none).
float read_softcap(const TensorSource& src, const std::string& key, float def) {
  const double c = src.get_float(key, def);
  if (!std::isfinite(c) || c < 0 || c > 1e30)
    throw Error(src.path() + ": " + src.key_name(key) + " " + std::to_string(c) + " is not a finite value >= 0");
  return static_cast<float>(c);
}

struct Layer {
  AttentionWeights attn;     // attn_norm, attn_q/k/v, attn_q_norm, attn_k_norm, attn_output
  Tensor post_attention_norm;
  MlpWeights ffn;            // ffn_norm, ffn_gate/up/down
  Tensor post_ffw_norm;
};

class Gemma3 final : public Model {
 public:
  Gemma3(std::shared_ptr<const TensorSource> src, const DeviceOptions& o) : Model(src) {
    const std::string a = hp_.arch + ".";
    cfg_.gemma2 = hp_.arch == "gemma2";
    if (cfg_.gemma2) {
      cfg_.attn_softcap = read_softcap(*src, a + "attn_logit_softcapping", kGemma2AttnSoftcap);
      cfg_.final_softcap = read_softcap(*src, a + "final_logit_softcapping", kGemma2FinalSoftcap);
    }
    cfg_.swa = read_sliding_window(*src, hp_, {.window = cfg_.gemma2 ? kGemma2Window : 0,
                                               .pattern = cfg_.gemma2 ? kGemma2Pattern : kSlidingWindowPattern});
    hp_.n_vocab = read_vocab(*src, hp_);
    WeightLoader wl = open_weights(o);
    const DecoderEnds ends = load_decoder_ends(wl.root(), hp_, Head::Tied, {holds_embedding(), holds_head()});
    tok_embd_ = ends.tok_embd, output_norm_ = ends.output_norm;
    layers_.resize(hp_.n_layer);
    for (int64_t il = stage_first(); il < stage_last(); ++il) load_layer(wl.layer(il), layers_[il]);
    // The global layers' rope scaling (model/rope.h; Gemma 3 4B+ use linear 8).
    const RopeScaling rope = load_rope_scaling(*src, wl, hp_, /*neox=*/true, /*long_factors=*/false);
    finish_loading(wl);  // a file with output.weight (an untied head) is refused here, naming it

    AttentionParams& g = global_;
    g = read_attention(*src, hp_, rope.params);
    const bool is_27b = hp_.n_layer == (cfg_.gemma2 ? 46 : 62);
    if (is_27b) g.scale = 1.0f / std::sqrt(static_cast<float>(hp_.n_embd / hp_.n_head));
    g.softcap = cfg_.attn_softcap;
    local_ = g;
    if (cfg_.gemma2) {
      local_.rope.freq_base = static_cast<float>(src->get_float(a + "rope.freq_base_swa", g.rope.freq_base));
    } else {
      local_.rope.freq_base = kLocalRopeBase;
      local_.rope.freq_scale = 1.0f;
      local_.rope.freq_factors = Tensor{};
      local_.rope.attn_factor = 1.0f;
    }
    local_.sliding_window = cfg_.swa.window;
  }

  void load_layer(const WeightScope& blk, Layer& L) {
    const int64_t E = hp_.n_embd, D = hp_.head_dim;
    L.attn = load_attention_weights(blk, E, hp_.n_head * D, hp_.n_head_kv * D, D);
    if (cfg_.gemma2 && (L.attn.q_norm || L.attn.k_norm))
      throw Error(blk.path() + ": tensor " + blk.name(L.attn.q_norm ? "attn_q_norm" : "attn_k_norm") +
                  ".weight: gemma2 has no QK-norm");
    if (!cfg_.gemma2 && (!L.attn.q_norm || !L.attn.k_norm))
      throw Error(blk.path() + ": missing tensor " + blk.name(L.attn.q_norm ? "attn_k_norm.weight" : "attn_q_norm.weight"));
    L.post_attention_norm = blk.get("post_attention_norm.weight", {E});
    L.ffn = load_mlp_weights(blk, E, hp_.n_ff);
    L.post_ffw_norm = blk.get("post_ffw_norm.weight", {E});
    require_f32(blk.path(), {&L.post_attention_norm, &L.post_ffw_norm});
  }

  std::unique_ptr<Cache> make_cache(int32_t n_ctx, int n_seq, int64_t n_batch, KVTypes types) const override {
    std::vector<LayerSpec> specs(hp_.n_layer);
    const int64_t kv_dim = hp_.n_head_kv * hp_.head_dim;
    for (int64_t il = 0; il < hp_.n_layer; ++il) specs[il] = KeyValueSpec{kv_dim, kv_dim, cfg_.swa.at(il)};
    return std::make_unique<LayerCaches>(specs, n_ctx, n_seq, n_batch, device_, types, held_layers());
  }

 protected:
  void forward_impl(LayerCaches& cache, const BatchView& b, Tensor& x, float* logits) const override {
    const float eps = hp_.norm_eps;
    const BatchIds ids = upload_batch(b, device_);
    if (!x) x = ops::scale(ops::get_rows(tok_embd_, ids.token), std::sqrt(static_cast<float>(hp_.n_embd)));
    for (int64_t il = stage_first(); il < stage_last(); ++il) {
      const Layer& L = layers_[il];
      const AttentionParams& p = cfg_.is_global(il) ? global_ : local_;
      x = ops::add(x, ops::rms_norm(attention_block(L.attn, p, cache.kv(il), ids, x), L.post_attention_norm, eps));
      x = ops::add(x, ops::rms_norm(gated_mlp(L.ffn, Activation::GELU_tanh, eps, x, ids.lora.get()), L.post_ffw_norm, eps));
    }
    if (!holds_head()) return;
    decoder_logits(x, ids, output_norm_, eps, tok_embd_, logits);
    // Gemma 2's final soft-cap, on the host's [n_out, n_vocab] logits.
    if (const float c = cfg_.final_softcap; c > 0)
      for (int64_t i = 0, n = ids.n_out * hp_.n_vocab; i < n; ++i) logits[i] = c * std::tanh(logits[i] / c);
  }

 private:
  Gemma3Params cfg_;
  Tensor tok_embd_, output_norm_;
  std::vector<Layer> layers_;
  AttentionParams global_, local_;
};

// HF names (transformers' Gemma3ForCausalLM, model_type gemma3_text, and
// Gemma2ForCausalLM, gemma2, the same names without q_norm / k_norm) →
// GGUF names. Every RMSNorm weight w becomes 1 + w, as the GGUF converter
// stores it (Gemma's norm multiplies by 1 + w).
// Gemma 2's and 3's config.json (gemma2: Gemma2Config's defaults for
// absent fields, a null soft-cap written as 0, none).
void hf_config_gemma(const std::string& arch, const nlohmann::json& cfg, HfConfig& out) {
  const bool gemma2 = arch == "gemma2";
  decoder_config(arch, cfg, out);
  const int64_t window = hf_sliding_window(arch, cfg, out, gemma2 ? kGemma2Window : 0);
  // kvad runs the fixed pattern (read_sliding_window's, layer il global
  // when il % pattern == pattern - 1); a config with another one is refused
  // rather than run wrong.
  const int64_t pattern = gemma2 ? kGemma2Pattern : kSlidingWindowPattern;
  const int64_t n_layer = config_int(cfg, "num_hidden_layers");
  const std::vector<bool> local = sliding_layers(cfg, n_layer, pattern);
  for (size_t il = 0; il < local.size(); ++il)
    if (window > 0 && local[il] != (static_cast<int64_t>(il) % pattern < pattern - 1))
      throw Error("config.json: layer " + std::to_string(il) + " is " + (local[il] ? "sliding" : "full") +
                  " attention; kvad runs " +
                  (gemma2 ? "Gemma 2's pattern of sliding and full layers in turn, sliding first"
                          : "Gemma 3's pattern of 5 sliding layers then 1 full"));
  if (gemma2) {
    if (config_bool(cfg, "use_bidirectional_attention", false))
      throw Error("config.json: use_bidirectional_attention (an encoder) is not supported for gemma2");
    for (const char* key : {"attn_logit_softcapping", "final_logit_softcapping"}) {
      const double def = key[0] == 'a' ? kGemma2AttnSoftcap : kGemma2FinalSoftcap;
      const double c = cfg.contains(key) && cfg[key].is_null() ? 0.0 : config_float(cfg, key, def);
      if (!std::isfinite(c) || c < 0) throw Error(std::string("config.json: ") + key + " must be a number >= 0 or null");
      out.md[arch + "." + key] = c;
    }
  } else if (local_rope_base(cfg, kLocalRopeBase) != kLocalRopeBase) {
    throw Error("config.json: a sliding-layer rope base other than 10000 is not supported");
  }
  const int64_t head_dim = config_int(cfg, "head_dim");
  if (config_int(cfg, "query_pre_attn_scalar", gemma2 ? 256 : head_dim) != head_dim &&
      n_layer != (gemma2 ? 46 : 62))
    throw Error("config.json: query_pre_attn_scalar other than head_dim is not supported");
}

void hf_config(const nlohmann::json& cfg, HfConfig& out) { hf_config_gemma("gemma3", cfg, out); }
void hf_config_gemma2(const nlohmann::json& cfg, HfConfig& out) { hf_config_gemma("gemma2", cfg, out); }

bool hf_tensor(const std::string& hf, TensorRename& r) {
  using T = TensorTransform;
  static const HfLayerName kLayer[] = {
      {"post_attention_layernorm.weight", "post_attention_norm.weight", T::ToF32PlusOne},
      {"pre_feedforward_layernorm.weight", "ffn_norm.weight", T::ToF32PlusOne},
      {"post_feedforward_layernorm.weight", "post_ffw_norm.weight", T::ToF32PlusOne},
  };
  return hf_decoder_tensor(hf, T::ToF32PlusOne, kLayer, std::size(kLayer), r);
}

}  // namespace

extern const HfNames kGemma3HfNames;
const HfNames kGemma3HfNames = {{"gemma3_text"}, &hf_config, &hf_tensor};
extern const HfNames kGemma2HfNames;
const HfNames kGemma2HfNames = {{"gemma2"}, &hf_config_gemma2, &hf_tensor};

std::unique_ptr<Model> load_gemma3(std::shared_ptr<const TensorSource> src, const DeviceOptions& o) {
  return std::make_unique<Gemma3>(std::move(src), o);
}

}  // namespace kvad
