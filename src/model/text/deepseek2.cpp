// DeepSeek V2 / V3 (DeepSeek-AI 2024, "DeepSeek-V2: A Strong, Economical,
// and Efficient Mixture-of-Experts Language Model" and "DeepSeek-V3
// Technical Report"; transformers' modeling_deepseek_v2.py /
// modeling_deepseek_v3.py; GGUF architecture "deepseek2", which llama.cpp
// also uses for V2-Lite, V2.5, Coder-V2, V3/R1, Kimi K2 and Moonlight).
// Pre-norm decoder blocks
//   x = x + MLA(RMSNorm(x) ⊙ attn_norm)
//   x = x + FFN(x)   dense gated MLP in the first leading_dense_block_count
//                    layers, then routed experts plus shared experts (moe_ffn)
//
// Multi-head latent attention, per token t (n = the normed input):
//   q_t = Wq · n, or Wq_b · (RMSNorm(Wq_a · n) ⊙ q_a_norm) with q_lora_rank;
//         per head q_nope (qk_nope_head_dim) | q_pe (qk_rope_head_dim)
//   c_t | k_pe_t = Wkv_a · n;  c_t ← RMSNorm(c_t) ⊙ kv_a_norm   (kv_lora_rank | rope)
//   q_pe, k_pe ← RoPE(·, pos)  (one k_pe shared by every head)
//   head h: k_h,s = W_UK,h · c_s | k_pe_s,  v_h,s = W_UV,h · c_s
//   a_h = Σ_s softmax_s(scale · q_h · k_h,s) v_h,s;  out = Wo · (a_1 | ... | a_H)
// The cache holds only c | k_pe per token and layer (a LatentSpec layer).
// Decode runs in the absorbed form
//   q_h · k_h,s = (W_UK,hᵀ q_nope_h) · c_s + q_pe_h · k_pe_s
//   a_h = W_UV,h · Σ_s softmax_s(·) c_s
// so nothing is expanded per cached position (ops::attention_latent). A
// one-sequence prefill batch is expanded instead (k_h,s and v_h,s formed for
// its positions, ops::attention_seq) when that costs fewer multiply-adds:
// for a prompt from scratch, 2·kv_lora_rank > qk_nope + v_head_dim makes it
// so; KVAD_MLA_PREFILL=absorbed|expanded forces one form. W_UK
// and W_UV are llama.cpp's attn_k_b [n_head, kv_lora_rank, qk_nope] and
// attn_v_b [n_head, v_head_dim, kv_lora_rank]; a file with the older fused
// attn_kv_b [kv_lora_rank → n_head · (qk_nope + v_head_dim)] (and every HF
// checkpoint: kv_b_proj) is split into them at load (f32, or f16 beside quantized weights).
//
// The softmax scale is 1/√(qk_nope + qk_rope) times mscale², mscale =
// 0.1 · mscale_all_dim · ln(factor) + 1 under YaRN (DeepSeek's correction;
// GGUF rope.scaling.yarn_log_multiplier = 0.1 · mscale_all_dim as
// llama.cpp's converter writes it). RoPE pairs adjacent dims (V2's complex
// rotation, V3's rope_interleave), or halves when kvad.rope.neox is set (V3
// with rope_interleave false).
//
// Routing (moe_ffn, ops::moe_route): V2 softmax with greedy or
// group_limited_greedy top-k, V3 sigmoid with the e_score_correction_bias
// (exp_probs_b) for choosing and noaux_tc groups; weights optionally
// renormalised (expert_weights_norm) and scaled (expert_weights_scale).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
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
#include "model/rope.h"
#include "model/weights.h"
#include "tensor/ops.h"

