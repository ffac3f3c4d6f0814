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
  /// fn(begin, end, ith) is called for each chunk. The calling thread works
  /// too and does not wait for workers that have not started by the time it
  /// runs out of chunks (on a busy machine a descheduled worker would
  /// otherwise stall every call): such a worker skips the job.
  void parallel_for(int64_t n, int64_t grain,
                    const std::function<void(int64_t begin, int64_t end, int ith)>& fn);

 private:
  // The job's state, one atomic word: generation (bits 34..63), `skippable`
  // (bit 33: workers that come late may skip it), `closed` (bit 32: no worker
  // may enter any more), workers finished (bits 16..31) and workers inside
  // (bits 0..15). Workers enter with a compare-and-swap on the whole word, so
  // they can only enter the current job while it is open.
  static constexpr uint64_t kInside = 1, kFinished = uint64_t{1} << 16;
  static constexpr uint64_t kClosed = uint64_t{1} << 32, kSkippable = uint64_t{1} << 33;
  static constexpr int kGenShift = 34;

  void worker(int ith);
  void run_job(int ith);
  void dispatch(const std::function<void(int, int)>& fn, bool skippable);

  int n_threads_;
  std::vector<std::thread> threads_;
  const std::function<void(int, int)>* job_ = nullptr;
  std::atomic<uint64_t> state_{0};
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::exception_ptr error_;
  std::mutex error_mu_;
};

}  // namespace kvad
