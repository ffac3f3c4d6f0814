// Qwen3-Next (Qwen Team 2025; transformers' modeling_qwen3_next.py, HF
// model_type "qwen3_next"; GGUF architecture "qwen3next"): a hybrid decoder
// whose layers are of two kinds, three gated DeltaNet layers to one gated
// attention layer in the released models (config layer_types, or every
// full_attention_interval-th layer attention), each followed by a sparse MoE
// with a shared expert:
//
//   x = x + Mixer(n),  n = RMSNorm(x) ⊙ attn_norm
//   x = x + MoE(n) + σ(w_shexp · n) · SharedExpert(n),  n = RMSNorm(x) ⊙ post_attention_norm
//
// Every RMSNorm but the DeltaNet output norm is zero-centred in HF (weights
// stored as w, applied as 1 + w); GGUF files store 1 + w (llama.cpp's
// converter adds the 1, and the HF name table below does the same), so the
// forward pass applies the weights as they are.
//
// Gated DeltaNet (Yang, Kautz & Hatamizadeh 2024, "Gated Delta Networks"):
//   q, k, v, z = in_proj_qkvz · n   (HF's order: per key head [q | k | v | z],
//                                    v and z of the Hv/Hk value heads it serves)
//   b, a = in_proj_ba · n            (per key head [b | a])
//   q, k, v = SiLU(causal depthwise conv_K([q | k | v]))  (a rolling state of K-1 inputs)
//   q, k = L2norm(q), L2norm(k);  β = σ(b);  g = −e^{A_log} · softplus(a + dt_bias)
//   o = gated delta rule(q / √Dk, k, v, g, β)   (ops::gated_delta_rule; state Hv × Dk × Dv)
//   out = ssm_out · (RMSNorm(o) ⊙ ssm_norm ⊙ SiLU(z))   per value head
// Newer llama.cpp converters split in_proj_qkvz into attn_qkv ([q | k | v]
// of all heads, the convolution's input order) and attn_gate (z); kvad reads
// either, and keeps HF's fused ssm_in for HF checkpoints.
//
// Qwen3.5 (Qwen Team 2026; transformers' modular_qwen3_5.py and
// qwen3_5_moe; HF model_type qwen3_5_text / qwen3_5_moe_text, or qwen3_5 /
// qwen3_5_moe with the language model under text_config; GGUF architectures
// qwen35 and qwen35moe) is the same network with the DeltaNet projections
// stored apart: in_proj_qkv ([q | k | v] of all heads: attn_qkv), in_proj_z
// (attn_gate), in_proj_b and in_proj_a (ssm_beta, ssm_alpha: [Hv] each, no
// per-key-head interleave); a dense MLP (qwen35) or the MoE with its gated
// shared expert (qwen35moe). Its rotary is Qwen3-VL's interleaved MRoPE,
// which for text (the temporal, height and width position ids all equal)
// is the NeoX rope over the partial rotary dims used here. llama.cpp's
// converter reorders the value heads (and everything indexed by them: the v
// rows of attn_qkv, attn_gate, ssm_beta/alpha, ssm_a, ssm_dt, the v channels
// of ssm_conv1d, the columns of ssm_out) from HF's grouped order (value head h
// reads key head h / (Hv/Hk)) into a tiled one (h reads h % Hk); kvad's HF
// table applies the same reorder (TensorRename::head_groups), so both kinds
// of checkpoint, and the quantize-once file, hold llama.cpp's order, and the
// delta rule runs with DeltaRuleParams::tiled_heads.
//
// Gated attention: q_proj gives per head [q | gate] (2·head_dim rows);
// QK-norm per head, partial NeoX rotary (partial_rotary_factor 0.25 of
// head_dim), GQA, and the output multiplied by σ(gate) before o_proj.
//
// The cache composes per layer (model/cache.h): keys and values for the
// attention layers, convolution and delta-rule states for the DeltaNet
// layers, with snapshots every N positions (DeviceOptions::state_snapshot_every).
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

/// The default snapshot interval (positions), see README "Recurrent state".
constexpr int32_t kDefaultSnapshotEvery = 256;
/// Tokens per chunk of the delta rule's parallel form in a prefill
/// (transformers' and flash-linear-attention's chunk size).
constexpr int64_t kDeltaChunk = 64;

struct DeltaNetWeights {
  Tensor in;              // ssm_in [n_embd → 2·Hk·Dk + 2·Hv·Dv], HF's interleaved order; or
  Tensor qkv, gate;       // attn_qkv [n_embd → C], attn_gate [n_embd → Hv·Dv]
  Tensor ba;              // ssm_ba [n_embd → 2·Hv], per key head [b | a]; or
  Tensor beta, alpha;     // ssm_beta, ssm_alpha [n_embd → Hv] (qwen35)
  Tensor conv;            // ssm_conv1d [C, K] f32
  Tensor a, dt;           // ssm_a = −e^{A_log} [Hv], ssm_dt.bias [Hv]
  Tensor norm;            // ssm_norm [Dv]
  Tensor out;             // ssm_out [Hv·Dv → n_embd]
};

