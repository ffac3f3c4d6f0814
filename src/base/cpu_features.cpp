#include "base/cpu_features.h"

#include <cstdlib>

namespace kvad {

static CpuFeatures detect() {
  CpuFeatures f;
  const char* no = std::getenv("KVAD_NO_SIMD");
  if (no && no[0] && no[0] != '0') return f;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  f.avx512f = __builtin_cpu_supports("avx512f");  // these check that the OS saves the zmm state, too
  f.avx512bw = __builtin_cpu_supports("avx512bw");
  f.avx512vl = __builtin_cpu_supports("avx512vl");
  f.avx512vnni = __builtin_cpu_supports("avx512vnni");
  // F16C has no __builtin_cpu_supports name in older GCCs; every AVX2 CPU
  // shipped so far has it, and cpuid bit 29 of ECX (leaf 1) confirms it.
  unsigned a, b, c, d;
  __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(1), "c"(0));
  f.f16c = (c >> 29) & 1u;
#endif
  return f;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

}  // namespace kvad
