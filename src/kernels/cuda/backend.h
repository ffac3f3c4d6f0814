// The CUDA row of the op table (tensor/backend.h), filled and registered by
// backend.cpp when a program links kvad_kernels_cuda. Nothing above tensor/
// calls it directly; this header has the few settings tests and benchmarks
// change. Status: compiles; UNVERIFIED ON A GPU in this build.
#pragma once
#include "kernels/cuda/device_kernels.h"

namespace kvad::cuda {

/// The prefill path (device_kernels.h GemmPath) the CUDA row's matmul takes for
/// quantized weights with more than kGemvMaxTokens tokens: what
/// set_gemm_path chose, else KVAD_CUDA_GEMM, read once per process at the
/// first call (gemm_path_from_env; throws kvad::Error for a value that is not
/// mma or cublas). Never returns Auto.
GemmPath gemm_path();

/// Overrides KVAD_CUDA_GEMM for the ops that follow (tests and benchmarks
/// compare the two paths in one process); Auto goes back to the variable.
void set_gemm_path(GemmPath p);

}  // namespace kvad::cuda
