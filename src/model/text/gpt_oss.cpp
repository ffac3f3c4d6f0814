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
  GptOss(std::shared_ptr<const TensorSource> src, const DeviceOptions& o) : Model(src) {
    const SlidingWindow swa = read_sliding_window(*src, hp_, {.required = true, .pattern = 2});
    window_ = swa.window;
    moe_ = read_moe(*src, hp_);
    require_experts(*src, hp_, moe_, "gpt-oss");
    moe_.norm_topk = true;  // softmax over the selected logits
    moe_.act = Activation::SwiGLU_OAI;
    moe_.swiglu_alpha = static_cast<float>(src->get_float("kvad.moe.swiglu_alpha", 1.702));
    moe_.swiglu_limit = static_cast<float>(src->get_float("kvad.moe.swiglu_limit", 7.0));

    hp_.n_vocab = read_vocab(*src, hp_);
    WeightLoader wl = open_weights(o);
    name_dims(wl, hp_, moe_);
    const DecoderEnds ends = load_decoder_ends(wl.root(), hp_, Head::Own, {holds_embedding(), holds_head()});
    tok_embd_ = ends.tok_embd, output_norm_ = ends.output_norm, output_ = ends.output;
    const RopeScaling rope = load_rope_scaling(*src, wl, hp_, /*neox=*/true, /*long_factors=*/false);
    const int64_t E = hp_.n_embd, D = hp_.head_dim;
    layers_.resize(hp_.n_layer);
    for (int64_t il = 0; il < hp_.n_layer; ++il) layers_[il].sliding = swa.layers[il];
    for (int64_t il = stage_first(); il < stage_last(); ++il) {
      const WeightScope blk = wl.layer(il);
      Layer& L = layers_[il];
      L.attn = load_attention_weights(blk, E, hp_.n_head * D, hp_.n_head_kv * D, D);
      if (!L.attn.sinks) throw Error(src->path() + ": missing tensor " + blk.name("attn_sinks.weight"));
      L.moe = load_moe_weights(blk, E, moe_.n_ff_exp, moe_.n_expert, "post_attention_norm.weight");
    }
    finish_loading(wl);

    full_ = read_attention(*src, hp_, rope.params);
    sliding_ = full_;
    sliding_.sliding_window = window_;
  }

  std::unique_ptr<Cache> make_cache(int32_t n_ctx, int n_seq, int64_t n_batch, KVTypes types) const override {
    std::vector<LayerSpec> specs(hp_.n_layer);
    const int64_t kv_dim = hp_.n_head_kv * hp_.head_dim;
    for (int64_t il = 0; il < hp_.n_layer; ++il) specs[il] = KeyValueSpec{kv_dim, kv_dim, layers_[il].sliding ? window_ : 0};
    return std::make_unique<LayerCaches>(specs, n_ctx, n_seq, n_batch, device_, types, held_layers());
  }

 protected:
  void forward_impl(LayerCaches& cache, const BatchView& b, Tensor& x, float* logits) const override {
    const BatchIds ids = upload_batch(b, device_);
    if (!x) x = ops::get_rows(tok_embd_, ids.token);  // [n, n_embd]
    for (int64_t il = stage_first(); il < stage_last(); ++il) {
      const Layer& L = layers_[il];
      x = ops::add(x, attention_block(L.attn, L.sliding ? sliding_ : full_, cache.kv(il), ids, x));
      x = ops::add(x, moe_ffn(L.moe, moe_, x));
    }
    if (holds_head()) decoder_logits(x, ids, output_norm_, hp_.norm_eps, output_, logits);
  }

 private:
  int32_t window_ = 0;
  MoeHParams moe_;  // expert_* keys; routed as GptOssTopKRouter, experts SwiGLU_OAI
  Tensor tok_embd_, output_norm_, output_;
  std::vector<Layer> layers_;
  AttentionParams full_, sliding_;
};

// ---- HF checkpoints (transformers' GptOssForCausalLM) ---------------------

void hf_config(const nlohmann::json& cfg, HfConfig& out) {
  const std::string a = "gpt-oss";
  decoder_config(a, cfg, out);
  const int64_t n_layer = config_int(cfg, "num_hidden_layers");
  hf_moe(a, cfg, out, /*ff_field=*/"intermediate_size");
  hf_sliding_window(a, cfg, out, /*def=*/128, /*required=*/true);
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
