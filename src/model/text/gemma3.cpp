// Gemma 3, text decoder (Gemma Team 2025, "Gemma 3 Technical Report"; HF
// transformers modeling_gemma3.py; GGUF architecture "gemma3"). Decoder
// blocks with a norm before and after each sub-block:
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
#include <cmath>
#include <memory>
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

constexpr int64_t kSlidingWindowPattern = 6;  // 5 local layers, then 1 global
constexpr float kLocalRopeBase = 10000.0f;

/// Gemma 3's hyper-parameters: the decoder keys plus the sliding window.
struct Gemma3Params {
  HParams hp;
  int32_t sliding_window = 0;  ///< gemma3.attention.sliding_window; 0: every layer global
  bool is_global(int64_t il) const {
    return sliding_window == 0 || il % kSlidingWindowPattern == kSlidingWindowPattern - 1;
  }
};

struct Layer {
  AttentionWeights attn;     // attn_norm, attn_q/k/v, attn_q_norm, attn_k_norm, attn_output
  Tensor post_attention_norm;
  MlpWeights ffn;            // ffn_norm, ffn_gate/up/down
  Tensor post_ffw_norm;
};

class Gemma3 final : public Model {
 public:
  Gemma3(std::shared_ptr<const TensorSource> src, const DeviceOptions& o) {
    source_ = src;
    cfg_.hp = read_hparams(*src);
    hp_ = cfg_.hp;
    const std::string a = hp_.arch + ".";
    const int64_t E = hp_.n_embd, D = hp_.head_dim, F = hp_.n_ff;
    const int64_t q_dim = hp_.n_head * D, kv_dim = hp_.n_head_kv * D;
    if (src->get_int(a + "attention.value_length", D) != D)
      throw Error(src->path() + ": " + a + "attention.value_length differs from key_length; not supported");
    const int64_t window = src->get_int(a + "attention.sliding_window", 0);
    if (window < 0 || window > INT32_MAX)
      throw Error(src->path() + ": " + a + "attention.sliding_window " + std::to_string(window) + " is invalid");
    cfg_.sliding_window = static_cast<int32_t>(window);

    WeightLoader wl(src, o);
    device_ = wl.device();
    const SourceTensor* te = src->find("token_embd.weight");
    if (!te || te->n_dims < 2) throw Error(src->path() + ": missing tensor token_embd.weight");
    hp_.n_vocab = te->ne[1];
    tok_embd_ = wl.get("token_embd.weight", {E, hp_.n_vocab});
    output_norm_ = wl.get("output_norm.weight", {E});
    layers_.resize(hp_.n_layer);
    for (int64_t il = 0; il < hp_.n_layer; ++il) {
      const std::string p = "blk." + std::to_string(il) + ".";
      Layer& L = layers_[il];
      L.attn = load_attention_weights(wl, p, E, q_dim, kv_dim, D);
      if (!L.attn.q_norm || !L.attn.k_norm)
        throw Error(src->path() + ": missing tensor " + p + (L.attn.q_norm ? "attn_k_norm.weight" : "attn_q_norm.weight"));
      L.post_attention_norm = wl.get(p + "post_attention_norm.weight", {E});
      L.ffn = load_mlp_weights(wl, p, E, F);
      L.post_ffw_norm = wl.get(p + "post_ffw_norm.weight", {E});
      require_f32(src->path(), {&L.post_attention_norm, &L.post_ffw_norm});
    }
    require_f32(src->path(), {&output_norm_});
    // The global layers' rope scaling (model/rope.h; Gemma 3 4B+ use linear 8).
    const RopeScaling rope = load_rope_scaling(*src, wl, hp_, /*neox=*/true);
    if (rope.has_long) throw Error(src->path() + ": LongRoPE factors are not supported for gemma3");
    wl.finish();  // a file with output.weight (an untied head) is refused here, naming it
    weight_bytes_ = wl.bytes();
    hp_.n_params = wl.n_params();

    AttentionParams& g = global_;
    g.n_head = hp_.n_head;
    g.n_head_kv = hp_.n_head_kv;
    g.head_dim = D;
    g.rope = rope.params;
    const bool is_27b = hp_.n_layer == 62;
    g.scale = 1.0f / std::sqrt(static_cast<float>(is_27b ? E / hp_.n_head : D));
    g.norm_eps = hp_.norm_eps;
    local_ = g;
    local_.rope.freq_base = kLocalRopeBase;
    local_.rope.freq_scale = 1.0f;
    local_.rope.freq_factors = Tensor{};
    local_.rope.attn_factor = 1.0f;
    local_.sliding_window = cfg_.sliding_window;
  }