namespace kvad {
namespace {

/// DeepSeek's hyper-parameters, GGUF keys as llama.cpp's (deepseek2.*).
struct DeepseekParams {
  int64_t q_lora_rank = 0;     ///< attention.q_lora_rank (0: a direct attn_q)
  int64_t kv_lora_rank = 0;    ///< attention.kv_lora_rank
  int64_t qk_nope = 0;         ///< attention.key_length_mla - rope
  int64_t qk_rope = 0;         ///< rope.dimension_count
  int64_t v_head_dim = 0;      ///< attention.value_length_mla
  int64_t n_dense = 0;         ///< leading_dense_block_count
  MoeHParams moe;              ///< expert_count, expert_feed_forward_length, expert_shared_count, routing
};

struct Layer {
  Tensor attn_norm, wq, wq_a, q_a_norm, wq_b, wkv_a, kv_a_norm, wk_b, wv_b, wo;
  Tensor wk_up;  // W_UK [H, qk_nope, kv_lora_rank], for the expanded prefill only
  MlpWeights ffn;  // dense layers
  MoeWeights moe;  // the others
  bool sparse = false;
};

// A matrix kvad derives at load, from f32 values on the model's device: f32
// when its source was f32 (--quant none keeps f32 arithmetic), else f16,
// which halves what the copies cost beside quantized weights.
Tensor derived(const Tensor& f32, DType source, const std::string& name) {
  Tensor t = source == DType::F32 ? f32 : ops::convert(f32, DType::F16);
  t.name = name;
  return t;
}

// Splits the fused kv_b [kv_lora_rank → H · (nope + v)] (per head nope rows,
// then v rows) into k_b [H, kv_lora_rank, nope] (W_UK,h transposed) and v_b
// [H, v, kv_lora_rank] (and W_UK as it is, [H, nope, kv_lora_rank], for the
// expanded prefill): strided views of its f32 values on its device, copied
// contiguous (ops::cont), f32 or f16 (derived()).
void split_kv_b(const Tensor& kv_b, int64_t H, int64_t nope, int64_t v, int64_t r, Tensor& k_b, Tensor& v_b,
                Tensor* k_up) {
  const Tensor w = ops::convert(kv_b, DType::F32);  // [H, nope + v, r]
  const size_t F = sizeof(float), head = static_cast<size_t>((nope + v) * r) * F;
  const Tensor uk = ops::view(w, {r, nope, H, 1}, {F, r * F, head, head * H});  // W_UK,h [nope, r]
  if (k_up) *k_up = derived(ops::cont(uk), kv_b.type, kv_b.name + " (k_up)");
  k_b = derived(ops::cont(ops::transpose(uk)), kv_b.type, kv_b.name + " (k_b)");
  v_b = derived(ops::cont(ops::view(w, {r, v, H, 1}, {F, r * F, head, head * H}, nope * r * F)), kv_b.type,
                kv_b.name + " (v_b)");
}

// W_UK as the expansion multiplies it, [H, nope, r], from llama.cpp's
// attn_k_b [H, r, nope]: its transpose per head (a view, copied contiguous
// on its device), f32 or f16 (derived()).
Tensor k_up_from_k_b(const Tensor& k_b) {
  return derived(ops::cont(ops::transpose(ops::convert(k_b, DType::F32))), k_b.type, k_b.name + " (k_up)");
}

/// How MLA's prefill runs (KVAD_MLA_PREFILL): absorbed like decode, expanded
/// (K and V decompressed from the latent rows, then ordinary attention), or
/// whichever costs fewer multiply-adds for the batch (the default).
enum class PrefillMode { Auto, Absorbed, Expanded };
PrefillMode prefill_mode() {
  const char* v = std::getenv("KVAD_MLA_PREFILL");
  const std::string m = v ? v : "";
  if (m == "absorbed") return PrefillMode::Absorbed;
  if (m == "expanded") return PrefillMode::Expanded;
  if (!m.empty() && m != "auto")
    throw Error("KVAD_MLA_PREFILL='" + m + "' is not auto, absorbed or expanded");
  return PrefillMode::Auto;
}

// DeepSeek's keys beside the decoder's (hp): the MLA widths, the dense
// layers and the experts. Throws kvad::Error naming the key.
DeepseekParams read_deepseek_params(const TensorSource& f, const HParams& hp) {
  DeepseekParams c;
  const std::string a = hp.arch + ".", path = f.path();
  auto need = [&](const std::string& key) {
    const int64_t v = f.require_int(a + key);
    if (v <= 0) throw Error(path + ": " + f.key_name(a + key) + " must be positive, is " + std::to_string(v));
    return v;
  };
  c.q_lora_rank = f.get_int(a + "attention.q_lora_rank", 0);
  c.kv_lora_rank = need("attention.kv_lora_rank");
  c.qk_rope = hp.n_rot;
  // The MLA widths: key_length_mla / value_length_mla when the file is in
  // llama.cpp's MQA form (key_length = kv_lora_rank + rope), else
  // key_length / value_length (older files).
  const int64_t qk_head = f.has(a + "attention.key_length_mla") ? need("attention.key_length_mla") : hp.head_dim;
  c.v_head_dim = f.has(a + "attention.value_length_mla") ? need("attention.value_length_mla")
                                                          : need("attention.value_length");
  c.qk_nope = qk_head - c.qk_rope;
  if (c.qk_nope <= 0 || c.q_lora_rank < 0)
    throw Error(path + ": " + a + "attention.key_length_mla " + std::to_string(qk_head) +
                " leaves no room beside rope.dimension_count " + std::to_string(c.qk_rope));
  c.n_dense = f.get_int(a + "leading_dense_block_count", 0);
  MoeHParams& m = c.moe;
  m = read_moe(f, hp, /*norm_topk_default=*/false);
  // V3's noaux_tc scores a group by the sum of its top two (with the
  // bias), V2's group_limited_greedy by its best (transformers, DeepSeek's
  // own modeling code). A GGUF records no topk_method, so the gating tells
  // them apart; llama.cpp's build_moe_ffn sums the top two for both, which
  // differs from the reference for grouped V2 files (DeepSeek-V2 236B).
  m.group_top2_sum = m.gating == MoeGating::Sigmoid;
  if (c.n_dense < 0 || c.n_dense > hp.n_layer)
    throw Error(path + ": " + a + "leading_dense_block_count " + std::to_string(c.n_dense) + " is not in [0, " + a +
                "block_count]");
  if (c.n_dense < hp.n_layer) require_experts(f, hp, m, "sparse layers");
  return c;
}

// The softmax scale 1/√qk_head with DeepSeek's YaRN correction
// (mscale_all_dim: rope.scaling.yarn_log_multiplier).
float mla_scale(const TensorSource& f, const std::string& arch, int64_t qk_head) {
  const std::string a = arch + ".";
  float scale = 1.0f / std::sqrt(static_cast<float>(qk_head));
  const double log_mul = f.get_float(a + "rope.scaling.yarn_log_multiplier", 0.0);
  const double factor = f.get_float(a + "rope.scaling.factor", 1.0);
  if (log_mul != 0 && factor > 1 && f.get_string(a + "rope.scaling.type", "none") == "yarn") {
    const double ms = 1.0 + log_mul * std::log(factor);
    scale = static_cast<float>(scale * ms * ms);
  }
  return scale;
}

class Deepseek2 final : public Model {
 public:
  Deepseek2(std::shared_ptr<const TensorSource> src, const DeviceOptions& o) : Model(src) {
    const std::string a = hp_.arch + ".";
    cfg_ = read_deepseek_params(*src, hp_);
    mode_ = prefill_mode();
    hp_.n_vocab = read_vocab(*src, hp_);
    WeightLoader wl = open_weights(o);
    name_dims(wl, hp_, cfg_.moe);
    const int64_t P = cfg_.qk_rope, N = cfg_.qk_nope;
    const DecoderEnds ends = load_decoder_ends(wl.root(), hp_, Head::OwnOrTied, {holds_embedding(), holds_head()});
    tok_embd_ = ends.tok_embd, output_norm_ = ends.output_norm, output_ = ends.output;
    rope_neox_ = src->get_int("kvad.rope.neox", 0) != 0;
    rope_ = load_rope_scaling(*src, wl, hp_, rope_neox_);
    // llama.cpp's deepseek2 rule for a file with yarn_log_multiplier and no
    // yarn_attn_factor: cos and sin unscaled (mscale == mscale_all_dim, so
    // transformers' attention_factor is 1); the correction is all in the
    // softmax scale below. HF checkpoints state their factor explicitly.
    if (src->get_string(a + "rope.scaling.type", "none") == "yarn" && src->has(a + "rope.scaling.yarn_log_multiplier") &&
        !src->has(a + "rope.scaling.yarn_attn_factor"))
      rope_.params.attn_factor = 1.0f;
    layers_.resize(hp_.n_layer);
    for (int64_t il = stage_first(); il < stage_last(); ++il) load_layer(wl.layer(il), il, layers_[il]);
    if (holds_head()) load_mtp(wl);  // a pipeline's last stage holds the prediction heads
    finish_loading(wl);

    scale_ = mla_scale(*src, hp_.arch, N + P);
    // What the rest of kvad reads: the MLA widths, not the latent's.
    hp_.head_dim = N + P;
    hp_.n_head_kv = 1;
  }

