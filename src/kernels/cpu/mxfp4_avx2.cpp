// AVX2+FMA+F16C dot product of MXFP4 weights (quant_blocks.h block_mxfp4)
// with Q8_0 activations. Compiled with ${KVAD_AVX2_FLAGS} and
// -ffp-contract=off; called only when cpu_features().has_avx2_fma().
//
// It computes what vec_dot_mxfp4_q8_0 in mxfp4_ref.cpp computes: the same
// exact integer sum per 32-element block; the 8 int lanes of a block are
// then scaled and added in float lanes with FMA (dot_table4_avx2.h), so it
// differs from the reference by float rounding only. MXFP4's to_float and
// from_float run the reference.
#include <immintrin.h>

#include "kernels/cpu/dot_table4_avx2.h"
#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/quants.h"

namespace kvad::cpu::quants::avx2 {

float vec_dot_mxfp4_q8_0(int64_t n, const void* vx, const void* vy) {
  static_assert(QK_MXFP4 == 32);
  return dot_table4_q8_0(n, static_cast<const block_mxfp4*>(vx), static_cast<const block_q8_0*>(vy), kvalues_mxfp4,
                         [](const block_mxfp4& b, const block_q8_0& a) { return _cvtsh_ss(a.d) * e8m0_to_f32_half(b.e); });
}

}  // namespace kvad::cpu::quants::avx2
