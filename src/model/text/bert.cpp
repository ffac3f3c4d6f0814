// BERT (Devlin et al. 2019, "BERT: Pre-training of Deep Bidirectional
// Transformers"; transformers' modeling_bert.py BertModel; GGUF architecture
// "bert", as llama.cpp's convert_hf_to_gguf.py writes it), the encoder of
// sentence-transformers models such as all-MiniLM-L6-v2. Registry kind
// `embedding`: it returns hidden states (Model::hidden), never logits.
//
//   x = LayerNorm(E_tok[t] + E_pos[p] + E_type[0]) ⊙ w + b      (token_embd_norm)
//   per layer (post-norm):
//     q, k, v = Wq·x + bq, Wk·x + bk, Wv·x + bv                  (no RoPE: absolute positions above)
//     a_h = softmax(q_h·K_hᵀ / √head_dim) · V_h                  bidirectional: every token of a sequence
//     x = LayerNorm(x + Wo·a + bo)                               (attn_output_norm)
//     x = LayerNorm(x + Wdown·GELU(Wup·x + bup) + bdown)         (layer_output_norm; exact erf GELU)
//   the last x is the hidden state that pooling reads (engine/embed.h).
//
// All tokens of a sequence must be in one call, at positions 0..n-1
// (attention sees positions 0..last of the call; the cache keeps nothing
// between calls); Embedder makes its calls that way. Token
// types: every token is type 0 (single-sentence inputs, as
// sentence-transformers feeds them). Tensor names are llama.cpp's (token_embd,
// token_types, position_embd, token_embd_norm, blk.N.attn_q/k/v/output,
// attn_output_norm, ffn_up/down, layer_output_norm); an HF checkpoint is read
// through kBertHfNames below (BertModel's own names, with or without the
// "bert." prefix of BertFor* heads).
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "base/error.h"
#include "io/gguf.h"
#include "io/tensor_source.h"
#include "model/blocks.h"
#include "model/cache.h"
#include "model/hf.h"
#include "model/hparams.h"
#include "model/model.h"
#include "model/registry.h"
#include "model/weights.h"
#include "tensor/ops.h"

#include <nlohmann/json.hpp>

namespace kvad {
namespace {

struct Layer {
  Tensor wq, bq, wk, bk, wv, bv, wo, bo;     // attention
  Tensor attn_norm_w, attn_norm_b;           // attn_output_norm
  Tensor up, up_b, down, down_b;             // ffn
  Tensor out_norm_w, out_norm_b;             // layer_output_norm
};

class Bert final : public Model {
 public:
  Bert(std::shared_ptr<const TensorSource> src, const DeviceOptions& o) : Model(src) {
    const std::string a = hp_.arch + ".";
    // BERT's LayerNorm epsilon (GGUF bert.attention.layer_norm_epsilon).
    hp_.norm_eps = static_cast<float>(src->get_float(a + "attention.layer_norm_epsilon", 1e-12));
    // llama.cpp's converter writes attention.causal as a bool.
    const std::shared_ptr<const gguf::File> gf = gguf_file(*src);
    if (gf ? gf->get_bool(a + "attention.causal", false) : src->get_int(a + "attention.causal", 0) != 0)
      throw Error(src->path() + ": " + a + "attention.causal is set; kvad's bert is bidirectional only");
    if (hp_.n_head_kv != hp_.n_head) throw Error(src->path() + ": bert with head_count_kv != head_count");
    hp_.n_vocab = read_vocab(*src, hp_);
    const SourceTensor* pe = src->find("position_embd.weight");
    if (!pe || pe->n_dims < 2) throw Error(src->path() + ": missing tensor position_embd.weight");
    n_pos_ = pe->ne[1];
    hp_.n_ctx_train = std::min<int64_t>(hp_.n_ctx_train, n_pos_);
    const SourceTensor* tt = src->find("token_types.weight");
    const int64_t n_types = tt && tt->n_dims >= 2 ? tt->ne[1] : 1;
    WeightLoader wl = open_weights(o);
    if (pipelined()) throw Error(src->path() + ": an embedding model (bert) is not split over pipeline stages");
    const int64_t E = hp_.n_embd;
    const WeightScope root = wl.root();
    tok_embd_ = root.get("token_embd.weight", {E, hp_.n_vocab});
    pos_embd_ = root.get("position_embd.weight", {E, n_pos_});
    types_ = root.get("token_types.weight", {E, n_types});
    embd_norm_w_ = root.get("token_embd_norm.weight", {E});
    embd_norm_b_ = root.get("token_embd_norm.bias", {E});
    require_f32(src->path(), {&embd_norm_w_, &embd_norm_b_});
    layers_.resize(hp_.n_layer);
    for (int64_t il = 0; il < hp_.n_layer; ++il) load_layer(wl.layer(il), layers_[il]);
    finish_loading(wl);
    // Type 0's row, added to every token.
    const int32_t zero = 0;
    type0_ = ops::get_rows(types_, ops::from_host(&zero, DType::I32, {1, 1, 1, 1}, device_));
  }

