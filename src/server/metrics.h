// Counters the HTTP layer keeps, and /metrics in the Prometheus text
// exposition format (prometheus.io/docs/instrumenting/exposition_formats,
// version 0.0.4).
#pragma once
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "engine/scheduler.h"
#include "server/image_jobs.h"

namespace kvad::server {

class Metrics {
 public:
  /// Counts one answered HTTP request. endpoint: a route ("/v1/chat/completions")
  /// or "other"; status: the HTTP status sent.
  void count_request(const std::string& endpoint, int status);
  /// Counts one finished generation by finish_reason ("stop", "length",
  /// "cancelled", "error").
  void count_finish(const std::string& reason);

  /// The whole /metrics page: these counters plus the scheduler's, and
  /// the embedder's forward calls (`embed_forward_calls`, < 0: no embedder).
  std::string render(const SchedulerMetrics& s, int64_t embed_forward_calls = -1) const;

  /// /v1/embeddings requests in their handler (running or waiting for
  /// their turn); the server bounds it (429 beyond).
  std::atomic<int> embedding_requests{0};

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  std::map<std::string, uint64_t> finishes_;
};

/// The image queue's families (kvad_images_*): pictures painted, jobs by
/// outcome, jobs waiting and running, and a histogram of denoising step
/// seconds (kImageStepBuckets).
std::string render_image_metrics(const ImageCounters& c);

}  // namespace kvad::server