  /// The multi-token prediction layers the checkpoint carries (none for most files).
  int64_t n_mtp() const override { return static_cast<int64_t>(mtp_.size()); }

  // The multi-token prediction layers (DeepSeek-V3 section 2.2; GGUF
  // {arch}.nextn_predict_layers, llama.cpp's blk.N.nextn.* past the
  // decoder's blocks) when the checkpoint carries them: run by forward_mtp
  // (speculative decoding's MTP proposer), never by forward.
  void load_mtp(WeightLoader& wl) {
    const std::string a = hp_.arch + ".";
    const int64_t E = hp_.n_embd, n_nextn = source_->get_int(a + "nextn_predict_layers", 0);
    if (n_nextn < 0 || n_nextn > 16)
      throw Error(source_->path() + ": " + a + "nextn_predict_layers " + std::to_string(n_nextn) + " is not in [0, 16]");
    for (int64_t il = hp_.n_layer; il < hp_.n_layer + n_nextn; ++il) {
      const WeightScope blk = wl.layer(il), nextn = blk.sub("nextn");
      if (!nextn.has("eh_proj.weight")) continue;  // transformers saves V3 without them
      Mtp& t = mtp_.emplace_back();
      load_layer(blk, il, t.layer);
      t.eh_proj = nextn.get("eh_proj.weight", {2 * E, E});
      t.enorm = nextn.get("enorm.weight", {E});
      t.hnorm = nextn.get("hnorm.weight", {E});
      t.head_norm = nextn.get_optional("shared_head_norm.weight", {E});
      t.head = nextn.get_optional("shared_head_head.weight", {E, hp_.n_vocab});
      t.embd = nextn.get_optional("embed_tokens.weight", {E, hp_.n_vocab});
    }
  }

