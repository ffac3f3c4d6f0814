// The image ops on the CPU at SD 1.5's UNet shapes (a plain program, no
// Google Benchmark; it prints numbers and asserts nothing):
//   conv2d 3×3, padding 1, at 64×64×320 → 320, 32×32×640 → 640 and
//   16×16×1280 → 1280, batch 2 (classifier-free guidance), with f32, f16 and
//   q8_0 weights; a 1×1 at 64×64×320 → 320;
//   sdpa: self-attention over 4096 spatial tokens (64×64), 8 heads of 40,
//   batch 2, and cross-attention of the same queries over 77 text tokens;
//   group_norm (GroupNorm32) of 64×64×320, batch 2.
// Each row: the median of `reps` timed runs (after one warm-up) in ms, and
// GFLOP/s (conv2d: 2·N·OH·OW·OC·C·KH·KW; sdpa: 4·N·H·n_q·n_kv·D, the two
// products; group_norm: GB/s of its three passes over x and one write).
// Run: build/bench/bench_image_ops [threads=2] [reps=5] [conv2d|sdpa|group_norm: that op only]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "tensor/ops.h"

using namespace kvad;

namespace {

Tensor randn(std::array<int64_t, 4> ne, float scale, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(ne[0] * ne[1] * ne[2] * ne[3]));
  for (float& x : v) x = nd(rng);
  return ops::from_host(v.data(), DType::F32, ne, Device::cpu());
}

double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// Median wall time (ms) of `reps` runs after a warm-up, and the median
// process CPU time (ms, all threads) of the same runs.
struct Timing {
  double wall_ms, cpu_ms;
};
Timing median_ms(int reps, const std::function<void()>& f) {
  f();  // warm-up: caches, the allocator's blocks
  std::vector<double> t, c;
  for (int i = 0; i < reps; ++i) {
    const double c0 = cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    c.push_back((cpu_seconds() - c0) * 1e3);
  }
  std::sort(t.begin(), t.end());
  std::sort(c.begin(), c.end());
  return {t[t.size() / 2], c[c.size() / 2]};
}

// units: flop (or bytes); printed per second of wall time, and per
// core-second of CPU time (all threads' CPU time, spin-waits included: on a
// loaded machine, what the threads reached while they ran).
std::string g_filter;
bool wanted(const char* op) { return g_filter.empty() || g_filter == op; }

void row(const std::string& name, Timing t, double units, const char* unit) {
  std::printf("%-52s %9.2f ms %8.1f %s  %8.1f per core-second\n", name.c_str(), t.wall_ms,
              units / (t.wall_ms * 1e6), unit, units / (t.cpu_ms * 1e6));
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 5;
  if (argc > 3) g_filter = argv[3];
  ThreadPool pool(threads);
  ops::PoolScope scope(pool);
  std::printf("bench_image_ops: %d threads, median of %d runs\n", threads, reps);

  struct Conv {
    int64_t hw, c;
  };
  for (const Conv& s : {Conv{64, 320}, Conv{32, 640}, Conv{16, 1280}}) {
    if (!wanted("conv2d")) break;
    const Tensor x = randn({s.c, s.hw, s.hw, 2}, 1.0f, 1);
    const Tensor w32 = randn({s.c, 3, 3, s.c}, 0.02f, 2);
    const Tensor b = randn({s.c, 1, 1, 1}, 0.1f, 3);
    const double flop = 2.0 * 2 * s.hw * s.hw * s.c * s.c * 9;
    for (DType t : {DType::F32, DType::F16, DType::Q8_0}) {
      const Tensor w = ops::convert(w32, t);
      const Timing ms = median_ms(reps, [&] { (void)ops::conv2d(x, w, b, {1, 1, 1, 1}); });
      row("conv2d 3x3 " + std::to_string(s.hw) + "x" + std::to_string(s.hw) + "x" + std::to_string(s.c) + " -> " +
              std::to_string(s.c) + " N=2 " + dtype_name(t),
          ms, flop, "GFLOP/s");
    }
  }
  if (wanted("conv2d")) {
    const Tensor x = randn({320, 64, 64, 2}, 1.0f, 4);
    const Tensor w = ops::convert(randn({320, 1, 1, 320}, 0.05f, 5), DType::F16);
    const Timing ms = median_ms(reps, [&] { (void)ops::conv2d(x, w, Tensor{}); });
    row("conv2d 1x1 64x64x320 -> 320 N=2 f16", ms, 2.0 * 2 * 4096 * 320 * 320, "GFLOP/s");
  }
  if (wanted("sdpa")) {
    const int64_t N = 2, H = 8, D = 40, n_q = 4096;
    const Tensor q = randn({D, H, n_q, N}, 1.0f, 6), k = randn({D, H, n_q, N}, 1.0f, 7),
                 v = randn({D, H, n_q, N}, 1.0f, 8);
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    const Timing ms = median_ms(reps, [&] { (void)ops::sdpa(q, k, v, scale); });
    row("sdpa self 4096 tokens, 8 heads of 40, N=2", ms, 4.0 * N * H * n_q * n_q * D, "GFLOP/s");
    const Tensor kc = randn({D, H, 77, N}, 1.0f, 9), vc = randn({D, H, 77, N}, 1.0f, 10);
    const Timing ms2 = median_ms(reps, [&] { (void)ops::sdpa(q, kc, vc, scale); });
    row("sdpa cross 4096 over 77 tokens, 8 heads of 40, N=2", ms2, 4.0 * N * H * n_q * 77 * D, "GFLOP/s");
  }
  if (wanted("group_norm")) {
    const Tensor x = randn({320, 64, 64, 2}, 1.0f, 11), w = randn({320, 1, 1, 1}, 0.1f, 12),
                 b = randn({320, 1, 1, 1}, 0.1f, 13);
    const Timing ms = median_ms(reps, [&] { (void)ops::group_norm(x, 32, w, b, 1e-5f); });
    row("group_norm 32 groups 64x64x320 N=2", ms, 4.0 * x.n_bytes(), "GB/s");
  }
  return 0;
}
