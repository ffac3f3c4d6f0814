// Shared transformer blocks that architecture files compose (DESIGN.md seam 4):
// RMSNorm over rows, the attention block and the gated MLP. Each block owns
// its scratch activations, so a model keeps one instance and reuses it across
// layers and calls. Shapes in ggml order: [n_tok, n_embd] is n_tok rows of
// n_embd floats.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "model/kv_cache.h"
#include "model/model.h"
#include "tensor/tensor.h"

namespace kvad {

class ThreadPool;

/// RMSNorm of each of n_rows rows: y[r] = x[r] / sqrt(mean(x[r]²) + eps) ⊙ w.
/// x, y: [n_rows, n]; w: [n] f32 (nullptr: no weight). y may alias x.
void rms_norm_rows(const float* x, const float* w, int64_t n_rows, int64_t n, float eps, float* y);
/// The same, rows split over the pool's threads.
void rms_norm_rows(ThreadPool& pool, const float* x, const float* w, int64_t n_rows, int64_t n, float eps,
                   float* y);

/// Throws kvad::Error naming `file` and the tensor when a non-empty tensor of
/// `ts` is not f32 (norm weights, which the blocks read as floats).
void require_f32(const std::string& file, std::initializer_list<const Tensor*> ts);

/// Weights of one attention block. norm: [n_embd] f32 (the pre-norm);
/// wq: [n_embd → n_head·head_dim]; wk, wv: [n_embd → n_head_kv·head_dim];
/// wo: [n_head·head_dim → n_embd]; q_norm, k_norm: optional per-head RMSNorm
/// weights [head_dim] f32 (Gemma 3, Qwen3, OLMo 2), empty when the
/// architecture has none.
struct AttentionWeights {
  Tensor norm, wq, wk, wv, wo;
  Tensor q_norm, k_norm;
};

/// How one layer's attention is computed.
struct AttentionParams {
  int64_t n_head = 0, n_head_kv = 0, head_dim = 0;
  int64_t n_rot = 0;            ///< rotated dims per head (<= head_dim)
  float rope_freq_base = 10000.0f;
  float rope_freq_scale = 1.0f;  ///< linear scaling: multiplies positions
  bool rope_neox = false;        ///< pair (i, i+n_rot/2) instead of (2i, 2i+1); see cpu::rope
  float scale = 0;               ///< multiplies q·k (usually 1/sqrt(head_dim))
  float norm_eps = 1e-5f;        ///< eps of the pre-norm and the QK norms
  /// 0: full causal attention. W > 0: sliding window — the token at position
  /// p attends to positions in (p - W, p] (llama.cpp's LLAMA_SWA_TYPE_STANDARD,
  /// HF's sliding_window; Mistral, Gemma 2/3 local layers).
  int32_t sliding_window = 0;
};

/// The attention block of a pre-norm decoder layer, for a batch of tokens:
///   n = RMSNorm(x) ⊙ norm
///   q = Wq·n, k = Wk·n, v = Wv·n        per head: q, k ← RMSNorm(·) ⊙ q_norm/k_norm (when given)
///   q, k ← RoPE(q, k, pos)              k, v → cache layer il at (seq, pos), in f16
///   a_h = softmax(scale · q_h·Kᵀ) · V   over the positions token t may see (causal, optionally windowed),
///                                       query head h reading kv head h / (n_head / n_head_kv)
///   out = Wo · a
/// (Vaswani et al. 2017; grouped-query attention, Ainslie et al. 2023.)
/// Residual adds and any post-norm are the caller's. The caller (Session)
/// has checked that positions continue the cache; every token's K/V are
/// written before attention runs, so a token sees earlier tokens of the same
/// batch. x: [b.n, n_embd]; out: [b.n, n_embd] (must not alias x).
class Attention {
 public:
  void forward(ThreadPool& pool, const AttentionWeights& w, const AttentionParams& p, KVCache& cache,
               int64_t il, const BatchView& b, const float* x, float* out);

 private:
  std::vector<float> n_, q_, k_, v_, att_;
  struct Tile {
    int64_t t0, t1, h0, h1;  // batch tokens [t0, t1) x query heads [h0, h1)
  };
  std::vector<Tile> tiles_;
};

/// Activation of a gated MLP.
enum class Activation {
  SiLU,       ///< SwiGLU (Shazeer 2020): Llama, Mistral, Qwen
  GELU_tanh,  ///< GeGLU with the tanh approximation of GELU: Gemma
};

/// Weights of a gated MLP. norm: [n_embd] f32 (the pre-norm); gate, up:
/// [n_embd → n_ff]; down: [n_ff → n_embd].
struct MlpWeights {
  Tensor norm, gate, up, down;
};

/// The gated feed-forward block of a pre-norm decoder layer:
///   n = RMSNorm(x) ⊙ norm;  out = Wdown · (act(Wgate·n) ⊙ Wup·n)
/// (Shazeer 2020, "GLU Variants Improve Transformer"). Residual adds and any
/// post-norm are the caller's. x: [n_tok, n_embd]; out: [n_tok, n_embd]
/// (must not alias x).
class GatedMlp {
 public:
  void forward(ThreadPool& pool, const MlpWeights& w, Activation act, float norm_eps, const float* x,
               int64_t n_tok, float* out);

 private:
  std::vector<float> n_, g_, u_;
};

}  // namespace kvad
