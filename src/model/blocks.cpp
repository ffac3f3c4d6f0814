#include "model/blocks.h"

#include <vector>

#include "base/error.h"
#include "model/weights.h"

namespace kvad {

BatchIds upload_batch(const BatchView& b, Device d) {
  BatchIds ids;
  ids.n = b.n;
  ids.n_out = b.n_out;
  ids.lora = LoraBatch::make(b.lora, b.lora_rows, b.n, d);
  if (b.lora_rows && b.n_out != b.n) {
    std::vector<const LoraSet*> out_rows(b.n_out);
    for (int64_t j = 0; j < b.n_out; ++j) out_rows[j] = b.lora_rows[b.out[j]];
    ids.lora_out = LoraBatch::make(nullptr, out_rows.data(), b.n_out, d);
  } else {
    ids.lora_out = ids.lora;
  }
  if (d.is_cpu()) {
    ids.token = ops::wrap_host(b.token, DType::I32, {b.n, 1, 1, 1});
    ids.pos = ops::wrap_host(b.pos, DType::I32, {b.n, 1, 1, 1});
    ids.seq = ops::wrap_host(b.seq, DType::I32, {b.n, 1, 1, 1});
    if (b.n_out) ids.out = ops::wrap_host(b.out, DType::I32, {b.n_out, 1, 1, 1});
    return ids;
  }
  // One transfer: token | pos | seq | out, then views of the parts.
  thread_local std::vector<int32_t> packed;
  packed.assign(b.token, b.token + b.n);
  packed.insert(packed.end(), b.pos, b.pos + b.n);
  packed.insert(packed.end(), b.seq, b.seq + b.n);
  packed.insert(packed.end(), b.out, b.out + b.n_out);
  const Tensor all = ops::from_host(packed.data(), DType::I32, {static_cast<int64_t>(packed.size()), 1, 1, 1}, d);
  auto part = [&](int64_t off, int64_t n) { return all.view({1, all.ne[0], 1, 1}).rows(off, off + n).view({n, 1, 1, 1}); };
  ids.token = part(0, b.n);
  ids.pos = part(b.n, b.n);
  ids.seq = part(2 * b.n, b.n);
  if (b.n_out) ids.out = part(3 * b.n, b.n_out);
  return ids;
}

void require_f32(const std::string& file, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    if (*t && t->type != DType::F32)
      throw Error(file + ": " + t->name + " must be f32, is " + dtype_name(t->type));
}

AttentionWeights load_attention_weights(const WeightScope& b, int64_t E, int64_t q_dim, int64_t kv_dim, int64_t D) {
  AttentionWeights w;
  w.norm = b.get("attn_norm.weight", {E});
  w.wq = b.get("attn_q.weight", {E, q_dim});
  w.wk = b.get("attn_k.weight", {E, kv_dim});
  w.wv = b.get("attn_v.weight", {E, kv_dim});
  w.wo = b.get("attn_output.weight", {q_dim, E});
  w.q_norm = b.get_optional("attn_q_norm.weight", {D});
  w.k_norm = b.get_optional("attn_k_norm.weight", {D});
  w.bq = b.get_optional("attn_q.bias", {q_dim});
  w.bk = b.get_optional("attn_k.bias", {kv_dim});
  w.bv = b.get_optional("attn_v.bias", {kv_dim});
  w.bo = b.get_optional("attn_output.bias", {E});
  w.sinks = b.get_optional("attn_sinks.weight", {q_dim / D});
  require_f32(b.path(), {&w.norm, &w.q_norm, &w.k_norm, &w.bq, &w.bk, &w.bv, &w.bo, &w.sinks});
  return w;
}

AttentionWeights load_fused_attention_weights(const WeightScope& blk, int64_t E, int64_t q_dim, int64_t kv_dim) {
  AttentionWeights w;
  const int64_t n = q_dim + 2 * kv_dim;
  w.norm = blk.get("attn_norm.weight", {E});
  w.norm_b = blk.get_optional("attn_norm.bias", {E});
  const Tensor qkv = blk.get("attn_qkv.weight", {E, n});
  w.wq = qkv.rows(0, q_dim);
  w.wk = qkv.rows(q_dim, q_dim + kv_dim);
  w.wv = qkv.rows(q_dim + kv_dim, n);
  const Tensor b = blk.get_optional("attn_qkv.bias", {n});
  require_f32(blk.path(), {&w.norm, &w.norm_b, &b});
  if (b) {
    const Tensor rows = b.view({1, n, 1, 1});  // one value per row, to cut q | k | v
    w.bq = rows.rows(0, q_dim).view({q_dim, 1, 1, 1});
    w.bk = rows.rows(q_dim, q_dim + kv_dim).view({kv_dim, 1, 1, 1});
    w.bv = rows.rows(q_dim + kv_dim, n).view({kv_dim, 1, 1, 1});
  }
  w.wo = blk.get("attn_output.weight", {q_dim, E});
  w.bo = blk.get_optional("attn_output.bias", {E});
  require_f32(blk.path(), {&w.bo});
  return w;
}

DecoderEnds load_decoder_ends(const WeightScope& root, const HParams& hp, Head head, StageEnds ends) {
  DecoderEnds e;
  const bool tied = head == Head::Tied || (head == Head::OwnOrTied && !root.has("output.weight"));
  if (ends.embedding || (ends.head && tied)) e.tok_embd = root.get("token_embd.weight", {hp.n_embd, hp.n_vocab});
  if (!ends.head) return e;
  e.output_norm = root.get("output_norm.weight", {hp.n_embd});
  require_f32(root.path(), {&e.output_norm});
  if (head == Head::Tied) return e.output = e.tok_embd, e;
  e.output = head == Head::Own ? root.get("output.weight", {hp.n_embd, hp.n_vocab})
                               : root.get_optional("output.weight", {hp.n_embd, hp.n_vocab});
  if (!e.output) e.output = e.tok_embd;  // tied: the same tensor, no copy
  return e;
}

Tensor pre_norm(const Tensor& x, const Tensor& w, const Tensor& b, float eps) {
  return b ? ops::layer_norm(x, w, b, eps) : ops::rms_norm(x, w, eps);
}

MlpWeights load_mlp_weights(const WeightScope& b, int64_t E, int64_t F) {
  MlpWeights w;
  w.norm = b.get("ffn_norm.weight", {E});
  w.gate = b.get("ffn_gate.weight", {E, F});
  w.up = b.get("ffn_up.weight", {E, F});
  w.down = b.get("ffn_down.weight", {F, E});
  require_f32(b.path(), {&w.norm});
  return w;
}

MlpWeights load_fused_mlp_weights(const WeightScope& b, int64_t E, int64_t F) {
  MlpWeights w;
  w.norm = b.get("ffn_norm.weight", {E});
  const Tensor gate_up = b.get("ffn_up.weight", {E, 2 * F});
  w.gate = gate_up.rows(0, F);
  w.up = gate_up.rows(F, 2 * F);
  w.down = b.get("ffn_down.weight", {F, E});
  require_f32(b.path(), {&w.norm});
  return w;
}

MoeWeights load_moe_weights(const WeightScope& b, int64_t E, int64_t F, int64_t n_exp, const std::string& norm) {
  MoeWeights w;
  if (!norm.empty()) w.norm = b.get(norm, {E});
  w.gate_inp = b.get("ffn_gate_inp.weight", {E, n_exp});
  w.gate_exps = b.get("ffn_gate_exps.weight", {E, F, n_exp});
  w.up_exps = b.get("ffn_up_exps.weight", {E, F, n_exp});
  w.down_exps = b.get("ffn_down_exps.weight", {F, E, n_exp});
  w.gate_inp_b = b.get_optional("ffn_gate_inp.bias", {n_exp});
  w.gate_exps_b = b.get_optional("ffn_gate_exps.bias", {F, n_exp});
  w.up_exps_b = b.get_optional("ffn_up_exps.bias", {F, n_exp});
  w.down_exps_b = b.get_optional("ffn_down_exps.bias", {E, n_exp});
  require_f32(b.path(), {&w.norm, &w.gate_inp_b, &w.gate_exps_b, &w.up_exps_b, &w.down_exps_b});
  return w;
}

void load_moe_shared(const WeightScope& b, int64_t E, int64_t F_sh, int64_t n_exp, MoeWeights& w) {
  w.exp_probs_b = b.get_optional("exp_probs_b.bias", {n_exp});
  require_f32(b.path(), {&w.exp_probs_b});
  if (F_sh <= 0) return;
  w.gate_shexp = b.get("ffn_gate_shexp.weight", {E, F_sh});
  w.up_shexp = b.get("ffn_up_shexp.weight", {E, F_sh});
  w.down_shexp = b.get("ffn_down_shexp.weight", {F_sh, E});
  w.gate_inp_shexp = b.get_optional("ffn_gate_inp_shexp.weight", {E});
}

namespace {
// y [n, k, m] + each slot's expert bias: row ids[t, j] of b [n_expert, m].
Tensor add_expert_bias(const Tensor& y, const Tensor& b, const Tensor& ids) {
  if (!b) return y;
  const Tensor slots = ids.view({ids.n_elements(), 1, 1, 1});                    // [n·k]
  return ops::add(y, ops::get_rows(b, slots).view(y.ne));
}
}  // namespace

Tensor moe_ffn(const MoeWeights& w, const MoeParams& p, const Tensor& x) {
  return moe_experts(w, p, ops::rms_norm(x, w.norm, p.norm_eps));
}

Tensor moe_experts(const MoeWeights& w, const MoeParams& p, const Tensor& h) {
  const int64_t n = h.ne[1], E = h.ne[0];                                      // h: [n, E]
  MoeRouteParams rp;
  rp.k = p.n_expert_used;
  rp.norm = p.norm_topk;
  rp.gating = p.gating;
  rp.n_group = p.n_group;
  rp.topk_group = p.topk_group;
  rp.group_top2_sum = p.group_top2_sum;
  rp.scale = p.scale;
  rp.bias = w.exp_probs_b;
  const Tensor logits = ops::matmul(h, w.gate_inp, w.gate_inp_b ? &w.gate_inp_b : nullptr);  // [n, n_expert]
  const ops::MoeRoute r = ops::moe_route(logits, rp);
  const Tensor hx = h.view({E, 1, n, 1});                                        // every slot reads its token's row
  const Tensor g = add_expert_bias(ops::matmul_id(hx, w.gate_exps, r.ids), w.gate_exps_b, r.ids);  // [n, k, F]
  const Tensor u = add_expert_bias(ops::matmul_id(hx, w.up_exps, r.ids), w.up_exps_b, r.ids);      // [n, k, F]
  const Tensor a = p.act == Activation::SiLU        ? ops::swiglu(g, u)
                   : p.act == Activation::GELU_tanh ? ops::geglu(g, u)
                                                    : ops::swiglu_oai(g, u, p.swiglu_alpha, p.swiglu_limit);
  const Tensor d = add_expert_bias(ops::matmul_id(a, w.down_exps, r.ids), w.down_exps_b, r.ids);   // [n, k, E]
  const Tensor y = ops::moe_sum(d, r.weights);                                   // [n, E]
  if (!w.down_shexp) return y;
  std::vector<Tensor> gs = w.gate_inp_shexp                                   // [n, F_sh] twice (, [n, 1])
                               ? ops::matmul_multi(h, {&w.gate_shexp, &w.up_shexp, &w.gate_inp_shexp})
                               : ops::matmul_multi(h, {&w.gate_shexp, &w.up_shexp});
  const Tensor as = p.act == Activation::SiLU ? ops::swiglu(gs[0], gs[1]) : ops::geglu(gs[0], gs[1]);
  const Tensor shared = ops::matmul(as, w.down_shexp);                        // [n, E]
  if (!w.gate_inp_shexp) return ops::add(y, shared);
  // σ(gate) per token: a one-slot weighted sum.
  return ops::add(y, ops::moe_sum(shared.view({E, 1, n, 1}), ops::sigmoid(gs[2]).view({1, n, 1, 1})));
}

Tensor attention_block(const AttentionWeights& w, const AttentionParams& p, KVLayer& cache, const BatchIds& b,
                       const Tensor& x) {
  const int64_t n = b.n, D = p.head_dim, H = p.n_head, Hkv = p.n_head_kv;
  const Tensor h = pre_norm(x, w.norm, w.norm_b, p.norm_eps);
  std::vector<Tensor> qkv = linear_multi(b.lora.get(), h, {&w.wq, &w.wk, &w.wv});
  Tensor q = w.bq ? ops::add(qkv[0], w.bq) : qkv[0];
  Tensor k = w.bk ? ops::add(qkv[1], w.bk) : qkv[1];
  const Tensor v = w.bv ? ops::add(qkv[2], w.bv) : qkv[2];
  q = q.view({D, H, n, 1});
  k = k.view({D, Hkv, n, 1});
  if (w.q_norm) q = ops::rms_norm(q, w.q_norm, p.norm_eps);
  if (w.k_norm) k = ops::rms_norm(k, w.k_norm, p.norm_eps);
  if (p.rope.n_rot > 0) {
    q = ops::rope(q, b.pos, p.rope);
    k = ops::rope(k, b.pos, p.rope);
  }
  ops::kv_store(cache.k, k, b.seq, b.pos, cache.slots);
  ops::kv_store(cache.v, v, b.seq, b.pos, cache.slots);
  AttentionOpParams ap;
  ap.scale = p.scale;
  ap.window = p.sliding_window;
  ap.slots = cache.slots;
  ap.sinks = w.sinks;
  ap.softcap = p.softcap;
  const Tensor a = ops::attention(q, cache.k, cache.v, b.seq, b.pos, ap);
  return linear(b.lora.get(), a.view({H * D, n, 1, 1}), w.wo, w.bo ? &w.bo : nullptr);
}

Tensor gated_mlp(const MlpWeights& w, Activation act, float norm_eps, const Tensor& x, const LoraBatch* lora) {
  const Tensor h = ops::rms_norm(x, w.norm, norm_eps);
  std::vector<Tensor> gu = linear_multi(lora, h, {&w.gate, &w.up});
  const Tensor a = act == Activation::SiLU ? ops::swiglu(gu[0], gu[1]) : ops::geglu(gu[0], gu[1]);
  return linear(lora, a, w.down);
}

Tensor mlp(const MlpWeights& w, Activation act, float norm_eps, const Tensor& x, const LoraBatch* lora) {
  const Tensor h = pre_norm(x, w.norm, w.norm_b, norm_eps);
  const Tensor u = linear(lora, h, w.up, w.up_b ? &w.up_b : nullptr);
  const Tensor a = act == Activation::SiLU ? ops::silu(u) : ops::gelu(u);
  return linear(lora, a, w.down, w.down_b ? &w.down_b : nullptr);
}

void decoder_logits(const Tensor& x, const BatchIds& b, const Tensor& norm, float eps, const Tensor& head,
                    float* logits, const Tensor& norm_b) {
  if (b.n_out == 0) return;
  // out lists ascending, distinct rows: n_out == n means every row.
  const Tensor rows = b.n_out == b.n ? x : ops::get_rows(x, b.out);
  ops::to_host(linear(b.lora_out.get(), pre_norm(rows, norm, norm_b, eps), head), logits);
}

}  // namespace kvad
