// The eager ops API (DESIGN.md seam 3): model code calls these on Tensors
// and gets Tensors back. An op runs at once on the device its inputs live on,
// through that device's row of the op table (tensor/backend.h); there is no
// graph and nothing is recorded for replay. A GPU op returns as soon as it is
// queued; the host waits only when it reads (to_host, to).
//
// Shapes are ggml order: [n_tok, n] in a comment means ne = {n, n_tok}, n_tok
// rows of n contiguous values. Activations are f32 unless said otherwise.
// Every op throws kvad::Error, naming the op and the shapes, when inputs are
// on different devices, have the wrong shapes or formats, or the device's row
// lacks the op: an empty entry, or a variant it refuses (BackendOps::refuses:
// attention with sinks, say). Which rows have which ops is the rows' own data,
// read by the registry through tensor/op_set.h's row_ops; nothing here
// restates it.
//
// Strided inputs (tensor/tensor.h; views from permute, transpose, view): an
// op's comment says "Strided: ..." when it takes them; every other op
// refuses a non-contiguous input with kvad::Error naming the op and the
// shape, and never copies one behind the caller's back (ops::cont copies
// when the caller asks). Outputs are always contiguous.
#pragma once
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "tensor/backend.h"
#include "tensor/tensor.h"

namespace kvad {
class ThreadPool;
}

namespace kvad::ops {

/// The pool the CPU row splits work over, for ops called on this thread
/// (nullptr: the calling thread alone). Set for a scope with PoolScope.
ThreadPool* current_pool();
class PoolScope {
 public:
  explicit PoolScope(ThreadPool& pool);
  ~PoolScope();
  PoolScope(const PoolScope&) = delete;
  PoolScope& operator=(const PoolScope&) = delete;

