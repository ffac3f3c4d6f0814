// Continuous batching over one Session: many requests, one forward call per
// step. The engine side of `kvad serve` (it knows nothing of HTTP).
//
// A Scheduler owns a Session with n_seq = n_slots sequences ("slots") and a
// thread that loops:
//   1. drops cancelled requests; admits queued requests into free slots
//      (each takes the free slot whose cached tokens share the longest prefix
//      with its prompt, truncates it there and reports the reused tokens);
//   2. builds ONE Batch: the next token of every decoding slot, then prompt
//      chunks of prefilling slots, at most max_prompt_per_step prompt tokens
//      in all (so a long prompt cannot starve the decoders);
//   3. calls Session::forward once, samples one token per slot that asked for
//      logits, and streams the new text to each request's Job.
// A request submitted between steps joins at the next step. This is the
// design of Orca (Yu et al., OSDI 2022, "iteration-level scheduling") and of
// llama.cpp's server (slots, n_batch chunking, prompt cache by longest common
// prefix).
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

#include "base/error.h"
#include "engine/grammar/grammar.h"
#include "engine/sampler.h"
#include "engine/speculative.h"
#include "model/model.h"

namespace kvad {

class Model;
class Session;
struct Batch;
class Tokenizer;

/// Thrown by Scheduler::submit when max_queue requests are already waiting.
class QueueFullError : public Error {
 public:
  using Error::Error;
};
/// Thrown by Scheduler::submit after shutdown() began.
class ShuttingDownError : public Error {
 public:
  using Error::Error;
};

/// Holds back generated text that may be the start of a stop string, so that
/// a stop string split over several tokens is never emitted (OpenAI's `stop`:
/// the returned text does not contain it). Text is UTF-8; stop strings are
/// matched byte for byte.
class StopText {
 public:
  explicit StopText(std::vector<std::string> stops);
  /// Appends generated text; returns the part that is now safe to emit.
  /// After a stop string appears, returns the text before it and stopped()
  /// becomes true; further calls return "".
  std::string push(const std::string& text);
  /// The text held back (at the end of generation, when no stop can follow).
  std::string flush();
  bool stopped() const { return stopped_; }
  /// The stop string that stopped it ("" until stopped()).
  const std::string& matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string text_;     ///< generated text not yet emitted
  bool stopped_ = false;
  std::string matched_;
};

/// What one request asks for.
struct GenParams {
  SamplerParams sampling;
  int32_t max_tokens = -1;          ///< -1: until end of generation or the context is full
  std::vector<std::string> stop;    ///< stop strings (not emitted)
  /// Who asks (the server passes the API key's identity). A slot's cached
  /// prefix is reused only by a request of the same tenant, unless
  /// SchedulerOptions::cache_reuse_all: neither the time to first token nor
  /// cached_tokens can tell one tenant what another's prompt was.
  std::string tenant;
  /// Constrains the output to this grammar's sentences (engine/grammar/grammar.h):
  /// tokens that cannot continue it are masked before sampling,
  /// end-of-generation is allowed only when the text is a whole sentence, and
  /// generation ends ("stop") once no byte can follow. Null: unconstrained.
  std::shared_ptr<const Grammar> grammar;
  /// Control tokens' text is part of the output (tool-call markers that are
  /// special tokens, e.g. <|python_tag|>); end-of-generation tokens still
  /// end it unseen.
  bool special_text = false;
  /// -1: no logprobs; otherwise each sampled token's log-probability and
  /// its `logprobs` most likely alternatives (0..20) come with the events
  /// (Sampler::logprob: after logit bias and penalties).
  int32_t logprobs = -1;
  /// The LoRA adapters this request runs through (model/lora.h; nullptr:
  /// the base model) and their name: requests with different adapters
  /// decode in one batch, each row through its own (Batch::lora), and a
  /// slot's cached prefix is reused only by a request of the same lora_key
  /// (whatever cache_reuse_all says: another adapter's keys and values are
  /// not this one's).
  std::shared_ptr<const LoraSet> lora;
  std::string lora_key;
};

/// A sampled token's log-probability and the most likely alternatives.
struct GenTokenLogprobs {
  int32_t id = -1;
  float logprob = 0.0f;
  std::vector<TokenLogprob> top;
};

/// Token counts and times of one request, final in its last event.
struct GenUsage {
  int32_t prompt_tokens = 0;
  int32_t cached_tokens = 0;        ///< prompt tokens reused from a slot's cache (not evaluated)
  int32_t completion_tokens = 0;    ///< tokens sampled (an end-of-generation token included)
  double queue_s = 0;               ///< seconds from submit to admission into a slot
  double ttft_s = -1;               ///< seconds from submit to the first sampled token (-1: none)
  double total_s = 0;               ///< seconds from submit to the end
  double grammar_s = 0;             ///< seconds spent computing grammar masks (GenParams::grammar)
  int32_t draft_tokens = 0;         ///< speculation: proposed tokens the target verified (llama.cpp's draft_n)
  int32_t draft_accepted = 0;       ///< of those, accepted (llama.cpp's draft_n_accepted)
};

/// A piece of a request's output. Text is whole UTF-8 characters.
struct GenEvent {
  std::string text;
  bool done = false;
  /// When done: "stop" (end of generation or a stop string), "length"
  /// (max_tokens or the context is full), "cancelled", or "error".
  std::string finish_reason;
  std::string error;   ///< message when finish_reason == "error"
  std::string stop_sequence;  ///< when done with "stop" because of a stop string: that string
  GenUsage usage;      ///< counts so far; final when done
  /// With GenParams::logprobs >= 0: the tokens sampled since the last event,
  /// in order (their text may still be held back by a stop string or an
  /// unfinished UTF-8 character). End-of-generation tokens are not listed.
  std::vector<GenTokenLogprobs> logprobs;
};

/// A submitted request: the caller's handle and the scheduler's record.
/// Thread-safe.
class Job {
 public:
  /// Waits up to `timeout` for output. Returns nullopt on timeout; otherwise
  /// everything produced since the last call merged into one event (texts
  /// and logprobs concatenated, done/finish_reason/usage from the latest).
  std::optional<GenEvent> wait(std::chrono::milliseconds timeout);
  /// Asks the scheduler to stop this request; its slot is freed at the next
  /// step and a last event with finish_reason "cancelled" follows.
  void cancel() { cancel_.store(true); }
  bool cancelled() const { return cancel_.load(); }