struct GatedAttentionWeights {
  Tensor wq, wk, wv, wo;  // attn_q [n_embd → n_head·2·head_dim] (q | gate per head), attn_k/v, attn_output
  Tensor q_norm, k_norm;  // [head_dim]
};

struct Layer {
  bool recurrent = false;
  Tensor attn_norm, post_norm;
  DeltaNetWeights ssm;
  GatedAttentionWeights attn;
  bool sparse = false;
  MoeWeights moe;          // ffn_gate_inp, ffn_{gate,up,down}_exps, the gated shared expert (moe.norm unused)
  MlpWeights mlp;          // a dense layer (mlp_only_layers)
};

class Qwen3Next final : public Model {
 public:
  Qwen3Next(std::shared_ptr<const TensorSource> src, const DeviceOptions& o) : Model(src) {
    const std::string a = hp_.arch + ".";
    const std::string& path = src->path();
    conv_k_ = src->get_int(a + "ssm.conv_kernel", 0);
    Dk_ = src->get_int(a + "ssm.state_size", 0);
    Hk_ = src->get_int(a + "ssm.group_count", 0);
    Hv_ = src->get_int(a + "ssm.time_step_rank", 0);
    const int64_t inner = src->get_int(a + "ssm.inner_size", 0);
    if (conv_k_ < 2 || Dk_ <= 0 || Hk_ <= 0 || Hv_ <= 0 || Hv_ % Hk_ != 0 || inner <= 0 || inner % Hv_ != 0)
      throw Error(path + ": " + a + "ssm.conv_kernel (>= 2), ssm.state_size, ssm.group_count, ssm.time_step_rank "
                  "(a multiple of group_count) and ssm.inner_size (a multiple of time_step_rank) are required");
    Dv_ = inner / Hv_;
    conv_dim_ = 2 * Hk_ * Dk_ + Hv_ * Dv_;
    moe_ = read_moe(*src, hp_);
    snapshot_every_ = o.state_snapshot_every < 0 ? kDefaultSnapshotEvery : o.state_snapshot_every;
    tiled_heads_ = hp_.arch == "qwen35" || hp_.arch == "qwen35moe";

    hp_.n_vocab = read_vocab(*src, hp_);
    // llama.cpp's converter writes the multi-token prediction layers (HF
    // mtp.*) as the last nextn_predict_layers blocks, inside block_count.
    const int64_t n_nextn = src->get_int(a + "nextn_predict_layers", 0);
    if (n_nextn < 0 || n_nextn >= hp_.n_layer)
      throw Error(path + ": " + a + "nextn_predict_layers " + std::to_string(n_nextn) + " is not in [0, " +
                  a + "block_count)");
    WeightLoader wl = open_weights(o, hp_.n_layer - n_nextn);
    name_dims(wl, hp_, moe_);
    const DecoderEnds ends = load_decoder_ends(wl.root(), hp_, Head::OwnOrTied, {holds_embedding(), holds_head()});
    tok_embd_ = ends.tok_embd, output_norm_ = ends.output_norm, output_ = ends.output;
    layers_.resize(hp_.n_layer);
    // Every block's kind (the cache's layout), the weights of this stage's
    // blocks and, on the stage with the head, of the prediction layers.
    const int64_t n_dec = hp_.n_layer - n_nextn;
    for (int64_t il = 0; il < hp_.n_layer; ++il) {
      if (holds_block(il) || (il >= n_dec && holds_head())) load_layer(wl.layer(il), layers_[il]);
      else layers_[il].recurrent = wl.layer(il).has("ssm_a");
    }
    if (holds_head()) {
      load_mtp(wl, n_nextn);
    } else {
      layers_.resize(n_dec);
      hp_.n_layer = n_dec;
    }
    rope_ = load_rope_scaling(*src, wl, hp_, /*neox=*/true);
    finish_loading(wl);
  }