 private:
  ThreadPool* prev_;
};

/// "" when ops can run on `d` in this build and on this machine; else why
/// not ("kvad was built without CUDA ...", "no CUDA device: ...").
std::string unavailable(Device d);
/// True when `d`'s row reads weights of format `t` in matmul and get_rows.
bool has_format(Device d, DType t);

// ---- memory --------------------------------------------------------------

/// An uninitialised tensor on `d`. ne: shape (ggml order).
Tensor empty(DType t, std::array<int64_t, 4> ne, Device d);
/// A tensor on `d` holding a copy of `src` (row_bytes(t, ne[0]) · rows bytes
/// of host memory): one host → device transfer.
Tensor from_host(const void* src, DType t, std::array<int64_t, 4> ne, Device d);
/// A CPU tensor over host memory the caller keeps alive (no copy).
Tensor wrap_host(const void* src, DType t, std::array<int64_t, 4> ne);
/// Copies all of `t` (contiguous; a strided t throws) into host memory `dst`
/// (t.n_bytes()), after the device's pending work: one device → host transfer.
void to_host(const Tensor& t, void* dst);
/// `t` on device `d`: the same tensor when it is there already, else a copy
/// (host ↔ device transfers counted as to_host/from_host; a strided t off
/// its device throws).
Tensor to(const Tensor& t, Device d);
/// A copy of `t` (contiguous) on its device.
Tensor copy(const Tensor& t);
/// Writes the bytes of `src` into `dst` (a tensor or a rows() view of one)
/// on their device: same format, same number of elements. Throws otherwise.
void copy_into(const Tensor& dst, const Tensor& src);
/// Rows of a tensor converted to another format on its device (dequantize,
/// quantize, f32 ↔ f16/bf16; the CPU row uses its format kernels'
/// to_float/from_float); `t` itself when it is that format already. ne[0]
/// must be a whole number of `to`'s blocks.
Tensor convert(const Tensor& t, DType to);

/// Host transfers through the op layer since the last reset, per device type
/// (the sim device's residency contract is checked with these).
struct TransferStats {
  int64_t to_device = 0, to_device_bytes = 0;  ///< from_host, to(host → device)
  int64_t to_host = 0, to_host_bytes = 0;      ///< to_host, to(device → host)
};
TransferStats transfer_stats(DeviceType t);
void reset_transfer_stats();

// ---- views (ggml_view_4d, ggml_permute, ggml_transpose, ggml_cont) ----------
// A view shares its input's storage and moves no bytes.

/// The bytes of `t` seen with shape ne and byte strides nb, starting
/// `offset` bytes past t's first element (ggml_view_4d). Every element the
/// view can address must lie inside t's extent; for a block format
/// (quantized) ne[0] must be whole blocks with nb[0] the block's bytes.
/// A stride may be 0 (a dimension that repeats its bytes: broadcasting).
/// Throws kvad::Error naming t otherwise.
Tensor view(const Tensor& t, std::array<int64_t, 4> ne, std::array<size_t, 4> nb, size_t offset = 0);
/// The dimensions of `t` rearranged: dimension i of t becomes dimension
/// axes[i] of the result (ggml_permute's convention), e.g. {0, 2, 1, 3} swaps
/// dims 1 and 2. axes must be a permutation of 0..3; a block format's dim 0
/// must stay dim 0. Throws kvad::Error otherwise.
Tensor permute(const Tensor& t, std::array<int, 4> axes);
/// Dims 0 and 1 swapped (ggml_transpose): [rows, n] → [n, rows]. f32, f16,
/// bf16, i32 only (an element per block). Throws kvad::Error otherwise.
Tensor transpose(const Tensor& t);
/// A contiguous copy of `t` on its device (ggml_cont); `t` itself when it is
/// contiguous already. Strided: any strides (0 included). f32, f16, bf16,
/// i32 with any strides; a block format when its dim 0 is contiguous
/// (nb[0] its block bytes; the CUDA row: element formats only). Throws
/// kvad::Error otherwise.
Tensor cont(const Tensor& t);

// ---- ops -----------------------------------------------------------------

/// y = x · Wᵀ (+ bias). x: [n_tok, n_in] f32; W: [n_out, n_in] in any format
/// the device reads (has_format); bias: nullptr or [n_out] f32; y: [n_tok, n_out].
/// Contiguous inputs only (matmul_batched takes strided activations).
/// On the CPU, activations are converted once to W's vec_dot_type as ggml does
/// (kernels/cpu/host_kernels.h cpu::matmul); the offload hook (backend.h) is offered
/// the product first.
Tensor matmul(const Tensor& x, const Tensor& w, const Tensor* bias = nullptr);
/// Several products of the same x (q/k/v, gate/up) in one call: on the CPU
/// the activations are converted once and one parallel loop covers all rows.
/// Results equal separate matmul calls bit for bit.
std::vector<Tensor> matmul_multi(const Tensor& x, std::initializer_list<const Tensor*> ws);

/// Batched products over a leading dimension (torch.bmm with the second
/// operand transposed; ggml_mul_mat with ne[2] > 1 on both sides):
/// y[b] = x[b] · W[b]ᵀ for b < B. x: [B, n_tok, n_in] f32 (ne = {n_in, n_tok,
/// B}); W: [B, n_out, n_in] (ne = {n_in, n_out, B}), contiguous, in a format
/// the device's matmul reads (has_format); y: [B, n_tok, n_out]. Each y[b]
/// equals matmul(x[b], W[b]) and matmul_id with ids b (per-head products of
/// MLA: q_nope · W_UK, attention · W_UV). Strided: x with any nb[1], nb[2]
/// (nb[2] = 0: one x for every batch) and contiguous rows (nb[0] = 4).
/// The CUDA row has no kernel for it yet and throws.
Tensor matmul_batched(const Tensor& x, const Tensor& w);

/// a + b, a ⊙ b with broadcasting (numpy's rule, ggml_add/ggml_mul's repeat):
/// in each dimension a and b have the same size, or one of them has size 1
/// and is repeated (stride 0) over the other's; the output has the larger
/// size in each (e.g. a [n, m] with b [m] (one row), [n, 1] (one value per
/// row) or [1] (one value)). Per-channel broadcasting of image tensors is
/// the same rule: a bias [C] over an image {C, W, H, N} (this op layer's
/// layout, see conv2d) is one row; a per-sample [N, C] (ne {C, 1, 1, N})
/// repeats over W and H. Strided: a and b, on every row.
Tensor add(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
/// x · s. Strided: x (the CUDA row: contiguous only, else it throws).
Tensor scale(const Tensor& x, float s);

/// How an RMSNorm weight multiplies x̂: as stored (Llama; GGUF Gemma, whose
/// converter stores 1 + w), or as 1 + w (HF Gemma checkpoints).
enum class NormWeight { Plain, OnePlus };
/// RMSNorm of each row (Zhang & Sennrich 2019): x̂ = x / √(mean(x²) + eps),
/// y = x̂ ⊙ w (or x̂ ⊙ (1 + w)). x: [rows, n]; w: empty or [n] f32. For
/// per-head norms (QK-norm) pass x viewed as [n_tok·n_head, head_dim].
Tensor rms_norm(const Tensor& x, const Tensor& w, float eps, NormWeight mode = NormWeight::Plain);
/// LayerNorm of each row (Ba et al. 2016): (x - mean) / √(var + eps) ⊙ w + b.
/// x: [rows, n]; w, b: empty or [n] f32.
Tensor layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, float eps);

/// RoPE (Su et al. 2021) of x: [n_tok, n_head, head_dim] (ne = {head_dim,
/// n_head, n_tok}) at positions pos: [n_tok] i32; dims past n_rot pass
/// through (partial rotary). Pairing and scaling as RopeParams says.
Tensor rope(const Tensor& x, const Tensor& pos, const RopeParams& p);

/// out[i] = row ids[i] of `table` ([n_rows, n], any format the device reads,
/// or f32 activations) as f32. ids: [n_ids] i32; out: [n_ids, n]. An id
/// outside [0, n_rows) throws on the CPU; device rows give zeros.
Tensor get_rows(const Tensor& table, const Tensor& ids);

/// Softmax of each row (max-subtracted).
Tensor softmax(const Tensor& x);
/// The element-wise activations below (silu .. quick_gelu, and the GLUs
/// after them). Strided: every input (output contiguous, of the same shape;
/// the CUDA row: contiguous only, and for the GLUs also evenly spaced
/// contiguous rows, such as column halves; else it throws).
/// x·σ(x) (SiLU) and tanh-GELU, element-wise.
Tensor silu(const Tensor& x);
Tensor gelu(const Tensor& x);
/// Exact GELU, 0.5·x·(1 + erf(x/√2)) (Hendrycks & Gimpel 2016; BERT's
/// "gelu", torch.nn.GELU()), element-wise.
Tensor gelu_erf(const Tensor& x);
/// Logistic sigmoid 1/(1 + e^-x) and softplus log(1 + e^x) (x above 20
/// passes through, as torch's F.softplus), element-wise.
Tensor sigmoid(const Tensor& x);
Tensor softplus(const Tensor& x);
/// tanh x, sin x and cos x (radians), element-wise (torch.tanh, torch.sin,
/// torch.cos; the sinusoidal timestep embedding of diffusers'
/// get_timestep_embedding is sin/cos of scaled steps).
Tensor tanh(const Tensor& x);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
/// x·σ(1.702·x) (Hendrycks & Gimpel 2016's sigmoid approximation; CLIP's
/// "quick_gelu", transformers' QuickGELUActivation), element-wise.
Tensor quick_gelu(const Tensor& x);
/// silu(gate) ⊙ up (SwiGLU) and gelu(gate) ⊙ up (GeGLU), Shazeer 2020.
/// gate, up: the same shape, each with any strides.
Tensor swiglu(const Tensor& gate, const Tensor& up);
Tensor geglu(const Tensor& gate, const Tensor& up);
/// gelu_erf(gate) ⊙ up: GeGLU with the exact GELU (diffusers' GEGLU, whose
/// F.gelu has approximate="none"). gate, up: the same shape, any strides.
Tensor geglu_erf(const Tensor& gate, const Tensor& up);
/// diffusers' GEGLU after its projection (diffusers.models.activations.GEGLU:
/// hidden_states, gate = proj(x).chunk(2, dim=-1); hidden_states ⊙
/// F.gelu(gate)): x [rows, 2F] → [rows, F], out = x[:, :F] ⊙ gelu_erf(x[:,
/// F:]). x contiguous f32 with an even ne[0] (else kvad::Error); the halves
/// are views, no copy.
Tensor geglu_split(const Tensor& x);
/// gpt-oss's clamped SwiGLU (transformers' GptOssExperts._apply_gate, ggml's
/// swiglu_oai), element-wise: g = min(gate, limit), u = clamp(up, -limit,
/// limit), out = (u + 1) · g·σ(alpha·g). gate, up: same shape, f32. gpt-oss
/// uses alpha 1.702, limit 7.
Tensor swiglu_oai(const Tensor& gate, const Tensor& up, float alpha, float limit);
/// Rows of a and b joined: [rows, na] and [rows, nb] → [rows, na + nb],
/// rows = n_rows() of each (row r of a strided input: its dims 1..3 in
/// order). Strided: a and b (e.g. a permuted per-head product beside a
/// broadcast k_pe; the CUDA row: contiguous only, else it throws).
Tensor concat(const Tensor& a, const Tensor& b);

/// Columns [off, off + n) of each row: x [rows, m] f32 → [rows, n], 0 <=
/// off, off + n <= m (ggml_view_2d + ggml_cont; the q_nope | q_pe and
/// c_kv | k_pe splits of MLA).
Tensor slice(const Tensor& x, int64_t off, int64_t n);

/// Stores rows of x ([n_tok, n], f32) into a cache tensor ([n_seq·slots, n],
/// f16 — rounded to nearest even — or f32, copied exactly; llama.cpp's
/// --cache-type-k/-v): token t goes to row seq[t]·slots + pos[t] % slots.
/// seq, pos: [n_tok] i32. slots: positions each sequence's ring holds.
void kv_store(const Tensor& cache, const Tensor& x, const Tensor& seq, const Tensor& pos, int64_t slots);
/// Causal scaled dot-product attention (Vaswani et al. 2017) of n_tok query
/// tokens over caches k, v: [n_seq·slots, n_head_kv·head_dim] written by
/// kv_store, each f16 or f32 (k and v may differ). q: [n_tok, n_head, head_dim]; token t (sequence seq[t],
/// position pos[t]) sees positions [first, pos[t]] of its sequence, first = 0
/// or pos[t] - window + 1; query head h reads kv head h / (n_head / n_head_kv)
/// (grouped-query attention, Ainslie et al. 2023). The caller keeps
/// slots >= window + tokens per call (a ring never overwrites what a token
/// sees). With p.causal false (encoders: BERT) every token of sequence s sees
/// positions [0, last_s] instead, last_s the highest position of s among
/// this call's tokens (so a call holding whole sequences attends over each
/// of them bidirectionally); window must then be 0. p.sinks (optional,
/// [n_head] f32): one extra logit per head in the softmax's denominator
/// (gpt-oss). p.softcap c > 0: each score s = scale · q·k becomes
/// c · tanh(s / c) before the softmax (Gemma 2's attention logit
/// soft-capping; must be finite and >= 0). Each of the three is an op of its
/// own to the rows (Op::AttentionBidirectional, AttentionSinks,
/// AttentionSoftcap), which a row may refuse. out: [n_tok, n_head, head_dim].
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& seq, const Tensor& pos,
                 const AttentionOpParams& p);

