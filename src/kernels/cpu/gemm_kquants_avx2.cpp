// The AVX2 build of the K-quant gemms (gemm_kquants_impl.h), and the Q8_K
// activation packer they share with the AVX512 build.
#define KVAD_GEMM_KQUANTS_ISA avx2
#include "kernels/cpu/gemm_kquants_impl.h"