  void load_layer(const WeightScope& blk, Layer& L) {
    const int64_t E = hp_.n_embd, D = hp_.head_dim, H = hp_.n_head, Hkv = hp_.n_head_kv;
    L.attn_norm = blk.get("attn_norm.weight", {E});
    L.post_norm = blk.get("post_attention_norm.weight", {E});
    require_f32(blk.path(), {&L.attn_norm, &L.post_norm});
    L.recurrent = blk.has("ssm_a");
    if (L.recurrent) {
      DeltaNetWeights& w = L.ssm;
      if (blk.has("attn_qkv.weight")) {
        w.qkv = blk.get("attn_qkv.weight", {E, conv_dim_});
        w.gate = blk.get("attn_gate.weight", {E, Hv_ * Dv_});
      } else {
        w.in = blk.get("ssm_in.weight", {E, 2 * Hk_ * Dk_ + 2 * Hv_ * Dv_});
      }
      if (blk.has("ssm_beta.weight")) {
        w.beta = blk.get("ssm_beta.weight", {E, Hv_});
        w.alpha = blk.get("ssm_alpha.weight", {E, Hv_});
      } else {
        w.ba = blk.get("ssm_ba.weight", {E, 2 * Hv_});
      }
      // GGUF stores [C, K]; HF's Conv1d weight is [C, 1, K].
      const SourceTensor* c = blk.find("ssm_conv1d.weight");
      if (c && c->n_dims == 3)
        w.conv = blk.get("ssm_conv1d.weight", {conv_k_, 1, conv_dim_}).view({conv_k_, conv_dim_, 1, 1});
      else
        w.conv = blk.get("ssm_conv1d.weight", {conv_k_, conv_dim_});
      w.a = blk.get("ssm_a", {Hv_});
      w.dt = blk.get("ssm_dt.bias", {Hv_});
      w.norm = blk.get("ssm_norm.weight", {Dv_});
      w.out = blk.get("ssm_out.weight", {Hv_ * Dv_, E});
      require_f32(blk.path(), {&w.conv, &w.a, &w.dt, &w.norm});
    } else {
      GatedAttentionWeights& w = L.attn;
      w.wq = blk.get("attn_q.weight", {E, H * 2 * D});
      w.wk = blk.get("attn_k.weight", {E, Hkv * D});
      w.wv = blk.get("attn_v.weight", {E, Hkv * D});
      w.wo = blk.get("attn_output.weight", {H * D, E});
      w.q_norm = blk.get("attn_q_norm.weight", {D});
      w.k_norm = blk.get("attn_k_norm.weight", {D});
      require_f32(blk.path(), {&w.q_norm, &w.k_norm});
    }
    L.sparse = blk.has("ffn_gate_inp.weight");
    if (!L.sparse) {
      if (hp_.n_ff <= 0)
        throw Error(blk.path() + ": " + blk.name("ffn_gate_inp.weight") + " is missing, and a dense layer needs " +
                    hp_.arch + ".feed_forward_length");
      L.mlp.gate = blk.get("ffn_gate.weight", {E, hp_.n_ff});  // normed by post_attention_norm
      L.mlp.up = blk.get("ffn_up.weight", {E, hp_.n_ff});
      L.mlp.down = blk.get("ffn_down.weight", {hp_.n_ff, E});
      return;
    }
    require_experts(*source_, hp_, moe_, blk.name("ffn_gate_inp.weight"));
    L.moe = load_moe_weights(blk, E, moe_.n_ff_exp, moe_.n_expert, /*norm=*/"");
    if (blk.has("ffn_gate_shexp.weight")) {
      if (moe_.n_ff_shexp <= 0)
        throw Error(blk.path() + ": " + blk.name("ffn_gate_shexp.weight") + " needs " + hp_.arch +
                    ".expert_shared_feed_forward_length");
      load_moe_shared(blk, E, moe_.n_ff_shexp, moe_.n_expert, L.moe);
      if (!L.moe.gate_inp_shexp)
        throw Error(blk.path() + ": " + blk.name("ffn_gate_inp_shexp.weight") + " is missing (the shared expert's gate)");
    }
  }

  /// The multi-token prediction layers the checkpoint carries.
  int64_t n_mtp() const override { return static_cast<int64_t>(mtp_.size()); }

  std::unique_ptr<Cache> make_cache(int32_t n_ctx, int n_seq, int64_t n_batch, KVTypes types) const override {
    std::vector<LayerSpec> specs(layers_.size());
    const int64_t kv_dim = hp_.n_head_kv * hp_.head_dim;
    for (size_t il = 0; il < layers_.size(); ++il) {
      if (layers_[il].recurrent)
        specs[il] = RecurrentSpec{(conv_k_ - 1) * conv_dim_, Hv_ * Dk_ * Dv_, snapshot_every_};
      else
        specs[il] = KeyValueSpec{kv_dim, kv_dim, 0};
    }
    return std::make_unique<LayerCaches>(specs, n_ctx, n_seq, n_batch, device_, types, held_layers());
  }

 protected:
  void forward_impl(LayerCaches& cache, const BatchView& b, Tensor& x, float* logits) const override {
    // The cache cut the batch where a sequence reaches a snapshot position
    // (LayerCaches::split), so that it copies the states there.
    const RopeParams& rope = rope_.at(cache.n_ctx());
    const BatchIds ids = upload_batch(b, device_);
    if (!x) x = ops::get_rows(tok_embd_, ids.token);  // [n, n_embd]
    for (auto il = static_cast<size_t>(stage_first()); il < static_cast<size_t>(stage_last()); ++il) {
      const Layer& L = layers_[il];
      const Tensor h = ops::rms_norm(x, L.attn_norm, hp_.norm_eps);
      x = ops::add(x, L.recurrent ? delta_net(L.ssm, cache.recurrent(static_cast<int64_t>(il)), ids, h)
                                  : gated_attention(L.attn, cache.kv(static_cast<int64_t>(il)), rope, ids, h));
      x = ops::add(x, ffn(L, ops::rms_norm(x, L.post_norm, hp_.norm_eps)));
    }
    if (holds_head()) decoder_logits(x, ids, output_norm_, hp_.norm_eps, output_, logits);
  }