  void load_layer(const WeightScope& blk, Layer& L) {
    const int64_t E = hp_.n_embd, F = hp_.n_ff;
    L.wq = blk.get("attn_q.weight", {E, E});
    L.bq = blk.get("attn_q.bias", {E});
    L.wk = blk.get("attn_k.weight", {E, E});
    L.bk = blk.get("attn_k.bias", {E});
    L.wv = blk.get("attn_v.weight", {E, E});
    L.bv = blk.get("attn_v.bias", {E});
    L.wo = blk.get("attn_output.weight", {E, E});
    L.bo = blk.get("attn_output.bias", {E});
    L.attn_norm_w = blk.get("attn_output_norm.weight", {E});
    L.attn_norm_b = blk.get("attn_output_norm.bias", {E});
    L.up = blk.get("ffn_up.weight", {E, F});
    L.up_b = blk.get("ffn_up.bias", {F});
    L.down = blk.get("ffn_down.weight", {F, E});
    L.down_b = blk.get("ffn_down.bias", {E});
    L.out_norm_w = blk.get("layer_output_norm.weight", {E});
    L.out_norm_b = blk.get("layer_output_norm.bias", {E});
    require_f32(blk.path(), {&L.bq, &L.bk, &L.bv, &L.bo, &L.attn_norm_w, &L.attn_norm_b, &L.up_b, &L.down_b,
                             &L.out_norm_w, &L.out_norm_b});
  }

  std::unique_ptr<Cache> make_cache(int32_t n_ctx, int n_seq, int64_t n_batch, KVTypes types) const override {
    const LayerSpec kv = KeyValueSpec{hp_.n_embd, hp_.n_embd, 0};
    return std::make_unique<LayerCaches>(std::vector<LayerSpec>(hp_.n_layer, kv), n_ctx, n_seq, n_batch, device_,
                                         types);
  }

 protected:
  void forward_impl(LayerCaches&, const BatchView&, Tensor&, float*) const override {
    throw Error("architecture bert is an embedding model (kind embedding): it has no next-token logits");
  }