/// Multi-head latent attention in its absorbed form (DeepSeek-AI 2024,
/// "DeepSeek-V2", section 2.1; llama.cpp's deepseek2 graph with MLA): every
/// query head attends over one shared f32 latent cache [n_seq·slots, d_k]
/// written by kv_store, whose rows are c_kv | k_pe (kv_lora_rank +
/// qk_rope_head_dim), and reads as its value the first n_v values of the
/// same rows (c_kv): out_h = softmax(scale · q_h·Cᵀ) · C[:, :n_v]. q: [n_tok,
/// n_head, d_k] (W_UK already folded into its nope part); causal, with
/// p.window and p.slots as attention's (p.causal must be true). out: [n_tok,
/// n_head, n_v].
Tensor attention_latent(const Tensor& q, const Tensor& cache, const Tensor& seq, const Tensor& pos,
                        const AttentionOpParams& p, int64_t n_v);

/// Causal multi-head attention of n_tok query tokens of one sequence over
/// f32 keys and values given for its positions 0..n_kv-1 (no cache): token
/// t sees positions [0, pos[t]]: out_h = softmax(scale · q_h·K_hᵀ) · V_h.
/// q: [n_tok, n_head, d_k]; k: [n_kv, n_head, d_k]; v: [n_kv, n_head, d_v];
/// pos: [n_tok] i32 in [0, n_kv); out: [n_tok, n_head, d_v]. MLA's expanded
/// prefill (K and V decompressed from the latent cache).
Tensor attention_seq(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pos, float scale);

