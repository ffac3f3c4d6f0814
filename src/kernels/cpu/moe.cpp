// Mixture-of-experts entries of the CPU row. matmul_id groups the (token,
// slot) pairs by expert and multiplies each chosen expert's matrix with all
// of its rows at once, so an expert's weights stream from memory once per
// call (llama.cpp's ggml_compute_forward_mul_mat_id does the same grouping);
// decode (one token) reads k experts and skips the rest.
#include "kernels/cpu/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "base/error.h"
#include "base/scratch.h"
#include "base/thread_pool.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/host_kernels.h"
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
    thread_local std::vector<float> p, c, gs;  // each thread's, reused by later calls
    thread_local std::vector<int32_t> order, gorder;
    p.resize(static_cast<size_t>(n_exp));
    c.resize(static_cast<size_t>(n_exp));
    gs.resize(static_cast<size_t>(G));
    order.resize(static_cast<size_t>(n_exp));
    gorder.resize(static_cast<size_t>(G));
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

namespace {

// matmul_id's scratch, grown on first use and reused by later calls of the
// calling thread (the workers only read and write through these pointers):
// a prefill step calls matmul_id three times per MoE layer, so no call
// allocates once the largest batch has been seen. The two big buffers are
// kept up to kKeepBytes each (a 512-token batch of Qwen3-30B-A3B needs
// 34 MB of products) and freed after calls that needed more.
constexpr size_t kKeepBytes = size_t{64} << 20;
struct IdScratch {
  std::vector<int32_t> count, start;  // per expert: slots, first sorted position
  std::vector<int32_t> order;         // sorted position -> slot (t·k + j), grouped by expert
  std::vector<int32_t> pos;           // slot -> sorted position
  std::vector<uint8_t> xq;            // activation rows in the dot partner's layout, sorted
  std::vector<float> y;               // product rows, sorted
  struct Item {
    int32_t e, r0, r1;  // expert e's weight rows [r0, r1) against all of its activation rows
  };
  std::vector<Item> items;
};

}  // namespace