  void load_layer(const WeightScope& blk, int64_t il, Layer& L) {
    const int64_t E = hp_.n_embd, H = hp_.n_head, R = cfg_.kv_lora_rank, P = cfg_.qk_rope, N = cfg_.qk_nope,
                  V = cfg_.v_head_dim, Q = cfg_.q_lora_rank;
    L.attn_norm = blk.get("attn_norm.weight", {E});
    if (Q > 0) {
      L.wq_a = blk.get("attn_q_a.weight", {E, Q});
      L.q_a_norm = blk.get("attn_q_a_norm.weight", {Q});
      L.wq_b = blk.get("attn_q_b.weight", {Q, H * (N + P)});
    } else {
      L.wq = blk.get("attn_q.weight", {E, H * (N + P)});
    }
    L.wkv_a = blk.get("attn_kv_a_mqa.weight", {E, R + P});
    L.kv_a_norm = blk.get("attn_kv_a_norm.weight", {R});
    if (blk.has("attn_kv_b.weight")) {
      split_kv_b(blk.get("attn_kv_b.weight", {R, H * (N + V)}), H, N, V, R, L.wk_b, L.wv_b,
                 mode_ != PrefillMode::Absorbed ? &L.wk_up : nullptr);
    } else {
      L.wk_b = blk.get("attn_k_b.weight", {N, R, H});
      L.wv_b = blk.get("attn_v_b.weight", {R, V, H});
      if (mode_ != PrefillMode::Absorbed) L.wk_up = k_up_from_k_b(L.wk_b);
    }
    L.wo = blk.get("attn_output.weight", {H * V, E});
    require_f32(blk.path(), {&L.attn_norm, &L.q_a_norm, &L.kv_a_norm});
    L.sparse = il >= cfg_.n_dense;
    const MoeHParams& m = cfg_.moe;
    if (L.sparse) {
      L.moe = load_moe_weights(blk, E, m.n_ff_exp, m.n_expert);
      load_moe_shared(blk, E, m.n_shared * m.n_ff_exp, m.n_expert, L.moe);
    } else {
      L.ffn = load_mlp_weights(blk, E, hp_.n_ff);
    }
  }

  // The latent rows are f32 whatever --cache-type-k/-v say (attention_latent
  // reads f32; model/cache.h LatentLayer).
  std::unique_ptr<Cache> make_cache(int32_t n_ctx, int n_seq, int64_t n_batch, KVTypes types) const override {
    const LayerSpec s = LatentSpec{cfg_.kv_lora_rank, cfg_.qk_rope};
    return std::make_unique<LayerCaches>(std::vector<LayerSpec>(hp_.n_layer, s), n_ctx, n_seq, n_batch, device_,
                                         types, held_layers());
  }

 protected:
  // What one forward call chooses once for every layer: the rope for the
  // cache's context, and whether its attention is expanded.
  struct Call {
    RopeParams rope;
    int64_t expand_kv = 0;  // positions expanded (0: absorbed)
    int32_t expand_seq = 0;
  };

