// Shared transformer blocks that architecture files compose (DESIGN.md seam
// 4), written on the ops API (tensor/ops.h) so that they run on every device
// the weights live on. Shapes in ggml order: [n_tok, n_embd] is n_tok rows of
// n_embd floats.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>

#include "model/cache.h"
#include "model/lora.h"
#include "model/model.h"
#include "tensor/ops.h"
#include "tensor/tensor.h"

namespace kvad {

/// A batch's ids on the model's device: token, pos, seq: [n] i32; out: [n_out]
/// i32 (rows that get logits). Off the CPU they arrive in one host → device
/// transfer; on the CPU they view the caller's arrays.
struct BatchIds {
  Tensor token, pos, seq, out;
  int64_t n = 0, n_out = 0;
  /// BatchView::lora / lora_rows as the blocks add them (model/lora.h); nullptr: none.
  std::shared_ptr<const LoraBatch> lora;
  std::shared_ptr<const LoraBatch> lora_out;  ///< the same for the rows `out` lists (the head's)
};
BatchIds upload_batch(const BatchView& b, Device d);

/// Throws kvad::Error naming `file` and the tensor when a non-empty tensor of
/// `ts` is not f32 (norm weights, which the blocks read as floats).
void require_f32(const std::string& file, std::initializer_list<const Tensor*> ts);

/// Weights of one attention block. norm: [n_embd] f32 (the pre-norm);
/// wq: [n_embd → n_head·head_dim]; wk, wv: [n_embd → n_head_kv·head_dim];
/// wo: [n_head·head_dim → n_embd]; q_norm, k_norm: optional per-head RMSNorm
/// weights [head_dim] f32 (Gemma 3, Qwen3, OLMo 2); bq, bk, bv: optional
/// projection biases (Qwen2, GPT-2); bo: optional output bias [n_embd] (GPT-2);
/// norm_b: the pre-norm's bias [n_embd] — when present the pre-norm is
/// LayerNorm (GPT-2), else RMSNorm; sinks: optional attention sinks
/// [n_head] f32 (gpt-oss). Empty tensors are absent.
struct AttentionWeights {
  Tensor norm, wq, wk, wv, wo;
  Tensor q_norm, k_norm;
  Tensor bq, bk, bv;
  Tensor bo, norm_b;
  Tensor sinks;
};

class WeightScope;

/// The attention weights of layer scope `blk` ("blk.N.") under llama.cpp's GGUF
/// names: attn_norm [n_embd], attn_q [n_embd → q_dim], attn_k / attn_v
/// [n_embd → kv_dim], attn_output [q_dim → n_embd]; the optional ones
/// (attn_q_norm / attn_k_norm [head_dim], attn_q/k/v biases, attn_output.bias
/// [n_embd], attn_sinks.weight [q_dim / head_dim]) when present.
/// Throws as WeightLoader::get, and when a norm is not f32.
AttentionWeights load_attention_weights(const WeightScope& blk, int64_t n_embd, int64_t q_dim, int64_t kv_dim,
                                        int64_t head_dim);

/// The same for a fused projection, as llama.cpp names it for GPT-2 and
/// Phi-3: attn_qkv [n_embd → q_dim + 2·kv_dim] (and its optional bias),
/// whose rows q | k | v become wq, wk, wv as views (no copy); attn_norm and
/// its optional bias (LayerNorm), attn_output and its optional bias.
AttentionWeights load_fused_attention_weights(const WeightScope& blk, int64_t n_embd, int64_t q_dim, int64_t kv_dim);

/// How one layer's attention is computed.
struct AttentionParams {
  int64_t n_head = 0, n_head_kv = 0, head_dim = 0;
  RopeParams rope;         ///< n_rot (<= head_dim; 0: no rotary, GPT-2), base, scaling, pairing
  float scale = 0;         ///< multiplies q·k (usually 1/sqrt(head_dim))
  float norm_eps = 1e-5f;  ///< eps of the pre-norm and the QK norms
  /// 0: full causal attention. W > 0: sliding window — the token at position
  /// p attends to positions in (p - W, p] (llama.cpp's LLAMA_SWA_TYPE_STANDARD,
  /// HF's sliding_window; Mistral, Gemma 2/3 local layers).
  int32_t sliding_window = 0;
  /// 0: none. c > 0: scores capped to c · tanh(s / c) before the softmax
  /// (Gemma 2's attn_logit_softcapping; AttentionOpParams::softcap).
  float softcap = 0;
};

/// The attention block of a pre-norm decoder layer, for a batch of tokens:
///   n = RMSNorm(x) ⊙ norm
///   q = Wq·n (+bq), k = Wk·n (+bk), v = Wv·n (+bv)   per head: q, k ← RMSNorm(·) ⊙ q_norm/k_norm (when given)
///   q, k ← RoPE(q, k, pos)              k, v → the layer's cache at (seq, pos), f16 or f32
///   a_h = softmax(scale · q_h·Kᵀ) · V   over the positions token t may see (causal, optionally windowed;
///                                       with w.sinks, sinks[h] is one more logit of the softmax, gpt-oss;
///                                       with p.softcap = c, each logit is c·tanh(logit / c) first, Gemma 2),
///                                       query head h reading kv head h / (n_head / n_head_kv)
///   out = Wo · a (+bo)
/// (Vaswani et al. 2017; grouped-query attention, Ainslie et al. 2023.)
/// Residual adds and any post-norm are the caller's. Wq, Wk, Wv and Wo get
/// the side paths of b.lora's adapters (model/lora.h linear), before the
/// biases' add as peft adds them after the base layer. Every token's K/V are
/// written before attention runs, so a token sees earlier tokens of the same
/// batch. x: [n_tok, n_embd]; returns [n_tok, n_embd].
Tensor attention_block(const AttentionWeights& w, const AttentionParams& p, KVLayer& cache, const BatchIds& b,
                       const Tensor& x);

/// Activation of a gated MLP.
enum class Activation {
  SiLU,       ///< SwiGLU (Shazeer 2020): Llama, Mistral, Qwen
  GELU_tanh,  ///< GeGLU with the tanh approximation of GELU: Gemma
  SwiGLU_OAI, ///< gpt-oss's clamped SwiGLU (ops::swiglu_oai; MoE experts only)
};

/// Weights of an MLP. norm: [n_embd] f32 (the pre-norm; with norm_b [n_embd]
/// it is LayerNorm, else RMSNorm); gate (absent for an ungated MLP), up:
/// [n_embd → n_ff]; down: [n_ff → n_embd]; up_b [n_ff], down_b [n_embd]:
/// optional biases (GPT-2).
struct MlpWeights {
  Tensor norm, gate, up, down;
  Tensor norm_b, up_b, down_b;
};

/// ffn_norm [n_embd], ffn_gate / ffn_up [n_embd → n_ff], ffn_down [n_ff → n_embd]
/// of layer scope `blk` ("blk.N."). Throws as WeightLoader::get.
MlpWeights load_mlp_weights(const WeightScope& blk, int64_t n_embd, int64_t n_ff);
/// The same with gate and up fused, as llama.cpp names Phi-3's: ffn_up
/// [n_embd → 2·n_ff] whose rows gate | up become views (no copy).
MlpWeights load_fused_mlp_weights(const WeightScope& blk, int64_t n_embd, int64_t n_ff);

/// The gated feed-forward block of a pre-norm decoder layer:
///   n = RMSNorm(x) ⊙ norm;  out = Wdown · (act(Wgate·n) ⊙ Wup·n)
/// (Shazeer 2020, "GLU Variants Improve Transformer"). Residual adds and any
/// post-norm are the caller's. Each projection gets the side paths of
/// `lora`'s adapters (model/lora.h linear). x: [n_tok, n_embd]; returns [n_tok, n_embd].
Tensor gated_mlp(const MlpWeights& w, Activation act, float norm_eps, const Tensor& x, const LoraBatch* lora = nullptr);

/// The ungated feed-forward block of GPT-2 (Radford et al. 2019) and BERT:
///   n = LayerNorm(x) ⊙ norm + norm_b (RMSNorm without norm_b);
///   out = Wdown · act(Wup·n + up_b) + down_b
/// act is SiLU or tanh-GELU (GPT-2's gelu_new). x: [n_tok, n_embd]; returns
/// [n_tok, n_embd].
Tensor mlp(const MlpWeights& w, Activation act, float norm_eps, const Tensor& x, const LoraBatch* lora = nullptr);

/// Weights of a sparse mixture-of-experts feed-forward block, names as
/// llama.cpp's: ffn_norm [n_embd] f32; ffn_gate_inp, the router [n_embd →
/// n_expert]; ffn_gate_exps / ffn_up_exps [n_expert, n_ff_exp, n_embd];
/// ffn_down_exps [n_expert, n_embd, n_ff_exp]. Optional (DeepSeek):
/// exp_probs_b [n_expert] f32, the choice bias (e_score_correction_bias);
/// ffn_{gate,up}_shexp [n_embd → n_ff_shexp], ffn_down_shexp [n_ff_shexp →
/// n_embd], the shared experts every token runs; ffn_gate_inp_shexp
/// [n_embd → 1] (Qwen2-MoE, Qwen3-Next: HF shared_expert_gate), their
/// per-token sigmoid gate. Optional biases (gpt-oss):
/// ffn_gate_inp.bias [n_expert], ffn_gate_exps.bias / ffn_up_exps.bias
/// [n_expert, n_ff_exp], ffn_down_exps.bias [n_expert, n_embd], all f32.
struct MoeWeights {
  Tensor norm, gate_inp, gate_exps, up_exps, down_exps;
  Tensor exp_probs_b, gate_shexp, up_shexp, down_shexp, gate_inp_shexp;
  Tensor gate_inp_b, gate_exps_b, up_exps_b, down_exps_b;
};
/// The pre-norm is `norm` in the scope (gpt-oss names it
/// post_attention_norm.weight; "" for none: a block whose caller norms).
/// Throws as WeightLoader::get, and when a norm or bias is not f32.
MoeWeights load_moe_weights(const WeightScope& blk, int64_t n_embd, int64_t n_ff_exp, int64_t n_expert,
                            const std::string& norm = "ffn_norm.weight");
/// The optional parts into w: exp_probs_b [n_expert] f32 (DeepSeek), the
/// shared experts of width n_ff_shexp (none when 0), and their gate
/// ffn_gate_inp_shexp when the file has it. Throws as WeightLoader::get.
void load_moe_shared(const WeightScope& blk, int64_t n_embd, int64_t n_ff_shexp, int64_t n_expert, MoeWeights& w);

struct MoeParams {
  int64_t n_expert_used = 0;  ///< k: experts per token ({arch}.expert_used_count, HF num_experts_per_tok)
  bool norm_topk = true;      ///< divide the k weights by their sum (HF norm_topk_prob)
  MoeGating gating = MoeGating::Softmax;  ///< {arch}.expert_gating_func: softmax 1, sigmoid 2 (llama.cpp)
  int64_t n_group = 1, topk_group = 1;    ///< {arch}.expert_group_count / expert_group_used_count
  bool group_top2_sum = false;            ///< group score: sum of top two (V3) or max (V2)
  float scale = 1.0f;                     ///< {arch}.expert_weights_scale (HF routed_scaling_factor)
  Activation act = Activation::SiLU;
  float norm_eps = 1e-5f;
  float swiglu_alpha = 1.702f, swiglu_limit = 7.0f;  ///< Activation::SwiGLU_OAI's (HF swiglu_alpha, swiglu_limit)
};

/// The sparse MoE feed-forward block (Shazeer et al. 2017; Qwen3-MoE,
/// transformers' Qwen3MoeSparseMoeBlock; llama.cpp build_moe_ffn with
/// softmax gating):
///   n = RMSNorm(x) ⊙ norm;  p = softmax(Wrouter · n (+ b_router));  E_t = top-k experts of p_t
///   w_t,e = p_t,e (/ Σ_{e'∈E_t} p_t,e' when norm_topk)
///   out_t = Σ_{e∈E_t} w_t,e · (Wdown_e · act(Wgate_e · n_t (+bg_e), Wup_e · n_t (+bu_e)) (+bd_e))
/// act(g, u) = silu(g)·u, gelu(g)·u, or swiglu_oai(g, u). With norm_topk,
/// w_t is the softmax over the k selected logits, which is gpt-oss's router
/// (transformers' GptOssTopKRouter: top-k, then softmax of those).
/// Tokens are grouped by expert (ops::matmul_id), so each expert's weights are
/// read once per batch, not once per token. DeepSeek's routers (DeepSeek-AI
/// 2024 "DeepSeek-V2" / "DeepSeek-V3"; transformers' DeepseekV2Moe,
/// DeepseekV3MoE; llama.cpp build_moe_ffn) are MoeParams options: sigmoid
/// gating, the exp_probs_b choice bias, group-limited choice and the
/// weights' scale (ops::moe_route); with shared experts the block adds
///   Wdown_sh · (act(Wgate_sh · n) ⊙ Wup_sh · n)
/// for every token, times σ(Wgate_inp_sh · n) when the gate is loaded
/// (transformers' Qwen3NextSparseMoeBlock shared_expert_gate). x: [n_tok, n_embd]; returns [n_tok, n_embd].
Tensor moe_ffn(const MoeWeights& w, const MoeParams& p, const Tensor& x);
/// moe_ffn after its norm: the routed and shared experts of h = RMSNorm(x)
/// ⊙ norm (w.norm unused), for blocks whose norm is not a plain RMSNorm
/// (Qwen3-Next's zero-centred one, qwen3next.cpp). h: [n_tok, n_embd];
/// returns [n_tok, n_embd].
Tensor moe_experts(const MoeWeights& w, const MoeParams& p, const Tensor& h);

/// The pre-norm of a block: LayerNorm(x) ⊙ w + b when b is given, else
/// RMSNorm(x) ⊙ w. x: [n_tok, n]; w, b: [n] f32.
Tensor pre_norm(const Tensor& x, const Tensor& w, const Tensor& b, float eps);

/// A decoder's ends: token_embd [n_embd → n_vocab rows], output_norm
/// [n_embd] f32, and the head output [n_embd → n_vocab].
struct DecoderEnds {
  Tensor tok_embd, output_norm, output;
};
/// Whether a decoder's head is its own output.weight or token_embd's.
enum class Head {
  OwnOrTied,  ///< output.weight when the file has it, else token_embd (Llama, Qwen, DeepSeek)
  Own,        ///< output.weight, required (gpt-oss)
  Tied,       ///< token_embd; an output.weight is left unread, so the unread-tensor guard names it (Gemma)
};
/// Which ends a pipeline stage holds (Model::holds_embedding, holds_head).
struct StageEnds {
  bool embedding = true, head = true;
};
/// Loads the ends from the root scope for hp's n_embd and n_vocab (read_vocab
/// first): for a pipeline stage only those it holds (token_embd on the first
/// stage, and on the last when the head is tied; output_norm and output on
/// the last), the others left empty. Throws as WeightLoader::get, and when
/// output_norm is not f32.
DecoderEnds load_decoder_ends(const WeightScope& root, const HParams& hp, Head head, StageEnds ends = {});

/// The head of a decoder: only the rows b.out asks for go through the final
/// RMSNorm (⊙ norm) and the output matrix; their logits [b.n_out, n_vocab]
/// are copied to host memory `logits` (the one device → host transfer of a
/// forward call).
/// norm_b (optional): the final norm is LayerNorm with that bias (GPT-2).
void decoder_logits(const Tensor& x, const BatchIds& b, const Tensor& norm, float eps, const Tensor& head,
                    float* logits, const Tensor& norm_b = Tensor{});

}  // namespace kvad
