// The op table: one row per backend (DESIGN.md seams 1 and 3). The op layer
// (ops.h) checks shapes, allocates outputs on the inputs' device and calls
// that device's row; a backend library (kernels/cpu, kernels/cuda) fills its
// row and registers it when the program starts. Nothing above tensor/ calls
// a row directly.
//
// Conventions for every entry: inputs are already checked by ops.cpp (same
// device, shapes and formats as documented in ops.h), and `out` is
// contiguous, allocated by the caller on the same device. Inputs are
// contiguous except where an entry says "strided" (the ops ops.h marks
// Strided); there, an input has out's shape (broadcasts are expanded by
// ops.cpp into stride-0 dimensions) and any byte strides nb, and a row that
// cannot do some layout throws kvad::Error saying so. Entries read and write
// bytes through Tensor::raw(), never Tensor::data (null off the CPU).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "tensor/op_set.h"
#include "tensor/tensor.h"

namespace kvad {

/// Element-wise activations and functions (ops.h: silu .. quick_gelu, swiglu, geglu, geglu_erf).
enum class Unary : uint8_t {
  SiLU,       ///< x·σ(x)
  GELU_tanh,  ///< 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
  GELU_erf,   ///< 0.5·x·(1 + erf(x/√2)) (exact GELU: BERT, torch's nn.GELU())
  Sigmoid,    ///< 1 / (1 + e^-x)
  Softplus,   ///< log(1 + e^x) (x itself above 20, as torch's F.softplus)
  Tanh,       ///< tanh x
  Sin,        ///< sin x (x in radians)
  Cos,        ///< cos x (x in radians)
  QuickGELU,  ///< x·σ(1.702·x) (CLIP's quick_gelu)
};
/// Element-wise binary ops (ops.h: add, mul).
enum class Binary : uint8_t { Add, Mul };

/// Rotary position embedding (Su et al. 2021) of the first n_rot dims of
/// each head: pair i rotates by θ_i = pos·freq_scale·freq_base^(-2i/n_rot) /
/// freq_factors[i], and cos θ_i, sin θ_i are multiplied by attn_factor
/// (ggml's ggml_rope_ext with its freq_factors `c` and attn_factor, ext_factor
/// 0). Llama 3's rope_freqs, LongRoPE's short/long factors and YaRN's ramp
/// (model/rope.h computes them) are all per-pair factors of this form.
struct RopeParams {
  int64_t n_rot = 0;
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;  ///< linear scaling: multiplies positions
  bool neox = false;        ///< pair (i, i + n_rot/2) (HF rotate_half); else (2i, 2i+1)
  Tensor freq_factors;      ///< empty, or [n_rot/2] f32 on x's device: divides pair i's frequency
  float attn_factor = 1.0f; ///< multiplies cos and sin (YaRN's mscale, LongRoPE's attention factor)
};

/// Attention over a KV cache (ops.h: attention).
struct AttentionOpParams {
  float scale = 0;       ///< multiplies q·k
  int32_t window = 0;    ///< 0: causal over every cached position; W: positions (p - W, p]
  int64_t slots = 0;     ///< positions per sequence the cache holds; position p lives in slot p % slots
  /// false: bidirectional (encoders): every token of sequence s sees positions
  /// [0, last_s], last_s the highest position of s in this call (window must be 0).
  bool causal = true;
  /// Empty, or [n_head] f32 on q's device: attention sinks (gpt-oss; Xiao et
  /// al. 2023 "Efficient Streaming Language Models with Attention Sinks";
  /// transformers' GptOssAttention `sinks`, llama.cpp's attn_sinks): head h's
  /// softmax gets one more logit sinks[h] in its denominator, whose value row
  /// is zero, so the weights over the keys sum to less than 1.
  Tensor sinks{};
  /// 0: none. c > 0: attention logit soft-capping (Gemma 2; transformers'
  /// attn_logit_softcapping, llama.cpp's attn_soft_cap): each score
  /// s = scale · q·k becomes c · tanh(s / c) before the mask and softmax.
  float softcap = 0;
};

/// 2-D convolution's geometry (ops.h: conv2d). Dilation 1, groups 1.
struct Conv2dParams {
  int64_t stride_w = 1, stride_h = 1;  ///< pixels between output positions (torch's stride)
  int64_t pad_w = 0, pad_h = 0;        ///< zeros on each side (torch's padding)
};

/// How a MoE router turns logits into expert weights (ops.h: moe_route).
enum class MoeGating : uint8_t {
  Softmax,  ///< p = softmax(logits) (Qwen3-MoE, DeepSeek V2; llama.cpp LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX)
  Sigmoid,  ///< p = σ(logits) per expert (DeepSeek V3; llama.cpp ..._SIGMOID)
};

/// A router's choice rule (ops.h: moe_route). Defaults: Qwen3-MoE's.
struct MoeRouteParams {
  int64_t k = 0;           ///< experts per token
  bool norm = false;       ///< divide the k weights by their sum (HF norm_topk_prob)
  MoeGating gating = MoeGating::Softmax;
  /// Group-limited choice (DeepSeek's group_limited_greedy and noaux_tc):
  /// the experts fall into n_group equal groups; only the topk_group groups
  /// of highest group score are candidates. n_group 1: every expert is.
  int64_t n_group = 1, topk_group = 1;
  /// Group score: the sum of its two highest choice scores (V3's noaux_tc);
  /// else its highest (V2's group_limited_greedy).
  bool group_top2_sum = false;
  float scale = 1.0f;      ///< multiplies the final weights (HF routed_scaling_factor)
  /// Empty, or [n_expert] f32 on the logits' device added to p for choosing
  /// only; the weights stay p (V3's e_score_correction_bias).
  Tensor bias;
};

/// The gated delta rule (ops.h: gated_delta_rule).
struct DeltaRuleParams {
  float scale = 1.0f;  ///< multiplies q (1/sqrt(head_k_dim) after its L2 norm)
  /// Tokens per chunk of the parallel (chunked) form; 0 or 1: the recurrent
  /// form, token by token. Both compute the same recurrence.
  int64_t chunk = 0;
  /// Which key head value head h reads (Hv = r·Hk): false, h / r (HF's
  /// grouped order: the r value heads of a key head side by side; Qwen3-Next,
  /// HF Qwen3.5); true, h % Hk (llama.cpp's tiled order, [K0, K1, ..., K0,
  /// K1, ...], into which its qwen35/qwen35moe converter reorders the value
  /// heads so that ggml_repeat can broadcast q and k).
  bool tiled_heads = false;
};

struct BackendOps {
  const char* name = "";
  /// True when the device can run; else false with the reason in *why.
  bool (*available)(std::string* why) = nullptr;
  /// True when matmul and get_rows read weights stored in this format.
  bool (*has_format)(DType t) = nullptr;
  /// Variants of filled entries that this row does not compute (op_set.h;
  /// e.g. Op::AttentionSinks beside a set `attention`): ops.cpp refuses them
  /// with an error naming the op before calling the entry, and row_ops, the
  /// registry's answer of what runs where, leaves them out. An empty entry
  /// needs no mention here: it is missing by itself.
  OpSet refuses{};