  // Whether this batch's attention is expanded: one sequence, and (auto)
  // fewer multiply-adds than the absorbed form for n queries over n_kv
  // positions. Sets c.expand_kv (0: absorbed) and c.expand_seq.
  void choose_prefill(const BatchView& bv, Call& c) const {
    c.expand_kv = 0;
    if (mode_ == PrefillMode::Absorbed || bv.n < 2) return;
    int32_t last = 0;
    for (int64_t t = 0; t < bv.n; ++t) {
      if (bv.seq[t] != bv.seq[0]) return;
      last = std::max(last, bv.pos[t]);
    }
    const double n = static_cast<double>(bv.n), L = last + 1.0, R = static_cast<double>(cfg_.kv_lora_rank),
                 P = static_cast<double>(cfg_.qk_rope), N = static_cast<double>(cfg_.qk_nope),
                 V = static_cast<double>(cfg_.v_head_dim);
    const double absorbed = n * N * R + n * L * (2 * R + P) + n * R * V;  // per head
    const double expanded = L * R * (N + V) + n * L * (N + P + V);
    if (mode_ == PrefillMode::Expanded || expanded < absorbed) {
      c.expand_kv = last + 1;
      c.expand_seq = bv.seq[0];
    }
  }

  // The per-head products (W_UK, W_UV) are batched matmuls over the heads
  // of strided views: x [H, n, ·] is the tokens' rows of head h, read in
  // place; results come back [H, n, ·] and are viewed (permute) as [n, H, ·].
  Tensor mla(const Layer& L, const Call& call, LatentLayer& cache, const BatchIds& b, const Tensor& x) const {
    const int64_t n = b.n, H = hp_.n_head, R = cfg_.kv_lora_rank, P = cfg_.qk_rope, N = cfg_.qk_nope,
                  V = cfg_.v_head_dim;
    const size_t F = sizeof(float);
    const float eps = hp_.norm_eps;
    const Tensor h = ops::rms_norm(x, L.attn_norm, eps);                                       // [n, E]
    const Tensor q = L.wq ? ops::matmul(h, L.wq)
                          : ops::matmul(ops::rms_norm(ops::matmul(h, L.wq_a), L.q_a_norm, eps), L.wq_b);  // [n, H·(N+P)]
    const size_t q_row = q.nb[1], q_head = (N + P) * F;
    const Tensor q_nope = ops::view(q, {N, H, n, 1}, {F, q_head, q_row, q_row * n});          // [n, H, N], strided
    const Tensor q_pe = ops::rope(ops::slice(q.view({N + P, H * n, 1, 1}), N, P).view({P, H, n, 1}), b.pos,
                                  call.rope);                                                 // [n, H, P]
    const Tensor kva = ops::matmul(h, L.wkv_a);                                                // [n, R+P]
    const Tensor c = ops::rms_norm(ops::slice(kva, 0, R), L.kv_a_norm, eps);                   // [n, R]
    const Tensor k_pe = ops::rope(ops::slice(kva, R, P).view({P, 1, n, 1}), b.pos, call.rope);  // [n, 1, P]
    ops::kv_store(cache.c, ops::concat(c, k_pe.view({P, n, 1, 1})), b.seq, b.pos, cache.slots);
    const std::array<int, 4> swap12 = {0, 2, 1, 3};  // [n, H, ·] ↔ [H, n, ·]
    if (call.expand_kv > 0) {
      // Expanded: every position's K and V decompressed from its latent row.
      const int64_t n_kv = call.expand_kv, row0 = call.expand_seq * cache.slots;
      const Tensor lat = cache.c.rows(row0, row0 + n_kv);                                     // [n_kv, R+P]
      const size_t l_row = lat.nb[1];
      const Tensor c_all = ops::view(lat, {R, n_kv, H, 1}, {F, l_row, 0, 0});                // c for every head
      const Tensor k_nope = ops::matmul_batched(c_all, L.wk_up);                              // [H, n_kv, N]
      const Tensor v = ops::cont(ops::permute(ops::matmul_batched(c_all, L.wv_b), swap12));   // [n_kv, H, V]
      const Tensor k_pe_all = ops::view(lat, {P, H, n_kv, 1}, {F, 0, l_row, l_row * n_kv}, R * F);  // k_pe per head
      const Tensor k = ops::concat(ops::permute(k_nope, swap12), k_pe_all).view({N + P, H, n_kv, 1});
      const Tensor qf = ops::concat(q_nope, q_pe).view({N + P, H, n, 1});
      const Tensor a = ops::attention_seq(qf, k, v, b.pos, scale_);                            // [n, H, V]
      return ops::matmul(a.view({H * V, n, 1, 1}), L.wo);
    }
    const Tensor q_abs = ops::matmul_batched(ops::permute(q_nope, swap12), L.wk_b);            // [H, n, R]
    const Tensor qf = ops::concat(ops::permute(q_abs, swap12), q_pe).view({R + P, H, n, 1});   // [n, H, R+P]
    AttentionOpParams ap;
    ap.scale = scale_;
    ap.slots = cache.slots;
    const Tensor a = ops::attention_latent(qf, cache.c, b.seq, b.pos, ap, R);                 // [n, H, R]
    const Tensor o = ops::matmul_batched(ops::permute(a, swap12), L.wv_b);                     // [H, n, V]
    return ops::matmul(ops::cont(ops::permute(o, swap12)).view({H * V, n, 1, 1}), L.wo);       // [n, E]
  }

