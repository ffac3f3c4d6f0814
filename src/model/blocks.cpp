#include "model/blocks.h"

#include <algorithm>

#include "base/error.h"
#include "base/thread_pool.h"
#include "kernels/cpu/ops.h"

namespace kvad {

void rms_norm_rows(const float* x, const float* w, int64_t n_rows, int64_t n, float eps, float* y) {
  for (int64_t r = 0; r < n_rows; ++r) cpu::rms_norm(x + r * n, w, n, eps, y + r * n);
}

void require_f32(const std::string& file, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    if (*t && t->type != DType::F32)
      throw Error(file + ": " + t->name + " must be f32, is " + dtype_name(t->type));
}

void Attention::forward(ThreadPool& pool, const AttentionWeights& w, const AttentionParams& p, KVCache& cache,
                        int64_t il, const BatchView& b, const float* x, float* out) {
  const int64_t n = b.n, E = w.wq.ne[0], D = p.head_dim, H = p.n_head, Hkv = p.n_head_kv;
  const int64_t q_dim = H * D, kv_dim = Hkv * D;
  n_.resize(n * E);
  q_.resize(n * q_dim);
  k_.resize(n * kv_dim);
  v_.resize(n * kv_dim);
  att_.resize(n * q_dim);

  rms_norm_rows(x, w.norm.f32(), n, E, p.norm_eps, n_.data());
  cpu::matmul(pool, w.wq, n_.data(), n, q_.data());
  cpu::matmul(pool, w.wk, n_.data(), n, k_.data());
  cpu::matmul(pool, w.wv, n_.data(), n, v_.data());
  if (w.q_norm) rms_norm_rows(q_.data(), w.q_norm.f32(), n * H, D, p.norm_eps, q_.data());
  if (w.k_norm) rms_norm_rows(k_.data(), w.k_norm.f32(), n * Hkv, D, p.norm_eps, k_.data());
  for (int64_t t = 0; t < n; ++t) {
    cpu::rope(&q_[t * q_dim], H, D, p.n_rot, b.pos[t], p.rope_freq_base, p.rope_freq_scale, p.rope_neox);
    cpu::rope(&k_[t * kv_dim], Hkv, D, p.n_rot, b.pos[t], p.rope_freq_base, p.rope_freq_scale, p.rope_neox);
    cpu::f32_to_f16_row(&k_[t * kv_dim], cache.k(il, b.seq[t], b.pos[t]), kv_dim);
    cpu::f32_to_f16_row(&v_[t * kv_dim], cache.v(il, b.seq[t], b.pos[t]), kv_dim);
  }
  // Causal attention: token t sees positions [first, pos[t]] of its sequence,
  // first = 0, or pos[t] - window + 1 in a sliding-window layer.
  pool.parallel_for(n * H, 1, [&](int64_t i0, int64_t i1, int) {
    thread_local std::vector<float> scores;
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t t = i / H, h = i % H, kvh = h / (H / Hkv);
      const int64_t first =
          p.sliding_window > 0 ? std::max<int64_t>(0, b.pos[t] - p.sliding_window + 1) : 0;
      const int64_t n_pos = b.pos[t] + 1 - first;
      scores.resize(n_pos);
      cpu::attention_f16(&q_[t * q_dim + h * D], cache.k(il, b.seq[t], first) + kvh * D,
                         cache.v(il, b.seq[t], first) + kvh * D, n_pos, kv_dim, 1, 1, D, p.scale,
                         &att_[t * q_dim + h * D], scores.data());
    }
  });
  cpu::matmul(pool, w.wo, att_.data(), n, out);
}

void GatedMlp::forward(ThreadPool& pool, const MlpWeights& w, Activation act, float norm_eps, const float* x,
                       int64_t n_tok, float* out) {
  const int64_t E = w.gate.ne[0], F = w.gate.n_rows();
  n_.resize(n_tok * E);
  g_.resize(n_tok * F);
  u_.resize(n_tok * F);
  rms_norm_rows(x, w.norm.f32(), n_tok, E, norm_eps, n_.data());
  cpu::matmul(pool, w.gate, n_.data(), n_tok, g_.data());
  cpu::matmul(pool, w.up, n_.data(), n_tok, u_.data());
  switch (act) {
    case Activation::SiLU: cpu::swiglu(g_.data(), u_.data(), n_tok * F); break;
    case Activation::GELU_tanh: cpu::geglu(g_.data(), u_.data(), n_tok * F); break;
  }
  cpu::matmul(pool, w.down, g_.data(), n_tok, out);
}

}  // namespace kvad
