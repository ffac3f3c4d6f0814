#include "kernels/cpu/host_kernels.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "base/cpu_features.h"
#include "base/error.h"
#include "base/thread_pool.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/vec.h"
#include "tensor/half.h"

namespace kvad::cpu {

// matmul: matmul.cpp.

void get_rows(const Tensor& w, const int32_t* ids, int64_t n_ids, float* out) {
  const CpuKernels& k = cpu_kernels(w.type);
  const int64_t n = w.ne[0];
  for (int64_t i = 0; i < n_ids; ++i) {
    if (ids[i] < 0 || ids[i] >= w.n_rows())
      throw Error("get_rows: id " + std::to_string(ids[i]) + " outside [0, " +
                  std::to_string(w.n_rows()) + ") of " + w.name);
    k.to_float(w.row(ids[i]), out + i * n, n);
  }
}

void rms_norm(const float* x, const float* w, int64_t n, float eps, float* y) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float scale = 1.0f / std::sqrt(static_cast<float>(ss / n) + eps);
  if (w) {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale * w[i];
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale;
  }
}

void rope(float* x, int64_t n_head, int64_t head_dim, int64_t n_rot, int64_t pos,
          float freq_base, float freq_scale, bool neox, const float* freq_factors, float attn_factor) {
  const int64_t half = n_rot / 2;
  thread_local std::vector<float> cs;
  cs.resize(2 * half);
  const float p = static_cast<float>(pos) * freq_scale;
  for (int64_t i = 0; i < half; ++i) {
    float theta = p * std::pow(freq_base, -2.0f * static_cast<float>(i) / static_cast<float>(n_rot));
    if (freq_factors) theta /= freq_factors[i];
    cs[2 * i] = std::cos(theta) * attn_factor;
    cs[2 * i + 1] = std::sin(theta) * attn_factor;
  }
  for (int64_t h = 0; h < n_head; ++h) {
    float* v = x + h * head_dim;
    for (int64_t i = 0; i < half; ++i) {
      const int64_t a = neox ? i : 2 * i;
      const int64_t b = neox ? i + half : 2 * i + 1;
      const float x0 = v[a], x1 = v[b];
      v[a] = x0 * cs[2 * i] - x1 * cs[2 * i + 1];
      v[b] = x0 * cs[2 * i + 1] + x1 * cs[2 * i];
    }
  }
}

void swiglu(float* gate, const float* up, int64_t n) { vec_ops().swiglu(gate, up, n); }

static inline float gelu_tanh(float x) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  constexpr float kA = 0.044715f;
  return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * (1.0f + kA * x * x)));
}

void gelu(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = gelu_tanh(x[i]);
}

void geglu(float* gate, const float* up, int64_t n) { vec_ops().geglu(gate, up, n); }

void softmax(float* x, int64_t n) {
  float mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i]);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void add(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void f32_to_f16_row(const float* x, uint16_t* y, int64_t n) { vec_ops().f32_to_f16(x, y, n); }

namespace {
// Logit soft-capping: x ← c · tanh(x / c) (Gemma 2).
void soft_cap(float* x, int64_t n, float c) {
  for (int64_t i = 0; i < n; ++i) x[i] = c * std::tanh(x[i] / c);
}

// softmax over x[0, n) with one more logit `sink` in the denominator (an
// attention sink; -inf: none): the sink joins the max and the sum, then is dropped.
void softmax_sink(float* x, int64_t n, float sink) {
  if (sink == -INFINITY) return softmax(x, n);
  float mx = sink;
  for (int64_t p = 0; p < n; ++p) mx = std::max(mx, x[p]);
  double sum = std::exp(static_cast<double>(sink - mx));
  for (int64_t p = 0; p < n; ++p) sum += x[p] = std::exp(x[p] - mx);
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t p = 0; p < n; ++p) x[p] *= inv;
}
}  // namespace

void attention_f16(const float* q, const uint16_t* k, const uint16_t* v, int64_t n_pos,
                   int64_t kv_stride, int64_t n_head, int64_t n_head_kv, int64_t head_dim,
                   float scale, float* out, float* scratch, float sink, float softcap) {
  const VecOps& vo = vec_ops();
  const int64_t group = n_head / n_head_kv;
  for (int64_t h = 0; h < n_head; ++h) {
    const int64_t kvh = h / group;
    const float* qh = q + h * head_dim;
    for (int64_t p = 0; p < n_pos; ++p)
      scratch[p] = vo.dot_f16_f32(head_dim, k + p * kv_stride + kvh * head_dim, qh) * scale;
    if (softcap > 0) soft_cap(scratch, n_pos, softcap);
    softmax_sink(scratch, n_pos, sink);
    float* oh = out + h * head_dim;
    std::fill(oh, oh + head_dim, 0.0f);
    for (int64_t p = 0; p < n_pos; ++p)
      vo.axpy_f16(head_dim, scratch[p], v + p * kv_stride + kvh * head_dim, oh);
  }
}