  // The MTP layer's latent rows, as a decoder layer's.
  std::unique_ptr<Cache> make_mtp_cache(int32_t n_ctx, int n_seq, int64_t n_batch, KVTypes types) const override {
    const LayerSpec s = LatentSpec{cfg_.kv_lora_rank, cfg_.qk_rope};
    return std::make_unique<LayerCaches>(std::vector<LayerSpec>(1, s), n_ctx, n_seq, n_batch, device_, types);
  }

  // DeepSeek-V3 section 2.2 (vLLM's DeepSeekMultiTokenPredictorLayer):
  // h' = M [RMSNorm(emb(t_{i+1})) ; RMSNorm(h_i)], the layer's MLA and
  // MoE, then the shared head (its own norm and head, or the main model's
  // where the file leaves them out). The chained state is the layer's
  // output before the head's norm.
  void mtp_impl(LayerCaches& cache, const BatchView& bv, const Tensor& h, float* logits,
                float* hidden_out) const override {
    const Mtp& m = mtp_[0];
    const float eps = hp_.norm_eps;
    const BatchIds ids = upload_batch(bv, device_);
    Call call;
    call.rope = rope_.at(cache.n_ctx());
    choose_prefill(bv, call);
    const Tensor e = ops::get_rows(m.embd ? m.embd : tok_embd_, ids.token);                        // [n, E]
    Tensor x = ops::matmul(ops::concat(ops::rms_norm(e, m.enorm, eps), ops::rms_norm(h, m.hnorm, eps)), m.eh_proj);
    const Layer& L = m.layer;
    x = ops::add(x, mla(L, call, cache.latent(0), ids, x));
    x = ops::add(x, L.sparse ? moe_ffn(L.moe, cfg_.moe, x) : gated_mlp(L.ffn, Activation::SiLU, eps, x));
    if (ids.n_out == 0) return;
    const Tensor rows = ids.n_out == ids.n ? x : ops::get_rows(x, ids.out);                           // [n_out, E]
    if (hidden_out) ops::to_host(rows, hidden_out);
    ops::to_host(ops::matmul(ops::rms_norm(rows, m.head_norm ? m.head_norm : output_norm_, eps),
                             m.head ? m.head : output_),
                 logits);
  }

  void forward_impl(LayerCaches& cache, const BatchView& bv, Tensor& x, float* logits) const override {
    const BatchIds ids = upload_batch(bv, device_);
    Call call;
    call.rope = rope_.at(cache.n_ctx());
    choose_prefill(bv, call);
    if (!x) x = ops::get_rows(tok_embd_, ids.token);  // [n, E]
    for (int64_t il = stage_first(); il < stage_last(); ++il) {
      const Layer& L = layers_[il];
      x = ops::add(x, mla(L, call, cache.latent(il), ids, x));
      x = ops::add(x, L.sparse ? moe_ffn(L.moe, cfg_.moe, x) : gated_mlp(L.ffn, Activation::SiLU, hp_.norm_eps, x));
    }
    if (holds_head()) decoder_logits(x, ids, output_norm_, hp_.norm_eps, output_, logits);
  }

