// The CPU (and sim) row's image entries (image_ops.h): group_norm,
// upsample_nearest2d, pad and concat along a dimension, on {C, W, H, N}
// images whose pixels hold their C channels side by side.
#include "kernels/cpu/image_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/cpu_features.h"
#include "kernels/cpu/row_util.h"
#include "kernels/cpu/strided.h"

namespace kvad::cpu {

using row::in;
using row::out;
using row::pool;

// ---- channel kernels (scalar references) --------------------------------------

namespace {

void channel_sums_ref(const float* x, int64_t n_pix, int64_t C, const float* shift, bool square, float* sum) {
  for (int64_t p = 0; p < n_pix; ++p) {
    const float* xp = x + p * C;
    for (int64_t c = 0; c < C; ++c) {
      const float v = shift ? xp[c] - shift[c] : xp[c];
      sum[c] += square ? v * v : v;
    }
  }
}

void channel_affine_ref(const float* x, int64_t n_pix, int64_t C, const float* a, const float* b, float* y) {
  for (int64_t p = 0; p < n_pix; ++p)
    for (int64_t c = 0; c < C; ++c) y[p * C + c] = x[p * C + c] * a[c] + b[c];
}

}  // namespace

const ChannelKernels& channel_kernels_ref() {
  static const ChannelKernels k{channel_sums_ref, channel_affine_ref};
  return k;
}

const ChannelKernels& channel_kernels() {
  static const ChannelKernels& k = cpu_features().has_avx2_fma() ? channel_kernels_avx2() : channel_kernels_ref();
  return k;
}

// ---- group_norm ---------------------------------------------------------------------

// Three passes over each image, parallel over chunks of kChunk pixels: the
// per-channel sums (f32 within a chunk, chunks added in double in a fixed
// order, so the result does not depend on the thread count), the sums of
// squares about the group mean (two-pass variance), then y = x·a[c] + b[c]
// with a = w·rstd, b = bias - mean·a (torch's CPU kernel folds the same way).
void group_norm(const Tensor& x, int64_t n_groups, const Tensor* w, const Tensor* b, float eps, const Tensor& o) {
  const int64_t C = x.ne[0], P = x.ne[1] * x.ne[2], N = x.ne[3], G = n_groups, Cg = C / G;
  constexpr int64_t kChunk = 64;
  const int64_t n_chunks = (P + kChunk - 1) / kChunk;
  const float* px = in(x);
  float* po = out(o);
  const float* pw = w ? in(*w) : nullptr;
  const float* pb = b ? in(*b) : nullptr;
  const ChannelKernels& k = channel_kernels();
  std::vector<float> part(static_cast<size_t>(N * n_chunks * C));
  std::vector<float> shift(static_cast<size_t>(N * C)), scale(static_cast<size_t>(N * C)),
      bias(static_cast<size_t>(N * C));
  // Per (image, group): the sum over chunks of the chunks' channel sums.
  auto group_totals = [&](std::vector<double>& tot) {
    tot.assign(static_cast<size_t>(N * G), 0.0);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t ch = 0; ch < n_chunks; ++ch) {
        const float* s = &part[static_cast<size_t>((n * n_chunks + ch) * C)];
        for (int64_t c = 0; c < C; ++c) tot[n * G + c / Cg] += s[c];
      }
  };
  auto sums = [&](bool square) {
    pool().parallel_for(N * n_chunks, 1, [&](int64_t i0, int64_t i1, int) {
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t n = i / n_chunks, p0 = (i % n_chunks) * kChunk, np = std::min(kChunk, P - p0);
        float* s = &part[static_cast<size_t>(i * C)];
        std::fill(s, s + C, 0.0f);
        k.sums(px + (n * P + p0) * C, np, C, square ? &shift[n * C] : nullptr, square, s);
      }
    });
  };
  const double count = static_cast<double>(Cg) * static_cast<double>(P);
  std::vector<double> tot;
  sums(false);
  group_totals(tot);
  std::vector<double> mean(tot.size());
  for (size_t i = 0; i < tot.size(); ++i) mean[i] = tot[i] / count;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) shift[n * C + c] = static_cast<float>(mean[n * G + c / Cg]);
  sums(true);
  group_totals(tot);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) {
      const int64_t g = n * G + c / Cg;
      // Σ (x - m)² with m the f32 mean: the exact variance about the true
      // mean is that less (mean - m)².
      const double dm = mean[g] - static_cast<double>(shift[n * C + c]);
      const double var = std::max(0.0, tot[g] / count - dm * dm);
      const double a = (pw ? pw[c] : 1.0) / std::sqrt(var + static_cast<double>(eps));
      scale[n * C + c] = static_cast<float>(a);
      bias[n * C + c] = static_cast<float>((pb ? pb[c] : 0.0) - mean[g] * a);
    }
  pool().parallel_for(N * n_chunks, 1, [&](int64_t i0, int64_t i1, int) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t n = i / n_chunks, p0 = (i % n_chunks) * kChunk, np = std::min(kChunk, P - p0);
      k.affine(px + (n * P + p0) * C, np, C, &scale[n * C], &bias[n * C], po + (n * P + p0) * C);
    }
  });
}

