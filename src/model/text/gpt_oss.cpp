// gpt-oss (OpenAI 2025, "gpt-oss-120b & gpt-oss-20b Model Card"; GGUF
// architecture "gpt-oss", HF model_type "gpt_oss", transformers'
// modeling_gpt_oss.py, llama.cpp's src/models/openai-moe.cpp): pre-norm
// decoder blocks of
//   x = x + Wo · Attn(RoPE(Wq·n + bq), RoPE(Wk·n + bk), Wv·n + bv) + bo,  n = RMSNorm(x) ⊙ attn_norm
//   x = x + MoE(x)                                   (post_attention_norm as the MoE's pre-norm)
// then RMSNorm ⊙ output_norm and an untied head. Attention: grouped-query,
// NeoX rotary with YaRN (rope_parameters.truncate false: unrounded
// correction dims), scale 1/√head_dim, and a learned sink per head (one more
// logit in each softmax's denominator: attn_sinks). Layers alternate between
// a sliding window of `sliding_window` positions (128 in the released
// models) and full attention: layer il slides when il % P < P - 1, P =
// {arch}.attention.sliding_window_pattern (2 when absent, as llama.cpp's
// load_swa_pattern; HF layer_types "sliding_attention" / "full_attention").
// MoE (blocks.h moe_ffn): router with bias; top-k experts, their weights the
// softmax over the k selected logits (GptOssTopKRouter; llama.cpp's
// SOFTMAX_WEIGHT gating); experts with biases and the clamped SwiGLU
//   g = min(gate, limit), u = clamp(up, ±limit), out = (u + 1) · g·σ(alpha·g)
// (alpha 1.702, limit 7: transformers' swiglu_alpha / swiglu_limit; llama.cpp
// fixes both). Tensor names as llama.cpp's converter writes them; HF's fused
// gate_up_proj [n_expert, n_embd, 2·n_ff] interleaves gate (even columns) and
// up (odd), and its expert matrices are stored transposed, which the HF name
// table undoes.
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

struct Layer {
  AttentionWeights attn;  // attn_norm, attn_q/k/v/output (+ biases), attn_sinks
  MoeWeights moe;         // post_attention_norm, ffn_gate_inp (+ bias), ffn_{gate,up,down}_exps (+ biases)
  bool sliding = false;
};

class GptOss final : public Model {
 public:
  GptOss(std::shared_ptr<const TensorSource> src, const DeviceOptions& o) {
    source_ = src;
    hp_ = read_hparams(*src);
    const std::string a = hp_.arch + ".";
    const int64_t window = src->get_int(a + "attention.sliding_window", 0);
    if (window <= 0 || window > INT32_MAX)
      throw Error(src->path() + ": " + a + "attention.sliding_window " + std::to_string(window) +
                  " is missing or invalid (gpt-oss's sliding layers need it)");
    window_ = static_cast<int32_t>(window);
    const int64_t pattern = src->get_int(a + "attention.sliding_window_pattern", 2);
    if (pattern < 0) throw Error(src->path() + ": " + a + "attention.sliding_window_pattern must not be negative");
    const int64_t n_expert = src->get_int(a + "expert_count", 0);
    const int64_t n_ff_exp = src->get_int(a + "expert_feed_forward_length", 0);
    moe_.n_expert_used = src->get_int(a + "expert_used_count", 0);
    if (n_expert <= 0 || n_ff_exp <= 0 || moe_.n_expert_used <= 0 || moe_.n_expert_used > n_expert)
      throw Error(src->path() + ": gpt-oss needs " + a + "expert_count, " + a + "expert_used_count (1.." + a +
                  "expert_count) and " + a + "expert_feed_forward_length");
    moe_.norm_topk = true;  // softmax over the selected logits
    moe_.act = Activation::SwiGLU_OAI;
    moe_.norm_eps = hp_.norm_eps;
    moe_.swiglu_alpha = static_cast<float>(src->get_float("kvad.moe.swiglu_alpha", 1.702));
    moe_.swiglu_limit = static_cast<float>(src->get_float("kvad.moe.swiglu_limit", 7.0));

    WeightLoader wl(src, o);
    device_ = wl.device();
    const int64_t E = hp_.n_embd, D = hp_.head_dim;
    const int64_t q_dim = hp_.n_head * D, kv_dim = hp_.n_head_kv * D;
    const SourceTensor* te = src->find("token_embd.weight");
    if (!te || te->n_dims < 2) throw Error(src->path() + ": missing tensor token_embd.weight");
    hp_.n_vocab = te->ne[1];
    tok_embd_ = wl.get("token_embd.weight", {E, hp_.n_vocab});
    output_norm_ = wl.get("output_norm.weight", {E});
    output_ = wl.get("output.weight", {E, hp_.n_vocab});
    const RopeScaling rope = load_rope_scaling(*src, wl, hp_, /*neox=*/true);
    if (rope.has_long) throw Error(src->path() + ": LongRoPE factors are not supported for gpt-oss");
    layers_.resize(hp_.n_layer);
    for (int64_t il = 0; il < hp_.n_layer; ++il) {
      const std::string p = "blk." + std::to_string(il) + ".";
      Layer& L = layers_[il];
      L.attn = load_attention_weights(wl, p, E, q_dim, kv_dim, D);
      if (!L.attn.sinks) throw Error(src->path() + ": missing tensor " + p + "attn_sinks.weight");
      L.moe = load_moe_weights(wl, p, E, n_ff_exp, n_expert, "post_attention_norm.weight");
      L.sliding = pattern == 0 || il % pattern < pattern - 1;
    }
    require_f32(src->path(), {&output_norm_});
    wl.finish();
    weight_bytes_ = wl.bytes();
    hp_.n_params = wl.n_params();

    full_.n_head = hp_.n_head;
    full_.n_head_kv = hp_.n_head_kv;
    full_.head_dim = D;
    full_.rope = rope.params;
    full_.scale = 1.0f / std::sqrt(static_cast<float>(D));
    full_.norm_eps = hp_.norm_eps;
    sliding_ = full_;
    sliding_.sliding_window = window_;
  }