// ---- images (UNet, VAE) ----------------------------------------------------
// An image is ne = {C, W, H, N} (ggml order): a pixel's C channel values are
// contiguous, W pixels make a row, H rows an image, N images a batch --
// PyTorch's NCHW tensor in its channels_last memory format (NHWC). So a 1×1
// convolution is a matmul over pixels, an image is a [N·H·W, C] token matrix
// for attention with no permute, a per-channel bias is one row (add), and
// the UNet's skip connections join channels (concat along dim 0).

/// GroupNorm (Wu & He 2018; torch.nn.GroupNorm, F.group_norm): the C
/// channels fall into n_groups groups of C / n_groups consecutive channels;
/// per image and group, y = (x - mean) / √(var + eps) ⊙ w[c] + b[c], mean and
/// (biased) variance over the group's C/n_groups · W · H values. The UNet's
/// and VAE's GroupNorm32 is n_groups = 32, eps 1e-5 (UNet) or 1e-6 (VAE).
/// x: {C, W, H, N} f32, contiguous; w, b: empty or [C] f32; out: x's shape.
/// Throws kvad::Error naming the shapes when n_groups does not divide C or
/// w/b are not [C].
Tensor group_norm(const Tensor& x, int64_t n_groups, const Tensor& w, const Tensor& b, float eps);

