#include "engine/scheduler.h"
#include "engine/scheduler_slot.h"

#include <algorithm>
#include <utility>

#include "engine/session.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace kvad {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Copy a prefix from another slot when it saves at least this many
// evaluated tokens (a copy is a conversion of rows, far cheaper than a
// forward pass over them).
constexpr int32_t kMinPrefixCopy = 1;

size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

}  // namespace

// ---------------------------------------------------------------- StopText

StopText::StopText(std::vector<std::string> stops) {
  for (auto& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
}

std::string StopText::push(const std::string& text) {
  if (stopped_) return "";
  text_ += text;
  if (stops_.empty()) return std::exchange(text_, std::string());
  // The earliest stop string wins (the text before it is what is returned).
  size_t first = std::string::npos;
  for (const auto& s : stops_) {
    const size_t at = text_.find(s);
    if (at < first) {
      first = at;
      matched_ = s;
    }
  }
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = text_.substr(0, first);
    text_.clear();
    return out;
  }
  // Hold back the longest tail of the text that is a proper prefix of a
  // stop string: the next token may complete it. That tail starts where a
  // stop string starts, so it starts on a character boundary.
  size_t hold = 0;
  for (const auto& s : stops_) {
    const size_t max_len = std::min(s.size() - 1, text_.size());
    for (size_t len = max_len; len > hold; --len)
      if (text_.compare(text_.size() - len, len, s, 0, len) == 0) {
        hold = len;
        break;
      }
  }
  std::string out = text_.substr(0, text_.size() - hold);
  text_.erase(0, text_.size() - hold);
  return out;
}

std::string StopText::flush() {
  if (stopped_) return "";
  return std::exchange(text_, std::string());
}

// --------------------------------------------------------------------- Job

std::optional<GenEvent> Job::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lk(mu_);
  if (!cv_.wait_for(lk, timeout, [&] { return !events_.empty(); })) return std::nullopt;
  GenEvent ev = std::move(events_.front());
  events_.pop_front();
  while (!events_.empty()) {
    GenEvent& e = events_.front();
    ev.text += e.text;
    for (GenTokenLogprobs& t : e.logprobs) ev.logprobs.push_back(std::move(t));
    ev.done = e.done;
    ev.finish_reason = std::move(e.finish_reason);
    ev.error = std::move(e.error);
    ev.stop_sequence = std::move(e.stop_sequence);
    ev.usage = e.usage;
    events_.pop_front();
  }
  return ev;
}

void Job::push(GenEvent ev) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    events_.push_back(std::move(ev));
  }
  cv_.notify_all();
}

// --------------------------------------------------------------- Scheduler