// Activation row x (n floats) -> dst in the dot partner's layout: vt's
// from_float, then the gemm's packing when it reads its own layout (the same
// bytes cpu::matmul's conversion gives, so results equal matmul's).
void convert_row(const CpuKernels& kw, const CpuKernels& kv, DType vt, bool pack, const float* x, int64_t n,
                 uint8_t* dst) {
  if (vt == DType::F32) {
    std::memcpy(dst, x, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  if (!pack) {
    kv.from_float(x, dst, n);
    return;
  }
  thread_local std::vector<uint8_t> row;
  const size_t xrb = row_bytes(vt, n);
  row.resize(xrb);
  kv.from_float(x, row.data(), n);
  kw.gemm_pack(n, row.data(), xrb, 1, dst, kw.gemm_packed_bytes(n));
}

// The slots are sorted by expert (a counting sort), each activation row is
// converted once to the weights' dot partner (a token's row once for all k
// of its slots when x has one row per token) straight into its sorted place,
// and one parallel loop runs over (expert, block of weight rows) items of
// all chosen experts: each item is the format's tiled gemm of those rows
// against the expert's contiguous activation rows, so the rows stay in cache
// while the expert's tokens stream past, and there is one barrier per call
// rather than one per expert. The sorted products are then scattered to
// their slots.
void matmul_id(const Tensor& x, const Tensor& w, const Tensor& ids, const Tensor& o) {
  const int64_t n_in = w.ne[0], n_out = w.ne[1], n_exp = w.ne[2];
  const int64_t k = ids.ne[0], n_tok = ids.n_rows(), n_x = x.ne[1], n_slot = n_tok * k;
  const auto* pi = static_cast<const int32_t*>(ids.raw());
  thread_local IdScratch sc;
  const ScratchTrim trim_xq(sc.xq, kKeepBytes);
  const ScratchTrim trim_y(sc.y, kKeepBytes / sizeof(float));
  sc.count.assign(static_cast<size_t>(n_exp), 0);
  for (int64_t s = 0; s < n_slot; ++s) {
    const int32_t e = pi[s];
    if (e < 0 || e >= n_exp)
      throw Error("matmul_id: expert id " + std::to_string(e) + " of token " + std::to_string(s / k) +
                  " is outside [0, " + std::to_string(n_exp) + ")");
    ++sc.count[e];
  }
  sc.start.resize(static_cast<size_t>(n_exp));
  for (int64_t e = 0, p = 0; e < n_exp; ++e) {
    sc.start[e] = static_cast<int32_t>(p);
    p += sc.count[e];
  }
  sc.order.resize(static_cast<size_t>(n_slot));
  sc.pos.resize(static_cast<size_t>(n_slot));
  {
    std::vector<int32_t>& next = sc.count;  // reused as the fill cursor, restored below
    for (int64_t e = 0; e < n_exp; ++e) next[e] = sc.start[e];
    for (int64_t s = 0; s < n_slot; ++s) {
      const int32_t p = next[pi[s]]++;
      sc.order[p] = static_cast<int32_t>(s);
      sc.pos[s] = p;
    }
    for (int64_t e = 0; e < n_exp; ++e) next[e] -= sc.start[e];
  }

  const CpuKernels& kw = cpu_kernels(w.type);
  const DType vt = dtype_info(w.type).vec_dot_type;
  const CpuKernels& kv = cpu_kernels(vt);
  const bool pack = vt != DType::F32 && kw.gemm && kw.gemm_pack;
  const size_t ldq = pack ? kw.gemm_packed_bytes(n_in) : row_bytes(vt, n_in);
  sc.xq.resize(ldq * static_cast<size_t>(n_slot));
  sc.y.resize(static_cast<size_t>(n_out * n_slot));
  uint8_t* xq = sc.xq.data();
  float* ys = sc.y.data();
  const int32_t* pos = sc.pos.data();
  const float* px = in(x);
  ThreadPool& tp = pool();

  // Conversion: one row of x per work unit, written to every sorted place
  // that reads it.
  const int64_t n_src = n_x == 1 ? n_tok : n_slot;
  tp.parallel_for(n_src, 4, [&](int64_t b, int64_t e, int) {
    for (int64_t r = b; r < e; ++r) {
      if (n_x == 1) {
        uint8_t* first = xq + static_cast<size_t>(pos[r * k]) * ldq;
        convert_row(kw, kv, vt, pack, px + r * n_in, n_in, first);
        for (int64_t j = 1; j < k; ++j) std::memcpy(xq + static_cast<size_t>(pos[r * k + j]) * ldq, first, ldq);
      } else {
        convert_row(kw, kv, vt, pack, px + r * n_in, n_in, xq + static_cast<size_t>(pos[r]) * ldq);
      }
    }
  });

  // Items: blocks of weight rows of every chosen expert. With several rows
  // per expert (prefill) a block is small enough that its weights stay in
  // cache across the gemm's token tiles; with one (decode) blocks balance the
  // threads over the k experts' rows.
  int64_t n_active = 0, max_m = 0;
  for (int64_t e = 0; e < n_exp; ++e) {
    n_active += sc.count[e] > 0;
    max_m = std::max<int64_t>(max_m, sc.count[e]);
  }
  const int nth = tp.size();
  int64_t grain = std::max<int64_t>(1, n_active * n_out / (nth * 16));
  if (max_m > 1) grain = std::max<int64_t>(grain, 16);
  grain = std::min<int64_t>(grain, max_m > 1 ? 64 : n_out);
  sc.items.clear();
  for (int64_t e = 0; e < n_exp; ++e) {
    if (sc.count[e] == 0) continue;
    for (int64_t r = 0; r < n_out; r += grain)
      sc.items.push_back({static_cast<int32_t>(e), static_cast<int32_t>(r),
                          static_cast<int32_t>(std::min(n_out, r + grain))});
  }
  const uint8_t* wbase = static_cast<const uint8_t*>(w.raw());
  const size_t rs = w.row_size();
  const IdScratch::Item* items = sc.items.data();
  const int32_t* count = sc.count.data();
  const int32_t* start = sc.start.data();
  tp.parallel_for(static_cast<int64_t>(sc.items.size()), 1, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) {
      const IdScratch::Item& it = items[i];
      const int64_t m = count[it.e], p0 = start[it.e];
      const uint8_t* wr = wbase + (static_cast<size_t>(it.e) * n_out + it.r0) * rs;
      const uint8_t* xe = xq + static_cast<size_t>(p0) * ldq;
      float* ye = ys + p0 * n_out;
      if (kw.gemm) {
        kw.gemm(n_in, wr, rs, it.r1 - it.r0, xe, ldq, m, ye + it.r0, n_out);
        continue;
      }
      for (int64_t r = it.r0; r < it.r1; ++r, wr += rs)
        for (int64_t c = 0; c < m; ++c) ye[c * n_out + r] = kw.vec_dot(n_in, wr, xe + static_cast<size_t>(c) * ldq);
    }
  });

  // Scatter the sorted rows to their slots.
  float* po = row::out(o);
  const int32_t* order = sc.order.data();
  tp.parallel_for(n_slot, 64, [&](int64_t b, int64_t e, int) {
    for (int64_t p = b; p < e; ++p)
      std::memcpy(po + static_cast<int64_t>(order[p]) * n_out, ys + p * n_out, n_out * sizeof(float));
  });
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