  std::unique_ptr<Cache> new_cache(int32_t n_ctx, int n_seq, int64_t n_batch, KVTypes types) const override {
    std::vector<LayerSpec> specs(hp_.n_layer);
    for (int64_t il = 0; il < hp_.n_layer; ++il) {
      specs[il].k_dim = specs[il].v_dim = hp_.n_head_kv * hp_.head_dim;
      specs[il].window = layers_[il].sliding ? window_ : 0;
    }
    return std::make_unique<LayerCaches>(specs, n_ctx, n_seq, n_batch, device_, types);
  }

 protected:
  void forward_impl(Cache& cache_base, const BatchView& b, float* logits) const override {
    auto& cache = static_cast<LayerCaches&>(cache_base);
    const BatchIds ids = upload_batch(b, device_);
    Tensor x = ops::get_rows(tok_embd_, ids.token);  // [n, n_embd]
    for (int64_t il = 0; il < hp_.n_layer; ++il) {
      const Layer& L = layers_[il];
      x = ops::add(x, attention_block(L.attn, L.sliding ? sliding_ : full_, cache.kv(il), ids, x));
      x = ops::add(x, moe_ffn(L.moe, moe_, x));
    }
    cache.advance(b);
    decoder_logits(x, ids, output_norm_, hp_.norm_eps, output_, logits);
  }

 private:
  int32_t window_ = 0;
  MoeParams moe_;
  Tensor tok_embd_, output_norm_, output_;
  std::vector<Layer> layers_;
  AttentionParams full_, sliding_;
};

// ---- HF checkpoints (transformers' GptOssForCausalLM) ---------------------

void hf_config(const nlohmann::json& cfg, HfConfig& out) {
  const std::string a = "gpt-oss";
  decoder_config(a, cfg, out);
  const int64_t n_layer = config_int(cfg, "num_hidden_layers");
  out.md[a + ".expert_count"] = config_int(cfg, "num_local_experts", config_int(cfg, "num_experts", 0));
  out.md[a + ".expert_used_count"] = config_int(cfg, "num_experts_per_tok");
  out.md[a + ".expert_feed_forward_length"] = config_int(cfg, "intermediate_size");
  const int64_t window = config_int(cfg, "sliding_window", 128);
  if (window <= 0) throw Error("config.json: sliding_window must be positive for gpt_oss");
  out.md[a + ".attention.sliding_window"] = window;
  if (!config_bool(cfg, "attention_bias", true)) throw Error("config.json: gpt_oss without attention_bias is not supported");
  // layer_types as llama.cpp's pattern P (layer il slides when il % P < P - 1).
  const std::vector<bool> local = sliding_layers(cfg, n_layer, 2);
  int64_t pattern = -1;
  for (int64_t p = 0; p <= n_layer && pattern < 0; ++p) {
    bool fits = true;
    for (int64_t il = 0; il < n_layer && fits; ++il) fits = local[il] == (p == 0 || il % p < p - 1);
    if (fits) pattern = p;
  }
  if (pattern < 0) throw Error("config.json: layer_types is not a repeating pattern of sliding layers then one full");
  if (pattern != 2) out.md[a + ".attention.sliding_window_pattern"] = pattern;
  const double alpha = config_float(cfg, "swiglu_alpha", 1.702), limit = config_float(cfg, "swiglu_limit", 7.0);
  if (alpha != 1.702) out.md["kvad.moe.swiglu_alpha"] = alpha;
  if (limit != 7.0) out.md["kvad.moe.swiglu_limit"] = limit;
}