Scheduler::Scheduler(std::shared_ptr<Model> model, std::shared_ptr<const Tokenizer> tok, const SchedulerOptions& o)
    : opts_(o), tok_(std::move(tok)) {
  if (opts_.max_prompt_per_step <= 0)
    throw Error("max_prompt_per_step must be positive, got " + std::to_string(opts_.max_prompt_per_step));
  session_ =
      std::make_unique<Session>(std::move(model), opts_.n_ctx, opts_.n_slots, opts_.n_threads, opts_.kv_types);
  // A sampled id the tokenizer does not know would throw while decoding it;
  // a prompt id the model has no row for is refused by submit(), so a
  // tokenizer larger than the model could not be served at all.
  if (tok_->n_vocab() > session_->n_vocab())
    throw Error("the tokenizer has " + std::to_string(tok_->n_vocab()) + " tokens but the model only " +
                std::to_string(session_->n_vocab()) + " logits (n_vocab)");
  n_sample_ = tok_->n_vocab();
  if (opts_.spec_ngram < 0 || opts_.spec_ngram > 64)
    throw Error("--spec-ngram must be in 0..64, got " + std::to_string(opts_.spec_ngram));
  if ((opts_.spec_ngram > 0) + (opts_.spec_draft != nullptr) + opts_.spec_mtp > 1)
    throw Error("--spec-ngram, --model-draft and --spec-mtp: choose one proposer");
  if (opts_.spec_max_rows < 0) throw Error("spec_max_rows must be >= 0, got " + std::to_string(opts_.spec_max_rows));
  opts_.spec.check();
  if (opts_.spec_draft)
    draft_session_ =
        std::make_unique<Session>(opts_.spec_draft, opts_.n_ctx, opts_.n_slots, opts_.n_threads, opts_.kv_types);
  if (opts_.spec_mtp && session_->model().n_mtp() == 0)
    throw Error("--spec-mtp: the model has no multi-token prediction layer");
  metrics_.spec_on = opts_.spec_ngram > 0 || opts_.spec_draft != nullptr || opts_.spec_mtp;
  for (int i = 0; i < opts_.n_slots; ++i) {
    slots_.push_back(std::make_unique<Slot>());
    slots_.back()->id = i;
  }
  metrics_.n_slots = opts_.n_slots;
  metrics_.slot_busy.assign(static_cast<size_t>(opts_.n_slots), 0);
  metrics_.slot_cached.assign(static_cast<size_t>(opts_.n_slots), 0);
  metrics_.n_ctx = opts_.n_ctx;
  metrics_.kv_bytes_per_token = session_->cache().bytes_per_token();
  metrics_.kv_bytes = session_->cache().bytes();
  metrics_.state_bytes = session_->cache().state_bytes();
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() {
  shutdown();
  if (thread_.joinable()) thread_.join();
}

void Scheduler::shutdown() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
}

std::shared_ptr<Job> Scheduler::submit(std::vector<int32_t> prompt, const GenParams& params) {
  if (prompt.empty()) throw Error("empty prompt");
  if (static_cast<int64_t>(prompt.size()) >= opts_.n_ctx)
    throw Error("prompt is " + std::to_string(prompt.size()) + " tokens; the context holds " +
                std::to_string(opts_.n_ctx) + " tokens per slot, the prompt included");
  const int32_t nv = session_->n_vocab();
  for (size_t i = 0; i < prompt.size(); ++i)
    if (prompt[i] < 0 || prompt[i] >= nv)
      throw Error("prompt token " + std::to_string(i) + ": id " + std::to_string(prompt[i]) +
                  " outside the vocabulary [0, " + std::to_string(nv) + ")");
  auto job = std::make_shared<Job>();
  job->prompt_ = std::move(prompt);
  job->params_ = params;
  job->submitted_ = Clock::now();
  if (params.max_tokens == 0) {  // nothing to generate: no slot needed
    GenEvent ev;
    ev.done = true;
    ev.finish_reason = "length";
    ev.usage.prompt_tokens = static_cast<int32_t>(job->prompt_.size());
    job->push(std::move(ev));
    return job;
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stopping_) throw ShuttingDownError("the server is shutting down");
    if (queue_.size() >= opts_.max_queue)
      throw QueueFullError("too many requests: " + std::to_string(queue_.size()) + " already wait for a slot");
    queue_.push_back(job);
  }
  cv_.notify_all();
  return job;
}

std::vector<std::shared_ptr<Job>> Scheduler::submit_n(std::vector<int32_t> prompt, const GenParams& params, int n) {
  if (n < 1) throw Error("n must be at least 1, got " + std::to_string(n));
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (queue_.size() + static_cast<size_t>(n) > opts_.max_queue)
      throw QueueFullError("too many requests: " + std::to_string(queue_.size()) + " already wait for a slot and " +
                           std::to_string(n) + " more do not fit");
  }
  // The first goes through submit(): its checks, and max_tokens 0.
  std::vector<std::shared_ptr<Job>> jobs{submit(prompt, params)};
  std::vector<std::shared_ptr<Job>> siblings;
  for (int i = 1; i < n; ++i) {
    auto j = std::make_shared<Job>();
    j->prompt_ = prompt;
    j->params_ = params;
    j->params_.sampling.seed = params.sampling.seed + static_cast<uint64_t>(i);
    j->submitted_ = Clock::now();
    j->leader_ = jobs[0];
    if (params.max_tokens == 0) {
      GenEvent ev;
      ev.done = true;
      ev.finish_reason = "length";
      ev.usage.prompt_tokens = static_cast<int32_t>(prompt.size());
      j->push(std::move(ev));
    } else {
      siblings.push_back(j);
    }
    jobs.push_back(std::move(j));
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stopping_) throw ShuttingDownError("the server is shutting down");
    for (auto& j : siblings) queue_.push_back(j);
  }
  cv_.notify_all();
  return jobs;
}

