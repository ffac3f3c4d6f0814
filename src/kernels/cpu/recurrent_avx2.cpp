// AVX2+FMA builds of the recurrent-layer kernels (recurrent_kernels.h;
// compiled with KVAD_AVX2_FLAGS, called only after the run-time check).
// Vectors run along the value dimension Dv (contiguous in the state's rows)
// or along channels (the convolution); tails shorter than a vector are
// scalar. The equations are the references' (recurrent.cpp); only the order
// of float sums differs.
//
// The chunked delta rule is written as small matrix products (Yang, Kautz &
// Hatamizadeh 2024, section 3, the WY form), per chunk of L tokens with
// G_i = Σ_{t<=i} g_t, Γ_i = e^{G_i}:
//   W = K S0, Y = Q S0                                   (L × Dv each)
//   A_im = e^{G_i−G_m} k_i·k_m (m < i),  B_im = e^{G_i−G_m} q_i·k_m (m <= i)
//   u_i = β_i (v_i − Γ_i W_i − Σ_{m<i} A_im u_m)         (forward substitution)
//   o_i = scale (Γ_i Y_i + Σ_m B_im u_m)
//   S = Γ_{L−1} S0 + Σ_m e^{G_{L−1}−G_m} k_m u_mᵀ
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/recurrent_kernels.h"
#include "kernels/cpu/simd_avx2.h"

namespace kvad::cpu {

namespace {

// C[i][j] (+)= Σ_{a<K} A[i][a] · B[a·ldb + j] for i < M, j < N; A is M row
// pointers, C rows ldc apart. Register blocks of R rows × 16 columns.
template <int R>
void gemm_block(const float* const* A, const float* B, int64_t ldb, int64_t K, int64_t N, float* C, int64_t ldc,
                bool acc) {
  int64_t j = 0;
  for (; j + 16 <= N; j += 16) {
    __m256 c0[R], c1[R];
    for (int r = 0; r < R; ++r) {
      c0[r] = acc ? _mm256_loadu_ps(C + r * ldc + j) : _mm256_setzero_ps();
      c1[r] = acc ? _mm256_loadu_ps(C + r * ldc + j + 8) : _mm256_setzero_ps();
    }
    for (int64_t a = 0; a < K; ++a) {
      const __m256 b0 = _mm256_loadu_ps(B + a * ldb + j), b1 = _mm256_loadu_ps(B + a * ldb + j + 8);
      for (int r = 0; r < R; ++r) {
        const __m256 x = _mm256_broadcast_ss(A[r] + a);
        c0[r] = _mm256_fmadd_ps(x, b0, c0[r]);
        c1[r] = _mm256_fmadd_ps(x, b1, c1[r]);
      }
    }
    for (int r = 0; r < R; ++r) {
      _mm256_storeu_ps(C + r * ldc + j, c0[r]);
      _mm256_storeu_ps(C + r * ldc + j + 8, c1[r]);
    }
  }
  for (; j + 8 <= N; j += 8) {
    __m256 c0[R];
    for (int r = 0; r < R; ++r) c0[r] = acc ? _mm256_loadu_ps(C + r * ldc + j) : _mm256_setzero_ps();
    for (int64_t a = 0; a < K; ++a) {
      const __m256 b0 = _mm256_loadu_ps(B + a * ldb + j);
      for (int r = 0; r < R; ++r) c0[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(A[r] + a), b0, c0[r]);
    }
    for (int r = 0; r < R; ++r) _mm256_storeu_ps(C + r * ldc + j, c0[r]);
  }
  for (; j < N; ++j)
    for (int r = 0; r < R; ++r) {
      float s = acc ? C[r * ldc + j] : 0.0f;
      for (int64_t a = 0; a < K; ++a) s += A[r][a] * B[a * ldb + j];
      C[r * ldc + j] = s;
    }
}

void gemm_rows(const float* const* A, int64_t M, const float* B, int64_t ldb, int64_t K, int64_t N, float* C,
               int64_t ldc, bool acc) {
  int64_t i = 0;
  for (; i + 4 <= M; i += 4) gemm_block<4>(A + i, B, ldb, K, N, C + i * ldc, ldc, acc);
  for (; i < M; ++i) gemm_block<1>(A + i, B, ldb, K, N, C + i * ldc, ldc, acc);
}

float dot(const float* x, const float* y, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8), a1);
  }
  for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), a0);
  float d = avx2::hsum(_mm256_add_ps(a0, a1));
  for (; i < n; ++i) d += x[i] * y[i];
  return d;
}

