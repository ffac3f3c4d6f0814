// SIMD builds of the recurrent-layer kernels (recurrent_kernels.h), written
// once over a vector type V and compiled per instruction set by the files
// that include this one (internal to them): recurrent_avx2.cpp (V = 8 f32
// lanes, ${KVAD_AVX2_FLAGS}) and recurrent_avx512.cpp (V = 16 lanes,
// ${KVAD_AVX512_VNNI_FLAGS}), each called only after the run-time CPU
// feature check (recurrent.cpp). Vectors run along the value dimension Dv
// (contiguous in the state's rows) or along channels (the convolution);
// tails shorter than a vector are scalar. The equations are the references'
// (recurrent.cpp); only the order of float sums differs.
//
// V provides: T (the vector), W (lanes), kRegs (vector registers), zero,
// load, store (unaligned), set1, bcast (from memory), fmadd(a, b, c) =
// a·b + c, fnmadd(a, b, c) = c − a·b, mul, add, sub, hsum, and exp
// (lane-wise e^x, relative error ~2e-7).
//
// The chunked delta rule is written as small matrix products (Yang, Kautz &
// Hatamizadeh 2024, section 3, the WY form), per chunk of L tokens with
// G_i = Σ_{t<=i} g_t, Γ_i = e^{G_i}:
//   W = K S0, Y = Q S0                                   (L × Dv each)
//   A_im = e^{G_i−G_m} k_i·k_m (m < i),  B_im = e^{G_i−G_m} q_i·k_m (m <= i)
//   u_i = β_i (v_i − Γ_i W_i − Σ_{m<i} A_im u_m)         (forward substitution)
//   o_i = scale (Γ_i Y_i + Σ_m B_im u_m)
//   S = Γ_{L−1} S0 + Σ_m e^{G_{L−1}−G_m} k_m u_mᵀ
// e^{G_i−G_m} <= 1 for m <= i, so no factor overflows.
#pragma once
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/recurrent_kernels.h"

