#include "server/image_jobs.h"

#include "engine/diffusion/latents.h"
#include "model/image/latent_preview.h"
#include "tensor/ops.h"

namespace kvad::server {

using Clock = std::chrono::steady_clock;

bool ImageJob::wait_for(int ms) {
  std::unique_lock<std::mutex> lk(mu_);
  return cv_.wait_for(lk, std::chrono::milliseconds(ms), [&] { return done_; });
}

bool ImageJob::finished() const {
  std::lock_guard<std::mutex> lk(mu_);
  return done_;
}

ImageQueue::ImageQueue(std::shared_ptr<const Painter> painter, size_t max_queue)
    : painter_(std::move(painter)), max_queue_(max_queue), worker_([this] { work(); }) {}

ImageQueue::~ImageQueue() { shutdown(); }

std::shared_ptr<ImageJob> ImageQueue::submit(std::vector<PaintRequest> batches, bool* stopping) {
  std::lock_guard<std::mutex> lk(mu_);
  if (stopping) *stopping = stop_;
  if (stop_ || waiting_.size() >= max_queue_) return nullptr;
  auto job = std::make_shared<ImageJob>();
  job->batches = std::move(batches);
  waiting_.push_back(job);
  counters_.queued = static_cast<int64_t>(waiting_.size());
  cv_.notify_all();
  return job;
}

bool ImageQueue::interrupt() {
  std::lock_guard<std::mutex> lk(mu_);
  if (!running_) return false;
  running_->interrupted = true;  // read by the worker after paint() returns (under mu_)
  running_->cancel = true;
  prog_.interrupted = true;
  return true;
}

ImageProgress ImageQueue::progress() const {
  std::lock_guard<std::mutex> lk(mu_);
  ImageProgress p = prog_;
  p.running = running_ != nullptr;
  p.job_count = static_cast<int64_t>(waiting_.size()) + (running_ ? 1 : 0);
  if (p.running) p.elapsed_s = std::chrono::duration<double>(Clock::now() - job_start_).count();
  return p;
}

ImageCounters ImageQueue::counters() const {
  std::lock_guard<std::mutex> lk(mu_);
  return counters_;
}

void ImageQueue::shutdown() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
    if (running_) running_->cancel = true;
    for (const auto& j : waiting_) j->cancel = true;
    cv_.notify_all();
  }
  if (worker_.joinable()) worker_.join();
}

void ImageQueue::finish(const std::shared_ptr<ImageJob>& job) {
  {
    std::lock_guard<std::mutex> lk(job->mu_);
    job->done_ = true;
  }
  job->cv_.notify_all();
}

void ImageQueue::work() {
  for (;;) {
    std::shared_ptr<ImageJob> job;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !waiting_.empty(); });
      if (waiting_.empty()) {  // stopping, nothing left
        return;
      }
      job = waiting_.front();
      waiting_.pop_front();
      counters_.queued = static_cast<int64_t>(waiting_.size());
      if (stop_ || job->cancel) {  // its client left while it waited
        job->cancelled = true;
        ++counters_.jobs_cancelled;
        lk.unlock();
        finish(job);
        continue;
      }
      running_ = job;
      counters_.running = 1;
      prog_ = ImageProgress{};
      prog_.batches = static_cast<int64_t>(job->batches.size());
      prog_.steps = job->batches.empty() ? 0 : job->batches[0].steps;
      job_start_ = Clock::now();
    }
    try {
      for (size_t b = 0; b < job->batches.size(); ++b) {
        {
          std::lock_guard<std::mutex> lk(mu_);
          prog_.batch = static_cast<int64_t>(b);
          prog_.step = 0;
          prog_.steps = job->batches[b].steps;
        }
        PaintResult res = painter_->paint(
            job->batches[b],
            [&](const PaintProgress& p) {
              // The first picture's latent through the fitted channel map (no VAE).
              const diffusion::ImageDims d{1, p.channels, p.latent_h, p.latent_w};
              std::vector<uint8_t> rgb;
              try {
                std::vector<float> z(static_cast<size_t>(d.count()));
                diffusion::nchw_to_cwhn(p.latents.first(z.size()), z, d);
                rgb = image::latent_preview_rgb(ops::wrap_host(z.data(), DType::F32, {d.c, d.w, d.h, 1}));
              } catch (const Error&) {
                rgb.clear();  // a channel count without a preview table: progress without a picture
              }
              std::lock_guard<std::mutex> lk(mu_);
              prog_.step = p.step;
              prog_.steps = p.total;
              if (!rgb.empty()) {
                prog_.preview = std::move(rgb);
                prog_.preview_w = d.w;
                prog_.preview_h = d.h;
              }
              ++counters_.step_count;
              counters_.step_s_sum += p.step_s;
              for (size_t i = 0; i < kImageStepBucketCount; ++i)
                if (p.step_s <= kImageStepBuckets[i]) ++counters_.step_buckets[i];
            },
            &job->cancel);
        std::lock_guard<std::mutex> lk(mu_);
        counters_.images_total += res.images.size();
        for (PaintedImage& im : res.images) job->images.push_back(std::move(im));
      }
      std::lock_guard<std::mutex> lk(mu_);
      ++counters_.jobs_done;
    } catch (const PaintCancelled&) {
      std::lock_guard<std::mutex> lk(mu_);
      job->cancelled = true;
      ++counters_.jobs_cancelled;
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lk(mu_);
      job->error = e.what();
      ++counters_.jobs_failed;
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      running_.reset();
      counters_.running = 0;
      prog_ = ImageProgress{};
    }
    finish(job);
  }
}

}  // namespace kvad::server