 private:
  DeepseekParams cfg_;
  Tensor tok_embd_, output_norm_, output_;
  std::vector<Layer> layers_;
  /// The multi-token prediction head (V3), used only for speculative decoding.
  struct Mtp {
    Layer layer;
    Tensor eh_proj, enorm, hnorm, head_norm, head, embd;
  };
  std::vector<Mtp> mtp_;
  RopeScaling rope_;
  bool rope_neox_ = false;
  float scale_ = 1.0f;
  PrefillMode mode_ = PrefillMode::Auto;
};

// ---- HF checkpoints (transformers' DeepseekV2ForCausalLM / DeepseekV3ForCausalLM)

// config.json → the keys llama.cpp's converter (DeepseekV2Model) writes.
void hf_config(const nlohmann::json& cfg, HfConfig& out, bool v3) {
  const std::string a = "deepseek2";
  decoder_config(a, cfg, out);  // the shared keys; the MLA widths and rope are set below
  Metadata& md = out.md;
  const int64_t rope = config_int(cfg, "qk_rope_head_dim"), nope = config_int(cfg, "qk_nope_head_dim");
  const int64_t kv_lora = config_int(cfg, "kv_lora_rank"), v_head = config_int(cfg, "v_head_dim");
  if (rope <= 0 || rope % 2 || nope <= 0 || kv_lora <= 0 || v_head <= 0)
    throw Error("config.json: qk_rope_head_dim (even), qk_nope_head_dim, kv_lora_rank and v_head_dim must be positive");
  md[a + ".attention.head_count_kv"] = int64_t{1};  // MLA as MQA over the latent (llama.cpp's form)
  md[a + ".attention.kv_lora_rank"] = kv_lora;
  md[a + ".attention.key_length"] = kv_lora + rope;
  md[a + ".attention.value_length"] = kv_lora;
  md[a + ".attention.key_length_mla"] = nope + rope;
  md[a + ".attention.value_length_mla"] = v_head;
  md[a + ".rope.dimension_count"] = rope;
  const int64_t q_lora = config_int(cfg, "q_lora_rank", 0);
  if (q_lora < 0) throw Error("config.json: q_lora_rank must not be negative");
  if (q_lora > 0) md[a + ".attention.q_lora_rank"] = q_lora;
  const int64_t n_layer = config_int(cfg, "num_hidden_layers");
  const bool moe = cfg.contains("n_routed_experts") && !cfg["n_routed_experts"].is_null();
  md[a + ".leading_dense_block_count"] = config_int(cfg, "first_k_dense_replace", moe ? 0 : n_layer);
  out.set(a + ".expert_feed_forward_length", "moe_intermediate_size",
          config_int(cfg, "moe_intermediate_size", config_int(cfg, "intermediate_size")));
  if (moe) {
    out.set(a + ".expert_count", "n_routed_experts", config_int(cfg, "n_routed_experts"));
    out.set(a + ".expert_used_count", "num_experts_per_tok", config_int(cfg, "num_experts_per_tok"));
  }
  out.set(a + ".expert_shared_count", "n_shared_experts", config_int(cfg, "n_shared_experts", 0));
  if (const int64_t nextn = config_int(cfg, "num_nextn_predict_layers", 0); nextn > 0)
    md[a + ".nextn_predict_layers"] = nextn;
  md[a + ".expert_weights_scale"] = config_float(cfg, "routed_scaling_factor", 1.0);
  // transformers' V2 router never renormalises; V3's does when norm_topk_prob.
  if (v3 && config_bool(cfg, "norm_topk_prob", false)) md[a + ".expert_weights_norm"] = int64_t{1};
  const std::string method = cfg.value("topk_method", std::string(v3 ? "noaux_tc" : "greedy"));
  const int64_t n_group = config_int(cfg, "n_group", 1), topk_group = config_int(cfg, "topk_group", n_group);
  if (v3) {
    if (method != "noaux_tc") throw Error("config.json: topk_method '" + method + "' is not noaux_tc (DeepSeek V3)");
    md[a + ".expert_gating_func"] = int64_t{2};  // sigmoid
  } else {
    if (method != "greedy" && method != "group_limited_greedy")
      throw Error("config.json: topk_method '" + method + "' is not greedy or group_limited_greedy (DeepSeek V2)");
    md[a + ".expert_gating_func"] = int64_t{1};  // softmax
  }
  if (v3 || method == "group_limited_greedy") {
    out.set(a + ".expert_group_count", "n_group", n_group);
    out.set(a + ".expert_group_used_count", "topk_group", topk_group);
  }
  if (v3 && !config_bool(cfg, "rope_interleave", true)) md["kvad.rope.neox"] = int64_t{1};
  // DeepSeek's softmax correction: transformers' yarn_apply_mscale.
  using json = nlohmann::json;
  json rope_cfg = cfg.contains("rope_parameters") && cfg["rope_parameters"].is_object()
                      ? cfg["rope_parameters"]
                      : (cfg.contains("rope_scaling") && cfg["rope_scaling"].is_object() ? cfg["rope_scaling"] : json());
  if (rope_cfg.is_object()) {
    const std::string type = rope_cfg.value("rope_type", rope_cfg.value("type", std::string("default")));
    const double ms_all = config_float(rope_cfg, "mscale_all_dim", 0.0);
    if (type != "default" && ms_all != 0) md[a + ".rope.scaling.yarn_log_multiplier"] = 0.1 * ms_all;
  }
  // decoder_config sized the rope from head_dim; redo it for the rotary part.
  for (auto it = md.begin(); it != md.end();)
    it = it->first.rfind(a + ".rope.scaling.", 0) == 0 && it->first != a + ".rope.scaling.yarn_log_multiplier"
             ? md.erase(it)
             : std::next(it);
  out.tensors.clear();
  json rp = rope_cfg.is_object() ? rope_cfg : json::object();
  if (!rp.contains("rope_theta") && cfg.contains("rope_theta")) rp["rope_theta"] = cfg["rope_theta"];
  hf_rope_scaling(a, rp, cfg, rope, out);
  // Say the cos/sin factor even when it is YaRN's default, so that the rule
  // for files without it (llama.cpp's, in the loader) does not apply.
  if (md.count(a + ".rope.scaling.type") && std::get<std::string>(md[a + ".rope.scaling.type"]) == "yarn" &&
      !md.count(a + ".rope.scaling.yarn_attn_factor"))
    md[a + ".rope.scaling.yarn_attn_factor"] = 1.0;
}

// V2 and V3 differ in their routers; model_type says which.
void hf_config_any(const nlohmann::json& cfg, HfConfig& out) {
  hf_config(cfg, out, cfg.value("model_type", std::string()) == "deepseek_v3");
}

bool hf_tensor(const std::string& hf, TensorRename& r) {
  using T = TensorTransform;
  static const HfLayerName kLayer[] = {
      {"post_attention_layernorm.weight", "ffn_norm.weight", T::ToF32},
      {"self_attn.q_a_proj.weight", "attn_q_a.weight", T::None},
      {"self_attn.q_a_layernorm.weight", "attn_q_a_norm.weight", T::ToF32},
      {"self_attn.q_b_proj.weight", "attn_q_b.weight", T::None},
      {"self_attn.kv_a_proj_with_mqa.weight", "attn_kv_a_mqa.weight", T::None},
      {"self_attn.kv_a_layernorm.weight", "attn_kv_a_norm.weight", T::ToF32},
      {"self_attn.kv_b_proj.weight", "attn_kv_b.weight", T::None},
  };
  if (hf == "lm_head.weight") return r.name = "output.weight", r.transform = T::None, true;
  int64_t il;
  std::string rest;
  // The MTP layer's own tensors (model.layers.{num_hidden_layers}.*), as
  // llama.cpp names them; its decoder part is named as any layer's.
  static const HfLayerName kNextn[] = {
      {"eh_proj.weight", "nextn.eh_proj.weight", T::None},
      {"enorm.weight", "nextn.enorm.weight", T::ToF32},
      {"hnorm.weight", "nextn.hnorm.weight", T::ToF32},
      {"embed_tokens.weight", "nextn.embed_tokens.weight", T::None},
      {"shared_head.norm.weight", "nextn.shared_head_norm.weight", T::ToF32},
      {"shared_head.head.weight", "nextn.shared_head_head.weight", T::None},
  };
  if (hf_layer_tensor(hf, il, rest))
    for (const HfLayerName& n : kNextn)
      if (rest == n.hf) return r.name = "blk." + std::to_string(il) + "." + n.gguf, r.transform = n.transform, true;
  if (hf_layer_tensor(hf, il, rest) && hf_moe_tensor(rest, "blk." + std::to_string(il) + ".", r)) return true;
  return hf_decoder_tensor(hf, T::ToF32, kLayer, std::size(kLayer), r);
}

}  // namespace

extern const HfNames kDeepseek2HfNames;
const HfNames kDeepseek2HfNames = {{"deepseek_v2", "deepseek_v3"}, &hf_config_any, &hf_tensor};

std::unique_ptr<Model> load_deepseek2(std::shared_ptr<const TensorSource> src, const DeviceOptions& o) {
  return std::make_unique<Deepseek2>(std::move(src), o);
}

}  // namespace kvad