  // The MTP block is a gated-attention layer: keys and values.
  std::unique_ptr<Cache> make_mtp_cache(int32_t n_ctx, int n_seq, int64_t n_batch, KVTypes types) const override {
    const int64_t kv_dim = hp_.n_head_kv * hp_.head_dim;
    return std::make_unique<LayerCaches>(std::vector<LayerSpec>(1, KeyValueSpec{kv_dim, kv_dim, 0}), n_ctx, n_seq,
                                         n_batch, device_, types);
  }

  // vLLM's Qwen3NextMultiTokenPredictor: fc [RMSNorm(emb(t_{i+1})) ;
  // RMSNorm(h_i)] (pre_fc_norm_embedding, pre_fc_norm_hidden), the
  // gated-attention block with its MoE, the block's norm (mtp.norm), then
  // the main model's head. The chained state is after that norm.
  void mtp_impl(LayerCaches& cache, const BatchView& b, const Tensor& h, float* logits,
                float* hidden_out) const override {
    const Mtp& m = mtp_[0];
    const float eps = hp_.norm_eps;
    const BatchIds ids = upload_batch(b, device_);
    const Tensor e = ops::get_rows(tok_embd_, ids.token);  // [n, n_embd]
    Tensor x = ops::matmul(ops::concat(ops::rms_norm(e, m.enorm, eps), ops::rms_norm(h, m.hnorm, eps)), m.eh_proj);
    const Layer& L = m.layer;
    x = ops::add(x, gated_attention(L.attn, cache.kv(0), rope_.at(cache.n_ctx()), ids, ops::rms_norm(x, L.attn_norm, eps)));
    x = ops::add(x, ffn(L, ops::rms_norm(x, L.post_norm, eps)));
    if (ids.n_out == 0) return;
    const Tensor rows = ops::rms_norm(ids.n_out == ids.n ? x : ops::get_rows(x, ids.out),
                                      m.head_norm ? m.head_norm : output_norm_, eps);  // [n_out, n_embd]
    if (hidden_out) ops::to_host(rows, hidden_out);
    ops::to_host(ops::matmul(rows, output_), logits);
  }

 private:
  // The columns of each token's row are picked by strided views
  // (ops::view) and copied together by ops::cont where an op needs them
  // contiguous: the same values as the layouts below, no index tensors.
  Tensor delta_net(const DeltaNetWeights& w, RecurrentLayer& st, const BatchIds& b, const Tensor& h) const {
    const int64_t n = b.n, r = Hv_ / Hk_, C = conv_dim_;
    constexpr size_t F = sizeof(float);  // strides and offsets are in bytes
    Tensor qkv, z;
    if (w.in) {
      // Per key head: [q (Dk) | k (Dk) | v (r·Dv) | z (r·Dv)], Wh floats.
      const int64_t Wh = 2 * Dk_ + 2 * r * Dv_;
      const Tensor y = ops::matmul(h, w.in);  // [n, Hk·Wh]
      const size_t row = y.nb[1], head = Wh * F;
      // The convolution's order, per token: every head's q, every head's k, every head's v.
      const Tensor qk = ops::cont(ops::view(y, {Dk_, Hk_, 2, n}, {F, head, Dk_ * F, row}));  // [n, 2, Hk, Dk]
      const Tensor v = ops::cont(ops::view(y, {r * Dv_, Hk_, n, 1}, {F, head, row, row * n}, 2 * Dk_ * F));
      qkv = ops::concat(qk.view({2 * Hk_ * Dk_, n, 1, 1}), v.view({Hv_ * Dv_, n, 1, 1}));  // [n, C]
      z = ops::view(y, {r * Dv_, Hk_, n, 1}, {F, head, row, row * n}, (2 * Dk_ + r * Dv_) * F);  // [n, Hk, r·Dv]
    } else {
      std::vector<Tensor> y = ops::matmul_multi(h, {&w.qkv, &w.gate});
      qkv = y[0];
      z = y[1];
    }
    Tensor b_raw, a_raw, dt = w.dt, A = w.a;  // [n, Hv], or views [n, Hk, r]
    if (w.beta) {  // qwen35: apart, in value-head order
      std::vector<Tensor> y = ops::matmul_multi(h, {&w.beta, &w.alpha});
      b_raw = y[0];
      a_raw = y[1];
    } else {  // qwen3next: per key head [b (r) | a (r)]
      const Tensor ba = ops::matmul(h, w.ba);  // [n, 2·Hv]
      b_raw = ops::view(ba, {r, Hk_, n, 1}, {F, 2 * r * F, ba.nb[1], ba.nb[1] * n});
      a_raw = ops::view(ba, {r, Hk_, n, 1}, {F, 2 * r * F, ba.nb[1], ba.nb[1] * n}, r * F);
      dt = w.dt.view({r, Hk_, 1, 1});
      A = w.a.view({r, Hk_, 1, 1});
    }
    const Tensor beta = ops::sigmoid(b_raw).view({Hv_, n, 1, 1});                      // [n, Hv]
    const Tensor g = ops::mul(ops::softplus(ops::add(a_raw, dt)), A).view({Hv_, n, 1, 1});
    // The short convolution over [q | k | v], then q, k, v apart.
    const Tensor xc = ops::silu(ops::ssm_conv(qkv, w.conv, st.conv, b.seq, b.pos));  // [n, C]
    // q of every token, then k of every token (one L2 norm for both), then v.
    const Tensor qk_in = ops::cont(ops::view(xc, {Dk_, Hk_, n, 2}, {F, Dk_ * F, C * F, Hk_ * Dk_ * F}));
    // L2 norm (eps 1e-6 on the sum of squares, as transformers' l2norm) of
    // every q and k head: RMSNorm with eps/Dk, divided by √Dk.
    const Tensor qk = ops::scale(ops::rms_norm(qk_in.view({Dk_, 2 * n * Hk_, 1, 1}), Tensor{}, 1e-6f / Dk_),
                                 1.0f / std::sqrt(static_cast<float>(Dk_)));  // [2, n, Hk, Dk]
    const Tensor q = qk.rows(0, n * Hk_).view({Dk_, Hk_, n, 1});
    const Tensor k = qk.rows(n * Hk_, 2 * n * Hk_).view({Dk_, Hk_, n, 1});
    const Tensor v = ops::cont(ops::view(xc, {Dv_, Hv_, n, 1}, {F, Dv_ * F, C * F, C * F * n}, 2 * Hk_ * Dk_ * F));
    DeltaRuleParams dp;
    dp.scale = 1.0f / std::sqrt(static_cast<float>(Dk_));
    dp.chunk = n > 1 ? kDeltaChunk : 0;
    dp.tiled_heads = tiled_heads_;
    const Tensor o = ops::gated_delta_rule(q, k, v, g, beta, st.ssm, b.seq, b.pos, dp);  // [n, Hv, Dv]
    // Gated RMSNorm per value head, then the output projection.
    const Tensor y = ops::mul(ops::rms_norm(o.view({Dv_, Hv_ * n, 1, 1}), w.norm, hp_.norm_eps),
                              ops::silu(z).view({Dv_, Hv_ * n, 1, 1}));
    return ops::matmul(y.view({Hv_ * Dv_, n, 1, 1}), w.out);
  }