namespace kvad::cpu::recurrent_simd {
namespace {

// C[i][j] (+)= Σ_{a<K} A[i][a] · B[a·ldb + j] for i < M, j < N; A is M row
// pointers, C rows ldc apart. Register blocks of R rows × 2 vectors.
template <class V, int R>
void gemm_block(const float* const* A, const float* B, int64_t ldb, int64_t K, int64_t N, float* C, int64_t ldc,
                bool acc) {
  using T = typename V::T;
  constexpr int64_t W = V::W;
  int64_t j = 0;
  for (; j + 2 * W <= N; j += 2 * W) {
    T c0[R], c1[R];
    for (int r = 0; r < R; ++r) {
      c0[r] = acc ? V::load(C + r * ldc + j) : V::zero();
      c1[r] = acc ? V::load(C + r * ldc + j + W) : V::zero();
    }
    for (int64_t a = 0; a < K; ++a) {
      const T b0 = V::load(B + a * ldb + j), b1 = V::load(B + a * ldb + j + W);
      for (int r = 0; r < R; ++r) {
        const T x = V::bcast(A[r] + a);
        c0[r] = V::fmadd(x, b0, c0[r]);
        c1[r] = V::fmadd(x, b1, c1[r]);
      }
    }
    for (int r = 0; r < R; ++r) {
      V::store(C + r * ldc + j, c0[r]);
      V::store(C + r * ldc + j + W, c1[r]);
    }
  }
  for (; j + W <= N; j += W) {
    T c0[R];
    for (int r = 0; r < R; ++r) c0[r] = acc ? V::load(C + r * ldc + j) : V::zero();
    for (int64_t a = 0; a < K; ++a) {
      const T b0 = V::load(B + a * ldb + j);
      for (int r = 0; r < R; ++r) c0[r] = V::fmadd(V::bcast(A[r] + a), b0, c0[r]);
    }
    for (int r = 0; r < R; ++r) V::store(C + r * ldc + j, c0[r]);
  }
  for (; j < N; ++j)
    for (int r = 0; r < R; ++r) {
      float s = acc ? C[r * ldc + j] : 0.0f;
      for (int64_t a = 0; a < K; ++a) s += A[r][a] * B[a * ldb + j];
      C[r * ldc + j] = s;
    }
}

template <class V>
void gemm_rows(const float* const* A, int64_t M, const float* B, int64_t ldb, int64_t K, int64_t N, float* C,
               int64_t ldc, bool acc) {
  int64_t i = 0;
  for (; i + 4 <= M; i += 4) gemm_block<V, 4>(A + i, B, ldb, K, N, C + i * ldc, ldc, acc);
  for (; i < M; ++i) gemm_block<V, 1>(A + i, B, ldb, K, N, C + i * ldc, ldc, acc);
}

template <class V>
float dot(const float* x, const float* y, int64_t n) {
  using T = typename V::T;
  constexpr int64_t W = V::W;
  T a0 = V::zero(), a1 = V::zero();
  int64_t i = 0;
  for (; i + 2 * W <= n; i += 2 * W) {
    a0 = V::fmadd(V::load(x + i), V::load(y + i), a0);
    a1 = V::fmadd(V::load(x + i + W), V::load(y + i + W), a1);
  }
  for (; i + W <= n; i += W) a0 = V::fmadd(V::load(x + i), V::load(y + i), a0);
  float d = V::hsum(V::add(a0, a1));
  for (; i < n; ++i) d += x[i] * y[i];
  return d;
}

// out[m] = e^{x − G[m]} for m < n.
template <class V>
void exp_diff(float x, const float* G, int64_t n, float* out) {
  constexpr int64_t W = V::W;
  int64_t m = 0;
  for (; m + W <= n; m += W) V::store(out + m, V::exp(V::sub(V::set1(x), V::load(G + m))));
  for (; m < n; ++m) out[m] = std::exp(x - G[m]);
}

// With w = S0ᵀk, y = S0ᵀq of the state before the token:
//   u = β (v − decay·w),  S = decay·S0 + k uᵀ,  o = scale (decay·y + (k·q) u),
// so each block of NB vectors' columns of S is read once and written once
// (with 32 registers NB = 8: 128 columns, a whole row of the real shape, so
// the state streams through in row order).
template <class V, int NB>
void recurrent_cols(const DeltaHead& h, int64_t j, const float* q, const float* k, const float* v, float* o,
                    float decay, float beta, float kq) {
  using T = typename V::T;
  constexpr int64_t W = V::W;
  const int64_t Dk = h.Dk, Dv = h.Dv;
  float* S = h.S;
  const T vdecay = V::set1(decay), vbeta = V::set1(beta), vkq = V::set1(kq), vscale = V::set1(h.scale);
  T w[NB], y[NB], u[NB];
  for (int b = 0; b < NB; ++b) w[b] = y[b] = V::zero();
  for (int64_t a = 0; a < Dk; ++a) {
    const T ka = V::bcast(k + a), qa = V::bcast(q + a);
    const float* Sa = S + a * Dv + j;
    for (int b = 0; b < NB; ++b) {
      const T s = V::load(Sa + W * b);
      w[b] = V::fmadd(ka, s, w[b]);
      y[b] = V::fmadd(qa, s, y[b]);
    }
  }
  for (int b = 0; b < NB; ++b) {
    u[b] = V::mul(vbeta, V::fnmadd(vdecay, w[b], V::load(v + j + W * b)));
    V::store(o + j + W * b, V::mul(vscale, V::fmadd(vdecay, y[b], V::mul(vkq, u[b]))));
  }
  for (int64_t a = 0; a < Dk; ++a) {
    const T ka = V::bcast(k + a);
    float* Sa = S + a * Dv + j;
    for (int b = 0; b < NB; ++b) V::store(Sa + W * b, V::fmadd(ka, u[b], V::mul(vdecay, V::load(Sa + W * b))));
  }
}

template <class V>
void delta_recurrent(const DeltaHead& h) {
  constexpr int64_t W = V::W;
  const int64_t Dk = h.Dk, Dv = h.Dv;
  float* S = h.S;
  for (int64_t i = 0; i < h.L; ++i) {
    const float* q = h.q[i];
    const float* k = h.k[i];
    const float* v = h.v[i];
    float* o = h.o[i];
    const float decay = std::exp(h.g[i]), beta = h.beta[i], kq = dot<V>(k, q, Dk);
    int64_t j = 0;
    if constexpr (V::kRegs >= 32)  // 3 x 8 accumulators fit: whole 128-float rows in one pass
      for (; j + 8 * W <= Dv; j += 8 * W) recurrent_cols<V, 8>(h, j, q, k, v, o, decay, beta, kq);
    for (; j + 4 * W <= Dv; j += 4 * W) recurrent_cols<V, 4>(h, j, q, k, v, o, decay, beta, kq);
    for (; j + W <= Dv; j += W) recurrent_cols<V, 1>(h, j, q, k, v, o, decay, beta, kq);
    for (; j < Dv; ++j) {
      float w = 0, y = 0;
      for (int64_t a = 0; a < Dk; ++a) {
        w += S[a * Dv + j] * k[a];
        y += S[a * Dv + j] * q[a];
      }
      const float u = beta * (v[j] - decay * w);
      o[j] = h.scale * (decay * y + kq * u);
      for (int64_t a = 0; a < Dk; ++a) S[a * Dv + j] = decay * S[a * Dv + j] + k[a] * u;
    }
  }
}

// u_i for columns [j, j + NB·W): forward substitution over the rows m < i.
template <class V, int NB>
void solve_cols(int64_t i, int64_t j, int64_t Dv, const float* a, const float* v, const float* Wi, const float* U,
                float* Ui, float gi, float bi) {
  using T = typename V::T;
  constexpr int64_t W = V::W;
  const T vg = V::set1(gi), vb = V::set1(bi);
  T x[NB];
  for (int b = 0; b < NB; ++b) x[b] = V::fnmadd(vg, V::load(Wi + j + W * b), V::load(v + j + W * b));
  for (int64_t m = 0; m < i; ++m) {
    const T c = V::bcast(a + m);
    const float* Um = U + m * Dv + j;
    for (int b = 0; b < NB; ++b) x[b] = V::fnmadd(c, V::load(Um + W * b), x[b]);
  }
  for (int b = 0; b < NB; ++b) V::store(Ui + j + W * b, V::mul(vb, x[b]));
}

template <class V>
void delta_chunk(const DeltaHead& h) {
  constexpr int64_t W = V::W;
  const int64_t Dk = h.Dk, Dv = h.Dv, L = h.L;
  thread_local std::vector<float> G, KT, KK, QK, Wm, Y, U, O, E;
  thread_local std::vector<const float*> rows;
  G.resize(L);
  KT.resize(Dk * L);  // KT[a][m] = k_m[a]
  KK.resize(L * L), QK.resize(L * L), E.resize(L);
  Wm.resize(L * Dv), Y.resize(L * Dv), U.resize(L * Dv), O.resize(L * Dv);
  float acc = 0;
  for (int64_t i = 0; i < L; ++i) G[i] = acc += h.g[i];
  for (int64_t m = 0; m < L; ++m)
    for (int64_t a = 0; a < Dk; ++a) KT[a * L + m] = h.k[m][a];
  // Gram matrices and the products with the incoming state.
  gemm_rows<V>(h.k, L, KT.data(), L, Dk, L, KK.data(), L, false);
  gemm_rows<V>(h.q, L, KT.data(), L, Dk, L, QK.data(), L, false);
  gemm_rows<V>(h.k, L, h.S, Dv, Dk, Dv, Wm.data(), Dv, false);
  gemm_rows<V>(h.q, L, h.S, Dv, Dk, Dv, Y.data(), Dv, false);
  // Decay masks: A (strictly lower, in KK) and B (lower with the diagonal, in QK; zero above).
  for (int64_t i = 0; i < L; ++i) {
    exp_diff<V>(G[i], G.data(), i + 1, E.data());
    float* a = KK.data() + i * L;
    float* b = QK.data() + i * L;
    for (int64_t m = 0; m <= i; ++m) a[m] *= E[m], b[m] *= E[m];
    std::fill(b + i + 1, b + L, 0.0f);
  }
  // Forward substitution for u.
  for (int64_t i = 0; i < L; ++i) {
    const float gi = std::exp(G[i]), bi = h.beta[i];
    const float* a = KK.data() + i * L;
    const float* v = h.v[i];
    const float* Wi = Wm.data() + i * Dv;
    float* Ui = U.data() + i * Dv;
    int64_t j = 0;
    for (; j + 4 * W <= Dv; j += 4 * W) solve_cols<V, 4>(i, j, Dv, a, v, Wi, U.data(), Ui, gi, bi);
    for (; j + W <= Dv; j += W) solve_cols<V, 1>(i, j, Dv, a, v, Wi, U.data(), Ui, gi, bi);
    for (; j < Dv; ++j) {
      float x = v[j] - gi * Wi[j];
      for (int64_t m = 0; m < i; ++m) x -= a[m] * U[m * Dv + j];
      Ui[j] = bi * x;
    }
  }
  // o = scale (Γ Y + B U).
  rows.resize(std::max(L, Dk));
  for (int64_t i = 0; i < L; ++i) rows[i] = QK.data() + i * L;
  gemm_rows<V>(rows.data(), L, U.data(), Dv, L, Dv, O.data(), Dv, false);
  for (int64_t i = 0; i < L; ++i) {
    const float gi = std::exp(G[i]);
    const float* Yi = Y.data() + i * Dv;
    const float* Oi = O.data() + i * Dv;
    float* o = h.o[i];
    for (int64_t j = 0; j < Dv; ++j) o[j] = h.scale * (gi * Yi[j] + Oi[j]);
  }
  // S = Γ_{L−1} S0 + Σ_m e^{G_{L−1}−G_m} k_m u_mᵀ.
  const float gl = std::exp(G[L - 1]);
  exp_diff<V>(G[L - 1], G.data(), L, E.data());
  for (int64_t a = 0; a < Dk; ++a) {
    float* kt = KT.data() + a * L;
    for (int64_t m = 0; m < L; ++m) kt[m] *= E[m];
    float* Sa = h.S + a * Dv;
    for (int64_t j = 0; j < Dv; ++j) Sa[j] *= gl;
    rows[a] = kt;
  }
  gemm_rows<V>(rows.data(), Dk, U.data(), Dv, L, Dv, h.S, Dv, true);
}

template <class V>
void ssm_conv_run(const ConvRun& r) {
  using T = typename V::T;
  constexpr int64_t W = V::W;
  const int64_t C = r.C, K = r.K;
  if (K > kConvMaxTapsSimd || K < 2) return ssm_conv_run_ref(r);
  int64_t c = r.c0;
  for (; c + W <= r.c1; c += W) {
    // Taps of the W channels as vectors (w is channel-major), the state in registers.
    T w[kConvMaxTapsSimd], s[kConvMaxTapsSimd];
    alignas(64) float t[W];
    for (int64_t j = 0; j < K; ++j) {
      for (int64_t l = 0; l < W; ++l) t[l] = r.w[(c + l) * K + j];
      w[j] = V::load(t);
    }
    for (int64_t j = 0; j < K - 1; ++j) s[j] = V::load(r.st + j * C + c);
    for (int64_t i = 0; i < r.n_tok; ++i) {
      const T x = V::load(r.x + r.tok[i] * C + c);
      T acc = V::mul(w[K - 1], x);
      for (int64_t j = 0; j < K - 1; ++j) acc = V::fmadd(w[j], s[j], acc);
      V::store(r.out + r.tok[i] * C + c, acc);
      for (int64_t j = 0; j + 1 < K - 1; ++j) s[j] = s[j + 1];
      s[K - 2] = x;
    }
    for (int64_t j = 0; j < K - 1; ++j) V::store(r.st + j * C + c, s[j]);
  }
  if (c < r.c1) {
    ConvRun tail = r;
    tail.c0 = c;
    ssm_conv_run_ref(tail);
  }
}

}  // namespace
}  // namespace kvad::cpu::recurrent_simd