SchedulerMetrics Scheduler::metrics() const {
  std::lock_guard<std::mutex> lk(mu_);
  SchedulerMetrics m = metrics_;
  m.queue_depth = queue_.size();
  const double now = seconds_since(Clock::time_point{});
  double p_s = 0, d_s = 0, p_n = 0, d_n = 0;
  for (const auto& s : recent_) {
    if (now - s.t > m.recent_window_s) continue;
    if (s.n_prompt > 0) { p_s += s.seconds; p_n += s.n_prompt; }
    if (s.n_decode > 0) { d_s += s.seconds; d_n += s.n_decode; }
  }
  m.prefill_tps_recent = p_s > 0 ? p_n / p_s : 0;
  m.decode_tps_recent = d_s > 0 ? d_n / d_s : 0;
  return m;
}

Scheduler::Slot* Scheduler::prefix_source(const Slot& dst, const std::vector<int32_t>& prompt,
                                           const std::string& tenant, const std::string& lora_key, size_t* lcp) {
  Slot* best = nullptr;
  *lcp = 0;
  for (auto& s : slots_) {
    if (s.get() == &dst || !(opts_.cache_reuse_all || s->tenant == tenant) || s->lora_key != lora_key) continue;
    // A slot's tokens are what its cache holds between steps (admission
    // runs between steps).
    const size_t l = common_prefix(s->tokens, prompt);
    if (l > *lcp) {
      best = s.get();
      *lcp = l;
    }
  }
  return best;
}

void Scheduler::admit(Slot& slot, std::shared_ptr<Job> job) {
  const std::vector<int32_t>& prompt = job->prompt_;
  // Reuse the cached prefix, but always evaluate the last prompt token: its
  // logits give the first generated token.
  const bool same_tenant =
      (opts_.cache_reuse_all || slot.tenant == job->params_.tenant) && slot.lora_key == job->params_.lora_key;
  const size_t lcp = same_tenant ? std::min(common_prefix(slot.tokens, prompt), prompt.size() - 1) : 0;
  int32_t landed = session_->truncate(slot.id, static_cast<int32_t>(lcp));
  slot.tokens.resize(static_cast<size_t>(landed));
  // Another slot (busy or free) may hold more of the prompt: copy it rather
  // than evaluate it again (n > 1 siblings, shared system prompts).
  size_t src_lcp = 0;
  if (Slot* src = prefix_source(slot, prompt, job->params_.tenant, job->params_.lora_key, &src_lcp)) {
    const int32_t n = static_cast<int32_t>(std::min(src_lcp, prompt.size() - 1));
    if (n >= landed + kMinPrefixCopy && session_->copy_prefix(src->id, slot.id, n)) {
      slot.tokens.assign(prompt.begin(), prompt.begin() + n);
      landed = n;
    }
  }
  slot.next_prompt = static_cast<size_t>(landed);
  slot.pending = -1;
  slot.sampler.emplace(job->params_.sampling);
  for (int32_t t : prompt) slot.sampler->accept(t);
  slot.dec = std::make_unique<StreamDecoder>(*tok_, job->params_.special_text);
  slot.stop.emplace(job->params_.stop);
  slot.grammar.reset();
  if (job->params_.grammar) {
    if (!trie_) trie_ = std::make_shared<TokenTrie>(*tok_);
    slot.grammar.emplace(job->params_.grammar, trie_);
  }
  slot.usage = GenUsage{};
  slot.usage.prompt_tokens = static_cast<int32_t>(prompt.size());
  slot.usage.cached_tokens = landed;
  slot.usage.queue_s = seconds_since(job->submitted_);
  slot.tenant = job->params_.tenant;
  slot.lora_key = job->params_.lora_key;
  slot.lora = job->params_.lora;
  slot.last_used = ++use_clock_;
  slot.admitted = use_clock_;
  slot.job = std::move(job);
  slot.n_prop = 0;
  spec_admit(slot);
  ++metrics_.active_slots;
  metrics_.slot_busy[static_cast<size_t>(slot.id)] = 1;
  metrics_.slot_cached[static_cast<size_t>(slot.id)] = landed;
  ++metrics_.requests_total;
  metrics_.prompt_tokens_total += prompt.size();
  metrics_.cached_tokens_total += static_cast<uint64_t>(landed);
}

