// Recurrent-layer entries of the CPU row: the short causal convolution and
// the gated delta rule of Gated DeltaNet layers (Yang, Kautz & Hatamizadeh
// 2024), each sequence's tokens in order over its state. The delta rule has
// two forms of one recurrence: token by token (decode), and in chunks
// (prefill), where within a chunk the values written to the state solve a
// unit lower-triangular system (the WY form of the paper's section 3) so the
// state is read and written once per chunk instead of once per token.
#include "kernels/cpu/recurrent.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "base/cpu_features.h"
#include "base/error.h"
#include "base/thread_pool.h"
#include "kernels/cpu/recurrent_kernels.h"
#include "kernels/cpu/row_util.h"

namespace kvad::cpu {
using row::ids;
using row::in;
using row::out;
using row::pool;

namespace {

// One sequence's tokens in this call, in batch order.
struct Run {
  int32_t seq = 0;
  bool fresh = false;  // starts at position 0: the state starts from zero
  std::vector<int64_t> tok;
};

// Groups the batch by sequence; throws for an id outside the state's rows
// or a sequence whose positions do not follow each other.
std::vector<Run> sequence_runs(const char* op, const Tensor& seq, const Tensor& pos, int64_t n_seq) {
  const int32_t* ss = ids(seq);
  const int32_t* ps = ids(pos);
  const int64_t n = seq.n_elements();
  std::vector<int64_t> run_of(static_cast<size_t>(n_seq), -1);
  std::vector<Run> runs;
  for (int64_t t = 0; t < n; ++t) {
    if (ss[t] < 0 || ss[t] >= n_seq || ps[t] < 0)
      throw Error(std::string(op) + ": token " + std::to_string(t) + " at sequence " + std::to_string(ss[t]) +
                  ", position " + std::to_string(ps[t]) + " is outside the state (" + std::to_string(n_seq) +
                  " sequences)");
    int64_t& r = run_of[ss[t]];
    if (r < 0) {
      r = static_cast<int64_t>(runs.size());
      runs.push_back({ss[t], ps[t] == 0, {}});
    } else if (ps[runs[r].tok.back()] + 1 != ps[t]) {
      throw Error(std::string(op) + ": sequence " + std::to_string(ss[t]) + " goes from position " +
                  std::to_string(ps[runs[r].tok.back()]) + " to " + std::to_string(ps[t]) +
                  "; a recurrent state takes consecutive positions");
    }
    runs[r].tok.push_back(t);
  }
  return runs;
}

}  // namespace

void ssm_conv_run_ref(const ConvRun& r) {
  const int64_t C = r.C, K = r.K;
  float* st = r.st;
  for (int64_t i = 0; i < r.n_tok; ++i) {
    const float* xt = r.x + r.tok[i] * C;
    float* ot = r.out + r.tok[i] * C;
    for (int64_t c = r.c0; c < r.c1; ++c) {
      const float* wc = r.w + c * K;
      float acc = 0;
      for (int64_t j = 0; j < K - 1; ++j) acc += wc[j] * st[j * C + c];
      acc += wc[K - 1] * xt[c];
      ot[c] = acc;
      for (int64_t j = 0; j + 1 < K - 1; ++j) st[j * C + c] = st[(j + 1) * C + c];
      st[(K - 2) * C + c] = xt[c];
    }
  }
}

void ssm_conv(const Tensor& x, const Tensor& w, const Tensor& state, const Tensor& seq, const Tensor& pos,
              const Tensor& o) {
  const int64_t C = x.ne[0], K = w.ne[0];
  const std::vector<Run> runs = sequence_runs("ssm_conv", seq, pos, state.n_rows());
  const float* px = in(x);
  const float* pw = in(w);
  float* pst = out(state);
  float* po = out(o);
  static void (*const run)(const ConvRun&) = cpu_features().has_avx512_vnni() ? &ssm_conv_run_avx512
                                              : cpu_features().has_avx2_fma()  ? &ssm_conv_run_avx2
                                                                               : &ssm_conv_run_ref;
  pool().parallel_for(C, 64, [&](int64_t c0, int64_t c1, int) {
    for (const Run& r : runs) {
      float* st = pst + static_cast<int64_t>(r.seq) * (K - 1) * C;  // rows j = 0 (oldest) .. K-2, C each
      if (r.fresh)
        for (int64_t j = 0; j < K - 1; ++j) std::fill(st + j * C + c0, st + j * C + c1, 0.0f);
      const ConvRun cr{C, K, c0, c1, pw, st, px, po, r.tok.data(), static_cast<int64_t>(r.tok.size())};
      run(cr);
    }
  });
}

namespace {

struct DeltaShape {
  int64_t Dk, Dv, Hk, Hv;
};

}  // namespace

// Token by token: S ← e^g S; u = β (v − Sᵀk); S ← S + k uᵀ; o = Sᵀq · scale.
void delta_recurrent_ref(const DeltaHead& h) {
  const int64_t Dk = h.Dk, Dv = h.Dv, L = h.L;
  float* S = h.S;
  const float* const* q = h.q;
  const float* const* k = h.k;
  const float* const* v = h.v;
  const float *g = h.g, *beta = h.beta, scale = h.scale;
  float* const* o = h.o;
  std::vector<float> u(static_cast<size_t>(Dv));
  for (int64_t i = 0; i < L; ++i) {
    const float decay = std::exp(g[i]);
    std::fill(u.begin(), u.end(), 0.0f);
    for (int64_t a = 0; a < Dk; ++a) {
      float* Sa = S + a * Dv;
      const float ka = k[i][a];
      for (int64_t j = 0; j < Dv; ++j) {
        Sa[j] *= decay;
        u[j] += Sa[j] * ka;
      }
    }
    for (int64_t j = 0; j < Dv; ++j) u[j] = beta[i] * (v[i][j] - u[j]);
    float* oi = o[i];
    std::fill(oi, oi + Dv, 0.0f);
    for (int64_t a = 0; a < Dk; ++a) {
      float* Sa = S + a * Dv;
      const float ka = k[i][a], qa = q[i][a] * scale;
      for (int64_t j = 0; j < Dv; ++j) {
        Sa[j] += ka * u[j];
        oi[j] += Sa[j] * qa;
      }
    }
  }
}

// One chunk of L tokens from state S0 (Γ_i = e^{G_i}, G the running sum of g
// inside the chunk):
//   u_i = β_i (v_i − Γ_i S0ᵀk_i − Σ_{j<i} (Γ_i/Γ_j)(k_i·k_j) u_j)
//   o_i = scale · (Γ_i S0ᵀq_i + Σ_{j≤i} (Γ_i/Γ_j)(q_i·k_j) u_j)
//   S   = Γ_{L-1} S0 + Σ_j (Γ_{L-1}/Γ_j) k_j u_jᵀ
// Γ_i/Γ_j = e^{G_i − G_j} <= 1 for j <= i, so no ratio overflows.
void delta_chunk_ref(const DeltaHead& h) {
  const int64_t Dk = h.Dk, Dv = h.Dv, L = h.L;
  float* S = h.S;
  const float* const* q = h.q;
  const float* const* k = h.k;
  const float* const* v = h.v;
  const float *g = h.g, *beta = h.beta, scale = h.scale;
  float* const* o = h.o;
  thread_local std::vector<float> G, U, W, Y;
  G.resize(static_cast<size_t>(L));
  U.assign(static_cast<size_t>(L * Dv), 0.0f);  // u_i
  W.assign(static_cast<size_t>(L * Dv), 0.0f);  // S0ᵀk_i
  Y.assign(static_cast<size_t>(L * Dv), 0.0f);  // S0ᵀq_i
  float acc = 0;
  for (int64_t i = 0; i < L; ++i) G[i] = acc += g[i];
  for (int64_t a = 0; a < Dk; ++a) {
    const float* Sa = S + a * Dv;
    for (int64_t i = 0; i < L; ++i) {
      const float ka = k[i][a], qa = q[i][a];
      float* Wi = W.data() + i * Dv;
      float* Yi = Y.data() + i * Dv;
      for (int64_t j = 0; j < Dv; ++j) {
        Wi[j] += Sa[j] * ka;
        Yi[j] += Sa[j] * qa;
      }
    }
  }
  auto dot = [Dk](const float* x, const float* y) {
    float d = 0;
    for (int64_t a = 0; a < Dk; ++a) d += x[a] * y[a];
    return d;
  };
  for (int64_t i = 0; i < L; ++i) {
    float* Ui = U.data() + i * Dv;
    const float gi = std::exp(G[i]);
    for (int64_t j = 0; j < Dv; ++j) Ui[j] = v[i][j] - gi * W[i * Dv + j];
    for (int64_t m = 0; m < i; ++m) {
      const float c = std::exp(G[i] - G[m]) * dot(k[i], k[m]);
      const float* Um = U.data() + m * Dv;
      for (int64_t j = 0; j < Dv; ++j) Ui[j] -= c * Um[j];
    }
    for (int64_t j = 0; j < Dv; ++j) Ui[j] *= beta[i];
    float* oi = o[i];
    for (int64_t j = 0; j < Dv; ++j) oi[j] = gi * Y[i * Dv + j];
    for (int64_t m = 0; m <= i; ++m) {
      const float c = std::exp(G[i] - G[m]) * dot(q[i], k[m]);
      const float* Um = U.data() + m * Dv;
      for (int64_t j = 0; j < Dv; ++j) oi[j] += c * Um[j];
    }
    for (int64_t j = 0; j < Dv; ++j) oi[j] *= scale;
  }
  const float gl = std::exp(G[L - 1]);
  for (int64_t a = 0; a < Dk; ++a) {
    float* Sa = S + a * Dv;
    for (int64_t j = 0; j < Dv; ++j) Sa[j] *= gl;
    for (int64_t m = 0; m < L; ++m) {
      const float c = std::exp(G[L - 1] - G[m]) * k[m][a];
      const float* Um = U.data() + m * Dv;
      for (int64_t j = 0; j < Dv; ++j) Sa[j] += c * Um[j];
    }
  }
}

void gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                      const Tensor& state, const Tensor& seq, const Tensor& pos, const DeltaRuleParams& p,
                      const Tensor& o) {
  const DeltaShape s{q.ne[0], v.ne[0], q.ne[1], v.ne[1]};
  const std::vector<Run> runs = sequence_runs("gated_delta_rule", seq, pos, state.n_rows());
  const float *pq = in(q), *pk = in(k), *pv = in(v), *pg = in(g), *pb = in(beta);
  float* pst = out(state);
  float* po = out(o);
  const int64_t per_head = s.Dk * s.Dv, r = s.Hv / s.Hk;
  const int64_t n_task = static_cast<int64_t>(runs.size()) * s.Hv;
  // The SIMD builds when the CPU has them (recurrent_kernels.h).
  static const int isa = cpu_features().has_avx512_vnni() ? 2 : cpu_features().has_avx2_fma() ? 1 : 0;
  void (*const recurrent)(const DeltaHead&) =
      isa == 2 ? &delta_recurrent_avx512 : isa == 1 ? &delta_recurrent_avx2 : &delta_recurrent_ref;
  void (*const chunked)(const DeltaHead&) =
      isa == 2 ? &delta_chunk_avx512 : isa == 1 ? &delta_chunk_avx2 : &delta_chunk_ref;
  pool().parallel_for(n_task, 1, [&](int64_t i0, int64_t i1, int) {
    std::vector<const float*> qs, ks, vs;
    std::vector<float*> os;
    std::vector<float> gs, bs;
    for (int64_t task = i0; task < i1; ++task) {
      const Run& run = runs[task / s.Hv];
      const int64_t h = task % s.Hv, kh = p.tiled_heads ? h % s.Hk : h / r;
      float* S = pst + (static_cast<int64_t>(run.seq) * s.Hv + h) * per_head;
      if (run.fresh) std::fill(S, S + per_head, 0.0f);
      const int64_t L = static_cast<int64_t>(run.tok.size());
      qs.resize(L), ks.resize(L), vs.resize(L), os.resize(L), gs.resize(L), bs.resize(L);
      for (int64_t i = 0; i < L; ++i) {
        const int64_t t = run.tok[i];
        qs[i] = pq + (t * s.Hk + kh) * s.Dk;
        ks[i] = pk + (t * s.Hk + kh) * s.Dk;
        vs[i] = pv + (t * s.Hv + h) * s.Dv;
        os[i] = po + (t * s.Hv + h) * s.Dv;
        gs[i] = pg[t * s.Hv + h];
        bs[i] = pb[t * s.Hv + h];
      }
      if (p.chunk <= 1) {
        recurrent({s.Dk, s.Dv, S, qs.data(), ks.data(), vs.data(), gs.data(), bs.data(), os.data(), L, p.scale});
        continue;
      }
      for (int64_t c0 = 0; c0 < L; c0 += p.chunk) {
        const int64_t n = std::min(p.chunk, L - c0);
        chunked({s.Dk, s.Dv, S, qs.data() + c0, ks.data() + c0, vs.data() + c0, gs.data() + c0, bs.data() + c0,
                 os.data() + c0, n, p.scale});
      }
    }
  });
}

}  // namespace kvad::cpu
