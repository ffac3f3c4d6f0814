#include "kernels/cpu/elementwise.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/host_kernels.h"
#include "kernels/cpu/row_util.h"
#include "kernels/cpu/strided.h"
#include "kernels/cpu/vec.h"

namespace kvad::cpu {

using row::in;
using row::ids;
using row::out;
using row::pool;

namespace {

// Element-wise work: chunks of kElemGrain elements over the pool (a decode
// step's vectors run inline on the calling thread).
constexpr int64_t kElemGrain = 1 << 15;
template <class F>
void elementwise(int64_t n, F&& f) {
  pool().parallel_for(n, kElemGrain, [&](int64_t b, int64_t e, int) { f(b, e); });
}

// A strided input has out's shape (tensor/backend.h); as the input of a
// contiguous kernel it is gathered into the (contiguous) output first, and
// the kernel then runs in place there: the same values as on cont(x).
Tensor gathered(const Tensor& x, const Tensor& o) {
  cont(x, o);
  return o;
}

// b is one row repeated over the rows of contiguous a (stride 0 in dims 1..3,
// as ops.cpp expands a broadcast row).
bool row_broadcast(const Tensor& a, const Tensor& b) {
  if (!a.is_contiguous() || (b.ne[0] > 1 && b.nb[0] != sizeof(float))) return false;
  for (int i = 1; i < 4; ++i)
    if (b.ne[i] > 1 && b.nb[i] != 0) return false;
  return true;
}

}  // namespace

void binary(Binary op, const Tensor& a, const Tensor& b, const Tensor& o) {
  const bool same = a.is_contiguous() && b.is_contiguous();
  if (!same && !row_broadcast(a, b)) return binary_strided(op, a, b, o);
  const float* pa = in(a);
  const float* pb = in(b);
  float* po = out(o);
  const int64_t n = a.n_elements(), nb = same ? n : b.ne[0];
  elementwise(n, [&](int64_t i0, int64_t i1) {
    if (nb == n) {
      if (op == Binary::Add)
        for (int64_t i = i0; i < i1; ++i) po[i] = pa[i] + pb[i];
      else
        for (int64_t i = i0; i < i1; ++i) po[i] = pa[i] * pb[i];
    } else {  // b is one row, broadcast: whole rows without a division per element
      for (int64_t i = i0; i < i1;) {
        const int64_t j0 = i % nb, m = std::min(nb - j0, i1 - i);
        const float* pr = pb + j0;
        if (op == Binary::Add)
          for (int64_t j = 0; j < m; ++j) po[i + j] = pa[i + j] + pr[j];
        else
          for (int64_t j = 0; j < m; ++j) po[i + j] = pa[i + j] * pr[j];
        i += m;
      }
    }
  });
}

void scale(const Tensor& x, float s, const Tensor& o) {
  if (!x.is_contiguous()) return scale(gathered(x, o), s, o);
  const float* px = in(x);
  float* po = out(o);
  elementwise(x.n_elements(), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) po[i] = px[i] * s;
  });
}

void unary(Unary op, const Tensor& x, const Tensor& o) {
  if (!x.is_contiguous()) return unary(op, gathered(x, o), o);
  const float* px = in(x);
  float* po = out(o);
  elementwise(x.n_elements(), [&](int64_t b, int64_t e) {
    if (op == Unary::SiLU) {
      for (int64_t i = b; i < e; ++i) po[i] = px[i] / (1.0f + std::exp(-px[i]));
    } else if (op == Unary::GELU_erf || op == Unary::QuickGELU) {
      if (po != px) std::memcpy(po + b, px + b, static_cast<size_t>(e - b) * sizeof(float));
      (op == Unary::GELU_erf ? vec_ops().gelu_erf : vec_ops().quick_gelu)(po + b, e - b);
    } else if (op == Unary::Tanh) {
      for (int64_t i = b; i < e; ++i) po[i] = std::tanh(px[i]);
    } else if (op == Unary::Sin) {
      for (int64_t i = b; i < e; ++i) po[i] = std::sin(px[i]);
    } else if (op == Unary::Cos) {
      for (int64_t i = b; i < e; ++i) po[i] = std::cos(px[i]);
    } else if (op == Unary::Sigmoid) {
      for (int64_t i = b; i < e; ++i) po[i] = 1.0f / (1.0f + std::exp(-px[i]));
    } else if (op == Unary::Softplus) {  // torch's threshold 20: above it log(1 + e^x) is x in f32
      for (int64_t i = b; i < e; ++i) po[i] = px[i] > 20.0f ? px[i] : std::log1p(std::exp(px[i]));
    } else {
      if (po != px) std::memcpy(po + b, px + b, static_cast<size_t>(e - b) * sizeof(float));
      cpu::gelu(po + b, e - b);
    }
  });
}