void Scheduler::finish(Slot& slot, const std::string& reason, const std::string& error) {
  GenEvent ev;
  if (reason == "stop" || reason == "length") {
    // Whatever the decoder and the stop matcher still hold is output.
    ev.text = slot.stop->push(slot.dec->flush());
    ev.text += slot.stop->flush();
  }
  ev.done = true;
  ev.finish_reason = reason;
  ev.error = error;
  if (slot.stop && slot.stop->stopped()) ev.stop_sequence = slot.stop->matched();
  slot.usage.total_s = seconds_since(slot.job->submitted_);
  ev.usage = slot.usage;
  std::shared_ptr<Job> job = std::move(slot.job);
  job->prefilled_ = true;  // siblings wait no longer
  slot.pending = -1;
  slot.dec.reset();
  slot.grammar.reset();
  {
    // Before the last event: whoever sees it finds the slot free.
    std::lock_guard<std::mutex> lk(mu_);
    flush_counts_locked();
    --metrics_.active_slots;
    metrics_.slot_busy[static_cast<size_t>(slot.id)] = 0;
  }
  job->push(std::move(ev));
}

void Scheduler::emit_token(Slot& slot, int32_t id) {
  Job& job = *slot.job;
  slot.sampler->accept_generated(id);
  ++step_emitted_;
  ++unflushed_.emitted;
  job.prefilled_ = true;
  ++slot.usage.completion_tokens;
  if (slot.usage.ttft_s < 0) {
    slot.usage.ttft_s = seconds_since(job.submitted_);
    std::lock_guard<std::mutex> lk(mu_);
    metrics_.ttft_s_sum += slot.usage.ttft_s;
    ++metrics_.ttft_count;
  }
  if (slot.grammar && !slot.grammar->accept(id)) return finish(slot, "error", "grammar: the sampled token is not allowed");
  if (tok_->is_eog(id)) return finish(slot, "stop");
  GenEvent ev;
  if (job.params_.logprobs >= 0)
    ev.logprobs.push_back({id, slot.sampler->logprob(id), slot.sampler->top_logprobs(job.params_.logprobs)});
  ev.text = slot.stop->push(slot.dec->push(id));
  if (!ev.text.empty() || !ev.logprobs.empty()) {
    ev.usage = slot.usage;
    job.push(std::move(ev));
  }
  if (slot.stop->stopped()) return finish(slot, "stop");
  if (slot.grammar && slot.grammar->finished()) return finish(slot, "stop");  // nothing can follow
  const int32_t max_tokens = job.params_.max_tokens;
  if (max_tokens >= 0 && slot.usage.completion_tokens >= max_tokens) return finish(slot, "length");
  // The token is evaluated at position tokens.size(), which must fit.
  if (static_cast<int64_t>(slot.tokens.size()) >= opts_.n_ctx) return finish(slot, "length");
  slot.pending = id;
}

