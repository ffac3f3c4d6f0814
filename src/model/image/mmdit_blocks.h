// The blocks the MMDiT image transformers share (FLUX.1's
// FluxTransformer2DModel, Qwen-Image's QwenImageTransformer2DModel): AdaLN
// modulation, multi-axis rotary embeddings over (text, h, w) ids, joint
// attention over the concatenated text and image streams with QK RMSNorm,
// and the double-stream block built of them. Each takes its weights by its
// diffusers names under a WeightScope; where the two models name a part
// differently the block takes the names as data (DoubleStreamNames).
//
// Layout: a stream is ne {dim, n_tok, N} (N samples of n_tok tokens); a
// per-sample vector (the conditioning, a modulation chunk) is ne {dim, 1, N},
// broadcast over the tokens by ops::add / ops::mul.
//
// Sources: Esser et al. 2024, "Scaling Rectified Flow Transformers for
// High-Resolution Image Synthesis" (MMDiT, joint attention, QK-norm); Peebles
// & Xie 2023, "Scalable Diffusion Models with Transformers" (adaLN-Zero);
// Su et al. 2021 (RoPE); diffusers 0.35 models/transformers/transformer_flux.py
// (FluxTransformerBlock, FluxAttnProcessor, FluxPosEmbed),
// models/normalization.py (AdaLayerNormZero, AdaLayerNormZeroSingle,
// AdaLayerNormContinuous), models/embeddings.py (get_1d_rotary_pos_embed,
// apply_rotary_emb) and transformer_qwenimage.py (QwenImageTransformerBlock).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/image/layers.h"