/// Nearest-neighbour upsampling by an integer factor in W and H
/// (F.interpolate(x, scale_factor=factor, mode="nearest"); diffusers'
/// Upsample2D with factor 2): out[c, ox, oy, n] = x[c, ox / f, oy / f, n].
/// x: {C, W, H, N} f32, contiguous; out: {C, W·f, H·f, N}. Throws for
/// factor < 1.
Tensor upsample_nearest2d(const Tensor& x, int64_t factor);

/// Zero padding (F.pad(x, ..., mode="constant", value=0)): lo[i] zeros before
/// and hi[i] after the values of dimension i (ggml order), for each i.
/// x: any f32 tensor, contiguous; out: ne[i] + lo[i] + hi[i]. Throws for a
/// negative amount. (diffusers' Downsample2D pads {0, 1, 0, 1} in W and H,
/// i.e. lo = {0, 0, 0, 0}, hi = {0, 1, 1, 0} here, when it pads by itself.)
Tensor pad(const Tensor& x, std::array<int64_t, 4> lo, std::array<int64_t, 4> hi);

/// torch.cat([a, b], dim) with dim in ggml order (0: the innermost,
/// contiguous dimension; for images {C, W, H, N}: 0 joins channels, 3
/// batches): a and b have the same sizes except in `dim`; out has a.ne[dim] +
/// b.ne[dim] there. f32. Strided: a and b, on every row. Throws for shapes
/// that differ elsewhere or dim outside 0..3.
Tensor concat(const Tensor& a, const Tensor& b, int dim);

