// The AVX512-VL/BW/VNNI build of the K-quant gemms (gemm_kquants_impl.h):
// compiled with ${KVAD_AVX512_VNNI_FLAGS}, called only when
// cpu_features().has_avx512_vnni().
#define KVAD_GEMM_KQUANTS_ISA avx512vnni
#define KVAD_GEMM_KQUANTS_NO_PACK
#include "kernels/cpu/gemm_kquants_impl.h"
