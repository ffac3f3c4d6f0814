// `kvad run`: answer one prompt, streaming the text to stdout.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <optional>

#include "base/error.h"
#include "cli/commands.h"
#include "cli/distributed.h"
#include "cli/generation_options.h"
#include "cli/loaded_model.h"
#include "cli/model_store.h"
#include "cli/reply_output.h"
#include "cli/speculation.h"
#include "engine/generate.h"
#include "engine/grammar/grammar.h"
#include "engine/sampler.h"
#include "engine/session.h"
#include "io/gguf.h"
#include "model/model.h"
#include "engine/chat_prompt.h"
#include "tokenizer/tokenizer.h"

namespace kvad::cli {

namespace {

struct RunOptions : GenerationOptions {
  std::string prompt;
  bool raw = false;
  ReasoningOptions reasoning;
  GrammarOptions grammar;
  SpecFlags spec;
  DistOptions dist;
};

void run(const RunOptions& o) {
  if (o.prompt.empty()) throw Error("--prompt is required and must not be empty");
  o.spec.check();
  const KVTypes kv = o.cache_type.types();
  const std::shared_ptr<const Grammar> gbnf = o.grammar.parse();  // a bad grammar fails before the model loads
  LoadedModel m = o.dist.load(o.model, o.device, o.spec);
  refuse_mtp(o.spec, m);  // before anything is printed
  if (serve_if_stage(m, o.threads)) return;  // ranks other than 0: rank 0 drives
  const PipelineDriver driver(m);
  const std::unique_ptr<TokenGrammar> grammar = GrammarOptions::bind(gbnf, *m.tokenizer);
  const HParams& hp = m.model->hparams();
  const int32_t n_ctx = o.context_size(hp);
  Session session(m.model, n_ctx, 1, o.threads, kv);
  session.set_lora(o.lora_set(*m.model));

  // Without --raw the prompt is one user turn in the model's own chat format.
  std::vector<int32_t> ids;
  std::optional<ChatPrompt> chat;
  std::string rendered;
  if (o.raw) {
    ids = m.tokenizer->encode(o.prompt, /*add_special=*/true, /*parse_special=*/false);
  } else {
    if (!m.tokenizer->chat_template().empty()) {
      chat.emplace(chat_prompt(m));
      ids = chat->tokenize(nlohmann::ordered_json::array({{{"role", "user"}, {"content", o.prompt}}}), true,
                           nullptr, &rendered);
    } else {
      // A file without a template is a completion model (e.g. a GGUF of a
      // base checkpoint such as gemma-3-270m, which answers a plain question
      // but not a chat turn it was never trained on): complete the prompt as is.
      std::fprintf(stderr, "[kvad] %s has no chat template; completing the prompt as is (as --raw)\n",
                   m.path.c_str());
      ids = m.tokenizer->encode(o.prompt, /*add_special=*/true, /*parse_special=*/false);
    }
  }
  if (static_cast<int64_t>(ids.size()) >= n_ctx)
    throw Error("prompt is " + std::to_string(ids.size()) + " tokens, longer than the context (" +
                std::to_string(n_ctx) + " tokens; raise --ctx-size)");

  const SamplerParams sp = m.sampler_params(o);
  Sampler sampler(sp);
  const std::unique_ptr<Speculation> spec = make_speculation(o.spec, m, session, o.device, n_ctx, o.threads, kv, sp);
  ReplyPrinter out(chat ? &*chat : nullptr, *m.tokenizer, rendered, o.reasoning);
  GenerateOptions go;
  go.max_tokens = o.max_tokens;
  go.special_text = out.special_text();
  go.grammar = grammar.get();
  go.proposer = spec ? spec->proposer.get() : nullptr;
  go.spec = o.spec.spec;
  const GenerateStats st = generate(session, *m.tokenizer, sampler, ids, go, [&](const std::string& piece) {
    out.push(piece);
    return true;
  });
  out.finish();
  const double pp = st.prefill_s > 0 ? st.n_prompt / st.prefill_s : 0;
  const double tg = st.decode_s > 0 ? st.n_decode_tokens / st.decode_s : 0;
  std::fprintf(stderr,
               "[kvad] load %.2f s | prompt %d tokens, prefill %.1f tok/s | generated %d tokens, decode %.1f tok/s "
               "| stop: %s | weights %.1f MiB | KV cache %zu B/token | peak RSS %.1f MiB%s\n",
               m.load_s, st.n_prompt, pp, st.n_generated, tg, st.stop.c_str(),
               m.model->weight_bytes() / 1048576.0, session.cache().bytes_per_token(),
               peak_rss_bytes() / 1048576.0, spec_stats_text(st.spec).c_str());
  const Cache& c = session.cache();
  if (c.state_bytes() > 0)
    std::fprintf(stderr, "[kvad] recurrent state %.2f MiB | %lld snapshots, %.2f MiB | cache %.2f MiB in all\n",
                 c.state_bytes() / 1048576.0, static_cast<long long>(c.n_snapshots()), c.snapshot_bytes() / 1048576.0,
                 c.bytes() / 1048576.0);
}

}  // namespace

void add_run(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* c = app.add_subcommand("run", "Answer a prompt, streaming the reply");
  c->add_option("-p,--prompt", o->prompt, "The prompt")->required();
  o->add_to(c, "Most tokens to generate (-1: until the model stops)");
  c->add_flag("--raw", o->raw, "Send the prompt as is, without the chat template");
  o->reasoning.add_to(c);
  o->grammar.add_to(c);
  o->spec.add_to(c);
  o->dist.add_to(c);
  c->callback([o] { run(*o); });
}

}  // namespace kvad::cli
