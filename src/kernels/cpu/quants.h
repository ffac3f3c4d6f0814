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

namespace ref {
// The legacy formats (quants_ref.cpp).
void to_float_f32(const void* src, float* dst, int64_t n);
void from_float_f32(const float* src, void* dst, int64_t n);
void to_float_f16(const void* src, float* dst, int64_t n);
void from_float_f16(const float* src, void* dst, int64_t n);
void to_float_bf16(const void* src, float* dst, int64_t n);
void from_float_bf16(const float* src, void* dst, int64_t n);
void to_float_q4_0(const void* src, float* dst, int64_t n);
void from_float_q4_0(const float* src, void* dst, int64_t n);
void to_float_q4_1(const void* src, float* dst, int64_t n);
void from_float_q4_1(const float* src, void* dst, int64_t n);
void to_float_q5_0(const void* src, float* dst, int64_t n);
void from_float_q5_0(const float* src, void* dst, int64_t n);
void to_float_q5_1(const void* src, float* dst, int64_t n);
void from_float_q5_1(const float* src, void* dst, int64_t n);
void to_float_q8_0(const void* src, float* dst, int64_t n);
void from_float_q8_0(const float* src, void* dst, int64_t n);
void to_float_q8_1(const void* src, float* dst, int64_t n);
void from_float_q8_1(const float* src, void* dst, int64_t n);
float vec_dot_f32(int64_t n, const void* x, const void* y);
float vec_dot_f16(int64_t n, const void* x, const void* y);
float vec_dot_bf16(int64_t n, const void* x, const void* y);
float vec_dot_q4_0_q8_0(int64_t n, const void* x, const void* y);
float vec_dot_q4_1_q8_1(int64_t n, const void* x, const void* y);
float vec_dot_q5_0_q8_0(int64_t n, const void* x, const void* y);
float vec_dot_q5_1_q8_1(int64_t n, const void* x, const void* y);
float vec_dot_q8_0_q8_0(int64_t n, const void* x, const void* y);
// The K-quants (kquants_ref.cpp), IQ4_NL, TQ1_0, TQ2_0 (iq_tq_ref.cpp), MXFP4 (mxfp4_ref.cpp).
void to_float_q2_K(const void* src, float* dst, int64_t n);
void from_float_q2_K(const float* src, void* dst, int64_t n);
void to_float_q3_K(const void* src, float* dst, int64_t n);
void from_float_q3_K(const float* src, void* dst, int64_t n);
void to_float_q4_K(const void* src, float* dst, int64_t n);
void from_float_q4_K(const float* src, void* dst, int64_t n);
void to_float_q5_K(const void* src, float* dst, int64_t n);
void from_float_q5_K(const float* src, void* dst, int64_t n);
void to_float_q6_K(const void* src, float* dst, int64_t n);
void from_float_q6_K(const float* src, void* dst, int64_t n);
void to_float_q8_K(const void* src, float* dst, int64_t n);
void from_float_q8_K(const float* src, void* dst, int64_t n);
void to_float_iq4_nl(const void* src, float* dst, int64_t n);
void from_float_iq4_nl(const float* src, void* dst, int64_t n);
void to_float_tq1_0(const void* src, float* dst, int64_t n);
void from_float_tq1_0(const float* src, void* dst, int64_t n);
void to_float_tq2_0(const void* src, float* dst, int64_t n);
void from_float_tq2_0(const float* src, void* dst, int64_t n);
void to_float_mxfp4(const void* src, float* dst, int64_t n);
void from_float_mxfp4(const float* src, void* dst, int64_t n);
float vec_dot_q2_K_q8_K(int64_t n, const void* x, const void* y);
float vec_dot_q3_K_q8_K(int64_t n, const void* x, const void* y);
float vec_dot_q4_K_q8_K(int64_t n, const void* x, const void* y);
float vec_dot_q5_K_q8_K(int64_t n, const void* x, const void* y);
float vec_dot_q6_K_q8_K(int64_t n, const void* x, const void* y);
float vec_dot_iq4_nl_q8_0(int64_t n, const void* x, const void* y);
float vec_dot_tq1_0_q8_K(int64_t n, const void* x, const void* y);
float vec_dot_tq2_0_q8_K(int64_t n, const void* x, const void* y);
float vec_dot_mxfp4_q8_0(int64_t n, const void* x, const void* y);
}  // namespace ref

namespace avx2 {
// quants_avx2.cpp.
void to_float_f32(const void* src, float* dst, int64_t n);
void from_float_f32(const float* src, void* dst, int64_t n);
void to_float_f16(const void* src, float* dst, int64_t n);
void from_float_f16(const float* src, void* dst, int64_t n);
void to_float_bf16(const void* src, float* dst, int64_t n);
void from_float_bf16(const float* src, void* dst, int64_t n);
void to_float_q4_0(const void* src, float* dst, int64_t n);
void from_float_q4_0(const float* src, void* dst, int64_t n);
void to_float_q4_1(const void* src, float* dst, int64_t n);
void from_float_q4_1(const float* src, void* dst, int64_t n);
void to_float_q5_0(const void* src, float* dst, int64_t n);
void from_float_q5_0(const float* src, void* dst, int64_t n);
void to_float_q5_1(const void* src, float* dst, int64_t n);
void from_float_q5_1(const float* src, void* dst, int64_t n);
void to_float_q8_0(const void* src, float* dst, int64_t n);
void from_float_q8_0(const float* src, void* dst, int64_t n);
void to_float_q8_1(const void* src, float* dst, int64_t n);
void from_float_q8_1(const float* src, void* dst, int64_t n);
float vec_dot_f32(int64_t n, const void* x, const void* y);
float vec_dot_f16(int64_t n, const void* x, const void* y);
float vec_dot_bf16(int64_t n, const void* x, const void* y);
float vec_dot_q4_0_q8_0(int64_t n, const void* x, const void* y);
float vec_dot_q4_1_q8_1(int64_t n, const void* x, const void* y);
float vec_dot_q5_0_q8_0(int64_t n, const void* x, const void* y);
float vec_dot_q5_1_q8_1(int64_t n, const void* x, const void* y);
float vec_dot_q8_0_q8_0(int64_t n, const void* x, const void* y);
// kquants_avx2.cpp; vec_dot_mxfp4_q8_0: mxfp4_avx2.cpp.
float vec_dot_q2_K_q8_K(int64_t n, const void* x, const void* y);
float vec_dot_q3_K_q8_K(int64_t n, const void* x, const void* y);
float vec_dot_q4_K_q8_K(int64_t n, const void* x, const void* y);
float vec_dot_q5_K_q8_K(int64_t n, const void* x, const void* y);
float vec_dot_q6_K_q8_K(int64_t n, const void* x, const void* y);
float vec_dot_iq4_nl_q8_0(int64_t n, const void* x, const void* y);
float vec_dot_tq1_0_q8_K(int64_t n, const void* x, const void* y);
float vec_dot_tq2_0_q8_K(int64_t n, const void* x, const void* y);
float vec_dot_mxfp4_q8_0(int64_t n, const void* x, const void* y);
void to_float_q4_K(const void* src, float* dst, int64_t n);
void to_float_q5_K(const void* src, float* dst, int64_t n);
void to_float_q6_K(const void* src, float* dst, int64_t n);
void to_float_q8_K(const void* src, float* dst, int64_t n);
void from_float_q8_K(const float* src, void* dst, int64_t n);
}  // namespace avx2

}  // namespace kvad::cpu::quants