  void hidden_impl(LayerCaches& cache, const BatchView& b, float* hidden) const override {
    for (int64_t i = 0; i < b.n; ++i)
      if (b.pos[i] < 0 || b.pos[i] >= n_pos_)
        throw Error("bert: position " + std::to_string(b.pos[i]) + " is outside the model's " +
                    std::to_string(n_pos_) + " position embeddings");
    const BatchIds ids = upload_batch(b, device_);
    const int64_t n = b.n, E = hp_.n_embd, H = hp_.n_head, D = hp_.head_dim;
    Tensor x = ops::add(ops::add(ops::get_rows(tok_embd_, ids.token), ops::get_rows(pos_embd_, ids.pos)), type0_);
    x = ops::layer_norm(x, embd_norm_w_, embd_norm_b_, hp_.norm_eps);  // [n, E]
    AttentionOpParams ap;
    ap.scale = 1.0f / std::sqrt(static_cast<float>(D));
    ap.causal = false;
    for (int64_t il = 0; il < hp_.n_layer; ++il) {
      const Layer& L = layers_[il];
      KVLayer& kv = cache.kv(il);
      std::vector<Tensor> qkv = ops::matmul_multi(x, {&L.wq, &L.wk, &L.wv});
      const Tensor q = ops::add(qkv[0], L.bq).view({D, H, n, 1});  // [n, H, D]
      ops::kv_store(kv.k, ops::add(qkv[1], L.bk), ids.seq, ids.pos, kv.slots);
      ops::kv_store(kv.v, ops::add(qkv[2], L.bv), ids.seq, ids.pos, kv.slots);
      ap.slots = kv.slots;
      const Tensor att = ops::attention(q, kv.k, kv.v, ids.seq, ids.pos, ap);          // [n, H, D]
      const Tensor o = ops::matmul(att.view({E, n, 1, 1}), L.wo, &L.bo);               // [n, E]
      x = ops::layer_norm(ops::add(x, o), L.attn_norm_w, L.attn_norm_b, hp_.norm_eps);
      const Tensor h = ops::gelu_erf(ops::matmul(x, L.up, &L.up_b));                   // [n, F]
      x = ops::layer_norm(ops::add(x, ops::matmul(h, L.down, &L.down_b)), L.out_norm_w, L.out_norm_b, hp_.norm_eps);
    }
    // Nothing is read back from earlier calls (the embedder rewinds every
    // sequence to 0 around a call): each call's keys and values overwrite
    // the rows its attention reads. A sequence must not be cut across
    // pieces, so a call holds at most the cache's n_batch tokens (the
    // embedder's do).
    if (b.n_out == 0) return;
    ops::to_host(b.n_out == b.n ? x : ops::get_rows(x, ids.out), hidden);
  }

