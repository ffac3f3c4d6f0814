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
#include <numeric>
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
  Qwen3Next(std::shared_ptr<const TensorSource> src, const DeviceOptions& o) {
    source_ = src;
    hp_ = read_hparams(*src);
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
    const int64_t n_expert = src->get_int(a + "expert_count", 0), F_exp = src->get_int(a + "expert_feed_forward_length", 0);
    const int64_t F_sh = src->get_int(a + "expert_shared_feed_forward_length", 0);
    moe_.n_expert_used = src->get_int(a + "expert_used_count", 0);
    moe_.norm_topk = src->get_int("kvad.moe.norm_topk_prob", 1) != 0;
    moe_.norm_eps = hp_.norm_eps;
    snapshot_every_ = o.state_snapshot_every < 0 ? kDefaultSnapshotEvery : o.state_snapshot_every;
    tiled_heads_ = hp_.arch == "qwen35" || hp_.arch == "qwen35moe";

    WeightLoader wl(src, o);
    device_ = wl.device();
    const int64_t E = hp_.n_embd, D = hp_.head_dim, H = hp_.n_head, Hkv = hp_.n_head_kv;
    const SourceTensor* te = src->find("token_embd.weight");
    if (!te || te->n_dims < 2) throw Error(path + ": missing tensor token_embd.weight");
    hp_.n_vocab = te->ne[1];
    tok_embd_ = wl.get("token_embd.weight", {E, hp_.n_vocab});
    output_norm_ = wl.get("output_norm.weight", {E});
    output_ = wl.get_optional("output.weight", {E, hp_.n_vocab});
    if (!output_) output_ = tok_embd_;
    // llama.cpp's converter writes the multi-token prediction layers (HF
    // mtp.*) as the last nextn_predict_layers blocks, inside block_count.
    const int64_t n_nextn = src->get_int(a + "nextn_predict_layers", 0);
    if (n_nextn < 0 || n_nextn >= hp_.n_layer)
      throw Error(path + ": " + a + "nextn_predict_layers " + std::to_string(n_nextn) + " is not in [0, " +
                  a + "block_count)");
    layers_.resize(hp_.n_layer);
    for (int64_t il = 0; il < hp_.n_layer; ++il) {
      const std::string p = "blk." + std::to_string(il) + ".";
      Layer& L = layers_[il];
      L.attn_norm = wl.get(p + "attn_norm.weight", {E});
      L.post_norm = wl.get(p + "post_attention_norm.weight", {E});
      L.recurrent = wl.has(p + "ssm_a");
      if (L.recurrent) {
        DeltaNetWeights& w = L.ssm;
        if (wl.has(p + "attn_qkv.weight")) {
          w.qkv = wl.get(p + "attn_qkv.weight", {E, conv_dim_});
          w.gate = wl.get(p + "attn_gate.weight", {E, Hv_ * Dv_});
        } else {
          w.in = wl.get(p + "ssm_in.weight", {E, 2 * Hk_ * Dk_ + 2 * Hv_ * Dv_});
        }
        if (wl.has(p + "ssm_beta.weight")) {
          w.beta = wl.get(p + "ssm_beta.weight", {E, Hv_});
          w.alpha = wl.get(p + "ssm_alpha.weight", {E, Hv_});
        } else {
          w.ba = wl.get(p + "ssm_ba.weight", {E, 2 * Hv_});
        }
        // GGUF stores [C, K]; HF's Conv1d weight is [C, 1, K].
        const SourceTensor* c = src->find(p + "ssm_conv1d.weight");
        if (c && c->n_dims == 3)
          w.conv = wl.get(p + "ssm_conv1d.weight", {conv_k_, 1, conv_dim_}).view({conv_k_, conv_dim_, 1, 1});
        else
          w.conv = wl.get(p + "ssm_conv1d.weight", {conv_k_, conv_dim_});
        w.a = wl.get(p + "ssm_a", {Hv_});
        w.dt = wl.get(p + "ssm_dt.bias", {Hv_});
        w.norm = wl.get(p + "ssm_norm.weight", {Dv_});
        w.out = wl.get(p + "ssm_out.weight", {Hv_ * Dv_, E});
        require_f32(path, {&w.conv, &w.a, &w.dt, &w.norm});
      } else {
        GatedAttentionWeights& w = L.attn;
        w.wq = wl.get(p + "attn_q.weight", {E, H * 2 * D});
        w.wk = wl.get(p + "attn_k.weight", {E, Hkv * D});
        w.wv = wl.get(p + "attn_v.weight", {E, Hkv * D});
        w.wo = wl.get(p + "attn_output.weight", {H * D, E});
        w.q_norm = wl.get(p + "attn_q_norm.weight", {D});
        w.k_norm = wl.get(p + "attn_k_norm.weight", {D});
        require_f32(path, {&w.q_norm, &w.k_norm});
      }
      L.sparse = wl.has(p + "ffn_gate_inp.weight");
      if (L.sparse) {
        if (n_expert <= 0 || F_exp <= 0 || moe_.n_expert_used <= 0 || moe_.n_expert_used > n_expert)
          throw Error(path + ": " + p + "ffn_gate_inp.weight needs " + a + "expert_count, " + a +
                      "expert_used_count (1.." + a + "expert_count) and " + a + "expert_feed_forward_length");
        L.moe.gate_inp = wl.get(p + "ffn_gate_inp.weight", {E, n_expert});
        L.moe.gate_exps = wl.get(p + "ffn_gate_exps.weight", {E, F_exp, n_expert});
        L.moe.up_exps = wl.get(p + "ffn_up_exps.weight", {E, F_exp, n_expert});
        L.moe.down_exps = wl.get(p + "ffn_down_exps.weight", {F_exp, E, n_expert});
        if (wl.has(p + "ffn_gate_shexp.weight")) {
          if (F_sh <= 0) throw Error(path + ": " + p + "ffn_gate_shexp.weight needs " + a + "expert_shared_feed_forward_length");
          load_moe_shared(wl, p, E, F_sh, n_expert, L.moe);
          if (!L.moe.gate_inp_shexp) throw Error(path + ": " + p + "ffn_gate_inp_shexp.weight is missing (the shared expert's gate)");
        }
      } else {
        if (hp_.n_ff <= 0)
          throw Error(path + ": " + p + "ffn_gate_inp.weight is missing, and a dense layer needs " + a +
                      "feed_forward_length");
        L.mlp.gate = wl.get(p + "ffn_gate.weight", {E, hp_.n_ff});
        L.mlp.up = wl.get(p + "ffn_up.weight", {E, hp_.n_ff});
        L.mlp.down = wl.get(p + "ffn_down.weight", {hp_.n_ff, E});
      }
      require_f32(path, {&L.attn_norm, &L.post_norm});
    }
    load_mtp(wl, n_nextn);
    require_f32(path, {&output_norm_});
    rope_ = load_rope_scaling(*src, wl, hp_, /*neox=*/true);
    make_layouts();
    wl.finish();
    weight_bytes_ = wl.bytes();
    hp_.n_params = wl.n_params();
  }

  /// The multi-token prediction layers the file carries (none for HF
  /// checkpoints, whose mtp.* kvad does not read).
  size_t n_mtp_layers() const { return mtp_.size(); }

  std::unique_ptr<Cache> new_cache(int32_t n_ctx, int n_seq, int64_t n_batch, KVTypes types) const override {
    std::vector<LayerSpec> specs(layers_.size());
    for (size_t il = 0; il < layers_.size(); ++il) {
      LayerSpec& s = specs[il];
      if (layers_[il].recurrent) {
        s.kind = LayerKind::Recurrent;
        s.conv_elems = (conv_k_ - 1) * conv_dim_;
        s.ssm_elems = Hv_ * Dk_ * Dv_;
        s.snapshot_every = snapshot_every_;
      } else {
        s.k_dim = s.v_dim = hp_.n_head_kv * hp_.head_dim;
      }
    }
    return std::make_unique<LayerCaches>(specs, n_ctx, n_seq, n_batch, device_, types);
  }

 protected:
  void forward_impl(Cache& cache_base, const BatchView& b, float* logits) const override {
    auto& cache = static_cast<LayerCaches&>(cache_base);
    const RopeParams& rope = rope_.at(cache.n_ctx());
    // Pieces end where a sequence reaches a snapshot position, so that the
    // cache copies the states there.
    for (const BatchPiece& piece : cache.pieces(b)) {
      const BatchIds ids = upload_batch(piece.view, device_);
      Tensor x = ops::get_rows(tok_embd_, ids.token);  // [n, n_embd]
      for (size_t il = 0; il < layers_.size(); ++il) {
        const Layer& L = layers_[il];
        const Tensor h = ops::rms_norm(x, L.attn_norm, hp_.norm_eps);
        x = ops::add(x, L.recurrent ? delta_net(L.ssm, cache, static_cast<int64_t>(il), ids, h)
                                    : gated_attention(L.attn, cache, static_cast<int64_t>(il), rope, ids, h));
        x = ops::add(x, ffn(L, ops::rms_norm(x, L.post_norm, hp_.norm_eps)));
      }
      cache.advance(piece.view);
      decoder_logits(x, ids, output_norm_, hp_.norm_eps, output_, logits + piece.out_offset * hp_.n_vocab);
    }
  }

 private:
  // Index tensors for ops::get_rows that pick columns of every token's row:
  // the row (n_units values of u floats each) is seen as n_units rows of u,
  // and part p lists, per token, the units it takes. The gathered rows hold
  // part 0 for every token, then part 1 for every token, ... Uploaded once
  // per (layout, n) into the session's cache (LayerCaches::scratch, which
  // bounds how many it keeps) and kept on the device.
  struct Layout {
    int64_t n_units = 0;
    std::vector<std::vector<int32_t>> parts;
  };
  Tensor gather_ids(LayerCaches& cache, int which, const Layout& lay, int64_t n) const {
    Tensor& t = cache.scratch(which, n);
    if (t) return t;
    std::vector<int32_t> ids;
    for (const auto& part : lay.parts)
      for (int64_t tok = 0; tok < n; ++tok)
        for (int32_t u : part) ids.push_back(static_cast<int32_t>(tok * lay.n_units + u));
    t = ops::from_host(ids.data(), DType::I32, {static_cast<int64_t>(ids.size()), 1, 1, 1}, device_);
    return t;
  }
  // x [n, n_units · u] → its parts' values, gathered as described above.
  Tensor gather(LayerCaches& cache, int which, const Layout& lay, int64_t u, const Tensor& x) const {
    const int64_t n = x.n_rows();
    return ops::get_rows(x.view({u, n * lay.n_units, 1, 1}), gather_ids(cache, which, lay, n));
  }
  // The layouts of the four gathers (they depend on the head sizes only):
  // 0: ssm_in's rows per key head [q (Dk) | k (Dk) | v (r·Dv) | z (r·Dv)] in
  // units of gcd(Dk, r·Dv), gathered as all q, all k, all v (the
  // convolution's order), then z; 1: ssm_ba's per key head [b (r) | a (r)];
  // 2: the convolution's output [q | k | v] in units of gcd(Dk, Dv), q of
  // every token, then k (one L2 norm for both), then v; 3: attn_q's per head
  // [q | gate].
  void make_layouts() {
    const int64_t r = Hv_ / Hk_;
    {
      const int64_t u = std::gcd(Dk_, r * Dv_), kq = Dk_ / u, kv = r * Dv_ / u, blk = 2 * kq + 2 * kv;
      lay_in_.n_units = Hk_ * blk;
      lay_in_.parts.resize(2);
      for (int64_t off : {int64_t{0}, kq, 2 * kq})
        for (int64_t hk = 0; hk < Hk_; ++hk)
          for (int64_t i = 0; i < (off == 2 * kq ? kv : kq); ++i)
            lay_in_.parts[0].push_back(static_cast<int32_t>(hk * blk + off + i));
      for (int64_t hk = 0; hk < Hk_; ++hk)
        for (int64_t i = 0; i < kv; ++i) lay_in_.parts[1].push_back(static_cast<int32_t>(hk * blk + 2 * kq + kv + i));
    }
    lay_ba_.n_units = 2 * Hk_;
    lay_ba_.parts.resize(2);
    for (int64_t hk = 0; hk < Hk_; ++hk) {
      lay_ba_.parts[0].push_back(static_cast<int32_t>(2 * hk));
      lay_ba_.parts[1].push_back(static_cast<int32_t>(2 * hk + 1));
    }
    const int64_t u = std::gcd(Dk_, Dv_), qk_units = Hk_ * Dk_ / u, v_units = Hv_ * Dv_ / u;
    lay_qkv_.n_units = 2 * qk_units + v_units;
    lay_qkv_.parts.resize(3);
    for (int64_t i = 0; i < qk_units; ++i) {
      lay_qkv_.parts[0].push_back(static_cast<int32_t>(i));
      lay_qkv_.parts[1].push_back(static_cast<int32_t>(qk_units + i));
    }
    for (int64_t i = 0; i < v_units; ++i) lay_qkv_.parts[2].push_back(static_cast<int32_t>(2 * qk_units + i));
    lay_q_.n_units = 2 * hp_.n_head;
    lay_q_.parts.resize(2);
    for (int64_t i = 0; i < hp_.n_head; ++i) {
      lay_q_.parts[0].push_back(static_cast<int32_t>(2 * i));
      lay_q_.parts[1].push_back(static_cast<int32_t>(2 * i + 1));
    }
  }
  // Rows [r0, r0 + rows) of a gathered [_, u] tensor as shape ne.
  static Tensor part(const Tensor& g, int64_t r0, int64_t rows, std::array<int64_t, 4> ne) {
    return g.rows(r0, r0 + rows).view(ne);
  }

  Tensor delta_net(const DeltaNetWeights& w, LayerCaches& caches, int64_t il, const BatchIds& b, const Tensor& h) const {
    RecurrentLayer& st = caches.recurrent(il);
    const int64_t n = b.n, r = Hv_ / Hk_, C = conv_dim_, Z = Hv_ * Dv_;
    Tensor qkv, z;
    if (w.in) {
      // Per key head: [q (Dk) | k (Dk) | v (r·Dv) | z (r·Dv)], in units of u.
      const int64_t u = std::gcd(Dk_, r * Dv_);
      const Tensor g = gather(caches, 0, lay_in_, u, ops::matmul(h, w.in));
      qkv = part(g, 0, n * C / u, {C, n, 1, 1});
      z = part(g, n * C / u, n * Z / u, {Dv_, Hv_ * n, 1, 1});
    } else {
      std::vector<Tensor> y = ops::matmul_multi(h, {&w.qkv, &w.gate});
      qkv = y[0];
      z = y[1].view({Dv_, Hv_ * n, 1, 1});
    }
    Tensor b_raw, a_raw;  // [n, Hv]
    if (w.beta) {  // qwen35: apart, in value-head order
      std::vector<Tensor> y = ops::matmul_multi(h, {&w.beta, &w.alpha});
      b_raw = y[0];
      a_raw = y[1];
    } else {  // qwen3next: per key head [b (r) | a (r)], units of r
      const Tensor ba = gather(caches, 1, lay_ba_, r, ops::matmul(h, w.ba));
      b_raw = part(ba, 0, n * Hk_, {Hv_, n, 1, 1});
      a_raw = part(ba, n * Hk_, n * Hk_, {Hv_, n, 1, 1});
    }
    const Tensor beta = ops::sigmoid(b_raw);                                          // [n, Hv]
    const Tensor g = ops::mul(ops::softplus(ops::add(a_raw, w.dt)), w.a);
    // The short convolution over [q | k | v], then q, k, v apart.
    const Tensor xc = ops::silu(ops::ssm_conv(qkv, w.conv, st.conv, b.seq, b.pos));                // [n, C]
    const int64_t u = std::gcd(Dk_, Dv_), qk_units = Hk_ * Dk_ / u, v_units = Hv_ * Dv_ / u;
    const Tensor parts = gather(caches, 2, lay_qkv_, u, xc);
    // L2 norm (eps 1e-6 on the sum of squares, as transformers' l2norm) of
    // every q and k head: RMSNorm with eps/Dk, divided by √Dk.
    const Tensor qk = ops::scale(
        ops::rms_norm(part(parts, 0, 2 * n * qk_units, {Dk_, 2 * n * Hk_, 1, 1}), Tensor{}, 1e-6f / Dk_),
        1.0f / std::sqrt(static_cast<float>(Dk_)));  // [2, n, Hk, Dk]
    const Tensor q = qk.rows(0, n * Hk_).view({Dk_, Hk_, n, 1});
    const Tensor k = qk.rows(n * Hk_, 2 * n * Hk_).view({Dk_, Hk_, n, 1});
    const Tensor v = part(parts, 2 * n * qk_units, n * v_units, {Dv_, Hv_, n, 1});
    DeltaRuleParams dp;
    dp.scale = 1.0f / std::sqrt(static_cast<float>(Dk_));
    dp.chunk = n > 1 ? kDeltaChunk : 0;
    dp.tiled_heads = tiled_heads_;
    const Tensor o = ops::gated_delta_rule(q, k, v, g, beta, st.ssm, b.seq, b.pos, dp);  // [n, Hv, Dv]
    // Gated RMSNorm per value head, then the output projection.
    const Tensor y = ops::mul(ops::rms_norm(o.view({Dv_, Hv_ * n, 1, 1}), w.norm, hp_.norm_eps), ops::silu(z));
    return ops::matmul(y.view({Hv_ * Dv_, n, 1, 1}), w.out);
  }

  Tensor gated_attention(const GatedAttentionWeights& w, LayerCaches& caches, int64_t il, const RopeParams& rope,
                         const BatchIds& b, const Tensor& h) const {
    KVLayer& cache = caches.kv(il);
    const int64_t n = b.n, D = hp_.head_dim, H = hp_.n_head, Hkv = hp_.n_head_kv;
    std::vector<Tensor> y = ops::matmul_multi(h, {&w.wq, &w.wk, &w.wv});
    const Tensor qg = gather(caches, 3, lay_q_, D, y[0]);
    Tensor q = ops::rms_norm(part(qg, 0, n * H, {D, H, n, 1}), w.q_norm, hp_.norm_eps);
    const Tensor gate = part(qg, n * H, n * H, {H * D, n, 1, 1});
    Tensor k = ops::rms_norm(y[1].view({D, Hkv, n, 1}), w.k_norm, hp_.norm_eps);
    q = ops::rope(q, b.pos, rope);
    k = ops::rope(k, b.pos, rope);
    ops::kv_store(cache.k, k, b.seq, b.pos, cache.slots);
    ops::kv_store(cache.v, y[2], b.seq, b.pos, cache.slots);
    const Tensor a = ops::attention(q, cache.k, cache.v, b.seq, b.pos,
                                    {1.0f / std::sqrt(static_cast<float>(D)), 0, cache.slots});
    return ops::matmul(ops::mul(a.view({H * D, n, 1, 1}), ops::sigmoid(gate)), w.wo);
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
  // an optional shared_head_norm), used only for speculative decoding:
  // moved out of layers_ so that forward does not run them, and kept so
  // that the unread-tensor guard sees them taken (as deepseek2's).
  struct Mtp {
    Layer layer;
    Tensor eh_proj, enorm, hnorm, head_norm;
  };
  void load_mtp(WeightLoader& wl, int64_t n_nextn) {
    const int64_t E = hp_.n_embd, first = hp_.n_layer - n_nextn;
    for (int64_t il = first; il < hp_.n_layer; ++il) {
      const std::string p = "blk." + std::to_string(il) + ".nextn.";
      Mtp& m = mtp_.emplace_back();
      m.layer = std::move(layers_[il]);
      m.eh_proj = wl.get(p + "eh_proj.weight", {2 * E, E});
      m.enorm = wl.get(p + "enorm.weight", {E});
      m.hnorm = wl.get(p + "hnorm.weight", {E});
      m.head_norm = wl.get_optional(p + "shared_head_norm.weight", {E});
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
  MoeParams moe_;
  RopeScaling rope_;
  Layout lay_in_, lay_ba_, lay_qkv_, lay_q_;  // the gathers' (make_layouts)
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
  md[a + ".expert_count"] = config_int(cfg, "num_experts");
  md[a + ".expert_used_count"] = config_int(cfg, "num_experts_per_tok");
  md[a + ".expert_feed_forward_length"] = config_int(cfg, "moe_intermediate_size");
  md[a + ".expert_shared_feed_forward_length"] = config_int(cfg, "shared_expert_intermediate_size", 0);
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

bool hf_tensor(const std::string& hf, TensorRename& r) {
  using T = TensorTransform;
  // The multi-token-prediction head (mtp.*) is for speculative decoding: not read.
  if (hf.compare(0, 4, "mtp.") == 0) return r.name.clear(), true;
  static const HfLayerName kLayer[] = {
      {"post_attention_layernorm.weight", "post_attention_norm.weight", T::ToF32PlusOne},
      {"linear_attn.in_proj_qkvz.weight", "ssm_in.weight", T::None},
      {"linear_attn.in_proj_ba.weight", "ssm_ba.weight", T::None},
      {"linear_attn.conv1d.weight", "ssm_conv1d.weight", T::ToF32},
      {"linear_attn.A_log", "ssm_a", T::ToF32NegExp},
      {"linear_attn.dt_bias", "ssm_dt.bias", T::ToF32},
      {"linear_attn.norm.weight", "ssm_norm.weight", T::ToF32},  // applied as w (not 1 + w)
      {"linear_attn.out_proj.weight", "ssm_out.weight", T::None},
      {"mlp.gate.weight", "ffn_gate_inp.weight", T::None},
      {"mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight", T::None},
      {"mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight", T::None},
      {"mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight", T::None},
      {"mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp.weight", T::None},
  };
  if (hf == "lm_head.weight") return r.name = "output.weight", r.transform = T::None, true;
  int64_t il;
  std::string rest;
  if (hf_layer_tensor(hf, il, rest) && hf_expert_tensor(rest, "blk." + std::to_string(il) + ".", r)) return true;
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
void hf_finish_qwen35(const Metadata& md, std::vector<TensorRename>& rules) {
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
const HfNames kQwen3NextHfNames = {{"qwen3_next"}, &hf_config, &hf_tensor};
const HfNames kQwen35HfNames = {
    {"qwen3_5_text", "qwen3_5"}, &hf_config_qwen35, &hf_tensor_qwen35, {}, nullptr, &hf_finish_qwen35};
const HfNames kQwen35MoeHfNames = {
    {"qwen3_5_moe_text", "qwen3_5_moe"}, &hf_config_qwen35moe, &hf_tensor_qwen35, {}, nullptr, &hf_finish_qwen35};

std::unique_ptr<Model> load_qwen3next(std::shared_ptr<const TensorSource> src, const DeviceOptions& o) {
  return std::make_unique<Qwen3Next>(std::move(src), o);
}

}  // namespace kvad
