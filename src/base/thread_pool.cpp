#include "base/thread_pool.h"

#include <algorithm>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KVAD_PAUSE() _mm_pause()
#else
#define KVAD_PAUSE() ((void)0)
#endif

namespace kvad {

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = std::max(1u, std::thread::hardware_concurrency());
  n_threads_ = n_threads;
  for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_.store(true);
    generation_.fetch_add(1);
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
  uint64_t seen = 0;
  for (;;) {
    // Spin a while for the next job, then sleep.
    uint64_t g = generation_.load(std::memory_order_acquire);
    for (int spin = 0; g == seen && spin < 20000; ++spin) {
      KVAD_PAUSE();
      g = generation_.load(std::memory_order_acquire);
    }
    if (g == seen) {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return generation_.load(std::memory_order_acquire) != seen; });
      g = generation_.load(std::memory_order_acquire);
    }
    seen = g;
    if (stop_.load()) return;
    run_job(ith);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
  if (n_threads_ == 1) {
    fn(0, 1);
    return;
  }
  job_ = &fn;
  error_ = nullptr;
  pending_.store(n_threads_ - 1, std::memory_order_release);
  {
    std::lock_guard<std::mutex> lk(mu_);
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  cv_.notify_all();
  run_job(0);
  while (pending_.load(std::memory_order_acquire) != 0) KVAD_PAUSE();
  job_ = nullptr;
  if (error_) {
    auto e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int64_t, int64_t, int)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  std::atomic<int64_t> next{0};
  run([&](int ith, int) {
    for (;;) {
      int64_t b = next.fetch_add(grain, std::memory_order_relaxed);
      if (b >= n) break;
      fn(b, std::min(n, b + grain), ith);
    }
  });
}

}  // namespace kvad
