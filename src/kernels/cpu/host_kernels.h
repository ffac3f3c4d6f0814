// Eager CPU ops on f32 activations and weights in any format with CPU kernels.
//
// Shapes use ggml order in comments: [n_tok, n_embd] means n_tok rows of
// n_embd contiguous floats.
#pragma once
#include <cmath>
#include <cstdint>
#include <initializer_list>

#include "tensor/tensor.h"

namespace kvad {
class ThreadPool;
}

namespace kvad::cpu {

/// y = x · Wᵀ. W: [n_out, n_in] (ne[0] = n_in) in any format with CPU kernels;
/// x: [n_tok, n_in] f32; y: [n_tok, n_out] f32. Activations are converted
/// once to W's vec_dot_type (e.g. Q8_1 for Q4_1 weights, as ggml does); each
/// y[t, o] is then vec_dot(W row o, x row t) up to float summation order,
/// computed by the format's tiled gemm where it has one (kernels.h), by one
/// vec_dot per pair otherwise. Work is split over W's rows (matmul.cpp).
/// Throws kvad::Error when W's format has no CPU kernels.
void matmul(ThreadPool& pool, const Tensor& w, const float* x, int64_t n_tok, float* y);

/// One product of a matmul_multi: y = x · wᵀ, y: [n_tok, w.n_rows()] f32.
struct MatmulTarget {
  const Tensor* w;
  float* y;
};

/// Several matmuls of the same input x [n_tok, n_in] (q/k/v projections,
/// gate/up): the activations are converted once when every weight takes the
/// same dot partner and layout, and all rows of all weights are split over
/// the threads in one parallel loop (one barrier instead of one per weight).
/// Results equal separate matmul calls bit for bit. Throws as matmul.
void matmul_multi(ThreadPool& pool, std::initializer_list<MatmulTarget> targets, const float* x, int64_t n_tok);

/// The same over an array of n targets.
void matmul_multi(ThreadPool& pool, const MatmulTarget* targets, int n, const float* x, int64_t n_tok);

/// out[i] = row ids[i] of table W ([n_rows, n]) converted to f32; only the
/// rows asked for are dequantized. out: [n_ids, n]. Throws kvad::Error for an
/// id outside [0, n_rows).
void get_rows(const Tensor& w, const int32_t* ids, int64_t n_ids, float* out);

/// RMSNorm (Zhang & Sennrich 2019): y = x / sqrt(mean(x²) + eps) * w.
/// x, y: [n]; w: [n] f32, or nullptr for no weight. y may alias x.
void rms_norm(const float* x, const float* w, int64_t n, float eps, float* y);

/// Rotary position embedding (Su et al. 2021, RoFormer) applied in place to
/// x: [n_head, head_dim] of one token at position `pos`; the first n_rot dims
/// of each head rotate with theta_i = pos * freq_base^(-2i/n_rot).
/// `neox` = false pairs (2i, 2i+1) (GGUF llama files, whose Q/K were permuted
/// at conversion); true pairs (i, i + n_rot/2) (HF rotate_half: GPT-NeoX,
/// Qwen2, Gemma). `freq_scale` multiplies pos (linear scaling);
/// `freq_factors` (nullptr or [n_rot/2]) divides theta_i, and `attn_factor`
/// multiplies cos and sin (tensor/backend.h RopeParams; ggml_rope_ext).
void rope(float* x, int64_t n_head, int64_t head_dim, int64_t n_rot, int64_t pos,
          float freq_base, float freq_scale, bool neox, const float* freq_factors = nullptr,
          float attn_factor = 1.0f);

/// gate[i] = silu(gate[i]) * up[i] (SwiGLU, Shazeer 2020), n elements.
void swiglu(float* gate, const float* up, int64_t n);

/// GELU with the tanh approximation (Hendrycks & Gimpel 2016; as GPT-2, Gemma's
/// gelu_pytorch_tanh and ggml's ggml_gelu define it), in place over n elements:
/// gelu(x) = 0.5·x·(1 + tanh(sqrt(2/π)·(x + 0.044715·x³))).
void gelu(float* x, int64_t n);

/// gate[i] = gelu(gate[i]) * up[i] (GeGLU, Shazeer 2020; tanh GELU as gelu()),
/// n elements.
void geglu(float* gate, const float* up, int64_t n);

/// Numerically stable softmax in place over n elements.
void softmax(float* x, int64_t n);

/// x[i] += y[i].
void add(float* x, const float* y, int64_t n);

/// Scaled dot-product attention of one query token over a KV cache in f16.
/// q: [n_head, head_dim] f32; k, v: [n_pos, kv_stride] f16 (row p holds all
/// kv heads of position p, head h at offset h*head_dim); query head h reads
/// kv head h / (n_head / n_head_kv) (grouped-query attention, Ainslie et al.
/// 2023). out: [n_head, head_dim]. scratch: n_pos floats.
/// out = softmax(q·kᵀ · scale) · v over positions [0, n_pos). sink: an extra
/// logit in every head's softmax denominator (gpt-oss's attention sinks),
/// -inf for none. softcap c > 0: each score s becomes c · tanh(s / c) before
/// the softmax (Gemma 2); 0 for none.
void attention_f16(const float* q, const uint16_t* k, const uint16_t* v, int64_t n_pos,
                   int64_t kv_stride, int64_t n_head, int64_t n_head_kv, int64_t head_dim,
                   float scale, float* out, float* scratch, float sink = -INFINITY, float softcap = 0);

/// Query rows of one attention tile: every row reads the same KV head.
/// Row r is one (token, query head) pair; it sees key positions
/// [first[r], last[r]] (inclusive, indices into the k/v arrays passed to
/// attention_rows), which expresses causal masks and sliding windows.
struct AttentionRows {
  static constexpr int kMax = 16;
  int n = 0;                  ///< rows in use, 1..kMax
  const float* q[kMax];       ///< [head_dim] f32 query of row r
  float* out[kMax];           ///< [head_dim] f32 output of row r
  int64_t first[kMax];        ///< first visible key position of row r
  int64_t last[kMax];         ///< last visible key position of row r (>= first)
  /// 0: position p is row p of k/v. R > 0: k/v are a ring of R rows and
  /// position p is row p % R (a sliding-window cache; last - first < R).
  int64_t ring = 0;
  /// sinks true: row r's softmax has one more logit sink[r] in its
  /// denominator (an attention sink, gpt-oss), with a zero value row.
  bool sinks = false;
  float sink[kMax];
  /// 0: none. c > 0: every score s = scale · q·k becomes c · tanh(s / c)
  /// before the softmax (Gemma 2's attention logit soft-capping).
  float softcap = 0;
};

/// Rows of one KV cache tensor as the attention kernels read them: f16 or
/// f32 (the cache's format, --cache-type-k / --cache-type-v).
struct KVRows {
  const void* data = nullptr;
  bool f32 = false;  ///< false: uint16_t f16 values; true: float
  /// The same rows starting `n` values further on.
  KVRows offset(int64_t n) const {
    return {static_cast<const char*>(data) + n * (f32 ? 4 : 2), f32};
  }
};

/// Attention of a tile of query rows over one KV head:
/// out_r = softmax(q_r · k_pᵀ · scale, p in [first_r, last_r]) · v_p
/// (with sink_r as one more logit of the softmax when rows.sinks, and each
/// score s capped to c · tanh(s / c) when rows.softcap = c > 0).
/// k, v: [*, kv_stride], each f16 or f32, with the head's head_dim values at
/// offset 0 of each row (the caller offsets them to its KV head).
/// head_dim % 8 == 0 and head_dim <= 256 for the AVX2 path (else the
/// reference runs). The AVX2 kernel streams over keys in blocks of 32 with an
/// online softmax (Milakov & Gimelshein 2018; the FlashAttention tiling, Dao
/// et al. 2022), converting each K/V block to f32 once for all rows of the
/// tile. The reference (`attention_rows_ref`) runs attention_f16's per-row
/// math for f16 caches and the same math in f32 for a cache that is f32.
void attention_rows(const AttentionRows& rows, KVRows k, KVRows v, int64_t kv_stride, int64_t head_dim, float scale);
void attention_rows_ref(const AttentionRows& rows, KVRows k, KVRows v, int64_t kv_stride, int64_t head_dim,
                        float scale);

/// f32 -> f16 for n elements (cache writes).
void f32_to_f16_row(const float* x, uint16_t* y, int64_t n);

}  // namespace kvad::cpu
