// The speculative-decoding flags of run, chat and bench (engine/speculative.h):
// --spec-ngram N, --model-draft M, --spec-mtp, --draft-max, --draft-min,
// --draft-fixed, and what they load (a draft model with its own Session,
// n-gram lookup, or the target's own multi-token prediction layer).
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

#include "cli/loaded_model.h"
#include "engine/speculative.h"
#include "model/model.h"
#include "model/registry.h"

namespace CLI { class App; class Option; }

namespace kvad {
class Session;
}

namespace kvad::cli {

struct SpecFlags {
  std::string model_draft;  ///< --model-draft: GGUF file or model-store name
  int32_t ngram = 0;        ///< --spec-ngram N: longest suffix to look up (0: off)
  bool mtp = false;         ///< --spec-mtp: the target's multi-token prediction layer proposes
  SpecOptions spec;         ///< --draft-max, --draft-min, --draft-fixed (adaptive off)
  /// Adds the flags to `c`. Out-of-range values are usage errors (exit 2):
  /// --draft-max outside 1..256, --draft-min outside 0..256, --spec-ngram
  /// outside 0..64.
  void add_to(CLI::App* c);
  bool on() const { return ngram > 0 || !model_draft.empty() || mtp; }
  /// Throws CLI::ValidationError (exit 2) for --draft-min above --draft-max,
  /// more than one of --spec-ngram, --model-draft and --spec-mtp, or
  /// --draft-max, --draft-min or --draft-fixed (or `tuning`, the caller's
  /// own speculation flags: serve's --spec-max-rows) without any of them.
  void check(std::initializer_list<const CLI::Option*> tuning = {}) const;

 private:
  CLI::Option *draft_max_ = nullptr, *draft_min_ = nullptr, *draft_fixed_ = nullptr;
};

/// A loaded proposer: the draft model and its Session when there is one.
struct Speculation {
  LoadedModel draft;
  std::unique_ptr<Session> draft_session;
  std::unique_ptr<Proposer> proposer;
  std::string describe;  ///< "ngram 3" or "draft <path>"
};

/// Loads --model-draft for `target` on its device: throws kvad::Error when
/// the draft's tokenizer is not the target's (naming the difference,
/// draft_vocab_mismatch) or when its weights are bigger than the target's
/// (a draft that reads more bytes per token than the target cannot pay);
/// warns on stderr when they are more than half the target's.
LoadedModel load_draft(const std::string& path, const LoadedModel& target, const DeviceOptions& dev);

/// The proposer the flags ask for, or null when speculation is off; the
/// MTP proposer reads `target`'s hidden states (Session::keep_hidden) and
/// throws kvad::Error when the model has no multi-token prediction layer
/// (refuse_mtp). A draft
/// loads on the target's device with `dev`, gets a Session of n_ctx
/// positions and the target's KV formats, and samples with `sp`'s chain.
/// Throws kvad::Error when the draft's tokenizer is not the target's
/// (naming the difference) or when its weights are bigger than the
/// target's (a draft that reads more bytes per token than the target
/// cannot pay); warns on stderr when they are more than half the target's.
std::unique_ptr<Speculation> make_speculation(const SpecFlags& f, const LoadedModel& target, Session& session,
                                              const DeviceOptions& dev, int32_t n_ctx, int threads, KVTypes kv,
                                              const SamplerParams& sp);

/// Throws kvad::Error ("--spec-mtp: ... has no multi-token prediction
/// layer") when --spec-mtp is given for a model without one.
void refuse_mtp(const SpecFlags& f, const LoadedModel& target);

/// " | spec ngram: proposed 120, accepted 96 (80.0%)" for a stats line, or
/// "" when nothing was proposed.
std::string spec_stats_text(const SpecStats& st);

}  // namespace kvad::cli
