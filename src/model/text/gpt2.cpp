// GPT-2 (Radford et al. 2019, "Language Models are Unsupervised Multitask
// Learners"; transformers' modeling_gpt2.py; GGUF architecture "gpt2").
// Learned absolute position embeddings, no rotary, and pre-LayerNorm decoder
// blocks with biases everywhere:
//   x = wte[token] + wpe[pos]
//   x = x + (Wo · Attn(q, k, v) + bo),   q | k | v = Wqkv · n + bqkv,  n = LayerNorm(x) ⊙ attn_norm + attn_norm.bias
//   x = x + Wdown · GELU_tanh(Wup · n + bup) + bdown,                  n = LayerNorm(x) ⊙ ffn_norm + ffn_norm.bias
// then LayerNorm ⊙ output_norm + output_norm.bias and the head tied to
// token_embd (llama.cpp's converter also writes the copy as output.weight,
// which is used when present). Attention scale 1/sqrt(head_dim); GELU is
// HF's "gelu_new" (the tanh approximation).
//
// Names as llama.cpp's gpt2: token_embd, position_embd, blk.N.attn_norm(.bias),
// attn_qkv(.bias), attn_output(.bias), ffn_norm(.bias), ffn_up(.bias),
// ffn_down(.bias), output_norm(.bias). HF checkpoints store the four
// matrices as Conv1D weights [n_in, n_out]; the name table transposes them
// (TensorTransform::Transpose), as llama.cpp's converter does.
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
#include "model/weights.h"
#include "tensor/ops.h"

namespace kvad {
namespace {

struct Layer {
  AttentionWeights attn;  // attn_norm(.bias), attn_qkv(.bias) as q/k/v views, attn_output(.bias)
  MlpWeights ffn;         // ffn_norm(.bias), ffn_up(.bias), ffn_down(.bias)
};

class Gpt2 final : public Model {
 public:
  Gpt2(std::shared_ptr<const TensorSource> src, const DeviceOptions& o) : Model(src) {
    hp_.norm_eps = static_cast<float>(src->get_float("gpt2.attention.layer_norm_epsilon", 1e-5));
    hp_.n_rot = 0;
    if (hp_.n_head_kv != hp_.n_head) throw Error(src->path() + ": gpt2 with head_count_kv != head_count");
    hp_.n_vocab = read_vocab(*src, hp_);
    const SourceTensor* pe = src->find("position_embd.weight");
    if (!pe || pe->n_dims < 2) throw Error(src->path() + ": missing tensor position_embd.weight");
    n_pos_ = pe->ne[1];
    WeightLoader wl = open_weights(o);
    const int64_t E = hp_.n_embd, F = hp_.n_ff;
    const WeightScope root = wl.root();
    const DecoderEnds ends = load_decoder_ends(root, hp_, Head::OwnOrTied, {holds_embedding(), holds_head()});
    tok_embd_ = ends.tok_embd, output_norm_ = ends.output_norm, output_ = ends.output;
    if (holds_embedding()) pos_embd_ = root.get("position_embd.weight", {E, n_pos_});
    if (holds_head()) {
      output_norm_b_ = root.get("output_norm.bias", {E});
      require_f32(src->path(), {&output_norm_b_});
    }
    layers_.resize(hp_.n_layer);
    for (int64_t il = stage_first(); il < stage_last(); ++il) {
      const WeightScope blk = wl.layer(il);
      Layer& L = layers_[il];
      L.attn = load_fused_attention_weights(blk, E, E, E);
      if (!L.attn.norm_b) throw Error(src->path() + ": missing tensor " + blk.name("attn_norm.bias"));
      L.ffn.norm = blk.get("ffn_norm.weight", {E});
      L.ffn.norm_b = blk.get("ffn_norm.bias", {E});
      L.ffn.up = blk.get("ffn_up.weight", {E, F});
      L.ffn.up_b = blk.get_optional("ffn_up.bias", {F});
      L.ffn.down = blk.get("ffn_down.weight", {F, E});
      L.ffn.down_b = blk.get_optional("ffn_down.bias", {E});
      require_f32(src->path(), {&L.ffn.norm, &L.ffn.norm_b, &L.ffn.up_b, &L.ffn.down_b});
    }
    finish_loading(wl);
    attn_ = read_attention(*src, hp_);  // rope.n_rot 0: learned positions instead
  }

  std::unique_ptr<Cache> make_cache(int32_t n_ctx, int n_seq, int64_t n_batch, KVTypes types) const override {
    if (n_ctx > n_pos_)
      throw Error("gpt2 has learned positions for " + std::to_string(n_pos_) + " tokens; a context of " +
                  std::to_string(n_ctx) + " does not fit (use -c " + std::to_string(n_pos_) + " or less)");
    const LayerSpec kv = KeyValueSpec{hp_.n_embd, hp_.n_embd, 0};
    return std::make_unique<LayerCaches>(std::vector<LayerSpec>(hp_.n_layer, kv), n_ctx, n_seq, n_batch, device_,
                                         types, held_layers());
  }