void Scheduler::flush_counts_locked() {
  metrics_.generated_tokens_total += unflushed_.emitted;
  metrics_.spec_verify_steps_total += unflushed_.verify;
  metrics_.spec_draft_tokens_total += unflushed_.drafted;
  metrics_.spec_accepted_tokens_total += unflushed_.accepted;
  unflushed_ = Unflushed{};
}

const float* Scheduler::masked_row(Slot& s, const float* row) {
  if (!s.grammar) return row;
  masked_.assign(row, row + n_sample_);
  const double before = s.grammar->mask_seconds();
  s.grammar->apply(masked_.data(), n_sample_);
  s.usage.grammar_s += s.grammar->mask_seconds() - before;
  return masked_.data();
}

int32_t Scheduler::sample_row(Slot& s, const float* row) { return s.sampler->sample(masked_row(s, row), n_sample_); }

void Scheduler::step(const Batch& batch, const std::vector<Slot*>& rows) {
  const size_t nv = static_cast<size_t>(session_->n_vocab());
  const std::vector<float>& logits = session_->forward(batch);
  size_t at = 0;  // the first logits row of rows[j]
  for (size_t j = 0; j < rows.size(); ++j) {
    Slot& s = *rows[j];
    const float* row = logits.data() + at * nv;
    at += 1 + static_cast<size_t>(s.n_prop);
    if (s.job) {
      try {
        if (s.n_prop > 0) spec_verify(s, row, nv);
        else emit_token(s, sample_row(s, row));
      } catch (const std::exception& e) {
        // Its cache holds what was evaluated; only its request ends (and
        // a verification's rejected positions are dropped).
        if (s.job) finish(s, "error", e.what());
        if (s.n_prop > 0) spec_rewind(s);
      }
    }
    s.n_prop = 0;
  }
}

void Scheduler::retry_alone(const Batch& batch, const std::vector<Slot*>& in_batch, const std::vector<Slot*>& rows,
                            const std::string& error) {
  for (Slot* s : in_batch) {
    // This step's entries of s, and where s stood before them.
    Batch mine;
    for (size_t i = 0, o = 0; i < batch.size(); ++i) {
      while (o < batch.out.size() && static_cast<size_t>(batch.out[o]) < i) ++o;
      const bool logits = o < batch.out.size() && static_cast<size_t>(batch.out[o]) == i;
      if (batch.seq[i] == s->id) mine.add(batch.token[i], batch.pos[i], batch.seq[i], logits);
      if (batch.seq[i] == s->id && !batch.lora.empty()) mine.lora.push_back(batch.lora[i]);
    }
    const int32_t before = mine.size() ? mine.pos[0] : static_cast<int32_t>(s->tokens.size());
    const int32_t landed = session_->truncate(s->id, before);
    if (!s->job || landed != before) {
      // The cache cannot go back exactly there: this request cannot go on.
      if (s->job) finish(*s, "error", error);
      s->tokens.resize(static_cast<size_t>(session_->truncate(s->id, 0)));
      continue;
    }
    const bool has_row = std::find(rows.begin(), rows.end(), s) != rows.end();
    std::vector<Slot*> my_rows;
    if (has_row) my_rows.push_back(s);
    try {
      step(mine, my_rows);
    } catch (const std::exception& e) {
      if (s->job) finish(*s, "error", e.what());
      s->tokens.resize(static_cast<size_t>(session_->truncate(s->id, 0)));
    }
  }
}

