// Internal: the per-format CPU kernels behind cpu_kernels() (kernels_table.cpp).
// `ref` holds the scalar references (quants_ref.cpp), the definition of each
// format's math, following ggml's *_ref functions (ggml/src/ggml-quants.c)
// and ggml_vec_dot_* generic paths. `avx2` holds AVX2+FMA+F16C versions
// (quants_avx2.cpp), called only after a run-time feature check.
//
// Signatures are those of kernels.h: to_float(src, dst, n), from_float(src,
// dst, n), vec_dot(n, x, y); n is a multiple of the format's block size.
#pragma once
#include <cstdint>

namespace kvad::cpu::quants {

#define KVAD_FORMAT_KERNELS(fmt)                                  \
  void to_float_##fmt(const void* src, float* dst, int64_t n);    \
  void from_float_##fmt(const float* src, void* dst, int64_t n);

#define KVAD_ALL_FORMATS(X) X(f32) X(f16) X(bf16) X(q4_0) X(q4_1) X(q5_0) X(q5_1) X(q8_0) X(q8_1)

#define KVAD_ALL_DOTS(X) \
  X(f32) X(f16) X(bf16) X(q4_0_q8_0) X(q4_1_q8_1) X(q5_0_q8_0) X(q5_1_q8_1) X(q8_0_q8_0)

#define KVAD_DOT_DECL(name) float vec_dot_##name(int64_t n, const void* x, const void* y);

namespace ref {
KVAD_ALL_FORMATS(KVAD_FORMAT_KERNELS)
KVAD_ALL_DOTS(KVAD_DOT_DECL)
}  // namespace ref

namespace avx2 {
KVAD_ALL_FORMATS(KVAD_FORMAT_KERNELS)
KVAD_ALL_DOTS(KVAD_DOT_DECL)
}  // namespace avx2

#undef KVAD_FORMAT_KERNELS
#undef KVAD_DOT_DECL
#undef KVAD_ALL_FORMATS
#undef KVAD_ALL_DOTS

}  // namespace kvad::cpu::quants