  // Memory. alloc throws kvad::Error when the device is out of memory.
  void* (*alloc)(size_t bytes) = nullptr;
  void (*release)(void* p, size_t bytes) = nullptr;
  void (*write)(void* dst, const void* host_src, size_t bytes) = nullptr;  ///< host → device
  void (*read)(void* host_dst, const void* src, size_t bytes) = nullptr;   ///< device → host, after pending work
  void (*copy)(void* dst, const void* src, size_t bytes) = nullptr;        ///< within the device
  /// Rows of src converted to dst's format (same shape): dequantize, quantize, f32 ↔ f16/bf16.
  void (*convert)(const Tensor& src, const Tensor& dst) = nullptr;
  /// Strided: out = the elements of x (same shape and format), contiguous.
  void (*cont)(const Tensor& x, const Tensor& out) = nullptr;

  // Ops (shapes as in ops.h).
  /// out[i] = x · w[i]ᵀ for i < n (n >= 1; the weights share x).
  void (*matmul)(const Tensor& x, const Tensor* const* w, const Tensor* out, int n) = nullptr;
  /// Strided: x [B, n_tok, n_in] f32 (nb[0] = 4); w [B, n_out, n_in] contiguous; out [B, n_tok, n_out].
  void (*matmul_batched)(const Tensor& x, const Tensor& w, const Tensor& out) = nullptr;
  /// Strided: out = a op b, a and b of out's shape (stride 0 where broadcast).
  void (*binary)(Binary op, const Tensor& a, const Tensor& b, const Tensor& out) = nullptr;
  /// Strided (as unary, glu, swiglu_oai and concat).
  void (*scale)(const Tensor& x, float s, const Tensor& out) = nullptr;
  /// w: nullptr or [ne0] f32; one_plus: x̂·(1 + w).
  void (*rms_norm)(const Tensor& x, const Tensor* w, float eps, bool one_plus, const Tensor& out) = nullptr;
  void (*layer_norm)(const Tensor& x, const Tensor* w, const Tensor* b, float eps, const Tensor& out) = nullptr;
  void (*rope)(const Tensor& x, const Tensor& pos, const RopeParams& p, const Tensor& out) = nullptr;
  void (*get_rows)(const Tensor& table, const Tensor& ids, const Tensor& out) = nullptr;
  void (*softmax)(const Tensor& x, const Tensor& out) = nullptr;
  void (*unary)(Unary op, const Tensor& x, const Tensor& out) = nullptr;
  void (*glu)(Unary op, const Tensor& gate, const Tensor& up, const Tensor& out) = nullptr;
  void (*concat)(const Tensor& a, const Tensor& b, const Tensor& out) = nullptr;
  /// out = columns [off, off + out.ne[0]) of each row of x (f32).
  void (*slice)(const Tensor& x, int64_t off, const Tensor& out) = nullptr;
  /// gpt-oss's clamped SwiGLU (ops.h swiglu_oai).
  void (*swiglu_oai)(const Tensor& gate, const Tensor& up, float alpha, float limit, const Tensor& out) = nullptr;
  /// Writes rows of x into cache slots (seq[t]·slots + pos[t] % slots), converted to the cache's format.
  void (*kv_store)(const Tensor& cache, const Tensor& x, const Tensor& seq, const Tensor& pos, int64_t slots) = nullptr;
  void (*attention)(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& seq, const Tensor& pos,
                    const AttentionOpParams& p, const Tensor& out) = nullptr;
  /// Multi-head latent attention over one f32 latent cache (ops.h: attention_latent).
  void (*attention_latent)(const Tensor& q, const Tensor& cache, const Tensor& seq, const Tensor& pos,
                           const AttentionOpParams& p, const Tensor& out) = nullptr;
  /// Causal attention over one sequence's f32 keys and values (ops.h: attention_seq).
  void (*attention_seq)(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pos, float scale,
                        const Tensor& out) = nullptr;
  // Images ({C, W, H, N}, ops.h group_norm .. concat along a dimension).
  /// w, b: nullptr or [C] f32.
  void (*group_norm)(const Tensor& x, int64_t n_groups, const Tensor* w, const Tensor* b, float eps,
                     const Tensor& out) = nullptr;
  void (*upsample_nearest2d)(const Tensor& x, int64_t factor, const Tensor& out) = nullptr;
  /// out = x with lo[i] zeros before dimension i's values (and zeros after, up to out.ne[i]).
  void (*pad)(const Tensor& x, const int64_t* lo, const Tensor& out) = nullptr;
  /// Strided: a and b (any strides), joined along `dim` into out.
  void (*concat_dim)(const Tensor& a, const Tensor& b, int dim, const Tensor& out) = nullptr;
  /// bias: nullptr or [OC] f32; shapes and formats as ops.h conv2d checks them.
  void (*conv2d)(const Tensor& x, const Tensor& w, const Tensor* bias, const Conv2dParams& p,
                 const Tensor& out) = nullptr;
  /// Strided: q, k, v with nb[0] = 4 (ops.h sdpa).
  void (*sdpa)(const Tensor& q, const Tensor& k, const Tensor& v, float scale, const Tensor& out) = nullptr;
  // Mixture of experts (ops.h moe_route, matmul_id, moe_sum).
  void (*moe_route)(const Tensor& logits, const MoeRouteParams& p, const Tensor& ids, const Tensor& weights) = nullptr;
  void (*matmul_id)(const Tensor& x, const Tensor& w, const Tensor& ids, const Tensor& out) = nullptr;
  void (*moe_sum)(const Tensor& y, const Tensor& weights, const Tensor& out) = nullptr;
  // Recurrent layers (ops.h ssm_conv, gated_delta_rule): the state is updated in place.
  void (*ssm_conv)(const Tensor& x, const Tensor& w, const Tensor& state, const Tensor& seq, const Tensor& pos,
                   const Tensor& out) = nullptr;
  void (*gated_delta_rule)(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                           const Tensor& state, const Tensor& seq, const Tensor& pos, const DeltaRuleParams& p,
                           const Tensor& out) = nullptr;
};

/// Installs the row of a device type (called once by each backend library
/// at start-up). A second registration replaces the first.
void register_backend(DeviceType t, const BackendOps* ops);
/// The row of a device type, or nullptr when this build has none.
const BackendOps* find_backend(DeviceType t);

/// Eager offload (DESIGN.md seam 3): when set, ops::matmul offers each
/// product of CPU tensors to it first (y = x · wᵀ; x [n_tok, w.ne[0]] f32,
/// y [n_tok, w.n_rows()] f32, host memory); a hook that returns true has
/// written y (e.g. on a GPU when its work-size gate admits the product, see
/// kernels/cuda/cpu_offload.h), false leaves it to the CPU row. nullptr (the
/// default) removes it. Set it before any session runs.
using MatmulOffloadFn = bool (*)(const Tensor& w, const float* x, int64_t n_tok, float* y);
void set_matmul_offload(MatmulOffloadFn fn);
MatmulOffloadFn matmul_offload();

}  // namespace kvad