 private:
  friend class Scheduler;
  void push(GenEvent ev);

  std::vector<int32_t> prompt_;
  GenParams params_;
  // Scheduler thread only: a sibling of submit_n waits for its leader's
  // prompt to be evaluated, then copies it (Session::copy_prefix).
  std::shared_ptr<Job> leader_;
  bool prefilled_ = false;  ///< the prompt is in a slot's cache (or this job ended)
  std::chrono::steady_clock::time_point submitted_;
  std::atomic<bool> cancel_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<GenEvent> events_;
};

struct SchedulerOptions {
  int n_slots = 4;                   ///< parallel sequences (Session n_seq)
  int32_t n_ctx = 4096;              ///< positions per slot
  int n_threads = 0;                 ///< CPU threads for the Session (0: all cores)
  KVTypes kv_types;                  ///< the KV cache's formats (--cache-type-k/-v)
  int32_t max_prompt_per_step = 256; ///< prompt tokens evaluated per step, all slots together
  size_t max_queue = 64;             ///< requests waiting for a slot before submit() refuses
  bool cache_reuse_all = false;      ///< reuse cached prefixes across tenants (`--cache-reuse all`)
  /// Speculative decoding per slot (engine/speculative.h; `kvad serve
  /// --spec-ngram N` or `--model-draft M`): n-gram lookup of up to this
  /// suffix length (0: off) ...
  int32_t spec_ngram = 0;
  /// ... or a draft model, with its own Session of n_slots sequences (one
  /// per slot, n_ctx positions, kv_types). Its tokenizer must be the
  /// target's (the caller checks, draft_vocab_mismatch). Not both.
  std::shared_ptr<Model> spec_draft;
  /// ... or the model's own multi-token prediction layer (`--spec-mtp`;
  /// MtpProposer, one per slot). Only one of the three.
  bool spec_mtp = false;
  /// draft_max / draft_min; adaptive: k per slot from its acceptance rate
  /// (the largest k whose last position is still used with probability
  /// >= kSpecMinUse), else always draft_max.
  SpecOptions spec;
  /// Speculation turns down when the batch is compute-bound: proposals are
  /// added to a step only while its rows (decode tokens, prompt tokens and
  /// proposals) stay at or below this, shared evenly among the slots that
  /// decode, so a step that evaluates a prompt chunk does not speculate. A
  /// forward's cost grows little with its rows while reading the weights
  /// dominates; past that each rejected proposal costs about as much as a
  /// useful token. 16: on a 2-core CPU with SmolLM2-135M and 4 streams, 8
  /// and 16 rows gave the same tok/s and 32 less (bench/serve_bench.py); a
  /// GPU stays memory-bound much longer (raise it there). 0: never.
  int32_t spec_max_rows = 16;
  static constexpr double kSpecMinUse = 0.1;
};

/// Counters and gauges for /metrics. Totals count since start.
struct SchedulerMetrics {
  int n_slots = 0;
  int active_slots = 0;
  size_t queue_depth = 0;
  int32_t n_ctx = 0;
  uint64_t requests_total = 0;            ///< admitted into a slot
  uint64_t prompt_tokens_total = 0;       ///< prompt tokens of admitted requests
  uint64_t cached_tokens_total = 0;       ///< of those, reused from a slot's cache
  uint64_t prompt_eval_tokens_total = 0;  ///< prompt tokens evaluated
  uint64_t generated_tokens_total = 0;    ///< tokens sampled
  uint64_t steps_total = 0;               ///< forward calls
  double busy_s_total = 0;                ///< seconds in steps (forward + sampling)
  double ttft_s_sum = 0;                  ///< sum of ttft_s over requests that got a first token
  uint64_t ttft_count = 0;
  /// Over the steps of the last `recent_window_s` seconds: prompt tokens per
  /// second of steps that evaluated prompt tokens, and sampled tokens per
  /// second of steps that decoded. A step that did both counts in both.
  double prefill_tps_recent = 0;
  double decode_tps_recent = 0;
  double recent_window_s = 10;
  size_t kv_bytes_per_token = 0;          ///< Session::cache().bytes_per_token()
  size_t kv_bytes = 0;                    ///< Session::cache().bytes() (after the last step)
  /// Positions the slots' caches hold after the last step (a finished
  /// request's tokens stay for prefix reuse until another takes the slot).
  int64_t kv_used_tokens = 0;
  size_t state_bytes = 0;                 ///< Session::cache().state_bytes(): recurrent layers' live states
  size_t snapshot_bytes = 0;              ///< Session::cache().snapshot_bytes() (after the last step)
  int64_t n_snapshots = 0;                ///< Session::cache().n_snapshots() (after the last step)
  std::vector<char> slot_busy;            ///< per slot: 1 while a request holds it
  std::vector<int32_t> slot_cached;       ///< per slot: prompt tokens its last request reused from a cache
  bool spec_on = false;                   ///< the scheduler speculates (spec_ngram or spec_draft)
  uint64_t spec_verify_steps_total = 0;   ///< slot steps that verified a proposal
  uint64_t spec_draft_tokens_total = 0;   ///< proposed tokens verified
  uint64_t spec_accepted_tokens_total = 0;  ///< of those, accepted
};

class Scheduler {
 public:
  /// Builds the Session (throws kvad::Error for bad sizes, or a tokenizer
  /// with more ids than the model has logits) and starts the scheduler
  /// thread. A model with more logits than the tokenizer has ids (padded
  /// embeddings) samples only the tokenizer's ids.
  Scheduler(std::shared_ptr<Model> model, std::shared_ptr<const Tokenizer> tok, const SchedulerOptions& o);
  /// shutdown(), then joins the thread.
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  /// Queues a request. Throws kvad::Error for an empty prompt, a prompt of
  /// n_ctx tokens or more (no room to generate), or token ids outside the
  /// vocabulary; QueueFullError when max_queue requests wait; and
  /// ShuttingDownError after shutdown().
  std::shared_ptr<Job> submit(std::vector<int32_t> prompt, const GenParams& params);
  /// n requests for one prompt (OpenAI's `n`): job i samples with seed
  /// params.sampling.seed + i. The prompt is evaluated once: the others wait
  /// until the first job's prompt is in its slot's cache and copy it from
  /// there (Session::copy_prefix), evaluating only the last prompt token
  /// themselves. Throws as submit(); QueueFullError when the n do not fit
  /// the queue together (none is queued then).
  std::vector<std::shared_ptr<Job>> submit_n(std::vector<int32_t> prompt, const GenParams& params, int n);