  Tensor gated_attention(const GatedAttentionWeights& w, KVLayer& cache, const RopeParams& rope, const BatchIds& b,
                         const Tensor& h) const {
    const int64_t n = b.n, D = hp_.head_dim, H = hp_.n_head, Hkv = hp_.n_head_kv;
    constexpr size_t F = sizeof(float);
    std::vector<Tensor> y = ops::matmul_multi(h, {&w.wq, &w.wk, &w.wv});
    // Per head [q (D) | gate (D)].
    const size_t row = y[0].nb[1];
    const Tensor q_raw = ops::view(y[0], {D, H, n, 1}, {F, 2 * D * F, row, row * n});
    const Tensor gate = ops::view(y[0], {D, H, n, 1}, {F, 2 * D * F, row, row * n}, D * F);
    Tensor q = ops::rms_norm(ops::cont(q_raw), w.q_norm, hp_.norm_eps);
    Tensor k = ops::rms_norm(y[1].view({D, Hkv, n, 1}), w.k_norm, hp_.norm_eps);
    q = ops::rope(q, b.pos, rope);
    k = ops::rope(k, b.pos, rope);
    ops::kv_store(cache.k, k, b.seq, b.pos, cache.slots);
    ops::kv_store(cache.v, y[2], b.seq, b.pos, cache.slots);
    const Tensor a = ops::attention(q, cache.k, cache.v, b.seq, b.pos,
                                    {1.0f / std::sqrt(static_cast<float>(D)), 0, cache.slots});
    return ops::matmul(ops::mul(a.view({H * D, n, 1, 1}), ops::sigmoid(gate).view({H * D, n, 1, 1})), w.wo);
  }

  // h: the post-attention norm's output [n, n_embd].
  Tensor ffn(const Layer& L, const Tensor& h) const {
    if (!L.sparse) {
      std::vector<Tensor> gu = ops::matmul_multi(h, {&L.mlp.gate, &L.mlp.up});
      return ops::matmul(ops::swiglu(gu[0], gu[1]), L.mlp.down);
    }
    return moe_experts(L.moe, moe_, h);  // routed experts + the gated shared expert
  }

  // The last n_nextn blocks, loaded with the decoder's, as the multi-token
  // prediction (MTP) head (llama.cpp's layout: a gated-attention block with
  // its MoE, plus blk.N.nextn.eh_proj [2·n_embd → n_embd], enorm, hnorm and
  // an optional shared_head_norm), run by forward_mtp for speculative
  // decoding: moved out of layers_ so that forward does not run them.
  struct Mtp {
    Layer layer;
    Tensor eh_proj, enorm, hnorm, head_norm;
  };
  void load_mtp(WeightLoader& wl, int64_t n_nextn) {
    const int64_t E = hp_.n_embd, first = hp_.n_layer - n_nextn;
    for (int64_t il = first; il < hp_.n_layer; ++il) {
      const WeightScope nextn = wl.layer(il).sub("nextn");
      Mtp& m = mtp_.emplace_back();
      m.layer = std::move(layers_[il]);
      if (m.layer.recurrent) throw Error(wl.layer(il).path() + ": a multi-token prediction block must be gated attention");
      m.eh_proj = nextn.get("eh_proj.weight", {2 * E, E});
      m.enorm = nextn.get("enorm.weight", {E});
      m.hnorm = nextn.get("hnorm.weight", {E});
      m.head_norm = nextn.get_optional("shared_head_norm.weight", {E});
    }
    layers_.resize(first);
    hp_.n_layer = first;
  }

