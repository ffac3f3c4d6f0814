#include "server/metrics.h"

#include <cstdio>

namespace kvad::server {

namespace {

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

void family(std::string& out, const char* name, const char* type, const char* help) {
  out.append("# HELP ").append(name).append(" ").append(help).append("\n");
  out.append("# TYPE ").append(name).append(" ").append(type).append("\n");
}

void sample(std::string& out, const char* name, double v, const std::string& labels = "") {
  out.append(name);
  if (!labels.empty()) out.append("{").append(labels).append("}");
  out.append(" ").append(num(v)).append("\n");
}

void one(std::string& out, const char* name, const char* type, const char* help, double v) {
  family(out, name, type, help);
  sample(out, name, v);
}

}  // namespace

void Metrics::count_request(const std::string& endpoint, int status) {
  std::lock_guard<std::mutex> lk(mu_);
  ++requests_[{endpoint, status}];
}

void Metrics::count_finish(const std::string& reason) {
  std::lock_guard<std::mutex> lk(mu_);
  ++finishes_[reason];
}

std::string Metrics::render(const SchedulerMetrics& s, int64_t embed_forward_calls) const {
  std::string out;
  {
    std::lock_guard<std::mutex> lk(mu_);
    family(out, "kvad_requests_total", "counter", "HTTP requests answered, by endpoint and status.");
    for (const auto& [k, n] : requests_)
      sample(out, "kvad_requests_total", static_cast<double>(n),
             "endpoint=\"" + k.first + "\",status=\"" + std::to_string(k.second) + "\"");
    family(out, "kvad_completions_total", "counter", "Generations finished, by finish_reason.");
    for (const auto& [reason, n] : finishes_)
      sample(out, "kvad_completions_total", static_cast<double>(n), "finish_reason=\"" + reason + "\"");
  }
  one(out, "kvad_prompt_tokens_total", "counter", "Prompt tokens of requests admitted into a slot.",
      static_cast<double>(s.prompt_tokens_total));
  one(out, "kvad_cached_tokens_total", "counter", "Prompt tokens reused from a slot's cache (not evaluated).",
      static_cast<double>(s.cached_tokens_total));
  one(out, "kvad_prompt_eval_tokens_total", "counter", "Prompt tokens evaluated.",
      static_cast<double>(s.prompt_eval_tokens_total));
  one(out, "kvad_generated_tokens_total", "counter", "Tokens generated (sampled).",
      static_cast<double>(s.generated_tokens_total));
  one(out, "kvad_scheduler_steps_total", "counter", "Batched forward calls.", static_cast<double>(s.steps_total));
  one(out, "kvad_scheduler_busy_seconds_total", "counter", "Seconds spent in steps (forward and sampling).",
      s.busy_s_total);
  one(out, "kvad_prefill_tokens_per_second", "gauge",
      "Prompt tokens per second over the steps of the last 10 s that evaluated prompt tokens.", s.prefill_tps_recent);
  one(out, "kvad_decode_tokens_per_second", "gauge",
      "Generated tokens per second over the steps of the last 10 s that decoded.", s.decode_tps_recent);
  family(out, "kvad_time_to_first_token_seconds", "summary", "Seconds from request to first generated token.");
  sample(out, "kvad_time_to_first_token_seconds_sum", s.ttft_s_sum);
  sample(out, "kvad_time_to_first_token_seconds_count", static_cast<double>(s.ttft_count));
  one(out, "kvad_queue_depth", "gauge", "Requests waiting for a slot.", static_cast<double>(s.queue_depth));
  one(out, "kvad_active_slots", "gauge", "Slots running a request.", static_cast<double>(s.active_slots));
  one(out, "kvad_slots", "gauge", "Slots (parallel sequences).", static_cast<double>(s.n_slots));
  one(out, "kvad_ctx_size", "gauge", "Context size per slot, tokens.", static_cast<double>(s.n_ctx));
  one(out, "kvad_kv_cache_bytes_per_token", "gauge", "KV cache bytes per cached token (all layers), as stored.",
      static_cast<double>(s.kv_bytes_per_token));
  one(out, "kvad_kv_cache_bytes", "gauge", "KV cache bytes allocated.", static_cast<double>(s.kv_bytes));
  one(out, "kvad_kv_cache_used_tokens", "gauge", "Positions the slots' caches hold (all slots).",
      static_cast<double>(s.kv_used_tokens));
  one(out, "kvad_kv_cache_usage_ratio", "gauge", "Share of the slots' positions in use (vLLM's kv_cache_usage_perc).",
      s.n_slots > 0 && s.n_ctx > 0 ? static_cast<double>(s.kv_used_tokens) / (static_cast<double>(s.n_slots) * s.n_ctx)
                                   : 0.0);
  if (s.spec_on) {  // speculative decoding (--spec-ngram, --model-draft)
    one(out, "kvad_spec_draft_tokens_total", "counter",
        "Speculation: proposed tokens the target verified (vLLM's spec_decode_num_draft_tokens).",
        static_cast<double>(s.spec_draft_tokens_total));
    one(out, "kvad_spec_accepted_tokens_total", "counter",
        "Speculation: proposed tokens accepted (vLLM's spec_decode_num_accepted_tokens).",
        static_cast<double>(s.spec_accepted_tokens_total));
    one(out, "kvad_spec_verify_steps_total", "counter", "Speculation: slot steps that verified a proposal.",
        static_cast<double>(s.spec_verify_steps_total));
    one(out, "kvad_spec_acceptance_rate", "gauge", "Speculation: accepted / proposed tokens since start (0 before any).",
        s.spec_draft_tokens_total ? static_cast<double>(s.spec_accepted_tokens_total) / s.spec_draft_tokens_total : 0.0);
  }
  if (embed_forward_calls >= 0) {
    one(out, "kvad_embedding_requests", "gauge", "Embedding requests running or waiting for their turn.",
        static_cast<double>(embedding_requests.load()));
    one(out, "kvad_embedding_forward_calls_total", "counter", "Batched forward calls of the embedder.",
        static_cast<double>(embed_forward_calls));
  }
  if (s.state_bytes > 0) {  // recurrent layers (qwen3next)
    one(out, "kvad_recurrent_state_bytes", "gauge", "Recurrent layers' live state bytes (all slots).",
        static_cast<double>(s.state_bytes));
    one(out, "kvad_state_snapshots", "gauge", "Recurrent-state snapshots held (all slots).",
        static_cast<double>(s.n_snapshots));
    one(out, "kvad_state_snapshot_bytes", "gauge", "Bytes of the recurrent-state snapshots held.",
        static_cast<double>(s.snapshot_bytes));
  }
  return out;
}

std::string render_image_metrics(const ImageCounters& c) {
  std::string out;
  one(out, "kvad_images_generated_total", "counter", "Pictures painted.", static_cast<double>(c.images_total));
  family(out, "kvad_image_jobs_total", "counter", "Image jobs ended, by outcome.");
  sample(out, "kvad_image_jobs_total", static_cast<double>(c.jobs_done), "outcome=\"done\"");
  sample(out, "kvad_image_jobs_total", static_cast<double>(c.jobs_cancelled), "outcome=\"cancelled\"");
  sample(out, "kvad_image_jobs_total", static_cast<double>(c.jobs_failed), "outcome=\"error\"");
  one(out, "kvad_image_jobs_queued", "gauge", "Image jobs waiting for the painter.", static_cast<double>(c.queued));
  one(out, "kvad_image_jobs_running", "gauge", "Image jobs painting.", static_cast<double>(c.running));
  family(out, "kvad_image_step_seconds", "histogram", "Seconds per denoising step (all pictures of a batch).");
  for (size_t i = 0; i < kImageStepBucketCount; ++i)
    sample(out, "kvad_image_step_seconds_bucket", static_cast<double>(c.step_buckets[i]),
           [&] {
             char le[32];
             std::snprintf(le, sizeof le, "le=\"%g\"", kImageStepBuckets[i]);
             return std::string(le);
           }());
  sample(out, "kvad_image_step_seconds_bucket", static_cast<double>(c.step_count), "le=\"+Inf\"");
  sample(out, "kvad_image_step_seconds_sum", c.step_s_sum);
  sample(out, "kvad_image_step_seconds_count", static_cast<double>(c.step_count));
  return out;
}

}  // namespace kvad::server
