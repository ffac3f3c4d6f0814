// CPU features detected at run time; kernels are chosen from these, never
// from the build machine (DESIGN.md seam 2).
#pragma once

namespace kvad {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  /// AVX2 kernels in kvad need AVX2, FMA and F16C together.
  bool has_avx2_fma() const { return avx2 && fma && f16c; }
};

/// Features of the CPU this process runs on. Setting the environment variable
/// KVAD_NO_SIMD=1 reports none, forcing the scalar reference kernels.
const CpuFeatures& cpu_features();

}  // namespace kvad