// out[m] = e^{x − G[m]} for m < n.
void exp_diff(float x, const float* G, int64_t n, float* out) {
  int64_t m = 0;
  for (; m + 8 <= n; m += 8)
    _mm256_storeu_ps(out + m, avx2::exp_ps(_mm256_sub_ps(_mm256_set1_ps(x), _mm256_loadu_ps(G + m))));
  for (; m < n; ++m) out[m] = std::exp(x - G[m]);
}

}  // namespace

void delta_recurrent_avx2(const DeltaHead& h) {
  const int64_t Dk = h.Dk, Dv = h.Dv;
  float* S = h.S;
  for (int64_t i = 0; i < h.L; ++i) {
    const float* q = h.q[i];
    const float* k = h.k[i];
    const float* v = h.v[i];
    float* o = h.o[i];
    const float decay = std::exp(h.g[i]), beta = h.beta[i], kq = dot(k, q, Dk);
    // With w = S0ᵀk, y = S0ᵀq of the state before the token:
    //   u = β (v − decay·w),  S = decay·S0 + k uᵀ,  o = scale (decay·y + (k·q) u),
    // so each block of 32 columns of S is read once and written once.
    int64_t j = 0;
    const __m256 vdecay = _mm256_set1_ps(decay), vbeta = _mm256_set1_ps(beta), vkq = _mm256_set1_ps(kq);
    const __m256 vscale = _mm256_set1_ps(h.scale);
    for (; j + 32 <= Dv; j += 32) {
      __m256 w[4], y[4], u[4];
      for (int b = 0; b < 4; ++b) w[b] = y[b] = _mm256_setzero_ps();
      for (int64_t a = 0; a < Dk; ++a) {
        const __m256 ka = _mm256_broadcast_ss(k + a), qa = _mm256_broadcast_ss(q + a);
        const float* Sa = S + a * Dv + j;
        for (int b = 0; b < 4; ++b) {
          const __m256 s = _mm256_loadu_ps(Sa + 8 * b);
          w[b] = _mm256_fmadd_ps(ka, s, w[b]);
          y[b] = _mm256_fmadd_ps(qa, s, y[b]);
        }
      }
      for (int b = 0; b < 4; ++b) {
        u[b] = _mm256_mul_ps(vbeta, _mm256_fnmadd_ps(vdecay, w[b], _mm256_loadu_ps(v + j + 8 * b)));
        _mm256_storeu_ps(o + j + 8 * b,
                         _mm256_mul_ps(vscale, _mm256_fmadd_ps(vdecay, y[b], _mm256_mul_ps(vkq, u[b]))));
      }
      for (int64_t a = 0; a < Dk; ++a) {
        const __m256 ka = _mm256_broadcast_ss(k + a);
        float* Sa = S + a * Dv + j;
        for (int b = 0; b < 4; ++b)
          _mm256_storeu_ps(Sa + 8 * b, _mm256_fmadd_ps(ka, u[b], _mm256_mul_ps(vdecay, _mm256_loadu_ps(Sa + 8 * b))));
      }
    }
    for (; j + 8 <= Dv; j += 8) {
      __m256 w = _mm256_setzero_ps(), y = _mm256_setzero_ps();
      for (int64_t a = 0; a < Dk; ++a) {
        const __m256 s = _mm256_loadu_ps(S + a * Dv + j);
        w = _mm256_fmadd_ps(_mm256_broadcast_ss(k + a), s, w);
        y = _mm256_fmadd_ps(_mm256_broadcast_ss(q + a), s, y);
      }
      const __m256 u = _mm256_mul_ps(vbeta, _mm256_fnmadd_ps(vdecay, w, _mm256_loadu_ps(v + j)));
      _mm256_storeu_ps(o + j, _mm256_mul_ps(vscale, _mm256_fmadd_ps(vdecay, y, _mm256_mul_ps(vkq, u))));
      for (int64_t a = 0; a < Dk; ++a) {
        float* Sa = S + a * Dv + j;
        _mm256_storeu_ps(Sa, _mm256_fmadd_ps(_mm256_broadcast_ss(k + a), u, _mm256_mul_ps(vdecay, _mm256_loadu_ps(Sa))));
      }
    }
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

void delta_chunk_avx2(const DeltaHead& h) {
  const int64_t Dk = h.Dk, Dv = h.Dv, L = h.L;
  thread_local std::vector<float> G, KT, KK, QK, W, Y, U, O, E;
  thread_local std::vector<const float*> rows;
  G.resize(L);
  KT.resize(Dk * L);  // KT[a][m] = k_m[a]
  KK.resize(L * L), QK.resize(L * L), E.resize(L);
  W.resize(L * Dv), Y.resize(L * Dv), U.resize(L * Dv), O.resize(L * Dv);
  float acc = 0;
  for (int64_t i = 0; i < L; ++i) G[i] = acc += h.g[i];
  for (int64_t m = 0; m < L; ++m)
    for (int64_t a = 0; a < Dk; ++a) KT[a * L + m] = h.k[m][a];
  // Gram matrices and the products with the incoming state.
  gemm_rows(h.k, L, KT.data(), L, Dk, L, KK.data(), L, false);
  gemm_rows(h.q, L, KT.data(), L, Dk, L, QK.data(), L, false);
  gemm_rows(h.k, L, h.S, Dv, Dk, Dv, W.data(), Dv, false);
  gemm_rows(h.q, L, h.S, Dv, Dk, Dv, Y.data(), Dv, false);
  // Decay masks: A (strictly lower, in KK) and B (lower with the diagonal, in QK; zero above).
  for (int64_t i = 0; i < L; ++i) {
    exp_diff(G[i], G.data(), i + 1, E.data());
    float* a = KK.data() + i * L;
    float* b = QK.data() + i * L;
    for (int64_t m = 0; m <= i; ++m) a[m] *= E[m], b[m] *= E[m];
    std::fill(b + i + 1, b + L, 0.0f);
  }
  // Forward substitution for u, 32 columns at a time.
  for (int64_t i = 0; i < L; ++i) {
    const float gi = std::exp(G[i]), bi = h.beta[i];
    const float* a = KK.data() + i * L;
    const float* v = h.v[i];
    const float* Wi = W.data() + i * Dv;
    float* Ui = U.data() + i * Dv;
    int64_t j = 0;
    const __m256 vg = _mm256_set1_ps(gi), vb = _mm256_set1_ps(bi);
    for (; j + 32 <= Dv; j += 32) {
      __m256 x[4];
      for (int b = 0; b < 4; ++b)
        x[b] = _mm256_fnmadd_ps(vg, _mm256_loadu_ps(Wi + j + 8 * b), _mm256_loadu_ps(v + j + 8 * b));
      for (int64_t m = 0; m < i; ++m) {
        const __m256 c = _mm256_broadcast_ss(a + m);
        const float* Um = U.data() + m * Dv + j;
        for (int b = 0; b < 4; ++b) x[b] = _mm256_fnmadd_ps(c, _mm256_loadu_ps(Um + 8 * b), x[b]);
      }
      for (int b = 0; b < 4; ++b) _mm256_storeu_ps(Ui + j + 8 * b, _mm256_mul_ps(vb, x[b]));
    }
    for (; j + 8 <= Dv; j += 8) {
      __m256 x = _mm256_fnmadd_ps(vg, _mm256_loadu_ps(Wi + j), _mm256_loadu_ps(v + j));
      for (int64_t m = 0; m < i; ++m)
        x = _mm256_fnmadd_ps(_mm256_broadcast_ss(a + m), _mm256_loadu_ps(U.data() + m * Dv + j), x);
      _mm256_storeu_ps(Ui + j, _mm256_mul_ps(vb, x));
    }
    for (; j < Dv; ++j) {
      float x = v[j] - gi * Wi[j];
      for (int64_t m = 0; m < i; ++m) x -= a[m] * U[m * Dv + j];
      Ui[j] = bi * x;
    }
  }
  // o = scale (Γ Y + B U).
  rows.resize(std::max(L, Dk));
  for (int64_t i = 0; i < L; ++i) rows[i] = QK.data() + i * L;
  gemm_rows(rows.data(), L, U.data(), Dv, L, Dv, O.data(), Dv, false);
  for (int64_t i = 0; i < L; ++i) {
    const float gi = std::exp(G[i]);
    const float* Yi = Y.data() + i * Dv;
    const float* Oi = O.data() + i * Dv;
    float* o = h.o[i];
    for (int64_t j = 0; j < Dv; ++j) o[j] = h.scale * (gi * Yi[j] + Oi[j]);
  }
  // S = Γ_{L−1} S0 + Σ_m e^{G_{L−1}−G_m} k_m u_mᵀ.
  const float gl = std::exp(G[L - 1]);
  exp_diff(G[L - 1], G.data(), L, E.data());
  for (int64_t a = 0; a < Dk; ++a) {
    float* kt = KT.data() + a * L;
    for (int64_t m = 0; m < L; ++m) kt[m] *= E[m];
    float* Sa = h.S + a * Dv;
    for (int64_t j = 0; j < Dv; ++j) Sa[j] *= gl;
    rows[a] = kt;
  }
  gemm_rows(rows.data(), Dk, U.data(), Dv, L, Dv, h.S, Dv, true);
}

void ssm_conv_run_avx2(const ConvRun& r) {
  const int64_t C = r.C, K = r.K;
  if (K > kConvMaxTapsAvx2 || K < 2) return ssm_conv_run_ref(r);
  int64_t c = r.c0;
  for (; c + 8 <= r.c1; c += 8) {
    // Taps of the 8 channels as vectors (w is channel-major), the state in registers.
    __m256 w[kConvMaxTapsAvx2], s[kConvMaxTapsAvx2];
    alignas(32) float t[8];
    for (int64_t j = 0; j < K; ++j) {
      for (int l = 0; l < 8; ++l) t[l] = r.w[(c + l) * K + j];
      w[j] = _mm256_load_ps(t);
    }
    for (int64_t j = 0; j < K - 1; ++j) s[j] = _mm256_loadu_ps(r.st + j * C + c);
    for (int64_t i = 0; i < r.n_tok; ++i) {
      const __m256 x = _mm256_loadu_ps(r.x + r.tok[i] * C + c);
      __m256 acc = _mm256_mul_ps(w[K - 1], x);
      for (int64_t j = 0; j < K - 1; ++j) acc = _mm256_fmadd_ps(w[j], s[j], acc);
      _mm256_storeu_ps(r.out + r.tok[i] * C + c, acc);
      for (int64_t j = 0; j + 1 < K - 1; ++j) s[j] = s[j + 1];
      s[K - 2] = x;
    }
    for (int64_t j = 0; j < K - 1; ++j) _mm256_storeu_ps(r.st + j * C + c, s[j]);
  }
  if (c < r.c1) {
    ConvRun tail = r;
    tail.c0 = c;
    ssm_conv_run_ref(tail);
  }
}

}  // namespace kvad::cpu