/// 2-D convolution (torch.nn.functional.conv2d with dilation 1 and groups 1;
/// diffusers' and ldm's nn.Conv2d), zero padding:
///   out[n, oy, ox, o] = bias[o] + Σ_{ky, kx, c} w[o, ky, kx, c] ·
///                       x[n, oy·stride_h + ky - pad_h, ox·stride_w + kx - pad_w, c]
/// x: {C, W, H, N} f32, contiguous; w: {C, KW, KH, OC} -- torch's weight
/// [OC, C, KH, KW] with its input channels moved innermost (conv2d_weight
/// makes it) -- in f32, f16, bf16, or a block format the device's matmul
/// reads (q8_0, ...; C must then be a whole number of its blocks); bias:
/// empty or [OC] f32; out: {OC, OW, OH, N}, OW = (W + 2·pad_w - KW) /
/// stride_w + 1, OH likewise. On the CPU, output pixels are computed in tiles
/// whose im2col rows take at most about 1 MiB (so a 128×128 latent needs no
/// unbounded scratch), each tile one matmul of the device's GEMMs (weights
/// split over threads); a 1×1 convolution with stride 1 and no padding is
/// one matmul over the pixels, no im2col. Throws kvad::Error naming the
/// shapes for a weight that does not match x, a stride < 1, padding < 0, a
/// kernel larger than the padded image, or a format the device cannot
/// compute with.
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p = {});
/// torch's conv2d weight [OC, C, KH, KW] (ne {KW, KH, C, OC}, f32, f16 or
/// bf16, as a checkpoint stores it) in conv2d's layout {C, KW, KH, OC}: a
/// permuted contiguous copy on its device, once at load (the same bytes,
/// re-shaped, when C = 1 or KW = KH = 1). Quantize after this, not before.
Tensor conv2d_weight(const Tensor& w_torch);

/// Scaled dot-product attention without a mask or cache
/// (F.scaled_dot_product_attention(q, k, v, scale=scale) per image and head;
/// diffusers' Attention with AttnProcessor2_0: the UNet's self-attention over
/// spatial tokens and its cross-attention over text tokens, the VAE's
/// mid-block attention): out_h = softmax(scale · q_h · K_hᵀ) · V_h.
/// q: [N, n_q, H, D] (ne {D, H, n_q, N}); k, v: [N, n_kv, H, D], n_kv any
/// (cross-attention: n_q ≠ n_kv); out: [N, n_q, H, D] contiguous; f32. On the
/// CPU with AVX2 and D % 8 == 0, D <= 256 (40, 64, 80, 160), tiles of up to
/// 64 queries of one head stream over blocks of 32 keys with an online
/// softmax (Milakov & Gimelshein 2018; FlashAttention's tiling, Dao et al.
/// 2022), so no n_q × n_kv score matrix exists; otherwise the scalar
/// reference, one row of n_kv scores at a time. Threads split images ×
/// heads × query tiles. Strided: q, k and v with contiguous head vectors
/// (nb[0] = 4; e.g. views into one fused projection), k and v with the same
/// token stride nb[2]. Throws kvad::Error naming the shapes when they do not
/// fit.
Tensor sdpa(const Tensor& q, const Tensor& k, const Tensor& v, float scale);

// ---- mixture of experts ----------------------------------------------------