  Tensor tok_embd_, output_norm_, output_;
  std::vector<Layer> layers_;
  std::vector<Mtp> mtp_;
  int64_t conv_k_ = 0, Dk_ = 0, Dv_ = 0, Hk_ = 0, Hv_ = 0, conv_dim_ = 0;
  int32_t snapshot_every_ = kDefaultSnapshotEvery;
  bool tiled_heads_ = false;  // qwen35: value head h reads key head h % Hk (llama.cpp's order)
  MoeHParams moe_;
  RopeScaling rope_;
};

// ---- HF checkpoints (transformers' Qwen3NextForCausalLM, Qwen3_5ForCausalLM,
// Qwen3_5MoeForCausalLM and the Qwen3.5 ForConditionalGeneration ones) -------

// The keys of Qwen3-Next and Qwen3.5 (`a`: qwen3next, qwen35, qwen35moe).
void delta_net_config(const std::string& a, const nlohmann::json& cfg, HfConfig& out) {
  decoder_config(a, cfg, out);
  Metadata& md = out.md;
  const int64_t n_layer = config_int(cfg, "num_hidden_layers");
  if (cfg.contains("layer_types") && cfg["layer_types"].is_array()) {
    const nlohmann::json& lt = cfg["layer_types"];
    if (static_cast<int64_t>(lt.size()) != n_layer) throw Error("config.json: layer_types does not list every layer");
    for (const auto& t : lt)
      if (!t.is_string() || (t != "linear_attention" && t != "full_attention"))
        throw Error("config.json: layer_types may hold linear_attention and full_attention only");
    // As llama.cpp's converter writes it (its loader reads it before full_attention_interval).
    std::vector<bool> recurrent;
    for (const auto& t : lt) recurrent.push_back(t == "linear_attention");
    md[a + ".attention.recurrent_layers"] = recurrent;
  }
  md[a + ".full_attention_interval"] = config_int(cfg, "full_attention_interval", 4);
  // Sizes, each in [1, kMaxHeadDim] (a bad config's product would overflow).
  auto size = [&](const char* key) {
    const int64_t v = config_int(cfg, key);
    if (v <= 0 || v > kMaxHeadDim)
      throw Error(std::string("config.json: ") + key + " " + std::to_string(v) + " is not in [1, " +
                  std::to_string(kMaxHeadDim) + "]");
    return v;
  };
  md[a + ".ssm.conv_kernel"] = size("linear_conv_kernel_dim");
  md[a + ".ssm.state_size"] = size("linear_key_head_dim");
  md[a + ".ssm.group_count"] = size("linear_num_key_heads");
  md[a + ".ssm.time_step_rank"] = size("linear_num_value_heads");
  md[a + ".ssm.inner_size"] = size("linear_value_head_dim") * size("linear_num_value_heads");
  if (config_bool(cfg, "attention_bias", false)) throw Error("config.json: attention_bias is not supported for " + a);
  if (a != "qwen3next") {
    // Qwen3-VL's MRoPE sections (rotary pairs per temporal, height, width
    // position): unused for text, where the three positions are equal, but
    // written as llama.cpp's converter does (padded to 4; [11, 11, 10]
    // when absent), which llama.cpp's qwen35 loader requires.
    std::vector<int64_t> sections{11, 11, 10, 0};
    if (cfg.contains("rope_parameters") && cfg["rope_parameters"].is_object() &&
        cfg["rope_parameters"].contains("mrope_section")) {
      const nlohmann::json& ms = cfg["rope_parameters"]["mrope_section"];
      if (!ms.is_array() || ms.size() > 4)
        throw Error("config.json: rope_parameters.mrope_section is not up to 4 integers");
      sections.assign(4, 0);
      for (size_t i = 0; i < ms.size(); ++i) {
        if (!ms[i].is_number_integer() || ms[i].get<int64_t>() < 0)
          throw Error("config.json: rope_parameters.mrope_section is not up to 4 integers");
        sections[i] = ms[i].get<int64_t>();
      }
    }
    md[a + ".rope.dimension_sections"] = sections;
  }
  if (a == "qwen35") return;  // a dense MLP in every layer
  hf_moe(a, cfg, out);
  out.set(a + ".expert_shared_feed_forward_length", "shared_expert_intermediate_size",
          config_int(cfg, "shared_expert_intermediate_size", 0));
  // Qwen3.5's router always renormalises its top-k (transformers' Qwen3_5MoeTopKRouter).
  if (a == "qwen3next" && !config_bool(cfg, "norm_topk_prob", true)) md["kvad.moe.norm_topk_prob"] = int64_t{0};
  if (config_int(cfg, "decoder_sparse_step", 1) != 1 && config_int(cfg, "num_experts") > 0)
    throw Error("config.json: decoder_sparse_step other than 1 is not supported for qwen3_next (use mlp_only_layers)");
}

