// Mixture-of-experts entries of the CPU row. matmul_id groups the (token,
// slot) pairs by expert and runs one ordinary matmul per expert that was
// chosen, over all of its rows at once, so an expert's weights stream from
// memory once per call (llama.cpp's ggml_compute_forward_mul_mat_id does the
// same grouping); decode (one token) reads k experts and skips the rest.
#include "kernels/cpu/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "base/error.h"
#include "base/thread_pool.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/row_util.h"
#include "tensor/ops.h"

namespace kvad::cpu {
using row::in;
using row::pool;

// One token's choice (ops.h moe_route): p from the logits, c = p + bias
// chooses, and with groups only the best topk_group groups' experts compete.
void moe_route(const Tensor& logits, const MoeRouteParams& rp, const Tensor& ids, const Tensor& weights) {
  const int64_t n_exp = logits.ne[0], n_tok = logits.n_rows(), k = rp.k;
  const int64_t G = rp.n_group, per = n_exp / G;
  const float* pl = in(logits);
  const float* pb = rp.bias ? in(rp.bias) : nullptr;
  auto* pi = static_cast<int32_t*>(ids.raw());
  float* pw = row::out(weights);
  pool().parallel_for(n_tok, 16, [&](int64_t t0, int64_t t1, int) {
    std::vector<float> p(n_exp), c(n_exp), gs(G);
    std::vector<int32_t> order(n_exp), gorder(G);
    for (int64_t t = t0; t < t1; ++t) {
      std::memcpy(p.data(), pl + t * n_exp, n_exp * sizeof(float));
      if (rp.gating == MoeGating::Softmax) softmax(p.data(), n_exp);
      else
        for (float& v : p) v = 1.0f / (1.0f + std::exp(-v));
      for (int64_t e = 0; e < n_exp; ++e) c[e] = pb ? p[e] + pb[e] : p[e];
      if (G > 1 && rp.topk_group < G) {
        for (int64_t g = 0; g < G; ++g) {
          const float* cg = &c[g * per];
          if (rp.group_top2_sum) {
            float a = -INFINITY, b = -INFINITY;  // the two highest
            for (int64_t e = 0; e < per; ++e) {
              if (cg[e] > a) b = a, a = cg[e];
              else if (cg[e] > b) b = cg[e];
            }
            gs[g] = a + b;
          } else {
            gs[g] = *std::max_element(cg, cg + per);
          }
        }
        std::iota(gorder.begin(), gorder.end(), 0);
        std::partial_sort(gorder.begin(), gorder.begin() + rp.topk_group, gorder.end(),
                          [&](int32_t a, int32_t b) { return gs[a] > gs[b] || (gs[a] == gs[b] && a < b); });
        for (int64_t j = rp.topk_group; j < G; ++j)
          std::fill(&c[gorder[j] * per], &c[gorder[j] * per] + per, -INFINITY);
      }
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + k, order.end(),
                        [&](int32_t a, int32_t b) { return c[a] > c[b] || (c[a] == c[b] && a < b); });
      float sum = 0;
      for (int64_t j = 0; j < k; ++j) sum += p[order[j]];
      for (int64_t j = 0; j < k; ++j) {
        pi[t * k + j] = order[j];
        const float v = rp.norm ? p[order[j]] / sum : p[order[j]];
        pw[t * k + j] = rp.scale != 1.0f ? v * rp.scale : v;
      }
    }
  });
}

void matmul_id(const Tensor& x, const Tensor& w, const Tensor& ids, const Tensor& o) {
  const int64_t n_in = w.ne[0], n_out = w.ne[1], n_exp = w.ne[2];
  const int64_t k = ids.ne[0], n_tok = ids.n_rows(), n_x = x.ne[1];
  const auto* pi = static_cast<const int32_t*>(ids.raw());
  // Slots per expert: slot s = t·k + j.
  std::vector<std::vector<int64_t>> slots(n_exp);
  for (int64_t s = 0; s < n_tok * k; ++s) {
    const int32_t e = pi[s];
    if (e < 0 || e >= n_exp)
      throw Error("matmul_id: expert id " + std::to_string(e) + " of token " + std::to_string(s / k) +
                  " is outside [0, " + std::to_string(n_exp) + ")");
    slots[e].push_back(s);
  }
  Tensor wh = w;  // the weights' host address (sim tensors have no Tensor::data)
  wh.data = w.raw();
  wh.offset = 0;
  wh.storage.reset();
  const float* px = in(x);
  float* po = row::out(o);
  std::vector<float> xe, ye;
  for (int64_t e = 0; e < n_exp; ++e) {
    const std::vector<int64_t>& ss = slots[e];
    if (ss.empty()) continue;
    const int64_t m = static_cast<int64_t>(ss.size());
    xe.resize(static_cast<size_t>(m * n_in));
    ye.resize(static_cast<size_t>(m * n_out));
    for (int64_t r = 0; r < m; ++r) {
      const int64_t t = ss[r] / k, j = ss[r] % k;
      std::memcpy(&xe[r * n_in], px + (t * n_x + (n_x == 1 ? 0 : j)) * n_in, n_in * sizeof(float));
    }
    const Tensor we = wh.rows(e * n_out, (e + 1) * n_out);
    matmul(pool(), we, xe.data(), m, ye.data());
    for (int64_t r = 0; r < m; ++r) std::memcpy(po + ss[r] * n_out, &ye[r * n_out], n_out * sizeof(float));
  }
}

void moe_sum(const Tensor& y, const Tensor& weights, const Tensor& o) {
  const int64_t n = y.ne[0], k = y.ne[1], n_tok = y.ne[2];
  const float* py = in(y);
  const float* pw = in(weights);
  float* po = row::out(o);
  pool().parallel_for(n_tok, 4, [&](int64_t t0, int64_t t1, int) {
    for (int64_t t = t0; t < t1; ++t) {
      float* dst = po + t * n;
      std::fill(dst, dst + n, 0.0f);
      for (int64_t j = 0; j < k; ++j) {
        const float wj = pw[t * k + j];
        const float* src = py + (t * k + j) * n;
        for (int64_t i = 0; i < n; ++i) dst[i] += wj * src[i];
      }
    }
  });
}

}  // namespace kvad::cpu