/// The router of a sparse MoE layer (Shazeer et al. 2017; transformers'
/// Qwen3MoeTopKRouter, llama.cpp build_moe_ffn with softmax gating):
/// p = softmax(row of logits); ids: the k experts of largest p, largest
/// first (ties: lower index first); weights: their p, divided by their sum
/// when `norm` (norm_topk_prob). logits: [n_tok, n_expert] f32, 0 < k <=
/// n_expert; ids: [n_tok, k] i32; weights: [n_tok, k] f32.
struct MoeRoute {
  Tensor ids, weights;
};
MoeRoute moe_route(const Tensor& logits, int64_t k, bool norm);
/// The same under a full choice rule (backend.h MoeRouteParams): p =
/// softmax or σ of the logits; c = p (+ bias); with groups, only experts of
/// the topk_group groups of highest score (max of c, or sum of its top two)
/// are candidates; ids: the k candidates of highest c (largest first, ties:
/// lower index); weights: their p (÷ Σ when norm) · scale. DeepSeek V2's
/// greedy / group_limited_greedy and V3's noaux_tc (transformers'
/// DeepseekV2TopkRouter, DeepseekV3TopkRouter). Throws for k or the groups
/// not fitting n_expert (n_group must divide it, k <= topk_group · group
/// size) or a bias of another size.
MoeRoute moe_route(const Tensor& logits, const MoeRouteParams& p);
/// Per-slot expert products (ggml_mul_mat_id): y[t, j] = x[t, j'] · W[ids[t, j]]ᵀ
/// with j' = j, or 0 when x has one row per token. x: [n_tok, n_x, n_in] f32,
/// n_x = 1 or k; w: [n_expert, n_out, n_in] (ne = {n_in, n_out, n_expert}) in
/// a format the device's matmul reads; ids: [n_tok, k] i32 in [0, n_expert)
/// (moe_route's); y: [n_tok, k, n_out]. The slots are grouped by expert, so
/// each expert's matrix is read once per call however many tokens chose it.
/// An id out of range throws (CPU).
Tensor matmul_id(const Tensor& x, const Tensor& w, const Tensor& ids);
/// The weighted sum of each token's expert outputs: out[t] = Σ_j weights[t, j] · y[t, j].
/// y: [n_tok, k, n] f32; weights: [n_tok, k] f32; out: [n_tok, n].
Tensor moe_sum(const Tensor& y, const Tensor& weights);

// ---- recurrent layers (gated DeltaNet: Qwen3-Next) ---------------------------

/// Causal depthwise 1-D convolution with a rolling state (Mamba's and
/// Gated DeltaNet's short convolution; transformers' causal_conv1d_fn /
/// causal_conv1d_update, llama.cpp's ggml_ssm_conv). For token t of
/// sequence s = seq[t], channel c:
///   out[t, c] = Σ_{j<K-1} w[c, j] · state_s[j, c] + w[c, K-1] · x[t, c]
/// then state_s shifts by one row and takes x[t] as its newest. A token at
/// pos 0 starts its sequence from a zero state. A sequence's tokens in the
/// call must be in order at consecutive positions (the state is as of the
/// position before the first). No bias, no activation (the caller applies
/// SiLU). x: [n_tok, C] f32; w: [C, K] f32 (ne {K, C}); state: [n_seq,
/// (K-1)·C] f32, row j of C values per older input, oldest first; out:
/// [n_tok, C]. Throws for a sequence id outside the state's rows or
/// positions that do not follow each other.
Tensor ssm_conv(const Tensor& x, const Tensor& w, const Tensor& state, const Tensor& seq, const Tensor& pos);

/// The gated delta rule (Yang, Kautz & Hatamizadeh 2024, "Gated Delta
/// Networks"; transformers' torch_recurrent_gated_delta_rule and
/// torch_chunk_gated_delta_rule): per value head h, a state S [Dk, Dv]
/// updated token by token,
///   S ← e^{g_t} S;  u = β_t (v_t − Sᵀ k_t);  S ← S + k_t uᵀ;  o_t = Sᵀ (scale · q_t)
/// with value head h reading key head h / (Hv / Hk) (p.tiled_heads: h % Hk). q, k are used as
/// given (the caller L2-normalises them). p.chunk > 1 computes each
/// sequence's tokens in chunks of p.chunk with the parallel form (within a
/// chunk the u's solve a unit lower-triangular system; the state is carried
/// from chunk to chunk), which equals the recurrent form up to rounding. A
/// token at pos 0 starts its sequence from a zero state; a sequence's tokens
/// must be in order at consecutive positions. q, k: [n_tok, Hk, Dk] f32;
/// v: [n_tok, Hv, Dv] f32; g (log decay, <= 0), beta: [n_tok, Hv] f32;
/// state: [n_seq, Hv·Dk·Dv] f32 (per head Dk rows of Dv), updated in place;
/// out: [n_tok, Hv, Dv]. Throws as ssm_conv, and for Hv not a multiple of Hk.
Tensor gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                        const Tensor& state, const Tensor& seq, const Tensor& pos, const DeltaRuleParams& p);

}  // namespace kvad::ops