  /// Refuses new requests and ends queued and running ones (finish_reason
  /// "error", "server is shutting down"). Idempotent; returns at once.
  void shutdown();

  SchedulerMetrics metrics() const;
  int32_t n_ctx() const { return opts_.n_ctx; }
  int n_slots() const { return opts_.n_slots; }
  const Tokenizer& tokenizer() const { return *tok_; }

 private:
  struct Slot;
  void loop();
  void admit(Slot& slot, std::shared_ptr<Job> job);
  /// The slot (other than `dst`) whose cached tokens share the longest
  /// prefix with `prompt` among those `tenant` may reuse; its length in *lcp.
  Slot* prefix_source(const Slot& dst, const std::vector<int32_t>& prompt, const std::string& tenant,
                      const std::string& lora_key, size_t* lcp);
  void finish(Slot& slot, const std::string& reason, const std::string& error = "");
  void emit_token(Slot& slot, int32_t id);
  /// Evaluates `batch` and samples the rows of `rows` (a slot that
  /// speculates has 1 + n_prop rows in a row); a failure of one slot
  /// (sampling, decoding) ends only that slot. Throws what forward throws.
  void step(const Batch& batch, const std::vector<Slot*>& rows);
  // Speculation (scheduler_spec.cpp).
  /// Gives the slot its proposer at admission (a draft's sampling follows
  /// the request); none for requests with logprobs.
  void spec_admit(Slot& slot);
  /// The k a decoding slot asks for this step: at most `cap`, the room left
  /// in the context and in max_tokens; 0 when it does not speculate.
  int32_t spec_k(const Slot& slot, int32_t cap) const;
  /// After `pending` is in the batch: adds up to k proposed tokens (logits
  /// at each) and snapshots the slot's cache; returns how many.
  int32_t spec_propose(Slot& slot, int32_t k, Batch& batch);
  /// Walks the slot's 1 + n_prop logits rows from `rows` with the
  /// speculative sampling rule (spec_accept), emits the chosen tokens and
  /// rewinds the cache to what they leave (landing checked; a recurrent
  /// layer that lands short is evaluated again).
  void spec_verify(Slot& slot, const float* rows, size_t nv);
  /// Makes the slot's cache hold exactly slot.tokens (after a verification
  /// or a failure in the middle of one); ends the request when it cannot.
  void spec_rewind(Slot& slot);
  /// A logits row of a slot with its grammar's mask applied (the row
  /// itself without a grammar; else masked_, valid until the next call).
  const float* masked_row(Slot& slot, const float* row);
  /// Samples one logits row of a slot (its grammar's mask applied).
  int32_t sample_row(Slot& slot, const float* row);
  /// After a failed step: rewinds each slot of the batch and evaluates its
  /// part alone; a slot that fails alone (or cannot be rewound) ends with an error.
  void retry_alone(const Batch& batch, const std::vector<Slot*>& in_batch, const std::vector<Slot*>& rows,
                   const std::string& error);

