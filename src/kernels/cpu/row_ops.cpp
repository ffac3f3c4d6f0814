#include "kernels/cpu/row_ops.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/host_kernels.h"
#include "kernels/cpu/row_util.h"
#include "kernels/cpu/strided.h"

namespace kvad::cpu {

using row::in;
using row::ids;
using row::out;
using row::pool;

void rms_norm(const Tensor& x, const Tensor* w, float eps, bool one_plus, const Tensor& o) {
  const int64_t n = x.ne[0];
  const float* px = in(x);
  float* po = out(o);
  std::vector<float> w1;
  const float* pw = w ? in(*w) : nullptr;
  if (pw && one_plus) {
    w1.resize(n);
    for (int64_t i = 0; i < n; ++i) w1[i] = 1.0f + pw[i];
    pw = w1.data();
  }
  pool().parallel_for(x.n_rows(), 16, [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) cpu::rms_norm(px + r * n, pw, n, eps, po + r * n);
  });
}

void layer_norm(const Tensor& x, const Tensor* w, const Tensor* b, float eps, const Tensor& o) {
  const int64_t n = x.ne[0];
  const float* px = in(x);
  const float* pw = w ? in(*w) : nullptr;
  const float* pb = b ? in(*b) : nullptr;
  float* po = out(o);
  pool().parallel_for(x.n_rows(), 16, [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = px + r * n;
      float* yr = po + r * n;
      double mean = 0, var = 0;
      for (int64_t i = 0; i < n; ++i) mean += xr[i];
      mean /= n;
      for (int64_t i = 0; i < n; ++i) var += (xr[i] - mean) * (xr[i] - mean);
      const float inv = 1.0f / std::sqrt(static_cast<float>(var / n) + eps);
      for (int64_t i = 0; i < n; ++i) {
        float v = static_cast<float>(xr[i] - mean) * inv;
        if (pw) v *= pw[i];
        if (pb) v += pb[i];
        yr[i] = v;
      }
    }
  });
}

void rope(const Tensor& x, const Tensor& pos, const RopeParams& p, const Tensor& o) {
  const int64_t D = x.ne[0], H = x.ne[1], n_tok = x.ne[2];
  const float* px = in(x);
  float* po = out(o);
  const int32_t* ps = ids(pos);
  const float* ff = p.freq_factors ? in(p.freq_factors) : nullptr;
  pool().parallel_for(n_tok, 8, [&](int64_t t0, int64_t t1, int) {
    std::memcpy(po + t0 * H * D, px + t0 * H * D, static_cast<size_t>((t1 - t0) * H * D) * sizeof(float));
    for (int64_t t = t0; t < t1; ++t)
      cpu::rope(po + t * H * D, H, D, p.n_rot, ps[t], p.freq_base, p.freq_scale, p.neox, ff, p.attn_factor);
  });
}

void softmax(const Tensor& x, const Tensor& o) {
  const int64_t n = x.ne[0];
  std::memcpy(out(o), in(x), x.n_bytes());
  float* po = out(o);
  pool().parallel_for(x.n_rows(), 16, [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) cpu::softmax(po + r * n, n);
  });
}

void concat(const Tensor& a, const Tensor& b, const Tensor& o) {
  if (!a.is_contiguous() || !b.is_contiguous()) return concat_strided(a, b, o);
  const int64_t na = a.ne[0], nb = b.ne[0];
  const float* pa = in(a);
  const float* pb = in(b);
  float* po = out(o);
  for (int64_t r = 0; r < a.n_rows(); ++r) {
    std::memcpy(po + r * (na + nb), pa + r * na, static_cast<size_t>(na) * sizeof(float));
    std::memcpy(po + r * (na + nb) + na, pb + r * nb, static_cast<size_t>(nb) * sizeof(float));
  }
}

void slice(const Tensor& x, int64_t off, const Tensor& o) {
  const int64_t m = x.ne[0], n = o.ne[0];
  const float* px = in(x);
  float* po = out(o);
  for (int64_t r = 0; r < x.n_rows(); ++r) std::memcpy(po + r * n, px + r * m + off, static_cast<size_t>(n) * sizeof(float));
}

}  // namespace kvad::cpu
