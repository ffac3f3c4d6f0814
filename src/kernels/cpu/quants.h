// Internal: the per-format CPU kernels behind cpu_kernels() (kernels_table.cpp).
// `ref` holds the scalar references (quants_ref.cpp), the definition of each
// format's math, following ggml's *_ref functions (ggml/src/ggml-quants.c)
// and ggml_vec_dot_* generic paths. `avx2` holds AVX2+FMA+F16C versions
// (quants_avx2.cpp), called only after a run-time feature check.
//
// Signatures are those of kernels.h: to_float(src, dst, n), from_float(src,
// dst, n), vec_dot(n, x, y); n is a multiple of the format's block size.
//
// The K-quants (Q2_K..Q6_K, Q8_K) live in kquants_ref.cpp, IQ4_NL and the
// ternary TQ1_0/TQ2_0 in iq_tq_ref.cpp, MXFP4 in mxfp4_ref.cpp; their AVX2
// versions in kquants_avx2.cpp and mxfp4_avx2.cpp. Their AVX2 side has the
// dots, Q8_K's from_float (the activation quantizer, on the hot path) and the
// to_float of the formats read row by row as embedding tables (Q4_K, Q5_K,
// Q6_K; and Q8_K).
#pragma once
#include <cstdint>

namespace kvad::cpu::quants {

#define KVAD_FORMAT_KERNELS(fmt)                                  \
  void to_float_##fmt(const void* src, float* dst, int64_t n);    \
  void from_float_##fmt(const float* src, void* dst, int64_t n);

#define KVAD_ALL_FORMATS(X) X(f32) X(f16) X(bf16) X(q4_0) X(q4_1) X(q5_0) X(q5_1) X(q8_0) X(q8_1)

#define KVAD_ALL_DOTS(X) \
  X(f32) X(f16) X(bf16) X(q4_0_q8_0) X(q4_1_q8_1) X(q5_0_q8_0) X(q5_1_q8_1) X(q8_0_q8_0)

#define KVAD_K_FORMATS(X) X(q2_K) X(q3_K) X(q4_K) X(q5_K) X(q6_K) X(q8_K) X(iq4_nl) X(tq1_0) X(tq2_0) X(mxfp4)

#define KVAD_K_DOTS(X)                                                                    \
  X(q2_K_q8_K) X(q3_K_q8_K) X(q4_K_q8_K) X(q5_K_q8_K) X(q6_K_q8_K) X(iq4_nl_q8_0) \
  X(tq1_0_q8_K) X(tq2_0_q8_K) X(mxfp4_q8_0)

#define KVAD_DOT_DECL(name) float vec_dot_##name(int64_t n, const void* x, const void* y);

namespace ref {
KVAD_ALL_FORMATS(KVAD_FORMAT_KERNELS)
KVAD_ALL_DOTS(KVAD_DOT_DECL)
KVAD_K_FORMATS(KVAD_FORMAT_KERNELS)
KVAD_K_DOTS(KVAD_DOT_DECL)
}  // namespace ref

namespace avx2 {
KVAD_ALL_FORMATS(KVAD_FORMAT_KERNELS)
KVAD_ALL_DOTS(KVAD_DOT_DECL)
KVAD_K_DOTS(KVAD_DOT_DECL)
void to_float_q4_K(const void* src, float* dst, int64_t n);
void to_float_q5_K(const void* src, float* dst, int64_t n);
void to_float_q6_K(const void* src, float* dst, int64_t n);
void to_float_q8_K(const void* src, float* dst, int64_t n);
void from_float_q8_K(const float* src, void* dst, int64_t n);
}  // namespace avx2

#undef KVAD_FORMAT_KERNELS
#undef KVAD_DOT_DECL
#undef KVAD_ALL_FORMATS
#undef KVAD_ALL_DOTS
#undef KVAD_K_FORMATS
#undef KVAD_K_DOTS

}  // namespace kvad::cpu::quants