void hf_config(const nlohmann::json& cfg, HfConfig& out) { delta_net_config("qwen3next", cfg, out); }

// Qwen3.5: a text model's config (qwen3_5_text), or the multimodal one
// (qwen3_5, as the hub ships Qwen3.5) whose language model is text_config.
const nlohmann::json& qwen35_text_config(const nlohmann::json& cfg) {
  if (!cfg.contains("text_config")) return cfg;
  if (!cfg["text_config"].is_object()) throw Error("config.json: text_config is not an object");
  return cfg["text_config"];
}
void hf_config_qwen35(const nlohmann::json& cfg, HfConfig& out) {
  delta_net_config("qwen35", qwen35_text_config(cfg), out);
}
void hf_config_qwen35moe(const nlohmann::json& cfg, HfConfig& out) {
  delta_net_config("qwen35moe", qwen35_text_config(cfg), out);
}

// The MTP block's layer index until hf_finish knows block_count.
const std::string kMtpBlock = "blk.mtp.";

bool hf_tensor(const std::string& hf, TensorRename& r);

// The multi-token prediction block (HF mtp.*, vLLM's Qwen3NextMTP) as
// llama.cpp's converter writes it: blk.{num_hidden_layers}.* for its
// decoder layer (mtp.layers.0), nextn.eh_proj (mtp.fc), nextn.enorm /
// hnorm (pre_fc_norm_embedding / pre_fc_norm_hidden) and
// nextn.shared_head_norm (mtp.norm), the norms zero-centred as the others.
bool hf_mtp_tensor(const std::string& hf, TensorRename& r) {
  using T = TensorTransform;
  static const HfLayerName kMtp[] = {
      {"mtp.fc.weight", "nextn.eh_proj.weight", T::None},
      {"mtp.pre_fc_norm_embedding.weight", "nextn.enorm.weight", T::ToF32PlusOne},
      {"mtp.pre_fc_norm_hidden.weight", "nextn.hnorm.weight", T::ToF32PlusOne},
      {"mtp.norm.weight", "nextn.shared_head_norm.weight", T::ToF32PlusOne},
  };
  for (const HfLayerName& n : kMtp)
    if (hf == n.hf) return r.name = kMtpBlock + n.gguf, r.transform = n.transform, true;
  static const std::string layer = "mtp.layers.0.";
  if (hf.compare(0, layer.size(), layer) != 0) return false;  // one MTP layer, as the released models have
  if (!hf_tensor("model.layers.0." + hf.substr(layer.size()), r) || r.name.rfind("blk.0.", 0) != 0) return false;
  r.name = kMtpBlock + r.name.substr(6);
  return true;
}

// An MTP block among the rules: numbered after the decoder's layers, which
// block_count then counts (qwen3next.nextn_predict_layers 1), attention in
// attention.recurrent_layers.
void hf_finish(Metadata& md, std::vector<TensorRename>& rules) {
  const std::string a = std::get<std::string>(md.at("general.architecture")) + ".";
  bool mtp = false;
  for (const TensorRename& t : rules) mtp = mtp || t.name.rfind(kMtpBlock, 0) == 0;
  if (!mtp) return;
  auto it = md.find(a + "block_count");
  if (it == md.end() || !std::holds_alternative<int64_t>(it->second)) throw Error("missing " + a + "block_count");
  const int64_t n = std::get<int64_t>(it->second);
  for (TensorRename& t : rules)
    if (t.name.rfind(kMtpBlock, 0) == 0) t.name = "blk." + std::to_string(n) + "." + t.name.substr(kMtpBlock.size());
  md[a + "block_count"] = n + 1;
  md[a + "nextn_predict_layers"] = int64_t{1};
  if (auto rl = md.find(a + "attention.recurrent_layers"); rl != md.end()) {
    if (auto* v = std::get_if<std::vector<bool>>(&rl->second)) v->push_back(false);
  }
}

bool hf_tensor(const std::string& hf, TensorRename& r) {
  using T = TensorTransform;
  if (hf.compare(0, 4, "mtp.") == 0) return hf_mtp_tensor(hf, r);
  static const HfLayerName kLayer[] = {
      {"post_attention_layernorm.weight", "post_attention_norm.weight", T::ToF32PlusOne},
      {"linear_attn.in_proj_qkvz.weight", "ssm_in.weight", T::None},
      {"linear_attn.in_proj_ba.weight", "ssm_ba.weight", T::None},
      {"linear_attn.conv1d.weight", "ssm_conv1d.weight", T::ToF32},
      {"linear_attn.A_log", "ssm_a", T::ToF32NegExp},
      {"linear_attn.dt_bias", "ssm_dt.bias", T::ToF32},
      {"linear_attn.norm.weight", "ssm_norm.weight", T::ToF32},  // applied as w (not 1 + w)
      {"linear_attn.out_proj.weight", "ssm_out.weight", T::None},
  };
  if (hf == "lm_head.weight") return r.name = "output.weight", r.transform = T::None, true;
  int64_t il;
  std::string rest;
  if (hf_layer_tensor(hf, il, rest) && hf_moe_tensor(rest, "blk." + std::to_string(il) + ".", r)) return true;
  return hf_decoder_tensor(hf, T::ToF32PlusOne, kLayer, std::size(kLayer), r);
}