 protected:
  void forward_impl(LayerCaches& cache, const BatchView& b, Tensor& x, float* logits) const override {
    const BatchIds ids = upload_batch(b, device_);
    if (!x) x = ops::add(ops::get_rows(tok_embd_, ids.token), ops::get_rows(pos_embd_, ids.pos));  // [n, n_embd]
    for (int64_t il = stage_first(); il < stage_last(); ++il) {
      const Layer& L = layers_[il];
      x = ops::add(x, attention_block(L.attn, attn_, cache.kv(il), ids, x));
      x = ops::add(x, mlp(L.ffn, Activation::GELU_tanh, hp_.norm_eps, x));
    }
    if (holds_head()) decoder_logits(x, ids, output_norm_, hp_.norm_eps, output_, logits, output_norm_b_);
  }

 private:
  int64_t n_pos_ = 0;
  Tensor tok_embd_, pos_embd_, output_norm_, output_norm_b_, output_;
  std::vector<Layer> layers_;
  AttentionParams attn_;
};

// HF names (transformers' GPT2LMHeadModel, model_type gpt2) → GGUF names.
void hf_config(const nlohmann::json& cfg, HfConfig& out) {
  Metadata& md = out.md;
  md["general.architecture"] = std::string("gpt2");
  if (cfg.contains("_name_or_path") && cfg["_name_or_path"].is_string())
    md["general.name"] = cfg["_name_or_path"].get<std::string>();
  const int64_t E = config_int(cfg, "n_embd");
  out.set("gpt2.context_length", "n_positions", config_int(cfg, "n_positions"));
  out.set("gpt2.embedding_length", "n_embd", E);
  out.set("gpt2.block_count", "n_layer", config_int(cfg, "n_layer"));
  out.set("gpt2.feed_forward_length", "n_inner", config_int(cfg, "n_inner", 4 * E));
  out.set("gpt2.attention.head_count", "n_head", config_int(cfg, "n_head"));
  if (cfg.contains("vocab_size") && !cfg["vocab_size"].is_null())
    out.set("gpt2.vocab_size", "vocab_size", config_int(cfg, "vocab_size"));
  md["gpt2.attention.layer_norm_epsilon"] = config_float(cfg, "layer_norm_epsilon", 1e-5);
  const std::string act = cfg.value("activation_function", std::string("gelu_new"));
  if (act != "gelu_new" && act != "gelu_pytorch_tanh")
    throw Error("config.json: activation_function '" + act + "' is not supported (kvad runs gelu_new)");
  if (config_bool(cfg, "scale_attn_by_inverse_layer_idx", false) || !config_bool(cfg, "scale_attn_weights", true))
    throw Error("config.json: GPT-2 attention scaling other than 1/sqrt(head_dim) is not supported");
}

bool hf_tensor(const std::string& name, TensorRename& r) {
  using T = TensorTransform;
  // openai-community/gpt2 names its tensors without the "transformer." prefix.
  if (name == "lm_head.weight") return r.name = "output.weight", r.transform = T::None, true;  // an untied head
  std::string hf = name.compare(0, 12, "transformer.") == 0 ? name.substr(12) : name;
  if (hf == "wte.weight") return r.name = "token_embd.weight", r.transform = T::None, true;
  if (hf == "wpe.weight") return r.name = "position_embd.weight", r.transform = T::None, true;
  if (hf == "ln_f.weight") return r.name = "output_norm.weight", r.transform = T::ToF32, true;
  if (hf == "ln_f.bias") return r.name = "output_norm.bias", r.transform = T::ToF32, true;
  if (hf.compare(0, 2, "h.") != 0) return false;
  size_t i = 2, j = 2;
  while (j < hf.size() && hf[j] >= '0' && hf[j] <= '9') ++j;
  if (j == i || j - i > 6 || j >= hf.size() || hf[j] != '.') return false;
  const std::string p = "blk." + hf.substr(i, j - i) + ".", rest = hf.substr(j + 1);
  static const HfLayerName kLayer[] = {
      {"ln_1.weight", "attn_norm.weight", T::ToF32},        {"ln_1.bias", "attn_norm.bias", T::ToF32},
      {"attn.c_attn.weight", "attn_qkv.weight", T::Transpose}, {"attn.c_attn.bias", "attn_qkv.bias", T::ToF32},
      {"attn.c_proj.weight", "attn_output.weight", T::Transpose}, {"attn.c_proj.bias", "attn_output.bias", T::ToF32},
      {"ln_2.weight", "ffn_norm.weight", T::ToF32},         {"ln_2.bias", "ffn_norm.bias", T::ToF32},
      {"mlp.c_fc.weight", "ffn_up.weight", T::Transpose},   {"mlp.c_fc.bias", "ffn_up.bias", T::ToF32},
      {"mlp.c_proj.weight", "ffn_down.weight", T::Transpose}, {"mlp.c_proj.bias", "ffn_down.bias", T::ToF32},
  };
  for (const HfLayerName& n : kLayer)
    if (rest == n.hf) return r.name = p + n.gguf, r.transform = n.transform, true;
  // Older checkpoints store the causal mask as buffers; kvad builds its own.
  if (rest == "attn.bias" || rest == "attn.masked_bias") return r.name.clear(), true;
  return false;
}

}  // namespace

extern const HfNames kGpt2HfNames;
const HfNames kGpt2HfNames = {{"gpt2"}, &hf_config, &hf_tensor};

std::unique_ptr<Model> load_gpt2(std::shared_ptr<const TensorSource> src, const DeviceOptions& o) {
  return std::make_unique<Gpt2>(std::move(src), o);
}

}  // namespace kvad