namespace {
// Row r (dims 1..3 in order) of t, whose rows are contiguous (nb[0] = 4).
const float* row_at(const Tensor& t, int64_t r) {
  const int64_t i1 = r % t.ne[1], i2 = (r / t.ne[1]) % t.ne[2], i3 = r / (t.ne[1] * t.ne[2]);
  return reinterpret_cast<const float*>(static_cast<const uint8_t*>(t.raw()) + i1 * t.nb[1] + i2 * t.nb[2] +
                                        i3 * t.nb[3]);
}
}  // namespace

void glu(Unary op, const Tensor& g, const Tensor& u, const Tensor& o) {
  const bool rows_dense = (g.ne[0] == 1 || g.nb[0] == sizeof(float)) && (u.ne[0] == 1 || u.nb[0] == sizeof(float));
  if (rows_dense && (!g.is_contiguous() || !u.is_contiguous())) {
    // Views whose rows are contiguous (the halves of geglu_split): row by
    // row where they lie, no gathered copy.
    const int64_t F = g.ne[0];
    float* po = out(o);
    pool().parallel_for(g.n_rows(), 4, [&](int64_t r0, int64_t r1, int) {
      for (int64_t r = r0; r < r1; ++r) {
        float* orow = po + r * F;
        std::memcpy(orow, row_at(g, r), static_cast<size_t>(F) * sizeof(float));
        const float* urow = row_at(u, r);
        if (op == Unary::SiLU) cpu::swiglu(orow, urow, F);
        else if (op == Unary::GELU_erf) vec_ops().geglu_erf(orow, urow, F);
        else cpu::geglu(orow, urow, F);
      }
    });
    return;
  }
  if (!u.is_contiguous()) {
    thread_local std::vector<float> up;
    up.resize(static_cast<size_t>(u.n_elements()));
    cont_to(u, up.data());
    Tensor uc = o;  // up's values, contiguous, on the host
    uc.storage.reset();
    uc.data = up.data();
    uc.offset = 0;
    return glu(op, g, uc, o);
  }
  if (!g.is_contiguous()) return glu(op, gathered(g, o), u, o);
  const int64_t F = g.ne[0];
  const float* pg = in(g);
  const float* pu = in(u);
  float* po = out(o);
  pool().parallel_for(g.n_rows(), 4, [&](int64_t t0, int64_t t1, int) {
    const int64_t n = (t1 - t0) * F;
    if (po != pg) std::memcpy(po + t0 * F, pg + t0 * F, static_cast<size_t>(n) * sizeof(float));
    if (op == Unary::SiLU) cpu::swiglu(po + t0 * F, pu + t0 * F, n);
    else if (op == Unary::GELU_erf) vec_ops().geglu_erf(po + t0 * F, pu + t0 * F, n);
    else cpu::geglu(po + t0 * F, pu + t0 * F, n);
  });
}

// gpt-oss's clamped SwiGLU, as transformers' GptOssExperts._apply_gate.
void swiglu_oai(const Tensor& g, const Tensor& u, float alpha, float limit, const Tensor& o) {
  if (!g.is_contiguous() || !u.is_contiguous()) {  // u read row by row where it lies, g gathered into o
    const Tensor gc = g.is_contiguous() ? g : gathered(g, o);
    const float* pg = in(gc);
    float* po = out(o);
    const int64_t n0 = o.ne[0];
    pool().parallel_for(o.n_rows(), 64, [&](int64_t r0, int64_t r1, int) {
      std::vector<float> ur(static_cast<size_t>(n0));
      for (int64_t r = r0; r < r1; ++r) {
        gather_row(u, r, ur.data());
        for (int64_t i = 0; i < n0; ++i) {
          const float x = std::min(pg[r * n0 + i], limit);
          const float y = std::clamp(ur[i], -limit, limit);
          po[r * n0 + i] = (y + 1.0f) * (x / (1.0f + std::exp(-alpha * x)));
        }
      }
    });
    return;
  }
  const float* pg = in(g);
  const float* pu = in(u);
  float* po = out(o);
  elementwise(g.n_elements(), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const float x = std::min(pg[i], limit);
      const float y = std::clamp(pu[i], -limit, limit);
      po[i] = (y + 1.0f) * (x / (1.0f + std::exp(-alpha * x)));
    }
  });
}

}  // namespace kvad::cpu