// Qwen3.5's split DeltaNet projections (the rest as Qwen3-Next). The
// multimodal checkpoint's language model (model.language_model.*) is read
// as the text model; its vision tower (model.visual.*) is not read.
bool hf_tensor_qwen35(const std::string& hf, TensorRename& r) {
  using T = TensorTransform;
  static const std::string lm = "model.language_model.";
  if (hf.compare(0, lm.size(), lm) == 0) return hf_tensor_qwen35("model." + hf.substr(lm.size()), r);
  if (hf.compare(0, 13, "model.visual.") == 0) return r.name.clear(), true;
  static const HfLayerName kSplit[] = {
      {"linear_attn.in_proj_qkv.weight", "attn_qkv.weight", T::None},
      {"linear_attn.in_proj_z.weight", "attn_gate.weight", T::None},
      {"linear_attn.in_proj_b.weight", "ssm_beta.weight", T::None},
      {"linear_attn.in_proj_a.weight", "ssm_alpha.weight", T::None},
  };
  int64_t il;
  std::string rest;
  if (hf_layer_tensor(hf, il, rest))
    for (const HfLayerName& n : kSplit)
      if (rest == n.hf) return r.name = "blk." + std::to_string(il) + "." + n.gguf, r.transform = n.transform, true;
  return hf_tensor(hf, r);
}

// The value heads into llama.cpp's tiled order (see the top of this file):
// the Hk·r heads of every tensor indexed by value head, grouped (head g·r +
// j) → tiled (j·Hk + g), as convert_hf_to_gguf.py's _reorder_v_heads.
void hf_finish_qwen35(Metadata& md, std::vector<TensorRename>& rules) {
  hf_finish(md, rules);
  const std::string a = std::get<std::string>(md.at("general.architecture")) + ".";
  auto num = [&](const std::string& k) {
    auto it = md.find(a + k);
    if (it == md.end() || !std::holds_alternative<int64_t>(it->second)) throw Error("missing " + a + k);
    return std::get<int64_t>(it->second);
  };
  const int64_t Hk = num("ssm.group_count"), Hv = num("ssm.time_step_rank"), Dk = num("ssm.state_size");
  if (Hk <= 0 || Hv <= 0 || Hv % Hk != 0)
    throw Error("linear_num_value_heads must be a positive multiple of linear_num_key_heads");
  const int64_t Dv = num("ssm.inner_size") / Hv;
  for (TensorRename& t : rules) {
    const std::string& n = t.name;
    auto ends = [&n](const char* s) { return n.ends_with(s); };
    int axis = -1;
    int64_t size = 1, offset = 0;
    if (ends(".attn_qkv.weight")) axis = 1, size = Dv, offset = 2 * Hk * Dk;  // the v rows
    else if (ends(".attn_gate.weight")) axis = 1, size = Dv;
    else if (ends(".ssm_beta.weight") || ends(".ssm_alpha.weight")) axis = 1;
    else if (ends(".ssm_a") || ends(".ssm_dt.bias")) axis = 0;
    else if (ends(".ssm_conv1d.weight")) {  // HF's [C, 1, K]: channels are ne[2]; presented as GGUF's [C, K]
      axis = 2, size = Dv, offset = 2 * Hk * Dk;
      t.view_ne = {num("ssm.conv_kernel"), 2 * Hk * Dk + Hv * Dv, 1, 1};
      t.view_dims = 2;
    }
    else if (ends(".ssm_out.weight")) axis = 0, size = Dv;  // the columns
    if (axis < 0 || Hv == Hk) continue;  // one value head per key head: both orders agree
    t.head_axis = axis;
    t.head_groups = Hk;
    t.head_repeat = Hv / Hk;
    t.head_size = size;
    t.head_offset = offset;
  }
}

}  // namespace

extern const HfNames kQwen3NextHfNames, kQwen35HfNames, kQwen35MoeHfNames;
const HfNames kQwen3NextHfNames = {{"qwen3_next"}, &hf_config, &hf_tensor, {}, nullptr, &hf_finish};
const HfNames kQwen35HfNames = {
    {"qwen3_5_text", "qwen3_5"}, &hf_config_qwen35, &hf_tensor_qwen35, {}, nullptr, &hf_finish_qwen35};
const HfNames kQwen35MoeHfNames = {
    {"qwen3_5_moe_text", "qwen3_5_moe"}, &hf_config_qwen35moe, &hf_tensor_qwen35, {}, nullptr, &hf_finish_qwen35};

std::unique_ptr<Model> load_qwen3next(std::shared_ptr<const TensorSource> src, const DeviceOptions& o) {
  return std::make_unique<Qwen3Next>(std::move(src), o);
}

}  // namespace kvad
