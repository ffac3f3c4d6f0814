// CPU features detected at run time; kernels are chosen from these, never
// from the build machine (DESIGN.md seam 2).
#pragma once

namespace kvad {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512vnni = false;
  /// AVX2 kernels in kvad need AVX2, FMA and F16C together.
  bool has_avx2_fma() const { return avx2 && fma && f16c; }
  /// The AVX512 builds of AVX2 kernels (${KVAD_AVX512_VNNI_FLAGS}) need
  /// those and AVX512 F, BW, VL and VNNI (Ice Lake, Zen 4 and later).
  bool has_avx512_vnni() const { return has_avx2_fma() && avx512f && avx512bw && avx512vl && avx512vnni; }
};

/// Features of the CPU this process runs on. Setting the environment variable
/// KVAD_NO_SIMD=1 reports none, forcing the scalar reference kernels.
const CpuFeatures& cpu_features();

}  // namespace kvad
