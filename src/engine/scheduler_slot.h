// The scheduler's per-sequence record (engine/scheduler.h), shared by
// scheduler.cpp (admission, batching, sampling) and scheduler_spec.cpp
// (speculative decoding inside the batch). Private to the engine.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/grammar/grammar.h"
#include "engine/proposers.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "engine/speculative.h"
#include "tokenizer/tokenizer.h"

namespace kvad {

struct Scheduler::Slot {
  int id = 0;
  std::vector<int32_t> tokens;   ///< what the cache holds for sequence `id`, positions 0..size-1
  std::shared_ptr<Job> job;      ///< null when free
  size_t next_prompt = 0;        ///< index of the next prompt token to evaluate
  int32_t pending = -1;          ///< sampled token to evaluate at the next step
  std::optional<Sampler> sampler;
  std::unique_ptr<StreamDecoder> dec;
  std::optional<StopText> stop;
  std::optional<TokenGrammar> grammar;
  GenUsage usage;
  uint64_t last_used = 0;        ///< use_clock_ at admission (least recently used goes first)
  uint64_t admitted = 0;         ///< admission order, for prompt chunks
  std::string tenant;            ///< whose prompt `tokens` holds
  std::string lora_key;          ///< the adapters `tokens` were evaluated through (GenParams::lora_key)
  std::shared_ptr<const LoraSet> lora;  ///< the running request's adapters

  // Speculation (SchedulerOptions::spec_ngram / spec_draft).
  std::unique_ptr<Proposer> proposer;  ///< null: this slot does not speculate
  DraftProposer* draft = nullptr;      ///< proposer as a draft model (its sampling follows each request)
  Proposal prop;                       ///< this step's proposal, in the batch after `pending`
  int32_t n_prop = 0;                  ///< prop.tokens in this step's batch (0: a plain row)
  double alpha = 0.7;                  ///< moving average of the acceptance rate per proposed token
  std::vector<TokenProb> p, resample;  ///< the target's distribution at a position; the rejection's
};

}  // namespace kvad