void Scheduler::loop() {
  Batch batch;
  std::vector<Slot*> rows;      // the slot of each logits row
  std::vector<Slot*> in_batch;  // slots with entries in the batch
  std::vector<Slot*> order;
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stopping_ || !queue_.empty() || metrics_.active_slots > 0; });
      if (stopping_) {
        std::deque<std::shared_ptr<Job>> queued;
        queued.swap(queue_);
        lk.unlock();
        for (auto& j : queued) {
          GenEvent ev;
          ev.done = true;
          ev.finish_reason = "error";
          ev.error = "the server is shutting down";
          ev.usage.prompt_tokens = static_cast<int32_t>(j->prompt_.size());
          j->push(std::move(ev));
        }
        for (auto& s : slots_)
          if (s->job) finish(*s, "error", "the server is shutting down");
        return;
      }
      // Requests cancelled while queued end here.
      for (auto it = queue_.begin(); it != queue_.end();) {
        if ((*it)->cancelled()) {
          GenEvent ev;
          ev.done = true;
          ev.finish_reason = "cancelled";
          ev.usage.prompt_tokens = static_cast<int32_t>((*it)->prompt_.size());
          (*it)->prefilled_ = true;
          (*it)->push(std::move(ev));
          it = queue_.erase(it);
        } else {
          ++it;
        }
      }
      // Admission: each queued request, in order, takes the free slot with
      // the longest common prefix (ties: least recently used).
      // A sibling of submit_n waits (others pass it) until its leader's
      // prompt is in a cache, so that it copies the prompt instead of
      // evaluating it.
      for (auto qit = queue_.begin(); qit != queue_.end();) {
        if ((*qit)->leader_ && !(*qit)->leader_->prefilled_) {
          ++qit;
          continue;
        }
        Slot* best = nullptr;
        size_t best_lcp = 0;
        for (auto& s : slots_) {
          if (s->job) continue;
          const Job& front = **qit;
          const size_t lcp = (opts_.cache_reuse_all || s->tenant == front.params_.tenant) &&
                                     s->lora_key == front.params_.lora_key
                                 ? common_prefix(s->tokens, front.prompt_)
                                 : 0;
          if (!best || lcp > best_lcp || (lcp == best_lcp && s->last_used < best->last_used)) {
            best = s.get();
            best_lcp = lcp;
          }
        }
        if (!best) break;
        std::shared_ptr<Job> job = std::move(*qit);
        qit = queue_.erase(qit);
        job->leader_.reset();
        try {
          admit(*best, job);
        } catch (const std::exception& e) {  // bad_alloc among them: this request only
          const bool counted = best->job != nullptr;
          best->job.reset();
          best->dec.reset();
          best->tokens.resize(static_cast<size_t>(session_->truncate(best->id, 0)));
          if (counted) --metrics_.active_slots;
          metrics_.slot_busy[static_cast<size_t>(best->id)] = 0;
          GenEvent ev;
          ev.done = true;
          ev.finish_reason = "error";
          ev.error = std::string("admission failed: ") + e.what();
          job->prefilled_ = true;
          ev.usage.prompt_tokens = static_cast<int32_t>(job->prompt_.size());
          job->push(std::move(ev));
        }
      }
    }
    for (auto& s : slots_)
      if (s->job && s->job->cancelled()) finish(*s, "cancelled");

    // One batch: decoders first (one token each), then prompt chunks in
    // admission order within the per-step prompt budget.
    batch.clear();
    rows.clear();
    in_batch.clear();
    int32_t n_decode = 0, n_prompt = 0;
    order.clear();
    for (auto& s : slots_) {
      if (s->job && s->pending >= 0) ++n_decode;
      if (s->job && s->next_prompt < s->job->prompt_.size()) order.push_back(s.get());
    }
    // Speculation's rows: what the step leaves below spec_max_rows after
    // its decode and prompt rows, shared evenly among the decoders.
    int32_t spec_left = 0, spec_cap = 0;
    if (metrics_.spec_on && n_decode > 0) {
      int64_t prompt_rows = 0;
      for (const Slot* s : order) prompt_rows += static_cast<int64_t>(s->job->prompt_.size() - s->next_prompt);
      prompt_rows = std::min<int64_t>(prompt_rows, opts_.max_prompt_per_step);
      spec_left = static_cast<int32_t>(std::max<int64_t>(0, opts_.spec_max_rows - n_decode - prompt_rows));
      spec_cap = spec_left / n_decode;
    }
    step_emitted_ = 0;
    for (auto& s : slots_) {
      if (!s->job || s->pending < 0) continue;
      batch.add(s->pending, static_cast<int32_t>(s->tokens.size()), s->id, true);
      batch.lora.push_back(s->lora.get());
      s->tokens.push_back(s->pending);
      s->pending = -1;
      s->n_prop = 0;
      if (const int32_t k = spec_k(*s, std::min(spec_cap, spec_left)); k > 0) spec_left -= spec_propose(*s, k, batch);
      rows.push_back(s.get());
      in_batch.push_back(s.get());
    }
    std::sort(order.begin(), order.end(), [](const Slot* a, const Slot* b) { return a->admitted < b->admitted; });
    int32_t budget = opts_.max_prompt_per_step;
    for (Slot* s : order) {
      if (budget <= 0) break;
      const std::vector<int32_t>& prompt = s->job->prompt_;
      const size_t end = std::min(prompt.size(), s->next_prompt + static_cast<size_t>(budget));
      for (size_t k = s->next_prompt; k < end; ++k) {
        batch.add(prompt[k], static_cast<int32_t>(s->tokens.size()), s->id, k + 1 == prompt.size());
        batch.lora.push_back(s->lora.get());
        s->tokens.push_back(prompt[k]);
      }
      budget -= static_cast<int32_t>(end - s->next_prompt);
      n_prompt += static_cast<int32_t>(end - s->next_prompt);
      s->next_prompt = end;
      if (end == prompt.size()) {
        s->n_prop = 0;
        rows.push_back(s);
      }
      in_batch.push_back(s);
    }
    if (batch.size() == 0) continue;
    // No adapter anywhere: the base path, no per-row adapters at all.
    if (std::all_of(batch.lora.begin(), batch.lora.end(), [](const LoraSet* l) { return l == nullptr; }))
      batch.lora.clear();

    const auto t0 = Clock::now();
    try {
      step(batch, rows);
    } catch (const std::exception& e) {
      // forward() failed: every cache in the batch is in an unknown state.
      // With one slot that slot's request is the one at fault; with more,
      // each is rewound to where it was and evaluated alone, so only the
      // failing one ends.
      if (in_batch.size() == 1) {
        Slot* s = in_batch[0];
        if (s->job) finish(*s, "error", e.what());
        s->tokens.resize(static_cast<size_t>(session_->truncate(s->id, 0)));
      } else {
        retry_alone(batch, in_batch, rows, e.what());
      }
    }
    const double dt = seconds_since(t0);
    std::lock_guard<std::mutex> lk(mu_);
    ++metrics_.steps_total;
    metrics_.busy_s_total += dt;
    metrics_.prompt_eval_tokens_total += static_cast<uint64_t>(n_prompt);
    flush_counts_locked();
    // Decoded tokens: those emitted, less one per prompt that ended here.
    const int64_t n_prompt_rows = static_cast<int64_t>(rows.size()) - n_decode;
    const int32_t n_decoded =
        n_decode == 0 ? 0 : static_cast<int32_t>(std::max<int64_t>(0, static_cast<int64_t>(step_emitted_) - n_prompt_rows));
    const double now = seconds_since(Clock::time_point{});
    recent_.push_back({now, dt, n_prompt, n_decoded});
    // Snapshots of recurrent states come and go with the sequences.
    metrics_.kv_bytes = session_->cache().bytes();
    metrics_.kv_used_tokens = 0;
    for (const auto& s : slots_) metrics_.kv_used_tokens += static_cast<int64_t>(s->tokens.size());
    metrics_.snapshot_bytes = session_->cache().snapshot_bytes();
    metrics_.n_snapshots = session_->cache().n_snapshots();
    while (!recent_.empty() && now - recent_.front().t > metrics_.recent_window_s) recent_.pop_front();
  }
}

}  // namespace kvad