  std::unique_ptr<Cache> new_cache(int32_t n_ctx, int n_seq, int64_t n_batch, KVTypes types) const override {
    std::vector<LayerSpec> specs(hp_.n_layer);
    for (int64_t il = 0; il < hp_.n_layer; ++il) {
      specs[il].k_dim = specs[il].v_dim = hp_.n_head_kv * hp_.head_dim;
      specs[il].window = cfg_.is_global(il) ? 0 : cfg_.sliding_window;
    }
    return std::make_unique<LayerCaches>(specs, n_ctx, n_seq, n_batch, device_, types);
  }

 protected:
  void forward_impl(Cache& cache_base, const BatchView& b, float* logits) override {
    auto& cache = static_cast<LayerCaches&>(cache_base);
    const float eps = hp_.norm_eps;
    const BatchIds ids = upload_batch(b, device_);
    Tensor x = ops::scale(ops::get_rows(tok_embd_, ids.token), std::sqrt(static_cast<float>(hp_.n_embd)));
    for (int64_t il = 0; il < hp_.n_layer; ++il) {
      const Layer& L = layers_[il];
      const AttentionParams& p = cfg_.is_global(il) ? global_ : local_;
      x = ops::add(x, ops::rms_norm(attention_block(L.attn, p, cache.kv(il), ids, x), L.post_attention_norm, eps));
      x = ops::add(x, ops::rms_norm(gated_mlp(L.ffn, Activation::GELU_tanh, eps, x), L.post_ffw_norm, eps));
    }
    cache.advance(b);
    decoder_logits(x, ids, output_norm_, eps, tok_embd_, logits);
  }

 private:
  Gemma3Params cfg_;
  Tensor tok_embd_, output_norm_;
  std::vector<Layer> layers_;
  AttentionParams global_, local_;
};

// HF names (transformers' Gemma3ForCausalLM, model_type gemma3_text) →
// GGUF names. Every RMSNorm weight w becomes 1 + w, as the GGUF converter
// stores it (Gemma's norm multiplies by 1 + w).
void hf_config(const nlohmann::json& cfg, HfConfig& out) {
  decoder_config("gemma3", cfg, out);
  const int64_t window = config_int(cfg, "sliding_window", 0);
  out.md["gemma3.attention.sliding_window"] = window;
  // kvad runs Gemma 3's fixed pattern (Gemma3Params::is_global); a config
  // with another one is refused rather than run wrong.
  const std::vector<bool> local = sliding_layers(cfg, config_int(cfg, "num_hidden_layers"), kSlidingWindowPattern);
  Gemma3Params p;
  p.sliding_window = static_cast<int32_t>(window);
  for (size_t il = 0; il < local.size(); ++il)
    if (window > 0 && local[il] == p.is_global(static_cast<int64_t>(il)))
      throw Error("config.json: layer " + std::to_string(il) + " is " + (local[il] ? "sliding" : "full") +
                  " attention; kvad runs Gemma 3's pattern of 5 sliding layers then 1 full");
  if (local_rope_base(cfg, kLocalRopeBase) != kLocalRopeBase)
    throw Error("config.json: a sliding-layer rope base other than 10000 is not supported");
  const int64_t head_dim = config_int(cfg, "head_dim");
  if (config_int(cfg, "query_pre_attn_scalar", head_dim) != head_dim && config_int(cfg, "num_hidden_layers") != 62)
    throw Error("config.json: query_pre_attn_scalar other than head_dim is not supported");
}

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

std::unique_ptr<Model> load_gemma3(std::shared_ptr<const TensorSource> src, const DeviceOptions& o) {
  return std::make_unique<Gemma3>(std::move(src), o);
}

}  // namespace kvad
