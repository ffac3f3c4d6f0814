#include "model/blocks.h"

#include <algorithm>

#include "base/error.h"
#include "base/thread_pool.h"
#include "kernels/cpu/ops.h"

namespace kvad {

void rms_norm_rows(const float* x, const float* w, int64_t n_rows, int64_t n, float eps, float* y) {
  for (int64_t r = 0; r < n_rows; ++r) cpu::rms_norm(x + r * n, w, n, eps, y + r * n);
}

void rms_norm_rows(ThreadPool& pool, const float* x, const float* w, int64_t n_rows, int64_t n, float eps,
                   float* y) {
  pool.parallel_for(n_rows, 16, [&](int64_t r0, int64_t r1, int) {
    rms_norm_rows(x + r0 * n, w, r1 - r0, n, eps, y + r0 * n);
  });
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

  rms_norm_rows(pool, x, w.norm.f32(), n, E, p.norm_eps, n_.data());
  cpu::matmul_multi(pool, {{&w.wq, q_.data()}, {&w.wk, k_.data()}, {&w.wv, v_.data()}}, n_.data(), n);
  // Per token: QK-norm, RoPE, then K and V into the cache (f16).
  pool.parallel_for(n, 8, [&](int64_t t0, int64_t t1, int) {
    for (int64_t t = t0; t < t1; ++t) {
      float* qt = &q_[t * q_dim];
      float* kt = &k_[t * kv_dim];
      if (w.q_norm) rms_norm_rows(qt, w.q_norm.f32(), H, D, p.norm_eps, qt);
      if (w.k_norm) rms_norm_rows(kt, w.k_norm.f32(), Hkv, D, p.norm_eps, kt);
      cpu::rope(qt, H, D, p.n_rot, b.pos[t], p.rope_freq_base, p.rope_freq_scale, p.rope_neox);
      cpu::rope(kt, Hkv, D, p.n_rot, b.pos[t], p.rope_freq_base, p.rope_freq_scale, p.rope_neox);
      cpu::f32_to_f16_row(kt, cache.k(il, b.seq[t], b.pos[t]), kv_dim);
      cpu::f32_to_f16_row(&v_[t * kv_dim], cache.v(il, b.seq[t], b.pos[t]), kv_dim);
    }
  });
  // Causal attention: token t sees positions [first, pos[t]] of its sequence,
  // first = 0, or pos[t] - window + 1 in a sliding-window layer. Work is cut
  // into tiles of query rows that share a KV head: a run of tokens of one
  // sequence times the query heads of one group, so each K/V block is read
  // once per tile (cpu::attention_rows_f16).
  const int64_t G = H / Hkv;
  const int64_t heads_per_tile = std::min<int64_t>(G, cpu::AttentionRows::kMax);
  const int64_t toks_per_tile = std::max<int64_t>(1, cpu::AttentionRows::kMax / heads_per_tile);
  tiles_.clear();
  for (int64_t t0 = 0; t0 < n;) {
    int64_t t1 = t0 + 1;
    while (t1 < n && t1 - t0 < toks_per_tile && b.seq[t1] == b.seq[t0]) ++t1;
    for (int64_t kvh = 0; kvh < Hkv; ++kvh)
      for (int64_t h0 = kvh * G; h0 < (kvh + 1) * G; h0 += heads_per_tile)
        tiles_.push_back({t0, t1, h0, std::min(h0 + heads_per_tile, (kvh + 1) * G)});
    t0 = t1;
  }
  // Later tokens see more keys: hand out the last tiles first.
  pool.parallel_for(static_cast<int64_t>(tiles_.size()), 1, [&](int64_t i0, int64_t i1, int) {
    for (int64_t i = i0; i < i1; ++i) {
      const Tile& tile = tiles_[tiles_.size() - 1 - i];
      cpu::AttentionRows rows;
      for (int64_t t = tile.t0; t < tile.t1; ++t)
        for (int64_t h = tile.h0; h < tile.h1; ++h) {
          rows.q[rows.n] = &q_[t * q_dim + h * D];
          rows.out[rows.n] = &att_[t * q_dim + h * D];
          rows.first[rows.n] = p.sliding_window > 0 ? std::max<int64_t>(0, b.pos[t] - p.sliding_window + 1) : 0;
          rows.last[rows.n] = b.pos[t];
          ++rows.n;
        }
      const int64_t kvh = tile.h0 / G;
      cpu::attention_rows_f16(rows, cache.k(il, b.seq[tile.t0], 0) + kvh * D,
                              cache.v(il, b.seq[tile.t0], 0) + kvh * D, kv_dim, D, p.scale);
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
  rms_norm_rows(pool, x, w.norm.f32(), n_tok, E, norm_eps, n_.data());
  cpu::matmul_multi(pool, {{&w.gate, g_.data()}, {&w.up, u_.data()}}, n_.data(), n_tok);
  pool.parallel_for(n_tok, 4, [&](int64_t t0, int64_t t1, int) {
    float* g = g_.data() + t0 * F;
    const float* u = u_.data() + t0 * F;
    switch (act) {
      case Activation::SiLU: cpu::swiglu(g, u, (t1 - t0) * F); break;
      case Activation::GELU_tanh: cpu::geglu(g, u, (t1 - t0) * F); break;
    }
  });
  cpu::matmul(pool, w.down, g_.data(), n_tok, out);
}

}  // namespace kvad
