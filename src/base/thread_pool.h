// A persistent pool of worker threads for the CPU kernels.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kvad {

/// Runs one function on n threads at once: the calling thread is thread 0 and
/// n-1 workers live for the pool's lifetime. Workers spin briefly between jobs
/// (decode steps issue many small jobs back to back), then sleep on a
/// condition variable. Not reentrant: run() must not be called from inside a job.
class ThreadPool {
 public:
  /// n_threads >= 1; 0 means std::thread::hardware_concurrency().
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  /// Calls fn(ith, nth) on every thread, ith in [0, nth), and returns when all
  /// calls have returned. An exception thrown by any call is rethrown here
  /// (the first one, after all threads have finished).
  void run(const std::function<void(int ith, int nth)>& fn);

  /// Splits [0, n) into chunks of `grain` and hands them out dynamically;
  /// fn(begin, end, ith) is called for each chunk.
  void parallel_for(int64_t n, int64_t grain,
                    const std::function<void(int64_t begin, int64_t end, int ith)>& fn);

 private:
  void worker(int ith);
  void run_job(int ith);

  int n_threads_;
  std::vector<std::thread> threads_;
  const std::function<void(int, int)>* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::exception_ptr error_;
  std::mutex error_mu_;
};

}  // namespace kvad
