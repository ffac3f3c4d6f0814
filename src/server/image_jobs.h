// Image jobs of `kvad serve --image-model`: a bounded queue in front of one
// Painter (engine/painter.h), painted one job at a time on the queue's own
// thread, so text requests keep being served by the Scheduler while a
// picture paints. A job is one HTTP request: one or more paint() calls (an
// A1111 request's n_iter batches), run back to back.
//
// Waiting handlers hold their job; a client that leaves sets the job's
// cancel flag (the Painter reads it before each step), a queued job that is
// cancelled is skipped. interrupt() cancels the running job (A1111's
// /sdapi/v1/interrupt). progress() is what /sdapi/v1/progress reports,
// with the latent preview of the step just done (model/image/latent_preview.h).
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine/painter.h"

namespace kvad::server {

/// Upper bounds (seconds) of the step-time histogram's buckets (+Inf beyond).
inline constexpr double kImageStepBuckets[] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
inline constexpr size_t kImageStepBucketCount = sizeof kImageStepBuckets / sizeof kImageStepBuckets[0];

/// One request's pictures. The handler that submitted it waits on done().
struct ImageJob {
  std::vector<PaintRequest> batches;  ///< settled requests, painted in order
  std::atomic<bool> cancel{false};    ///< set by a client that left, interrupt() or shutdown
  // Filled by the worker, read after done():
  std::vector<PaintedImage> images;   ///< every batch's pictures, in order
  std::string error;                  ///< "" when painted (or cancelled)
  bool cancelled = false;             ///< stopped before it finished (images may hold the batches done)
  bool interrupted = false;           ///< by interrupt() (A1111: the images painted so far are answered)

  /// Waits up to `ms` for the job to end; true when it has.
  bool wait_for(int ms);
  bool finished() const;

 private:
  friend class ImageQueue;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
};

/// What /sdapi/v1/progress and /metrics report.
struct ImageProgress {
  bool running = false;
  int64_t job_count = 0;              ///< running + waiting
  int64_t batch = 0, batches = 0;     ///< batch being painted (0-based) of the running job
  int64_t step = 0, steps = 0;        ///< steps done in that batch, and its steps
  double elapsed_s = 0;               ///< since the running job began
  bool interrupted = false;
  /// The latent preview after the last step (RGB8, preview_w x preview_h);
  /// empty before the first step of the running job.
  std::vector<uint8_t> preview;
  int64_t preview_w = 0, preview_h = 0;
};

struct ImageCounters {
  uint64_t images_total = 0;          ///< pictures painted
  uint64_t jobs_done = 0, jobs_cancelled = 0, jobs_failed = 0;
  int64_t queued = 0, running = 0;
  uint64_t step_count = 0;
  double step_s_sum = 0;
  uint64_t step_buckets[kImageStepBucketCount] = {};  ///< cumulative: steps taking <= kImageStepBuckets[i]
};

class ImageQueue {
 public:
  /// `max_queue`: jobs that may wait behind the running one.
  ImageQueue(std::shared_ptr<const Painter> painter, size_t max_queue);
  ~ImageQueue();  ///< shutdown()
  ImageQueue(const ImageQueue&) = delete;
  ImageQueue& operator=(const ImageQueue&) = delete;

  /// Queues `batches` (settled, each within check_paint_request's bounds).
  /// Returns nullptr when max_queue jobs already wait (the caller answers
  /// 503) or the queue is shutting down (*stopping set).
  std::shared_ptr<ImageJob> submit(std::vector<PaintRequest> batches, bool* stopping = nullptr);
  /// Cancels the running job (the Painter stops before its next step).
  /// False when none runs.
  bool interrupt();
  ImageProgress progress() const;
  ImageCounters counters() const;
  /// Cancels every job and joins the worker; submit() then refuses.
  void shutdown();
  const Painter& painter() const { return *painter_; }
  size_t max_queue() const { return max_queue_; }

 private:
  void work();
  void finish(const std::shared_ptr<ImageJob>& job);

  std::shared_ptr<const Painter> painter_;
  size_t max_queue_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<ImageJob>> waiting_;
  std::shared_ptr<ImageJob> running_;
  bool stop_ = false;
  ImageProgress prog_;  ///< the running job's (guarded by mu_)
  std::chrono::steady_clock::time_point job_start_;
  ImageCounters counters_;
  std::thread worker_;
};

}  // namespace kvad::server