// ---- upsample, pad, concat ------------------------------------------------------------

void upsample_nearest2d(const Tensor& x, int64_t f, const Tensor& o) {
  const int64_t C = x.ne[0], W = x.ne[1], H = x.ne[2], N = x.ne[3], OW = W * f, OH = H * f;
  const float* px = in(x);
  float* po = out(o);
  const size_t pix = static_cast<size_t>(C) * sizeof(float);
  pool().parallel_for(N * OH, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, OW * C)), [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t n = r / OH, oy = r % OH;
      const float* src = px + (n * H + oy / f) * W * C;
      float* dst = po + r * OW * C;
      for (int64_t ox = 0; ox < OW; ++ox) std::memcpy(dst + ox * C, src + (ox / f) * C, pix);
    }
  });
}

void pad(const Tensor& x, const int64_t* lo, const Tensor& o) {
  const float* px = in(x);
  float* po = out(o);
  std::memset(po, 0, o.n_bytes());
  const int64_t n0 = x.ne[0];
  pool().parallel_for(x.n_rows(), std::max<int64_t>(1, 4096 / std::max<int64_t>(1, n0)), [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t i1 = r % x.ne[1], i2 = (r / x.ne[1]) % x.ne[2], i3 = r / (x.ne[1] * x.ne[2]);
      const int64_t orow = ((i3 + lo[3]) * o.ne[2] + (i2 + lo[2])) * o.ne[1] + (i1 + lo[1]);
      std::memcpy(po + orow * o.ne[0] + lo[0], px + r * n0, static_cast<size_t>(n0) * sizeof(float));
    }
  });
}

void concat_dim(const Tensor& a, const Tensor& b, int dim, const Tensor& o) {
  float* po = out(o);
  const int64_t n0 = o.ne[0];
  // Row index (dims 1..3 in order) of coordinates j in a tensor of shape t.
  auto row_of = [](const Tensor& t, int64_t j1, int64_t j2, int64_t j3) { return (j3 * t.ne[2] + j2) * t.ne[1] + j1; };
  pool().parallel_for(o.n_rows(), std::max<int64_t>(1, 4096 / std::max<int64_t>(1, n0)), [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) {
      int64_t j[4] = {0, r % o.ne[1], (r / o.ne[1]) % o.ne[2], r / (o.ne[1] * o.ne[2])};
      float* dst = po + r * n0;
      if (dim == 0) {
        gather_row(a, row_of(a, j[1], j[2], j[3]), dst);
        gather_row(b, row_of(b, j[1], j[2], j[3]), dst + a.ne[0]);
        continue;
      }
      const bool from_a = j[dim] < a.ne[dim];
      if (!from_a) j[dim] -= a.ne[dim];
      const Tensor& s = from_a ? a : b;
      gather_row(s, row_of(s, j[1], j[2], j[3]), dst);
    }
  });
}

}  // namespace kvad::cpu