  SchedulerOptions opts_;
  std::shared_ptr<const Tokenizer> tok_;
  std::shared_ptr<const TokenTrie> trie_;  ///< built at the first request with a grammar
  std::vector<float> masked_;              ///< a logits row with a grammar's mask applied
  std::unique_ptr<Session> session_;
  std::unique_ptr<Session> draft_session_;  ///< SchedulerOptions::spec_draft's, one sequence per slot
  uint64_t step_emitted_ = 0;               ///< tokens emit_token() saw in this step
  /// Counts not yet in metrics_: added under mu_ by finish() (before the
  /// request's last event, so that whoever sees it sees them counted) and
  /// at the end of each step.
  struct Unflushed { uint64_t emitted = 0, verify = 0, drafted = 0, accepted = 0; } unflushed_;
  void flush_counts_locked();
  std::vector<std::unique_ptr<Slot>> slots_;

  mutable std::mutex mu_;            ///< queue_, stopping_, metrics_
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool stopping_ = false;
  SchedulerMetrics metrics_;
  struct StepSample { double t, seconds; int32_t n_prompt, n_decode; };
  std::deque<StepSample> recent_;
  int32_t n_sample_ = 0;             ///< ids sampled: the tokenizer's (<= the model's n_vocab)
  uint64_t use_clock_ = 0;           ///< for least-recently-used slot choice

  std::thread thread_;
};

}  // namespace kvad
