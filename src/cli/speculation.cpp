#include "cli/speculation.h"
#include "cli/generation_options.h"

#include <CLI/CLI.hpp>

#include <cstdio>

#include "base/error.h"
#include "engine/proposers.h"
#include "engine/session.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace kvad::cli {

void SpecFlags::add_to(CLI::App* c) {
  c->add_option("--spec-ngram", ngram,
                "Speculative decoding by n-gram lookup: propose what followed the last N tokens where they occurred "
                "before in the prompt or reply (1..64; 0: off)")
      ->check(integer_check())
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  c->add_option("--model-draft", model_draft,
                "Speculative decoding with a draft model (GGUF file or model-store name) that has the target's "
                "tokenizer and fewer weight bytes");
  c->add_flag("--spec-mtp", mtp,
              "Speculative decoding with the model's own multi-token prediction layer (DeepSeek V3's nextn, "
              "Qwen3-Next's MTP block; --draft-max > 1 chains it on its own output)");
  draft_max_ = c->add_option("--draft-max", spec.draft_max, "Speculation: most tokens proposed per step (1..256)")
      ->check(integer_check())
      ->check(CLI::Range(1, SpecOptions::kDraftMaxLimit))
      ->capture_default_str();
  draft_min_ = c->add_option("--draft-min", spec.draft_min,
                "Speculation: fewest proposed tokens worth verifying (0..--draft-max); adaptive k stays at or above it")
      ->check(integer_check())
      ->check(CLI::Range(0, SpecOptions::kDraftMaxLimit))
      ->capture_default_str();
  draft_fixed_ = c->add_flag("--draft-fixed", [this](int64_t) { spec.adaptive = false; },
              "Speculation: always propose --draft-max tokens (no adaptive k from the acceptance rate)");
}

void SpecFlags::check(std::initializer_list<const CLI::Option*> tuning) const {
  if ((ngram > 0) + !model_draft.empty() + mtp > 1)
    throw CLI::ValidationError("--spec-ngram, --model-draft and --spec-mtp", "choose one proposer");
  auto refuse_if_given = [this](const CLI::Option* o) {
    if (!on() && o && o->count() > 0)
      throw CLI::ValidationError(o->get_name(), "tunes speculative decoding, which is off: add --spec-ngram N, "
                                                "--model-draft M or --spec-mtp");
  };
  for (const CLI::Option* o : {draft_max_, draft_min_, draft_fixed_}) refuse_if_given(o);
  for (const CLI::Option* o : tuning) refuse_if_given(o);
  if (spec.draft_min > spec.draft_max)
    throw CLI::ValidationError("--draft-min", "must not exceed --draft-max (" + std::to_string(spec.draft_min) + " > " +
                                                  std::to_string(spec.draft_max) + ")");
}

LoadedModel load_draft(const std::string& path, const LoadedModel& target, const DeviceOptions& dev) {
  LoadedModel d = load_for_cli(path, dev);
  if (const std::string why = draft_vocab_mismatch(*target.tokenizer, *d.tokenizer); !why.empty())
    throw Error("--model-draft " + d.path + " cannot propose for " + target.path + ": " + why);
  const size_t tb = target.model->weight_bytes(), db = d.model->weight_bytes();
  if (db > tb)
    throw Error("--model-draft " + d.path + " has more weight bytes (" + std::to_string(db / 1048576) +
                " MiB) than the target (" + std::to_string(tb / 1048576) +
                " MiB): it would read more per token than the target; use a smaller draft");
  if (db * 2 > tb)
    std::fprintf(stderr, "[kvad] warning: the draft's weights (%.1f MiB) are more than half the target's (%.1f MiB); "
                 "speculation pays little (adaptive k turns it off when it does not pay)\n", db / 1048576.0, tb / 1048576.0);
  return d;
}

void refuse_mtp(const SpecFlags& f, const LoadedModel& target) {
  if (f.mtp && target.model->n_mtp() == 0)
    throw Error("--spec-mtp: " + target.path + " has no multi-token prediction layer (" +
                target.model->hparams().arch + "; DeepSeek V3 and Qwen3-Next checkpoints with MTP tensors have one)");
}

std::unique_ptr<Speculation> make_speculation(const SpecFlags& f, const LoadedModel& target, Session& session,
                                              const DeviceOptions& dev, int32_t n_ctx, int threads, KVTypes kv,
                                              const SamplerParams& sp) {
  f.check();
  if (!f.on()) return nullptr;
  auto s = std::make_unique<Speculation>();
  if (f.mtp) {
    refuse_mtp(f, target);
    s->proposer = std::make_unique<MtpProposer>(session, target.tokenizer->n_vocab());
    s->describe = "mtp";
    return s;
  }
  if (f.ngram > 0) {
    s->proposer = std::make_unique<NgramProposer>(f.ngram);
    s->describe = "ngram " + std::to_string(f.ngram);
    return s;
  }
  s->draft = load_draft(f.model_draft, target, dev);
  s->draft_session = std::make_unique<Session>(s->draft.model, n_ctx, 1, threads, kv);
  s->proposer = std::make_unique<DraftProposer>(*s->draft_session, sp, target.tokenizer->n_vocab());
  s->describe = "draft " + s->draft.path;
  return s;
}

std::string spec_stats_text(const SpecStats& st) {
  if (st.n_proposed == 0) return "";
  char b[160];
  std::snprintf(b, sizeof b, " | speculation: proposed %lld, accepted %lld (%.1f%%) in %lld verify steps",
                static_cast<long long>(st.n_proposed), static_cast<long long>(st.n_accepted), 100.0 * st.acceptance(),
                static_cast<long long>(st.n_verify));
  return b;
}

}  // namespace kvad::cli
