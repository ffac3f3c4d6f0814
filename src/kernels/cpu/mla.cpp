// Absorbed multi-head latent attention on the CPU (DeepSeek-V2, section 2.1;
// the same product llama.cpp's deepseek2 graph forms with W_UK folded into
// the query). Every head reads the one latent row per position, so a work
// item is a token and a block of its heads: each cached row is loaded once
// per block for the scores and once more for the weighted sum of its first
// n_v values, instead of once per head. Scores, softmax and sums are f32.
#include "kernels/cpu/mla.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "base/cpu_features.h"
#include "base/error.h"
#include "kernels/cpu/row_util.h"

namespace kvad::cpu {
namespace {

// Eight partial sums: the compiler keeps them in one vector register.
float dot(const float* a, const float* b, int64_t n) {
  float s[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) s[j] += a[i + j] * b[i + j];
  float r = ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
  for (; i < n; ++i) r += a[i] * b[i];
  return r;
}

}  // namespace

void latent_block_ref(const LatentBlock& b) {
  const int nh = b.nh;
  const int64_t D = b.D, n_v = b.n_v, m = b.m;
  float* w = b.w;
  auto row_of = [&](int64_t j) { return b.base + ((b.first + j) % b.slots) * D; };
  for (int64_t j = 0; j < m; ++j) {
    const float* c = row_of(j);
    for (int h = 0; h < nh; ++h) w[h * m + j] = b.scale * dot(b.q[h], c, D);
  }
  for (int h = 0; h < nh; ++h) {
    float* wh = w + h * m;
    const float mx = *std::max_element(wh, wh + m);
    float sum = 0;
    for (int64_t j = 0; j < m; ++j) sum += (wh[j] = std::exp(wh[j] - mx));
    const float inv = 1.0f / sum;
    for (int64_t j = 0; j < m; ++j) wh[j] *= inv;
    std::fill(b.out[h], b.out[h] + n_v, 0.0f);
  }
  for (int64_t j = 0; j < m; ++j) {
    const float* c = row_of(j);
    for (int h = 0; h < nh; ++h) {
      const float wj = w[h * m + j];
      float* dst = b.out[h];
      for (int64_t x = 0; x < n_v; ++x) dst[x] += wj * c[x];
    }
  }
}

void attention_latent(const Tensor& q, const Tensor& cache, const Tensor& seq, const Tensor& pos,
                      const AttentionOpParams& p, const Tensor& o) {
  const int64_t D = q.ne[0], H = q.ne[1], n = q.ne[2], n_v = o.ne[0];
  const int32_t* ss = row::ids(seq);
  const int32_t* ps = row::ids(pos);
  const float* pq = row::in(q);
  const float* pc = row::in(cache);
  float* po = row::out(o);
  const int64_t n_seq = cache.n_rows() / p.slots;
  for (int64_t t = 0; t < n; ++t)
    if (ss[t] < 0 || ss[t] >= n_seq || ps[t] < 0)
      throw Error("attention_latent: token " + std::to_string(t) + " at sequence " + std::to_string(ss[t]) +
                  ", position " + std::to_string(ps[t]) + " is outside the cache");
  static const bool avx2 = cpu_features().has_avx2_fma();
  const bool simd = avx2 && D % 8 == 0 && n_v % 8 == 0;
  ThreadPool& pool = row::pool();
  // Blocks of at most 8 heads (the AVX2 loop keeps one accumulator each),
  // and enough items for every thread even at one token (decode).
  const int64_t want = std::max<int64_t>(1, (2 * pool.size() + n - 1) / n);
  const int64_t hb = std::clamp<int64_t>((H + want - 1) / want, 1, 8);
  const int64_t per_tok = (H + hb - 1) / hb;
  pool.parallel_for(n * per_tok, 1, [&](int64_t i0, int64_t i1, int) {
    std::vector<float> w;
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t t = i / per_tok, h0 = (i % per_tok) * hb, h1 = std::min(H, h0 + hb);
      LatentBlock b;
      b.nh = static_cast<int>(h1 - h0);
      for (int h = 0; h < b.nh; ++h) {
        b.q[h] = pq + (t * H + h0 + h) * D;
        b.out[h] = po + (t * H + h0 + h) * n_v;
      }
      b.first = p.window > 0 ? std::max<int64_t>(0, ps[t] - p.window + 1) : 0;
      b.m = ps[t] - b.first + 1;
      b.base = pc + static_cast<size_t>(ss[t]) * p.slots * D;
      b.slots = p.slots;
      b.D = D;
      b.n_v = n_v;
      b.scale = p.scale;
      w.resize(static_cast<size_t>(b.nh * b.m));
      b.w = w.data();
      if (simd) latent_block_avx2(b);
      else latent_block_ref(b);
    }
  });
}

// One (token, head) row per work item: scores over the visible keys, softmax,
// then the weighted sum of the values (rows strided by n_head).
void attention_seq(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pos, float scale,
                   const Tensor& o) {
  const int64_t D = q.ne[0], H = q.ne[1], n = q.ne[2], n_kv = k.ne[2], Dv = v.ne[0];
  const int32_t* ps = row::ids(pos);
  for (int64_t t = 0; t < n; ++t)
    if (ps[t] < 0 || ps[t] >= n_kv)
      throw Error("attention_seq: token " + std::to_string(t) + " at position " + std::to_string(ps[t]) + " sees past the " +
                  std::to_string(n_kv) + " keys given");
  const float* pq = row::in(q);
  const float* pk = row::in(k);
  const float* pv = row::in(v);
  float* po = row::out(o);
  static const bool avx2 = cpu_features().has_avx2_fma();
  row::pool().parallel_for(n * H, 1, [&](int64_t i0, int64_t i1, int) {
    std::vector<float> w;
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t t = i / H, h = i % H, m = ps[t] + 1;
      w.resize(static_cast<size_t>(m));
      const float* qh = pq + i * D;
      for (int64_t j = 0; j < m; ++j)
        w[j] = scale * (avx2 ? dot_f32_avx2(qh, pk + (j * H + h) * D, D) : dot(qh, pk + (j * H + h) * D, D));
      const float mx = *std::max_element(w.begin(), w.end());
      float sum = 0;
      for (float& x : w) sum += (x = std::exp(x - mx));
      const float inv = 1.0f / sum;
      float* dst = po + i * Dv;
      std::fill(dst, dst + Dv, 0.0f);
      for (int64_t j = 0; j < m; ++j) {
        const float wj = w[j] * inv;
        const float* vr = pv + (j * H + h) * Dv;
        if (avx2) axpy_f32_avx2(wj, vr, dst, Dv);
        else
          for (int64_t x = 0; x < Dv; ++x) dst[x] += wj * vr[x];
      }
    }
  });
}

}  // namespace kvad::cpu