 private:
  Tensor tok_embd_, pos_embd_, types_, type0_, embd_norm_w_, embd_norm_b_;
  std::vector<Layer> layers_;
  int64_t n_pos_ = 0;
};

// HF BertModel config.json → GGUF keys, as llama.cpp's converter writes them.
void hf_config(const nlohmann::json& cfg, HfConfig& out) {
  Metadata& md = out.md;
  const std::string a = "bert";
  md["general.architecture"] = a;
  if (cfg.contains("_name_or_path") && cfg["_name_or_path"].is_string())
    md["general.name"] = cfg["_name_or_path"].get<std::string>();
  const std::string act = cfg.contains("hidden_act") && cfg["hidden_act"].is_string()
                              ? cfg["hidden_act"].get<std::string>() : "gelu";
  if (act != "gelu")
    throw Error("config.json: hidden_act '" + act + "' is not supported for bert (kvad reads gelu, the erf GELU)");
  if (cfg.contains("position_embedding_type") && cfg["position_embedding_type"] != "absolute")
    throw Error("config.json: position_embedding_type must be absolute for bert");
  if (config_bool(cfg, "is_decoder", false)) throw Error("config.json: is_decoder bert is not supported");
  out.set(a + ".context_length", "max_position_embeddings", config_int(cfg, "max_position_embeddings", 512));
  out.set(a + ".embedding_length", "hidden_size", config_int(cfg, "hidden_size"));
  out.set(a + ".block_count", "num_hidden_layers", config_int(cfg, "num_hidden_layers"));
  out.set(a + ".feed_forward_length", "intermediate_size", config_int(cfg, "intermediate_size"));
  out.set(a + ".attention.head_count", "num_attention_heads", config_int(cfg, "num_attention_heads"));
  if (cfg.contains("vocab_size") && !cfg["vocab_size"].is_null())
    out.set(a + ".vocab_size", "vocab_size", config_int(cfg, "vocab_size"));
  md[a + ".attention.layer_norm_epsilon"] = config_float(cfg, "layer_norm_eps", 1e-12);
  md[a + ".attention.causal"] = int64_t{0};
}

bool hf_tensor(const std::string& hf_in, TensorRename& r) {
  using T = TensorTransform;
  // BertFor* heads keep the encoder under "bert.".
  const std::string hf = hf_in.rfind("bert.", 0) == 0 ? hf_in.substr(5) : hf_in;
  static const struct {
    const char *hf, *gguf;
    T transform;
  } kTop[] = {
      {"embeddings.word_embeddings.weight", "token_embd.weight", T::None},
      {"embeddings.position_embeddings.weight", "position_embd.weight", T::None},
      {"embeddings.token_type_embeddings.weight", "token_types.weight", T::None},
      {"embeddings.LayerNorm.weight", "token_embd_norm.weight", T::ToF32},
      {"embeddings.LayerNorm.bias", "token_embd_norm.bias", T::ToF32},
  };
  for (const auto& n : kTop)
    if (hf == n.hf) return r.name = n.gguf, r.transform = n.transform, true;
  static const std::string prefix = "encoder.layer.";
  if (hf.compare(0, prefix.size(), prefix) != 0) return false;
  size_t i = prefix.size(), j = i;
  while (j < hf.size() && hf[j] >= '0' && hf[j] <= '9') ++j;
  if (j == i || j - i > 6 || j >= hf.size() || hf[j] != '.') return false;
  const std::string il = hf.substr(i, j - i), rest = hf.substr(j + 1);
  static const struct {
    const char *hf, *gguf;
    T transform;
  } kLayer[] = {
      {"attention.self.query.weight", "attn_q.weight", T::None},
      {"attention.self.query.bias", "attn_q.bias", T::ToF32},
      {"attention.self.key.weight", "attn_k.weight", T::None},
      {"attention.self.key.bias", "attn_k.bias", T::ToF32},
      {"attention.self.value.weight", "attn_v.weight", T::None},
      {"attention.self.value.bias", "attn_v.bias", T::ToF32},
      {"attention.output.dense.weight", "attn_output.weight", T::None},
      {"attention.output.dense.bias", "attn_output.bias", T::ToF32},
      {"attention.output.LayerNorm.weight", "attn_output_norm.weight", T::ToF32},
      {"attention.output.LayerNorm.bias", "attn_output_norm.bias", T::ToF32},
      {"intermediate.dense.weight", "ffn_up.weight", T::None},
      {"intermediate.dense.bias", "ffn_up.bias", T::ToF32},
      {"output.dense.weight", "ffn_down.weight", T::None},
      {"output.dense.bias", "ffn_down.bias", T::ToF32},
      {"output.LayerNorm.weight", "layer_output_norm.weight", T::ToF32},
      {"output.LayerNorm.bias", "layer_output_norm.bias", T::ToF32},
  };
  for (const auto& n : kLayer)
    if (rest == n.hf) return r.name = "blk." + std::to_string(std::stoll(il)) + "." + n.gguf, r.transform = n.transform, true;
  return false;
}

}  // namespace

extern const HfNames kBertHfNames;
const HfNames kBertHfNames = {{"bert"},
                              &hf_config,
                              &hf_tensor,
                              {"embeddings.position_ids", "pooler.dense.weight", "pooler.dense.bias",
                               "bert.embeddings.position_ids", "bert.pooler.dense.weight", "bert.pooler.dense.bias"}};

std::unique_ptr<Model> load_bert(std::shared_ptr<const TensorSource> src, const DeviceOptions& o) {
  return std::make_unique<Bert>(std::move(src), o);
}

}  // namespace kvad