namespace {

// Row `row` of a run of cache rows (stride kv_stride), its first n values as f32.
void kv_row_f32(KVRows r, int64_t row, int64_t kv_stride, int64_t n, float* out) {
  if (r.f32) {
    const float* p = static_cast<const float*>(r.data) + row * kv_stride;
    std::copy(p, p + n, out);
  } else {
    const uint16_t* p = static_cast<const uint16_t*>(r.data) + row * kv_stride;
    for (int64_t i = 0; i < n; ++i) out[i] = f16_to_f32(p[i]);
  }
}

// f16 K and V: attention_f16 (its vec_ops dot and axpy) on each row.
void attention_rows_f16_ref(const AttentionRows& rows, const uint16_t* k, const uint16_t* v, int64_t kv_stride,
                            int64_t head_dim, float scale) {
  std::vector<float> scores;
  std::vector<uint16_t> kr, vr;  // a ring's visible rows, unwrapped
  for (int r = 0; r < rows.n; ++r) {
    const int64_t n_pos = rows.last[r] + 1 - rows.first[r];
    scores.resize(n_pos);
    const uint16_t* kp = k + rows.first[r] * kv_stride;
    const uint16_t* vp = v + rows.first[r] * kv_stride;
    if (rows.ring > 0) {
      kr.resize(n_pos * kv_stride);
      vr.resize(n_pos * kv_stride);
      for (int64_t j = 0; j < n_pos; ++j) {
        const int64_t s = (rows.first[r] + j) % rows.ring;
        std::copy(k + s * kv_stride, k + s * kv_stride + head_dim, &kr[j * kv_stride]);
        std::copy(v + s * kv_stride, v + s * kv_stride + head_dim, &vr[j * kv_stride]);
      }
      kp = kr.data();
      vp = vr.data();
    }
    attention_f16(rows.q[r], kp, vp, n_pos, kv_stride, 1, 1, head_dim, scale, rows.out[r], scores.data(),
                  rows.sinks ? rows.sink[r] : -INFINITY, rows.softcap);
  }
}

}  // namespace

void attention_rows_ref(const AttentionRows& rows, KVRows k, KVRows v, int64_t kv_stride, int64_t head_dim,
                        float scale) {
  if (!k.f32 && !v.f32) {
    attention_rows_f16_ref(rows, static_cast<const uint16_t*>(k.data), static_cast<const uint16_t*>(v.data),
                           kv_stride, head_dim, scale);
    return;
  }
  // An f32 cache (or one of the two): the same math, every row read as f32.
  std::vector<float> scores, kf(head_dim), vf(head_dim);
  for (int r = 0; r < rows.n; ++r) {
    const int64_t n_pos = rows.last[r] + 1 - rows.first[r];
    scores.resize(n_pos);
    const float* q = rows.q[r];
    for (int64_t j = 0; j < n_pos; ++j) {
      const int64_t p = rows.first[r] + j, s = rows.ring > 0 ? p % rows.ring : p;
      kv_row_f32(k, s, kv_stride, head_dim, kf.data());
      float dot = 0.0f;
      for (int64_t c = 0; c < head_dim; ++c) dot += q[c] * kf[c];
      scores[j] = dot * scale;
    }
    if (rows.softcap > 0) soft_cap(scores.data(), n_pos, rows.softcap);
    softmax_sink(scores.data(), n_pos, rows.sinks ? rows.sink[r] : -INFINITY);
    float* o = rows.out[r];
    std::fill(o, o + head_dim, 0.0f);
    for (int64_t j = 0; j < n_pos; ++j) {
      const int64_t p = rows.first[r] + j, s = rows.ring > 0 ? p % rows.ring : p;
      kv_row_f32(v, s, kv_stride, head_dim, vf.data());
      for (int64_t c = 0; c < head_dim; ++c) o[c] += scores[j] * vf[c];
    }
  }
}

void attention_rows_avx2(const AttentionRows& rows, KVRows k, KVRows v, int64_t kv_stride, int64_t head_dim,
                         float scale);  // attention_avx2.cpp

void attention_rows(const AttentionRows& rows, KVRows k, KVRows v, int64_t kv_stride, int64_t head_dim,
                    float scale) {
  static const bool avx2 = cpu_features().has_avx2_fma();
  if (avx2 && head_dim % 8 == 0 && head_dim <= 256)
    attention_rows_avx2(rows, k, v, kv_stride, head_dim, scale);
  else
    attention_rows_ref(rows, k, v, kv_stride, head_dim, scale);
}

}  // namespace kvad::cpu
