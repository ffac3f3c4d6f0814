// AVX2 build of the strided element-wise rows (strided.h): rows whose inner
// elements are contiguous. Called only after a run-time AVX2 check.
#include <immintrin.h>

#include "kernels/cpu/strided.h"

namespace kvad::cpu {

void binary_row_avx2(Binary op, int64_t n, const float* a, const float* b, float* o) {
  int64_t i = 0;
  if (op == Binary::Add) {
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(o + i, _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  } else {
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(o + i, _mm256_mul_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  }
  binary_row_ref(op, n - i, a + i, b + i, o + i);  // the tail, exact as the vector lanes
}

}  // namespace kvad::cpu
