#include "base/thread_pool.h"

#include <algorithm>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KVAD_PAUSE() _mm_pause()
#else
#define KVAD_PAUSE() ((void)0)
#endif

namespace kvad {

namespace {
constexpr uint64_t kCountMask = 0xFFFF;

// One step of a spin-wait: a pause, and after the first kPolite steps a
// yield every 16 steps, so that on a machine with more runnable threads than
// cores a waiting thread hands its core to the one it is waiting for (a
// descheduled worker or caller) instead of burning the time slice. On an
// idle core the yield returns at once.
constexpr int kPolite = 2000;
inline void spin_step(int i) {
  if (i >= kPolite && (i & 15) == 0) std::this_thread::yield();
  else KVAD_PAUSE();
}
}  // namespace

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = std::max(1u, std::thread::hardware_concurrency());
  n_threads_ = n_threads;
  for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_.store(true);
    const uint64_t g = (state_.load() >> kGenShift) + 1;
    state_.store((g << kGenShift) | kClosed, std::memory_order_release);
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::run_job(int ith) {
  try {
    (*job_)(ith, n_threads_);
  } catch (...) {
    std::lock_guard<std::mutex> lk(error_mu_);
    if (!error_) error_ = std::current_exception();
  }
}

void ThreadPool::worker(int ith) {
  uint64_t seen = 0;  // the last generation this worker took part in or skipped
  for (;;) {
    // Spin a while for the next job, then sleep.
    uint64_t st = state_.load(std::memory_order_acquire);
    for (int spin = 0; (st >> kGenShift) == seen && spin < 20000; ++spin) {
      spin_step(spin);
      st = state_.load(std::memory_order_acquire);
    }
    if ((st >> kGenShift) == seen) {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return (state_.load(std::memory_order_acquire) >> kGenShift) != seen; });
      st = state_.load(std::memory_order_acquire);
    }
    if (stop_.load()) return;
    const uint64_t g = st >> kGenShift;
    // Enter job g, unless it has been closed (a skippable job whose caller
    // finished it without us) or superseded; at most once either way.
    while ((st >> kGenShift) == g && !(st & kClosed)) {
      if (state_.compare_exchange_weak(st, st + kInside, std::memory_order_acquire, std::memory_order_acquire)) {
        run_job(ith);
        state_.fetch_add(kFinished - kInside, std::memory_order_release);
        break;
      }
    }
    seen = g;
  }
}

void ThreadPool::dispatch(const std::function<void(int, int)>& fn, bool skippable) {
  job_ = &fn;
  error_ = nullptr;
  {
    // Published under the mutex so that a worker about to sleep sees it.
    std::lock_guard<std::mutex> lk(mu_);
    const uint64_t g = (state_.load(std::memory_order_relaxed) >> kGenShift) + 1;
    state_.store((g << kGenShift) | (skippable ? kSkippable : 0), std::memory_order_release);
  }
  cv_.notify_all();
  run_job(0);
  if (skippable) {
    // No new entries; wait for the workers inside.
    uint64_t st = state_.fetch_or(kClosed, std::memory_order_acq_rel) | kClosed;
    for (int i = 0; (st & kCountMask) != 0; ++i) {
      spin_step(i);
      st = state_.load(std::memory_order_acquire);
    }
  } else {
    const uint64_t all = static_cast<uint64_t>(n_threads_ - 1);
    for (int i = 0; ((state_.load(std::memory_order_acquire) / kFinished) & kCountMask) != all; ++i) spin_step(i);
    state_.fetch_or(kClosed, std::memory_order_acq_rel);
  }
  job_ = nullptr;
  if (error_) {
    auto e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
  if (n_threads_ == 1) {
    fn(0, 1);
    return;
  }
  dispatch(fn, false);
}

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int64_t, int64_t, int)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  if (n_threads_ == 1 || n <= grain) {
    fn(0, n, 0);
    return;
  }
  std::atomic<int64_t> next{0};
  const std::function<void(int, int)> job = [&](int ith, int) {
    for (;;) {
      int64_t b = next.fetch_add(grain, std::memory_order_relaxed);
      if (b >= n) break;
      fn(b, std::min(n, b + grain), ith);
    }
  };
  dispatch(job, true);
}

}  // namespace kvad