namespace kvad::image::mmdit {

/// The modulation of AdaLN-Zero: chunks = Linear(SiLU(cond)).chunk(n) (diffusers'
/// AdaLayerNormZero's 6 chunks shift_msa, scale_msa, gate_msa, shift_mlp,
/// scale_mlp, gate_mlp; AdaLayerNormZeroSingle's 3; AdaLayerNormContinuous's 2,
/// scale then shift). Weight torch [n·dim, cond_dim], bias [n·dim].
struct AdaLNModulation {
  Linear linear;
  int64_t dim = 0, n = 0;
  AdaLNModulation() = default;
  AdaLNModulation(const WeightScope& s, int64_t cond_dim, int64_t dim, int64_t n);
  /// silu_cond: SiLU(conditioning) [N, cond_dim] (ne {cond_dim, N}; computed
  /// once per call and shared by every block) → n chunks, each ne {dim, 1, N}.
  std::vector<Tensor> operator()(const Tensor& silu_cond) const;
};

/// A Linear over a stream: x {n_in, n_tok, N} → {n_out, n_tok, N} (ops::matmul
/// itself returns the rows flattened).
Tensor linear_tokens(const Linear& l, const Tensor& x);

/// LayerNorm without affine weights (eps 1e-6 in FLUX and Qwen-Image), then
/// x̂ · (1 + scale) + shift. x {dim, n_tok, N}; shift, scale {dim, 1, N}.
Tensor modulate(const Tensor& x, const Tensor& shift, const Tensor& scale, float eps);
/// x + gate · y (the gated residual of adaLN-Zero). gate {dim, 1, N}.
Tensor gated_add(const Tensor& x, const Tensor& gate, const Tensor& y);

/// Multi-axis rotary embedding tables (diffusers' FluxPosEmbed: for each axis
/// i, get_1d_rotary_pos_embed(axes_dim[i], ids[:, i], theta,
/// repeat_interleave_real=True) in float64, cast to f32; the axes'
/// frequencies concatenated along the head dim). Each pair (2k, 2k+1) of a
/// head rotates by angle ids[t, axis(k)] · theta^(-2j/axes_dim[axis]) (j the
/// pair's index within its axis).
struct RopeTable {
  Tensor cos, sin, neg_sin;  ///< ne {head_dim/2, 1, n_tok·N}, f32, on the device (neg_sin = −sin)
  int64_t head_dim = 0, n_tok = 0, batch = 1;
};
/// ids: n_tok rows of axes_dim.size() positions (row-major, as the
/// pipeline's txt_ids then img_ids); the same for each of the `batch`
/// samples. Throws kvad::Error when an axis dim is odd or ids do not hold
/// n_tok · n_axes values.
RopeTable rope_table(const std::vector<float>& ids, const std::vector<int64_t>& axes_dim, double theta, int64_t batch,
                     Device dev);
/// apply_rotary_emb(x, (cos, sin), use_real=True, use_real_unbind_dim=-1):
/// out[2k] = x[2k]·cos − x[2k+1]·sin, out[2k+1] = x[2k+1]·cos + x[2k]·sin.
/// x: {head_dim, n_head, n_tok, N} contiguous f32 → the same shape.
Tensor apply_rope(const Tensor& x, const RopeTable& t);

/// One stream's q, k, v projections with RMSNorm over each head (diffusers'
/// to_q/to_k/to_v + norm_q/norm_k, or add_q_proj/add_k_proj/add_v_proj +
/// norm_added_q/norm_added_k).
struct QKV {
  Linear q, k, v;
  Tensor norm_q, norm_k;  ///< [head_dim] f32
  QKV() = default;
  QKV(const WeightScope& s, const char* q, const char* k, const char* v, const char* nq, const char* nk, int64_t dim,
      int64_t inner, int64_t head_dim);
};

/// Joint attention (FluxAttnProcessor; QwenDoubleStreamAttnProcessor2_0):
/// q, k, v of the text and image streams, each QK-normed, concatenated along
/// the tokens as [text, image], RoPE over the joint sequence, scaled
/// dot-product attention (scale 1/√head_dim), split back. With `added`
/// (double-stream) the text stream has its own projections (add_*_proj) and
/// output (to_add_out); without it (FLUX's single-stream blocks) the caller
/// passes one stream that already is [text, image], and no output projection.
struct JointAttention {
  QKV img, txt;
  Linear to_out, to_add_out;
  bool added = false, has_out = false;
  int64_t heads = 0, head_dim = 0;
  float eps = 1e-6f;
  JointAttention() = default;
  /// `added`: the add_* projections and to_add_out exist; `out`: to_out.0 exists.
  JointAttention(const WeightScope& s, int64_t dim, int64_t heads, int64_t head_dim, bool added, bool out, float eps);
  struct Out {
    Tensor img, txt;  ///< {dim, n, N}; txt empty without `added`
  };
  /// img {dim, n_img, N}; txt {dim, n_txt, N} (ignored without `added`);
  /// rope over n_txt + n_img tokens (n_img alone without `added`).
  Out operator()(const Tensor& img, const Tensor& txt, const RopeTable& rope) const;
};

/// The feed-forward of diffusers' FeedForward(activation_fn="gelu-tanh"):
/// net.2(gelu_tanh(net.0.proj(x))), dim → mult·dim → dim.
struct GeluMLP {
  Linear fc1, fc2;
  GeluMLP() = default;
  GeluMLP(const WeightScope& s, int64_t dim, int64_t hidden);
  Tensor operator()(const Tensor& x) const { return linear_tokens(fc2, ops::gelu(linear_tokens(fc1, x))); }
};

/// Where a double-stream block's parts live under its scope: FLUX's
/// "norm1.linear" / "norm1_context.linear" / "ff" / "ff_context", Qwen-Image's
/// "img_mod.1" / "txt_mod.1" / "img_mlp" / "txt_mlp". The attention is "attn"
/// in both.
struct DoubleStreamNames {
  std::string img_mod, txt_mod, img_mlp, txt_mlp;
};
DoubleStreamNames flux_double_stream_names();
DoubleStreamNames qwen_image_double_stream_names();

/// A double-stream block (FluxTransformerBlock; QwenImageTransformerBlock):
/// per stream s in {img, txt}, with (shift1, scale1, gate1, shift2, scale2,
/// gate2) = mod_s(SiLU(temb)):
///   a_img, a_txt = JointAttention(modulate(img, shift1, scale1), modulate(txt, ...))
///   s = s + gate1 · a_s
///   s = s + gate2 · MLP_s(modulate(s, shift2, scale2))
struct DoubleStreamBlock {
  AdaLNModulation img_mod, txt_mod;
  JointAttention attn;
  GeluMLP img_mlp, txt_mlp;
  float eps = 1e-6f;
  DoubleStreamBlock(const WeightScope& s, const DoubleStreamNames& names, int64_t dim, int64_t heads,
                    int64_t head_dim, int64_t mlp_hidden, float eps);
  /// img {dim, n_img, N}, txt {dim, n_txt, N} updated in place;
  /// silu_temb: SiLU(temb) ne {dim, N}.
  void operator()(Tensor& img, Tensor& txt, const Tensor& silu_temb, const RopeTable& rope) const;
};

}  // namespace kvad::image::mmdit
