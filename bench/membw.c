// Streaming-read memory bandwidth, for bench/compare.
//
// Usage: membw [MiB] [threads] [passes]   (defaults 1024, all, 20)
//
// Fills a buffer of MiB mebibytes (far larger than the caches) with the same
// threads that later read it (first touch puts the pages where those threads
// run), then sums it as uint64 words with `threads` OpenMP threads, each
// reading one contiguous slice with eight independent accumulators (one
// dependent chain of adds per thread would cap the rate below what the
// memory delivers: a single-sum loop measured 19.9 GB/s with 2 threads on
// the development machine, this one 31 GB/s), `passes` times. Prints one JSON line:
// bytes per pass, threads, and the best and median rate in GB/s (10^9 bytes
// per second). "Best" is STREAM's convention (the fastest pass is the least
// disturbed one); the sum is printed so the compiler cannot drop the reads.
//
// bench/compare compiles it on the fly: cc -O3 -march=native -fopenmp.
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

int main(int argc, char** argv) {
  const size_t mib = argc > 1 ? strtoull(argv[1], NULL, 10) : 1024;
  const int threads = argc > 2 && atoi(argv[2]) > 0 ? atoi(argv[2]) : omp_get_max_threads();
  const int passes = argc > 3 && atoi(argv[3]) > 0 ? atoi(argv[3]) : 20;
  const size_t n = (mib << 20) / sizeof(uint64_t);
  uint64_t* a = aligned_alloc(4096, n * sizeof(uint64_t));
  if (!a) {
    fprintf(stderr, "membw: cannot allocate %zu MiB\n", mib);
    return 1;
  }
#pragma omp parallel for num_threads(threads) schedule(static)
  for (size_t i = 0; i < n; ++i) a[i] = i;

  double* gbs = malloc(passes * sizeof(double));
  uint64_t total = 0;
  for (int p = 0; p < passes; ++p) {
    uint64_t s = 0;
    const double t0 = now_s();
#pragma omp parallel num_threads(threads) reduction(+ : s)
    {
      const size_t nt = (size_t)omp_get_num_threads(), it = (size_t)omp_get_thread_num();
      const size_t b = n / 8 * it / nt * 8, e = it + 1 == nt ? n : n / 8 * (it + 1) / nt * 8;
      uint64_t acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (size_t i = b; i < e; i += 8)
        for (int j = 0; j < 8; ++j) acc[j] += a[i + j];
      for (int j = 0; j < 8; ++j) s += acc[j];
    }
    const double t = now_s() - t0;
    total += s;
    gbs[p] = n * sizeof(uint64_t) / t / 1e9;
  }
  qsort(gbs, passes, sizeof(double), cmp_double);
  const double median = passes % 2 ? gbs[passes / 2] : 0.5 * (gbs[passes / 2 - 1] + gbs[passes / 2]);
  printf("{\"bytes\": %zu, \"threads\": %d, \"passes\": %d, \"best_gbs\": %.3f, \"median_gbs\": %.3f, \"sum\": %llu}\n",
         n * sizeof(uint64_t), threads, passes, gbs[passes - 1], median, (unsigned long long)total);
  free(gbs);
  free(a);
  return 0;
}