bool hf_tensor(const std::string& hf, TensorRename& r) {
  using T = TensorTransform;
  static const HfLayerName kLayer[] = {
      {"post_attention_layernorm.weight", "post_attention_norm.weight", T::ToF32},
      {"self_attn.o_proj.bias", "attn_output.bias", T::ToF32},
      {"self_attn.sinks", "attn_sinks.weight", T::ToF32},
      {"mlp.router.weight", "ffn_gate_inp.weight", T::None},
      {"mlp.router.bias", "ffn_gate_inp.bias", T::ToF32},
      {"mlp.experts.down_proj", "ffn_down_exps.weight", T::Transpose},
      {"mlp.experts.down_proj_bias", "ffn_down_exps.bias", T::ToF32},
  };
  if (hf == "lm_head.weight") return r.name = "output.weight", r.transform = T::None, true;
  return hf_decoder_tensor(hf, T::ToF32, kLayer, std::size(kLayer), r);
}

// gate_up_proj [n_expert, n_embd, 2·n_ff]: gate is columns 0, 2, 4, ..., up
// columns 1, 3, 5, ... (GptOssExperts._apply_gate), each transposed to GGUF's
// [n_expert, n_ff, n_embd]; its bias [n_expert, 2·n_ff] splits the same way.
//
// OpenAI's own checkpoints store the experts in MXFP4 instead
// (quantization_config mxfp4): {gate_up,down}_proj_blocks [n_expert, rows,
// n_in/32, 16] with their _scales [n_expert, rows, n_in/32], rows being
// output features (gate_up's interleaved), which become GGUF MXFP4 tensors
// as llama.cpp's converter repacks them (TensorTransform::Mxfp4).
bool hf_split(const std::string& hf, std::vector<TensorRename>& out) {
  int64_t il;
  std::string rest;
  if (!hf_layer_tensor(hf, il, rest)) return false;
  const std::string p = "blk." + std::to_string(il) + ".";
  if (rest == "mlp.experts.gate_up_proj_scales" || rest == "mlp.experts.down_proj_scales") return true;  // with _blocks
  if (rest == "mlp.experts.gate_up_proj_blocks" || rest == "mlp.experts.down_proj_blocks") {
    const bool gate_up = rest == "mlp.experts.gate_up_proj_blocks";
    for (int64_t lane = 0; lane < (gate_up ? 2 : 1); ++lane) {
      TensorRename r;
      r.name = p + (gate_up ? (lane == 0 ? "ffn_gate_exps.weight" : "ffn_up_exps.weight") : "ffn_down_exps.weight");
      r.transform = TensorTransform::Mxfp4;
      r.scale = hf.substr(0, hf.size() - 7) + "_scales";
      r.lanes = gate_up ? 2 : 1;
      r.lane = lane;
      out.push_back(std::move(r));
    }
    return true;
  }
  const bool w = rest == "mlp.experts.gate_up_proj", b = rest == "mlp.experts.gate_up_proj_bias";
  if (!w && !b) return false;
  const std::string suffix = w ? ".weight" : ".bias";
  for (int64_t lane = 0; lane < 2; ++lane) {
    TensorRename r;
    r.name = p + (lane == 0 ? "ffn_gate_exps" : "ffn_up_exps") + suffix;
    r.transform = w ? TensorTransform::Transpose : TensorTransform::ToF32;
    r.lanes = 2;
    r.lane = lane;
    out.push_back(std::move(r));
  }
  return true;
}

}  // namespace

extern const HfNames kGptOssHfNames;
const HfNames kGptOssHfNames = {{"gpt_oss"}, &hf_config, &hf_tensor, {}, &hf_split};

std::unique_ptr<Model> load_gpt_oss(std::shared_ptr<const TensorSource> src, const DeviceOptions& o) {
  return std::make_unique<GptOss>(std::move(src), o);
}

}  // namespace kvad
