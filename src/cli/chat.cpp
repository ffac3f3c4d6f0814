// `kvad chat`: a multi-turn conversation in the terminal.
//
// Each turn renders the whole conversation with the model's chat template
// and evaluates only the tokens past the longest common prefix with what the
// session already holds (prefix reuse, DESIGN.md seam 6). When the
// conversation outgrows the context, the oldest turns are dropped (the
// system prompt is kept) and the user is told.
#include <CLI/CLI.hpp>
#include <editline/readline.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <optional>

#include "base/error.h"
#include "cli/commands.h"
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

std::atomic<bool> g_interrupted{false};
void on_sigint(int) { g_interrupted.store(true); }

struct ChatOptions : GenerationOptions {
  ChatOptions() { max_tokens = 512; }
  std::string system;
  bool no_prefix_reuse = false;
  ReasoningOptions reasoning;
  GrammarOptions grammar;
  SpecFlags spec;
};

using json = nlohmann::ordered_json;

class Chat {
 public:
  Chat(const ChatOptions& o, LoadedModel m, std::shared_ptr<const Grammar> grammar)
      : o_(o), m_(std::move(m)), prompt_(chat_prompt(m_)), gbnf_(std::move(grammar)) {
    const HParams& hp = m_.model->hparams();
    n_ctx_ = o.context_size(hp);
    session_ = std::make_unique<Session>(m_.model, n_ctx_, 1, o.threads, o.cache_type.types());
    session_->set_lora(o.lora_set(*m_.model));
    const SamplerParams sp = m_.sampler_params(o);
    sampler_ = std::make_unique<Sampler>(sp);
    spec_ = make_speculation(o.spec, m_, *session_, o.device, n_ctx_, o.threads, o.cache_type.types(), sp);
    trie_ = gbnf_ ? std::make_shared<TokenTrie>(*m_.tokenizer) : nullptr;
    set_system(o.system);
  }

  void set_system(const std::string& text) {
    system_ = text;
    turns_ = json::array();
  }

  void reset() {
    turns_ = json::array();
    held_.clear();
    session_->truncate(0, 0);
  }

  // One user turn: prints the streamed reply. Returns false if the turn
  // cannot fit the context at all.
  void turn(const std::string& user) {
    turns_.push_back({{"role", "user"}, {"content", user}});
    // Room for the reply: at least a quarter of the context or max_tokens.
    const int32_t reserve = std::min<int32_t>(n_ctx_ / 4, o_.max_tokens > 0 ? o_.max_tokens : n_ctx_ / 4);
    std::string rendered;
    std::vector<int32_t> ids = prompt_.tokenize(messages(), true, nullptr, &rendered);
    int dropped = 0;
    while (static_cast<int32_t>(ids.size()) + reserve > n_ctx_ && turns_.size() > 1) {
      // Drop the oldest exchange (a user turn and the reply after it).
      turns_.erase(turns_.begin());
      if (!turns_.empty() && turns_[0]["role"] == "assistant") turns_.erase(turns_.begin());
      ++dropped;
      ids = prompt_.tokenize(messages(), true, nullptr, &rendered);
    }
    if (dropped)
      std::fprintf(stderr, "[kvad] the conversation outgrew the context (%d tokens): dropped the %d oldest turn(s), "
                   "kept the system prompt\n", n_ctx_, dropped);
    if (static_cast<int32_t>(ids.size()) + 1 > n_ctx_) {
      turns_.erase(turns_.end() - 1);
      throw Error("this message alone (" + std::to_string(ids.size()) + " tokens) does not fit the context (" +
                  std::to_string(n_ctx_) + " tokens; raise --ctx-size)");
    }
    GenerateOptions go;
    go.max_tokens = std::min<int32_t>(o_.max_tokens < 0 ? n_ctx_ : o_.max_tokens,
                                      n_ctx_ - static_cast<int32_t>(ids.size()));
    if (!o_.no_prefix_reuse) go.held = &held_;
    // Each reply starts the grammar afresh.
    std::optional<TokenGrammar> grammar;
    if (gbnf_) grammar.emplace(gbnf_, trie_);
    go.grammar = grammar ? &*grammar : nullptr;
    go.proposer = spec_ ? spec_->proposer.get() : nullptr;
    go.spec = o_.spec.spec;
    ReplyPrinter out(&prompt_, *m_.tokenizer, rendered, o_.reasoning);
    go.special_text = out.special_text();
    g_interrupted.store(false);
    last_ = generate(*session_, *m_.tokenizer, *sampler_, ids, go, [&](const std::string& piece) {
      if (g_interrupted.load()) return false;
      out.push(piece);
      return true;
    });
    // The history keeps the answer: templates leave past reasoning out.
    const std::string reply = out.finish();
    if (last_.stop == "stopped") std::fprintf(stderr, "[kvad] reply interrupted\n");
    turns_.push_back({{"role", "assistant"}, {"content", reply}});
    stats_line();
  }

  void stats_line() const {
    const double pp = last_.prefill_s > 0 ? last_.n_prompt / last_.prefill_s : 0;
    const double tg = last_.decode_s > 0 ? last_.n_decode_tokens / last_.decode_s : 0;
    std::fprintf(stderr,
                 "[kvad] cached_tokens %d | prompt %d new tokens, prefill %.1f tok/s (%.3f s) | reply %d tokens, "
                 "decode %.1f tok/s | context %d/%d%s\n",
                 last_.n_cached, last_.n_prompt, pp, last_.prefill_s, last_.n_generated, tg,
                 session_->cached(0), n_ctx_, spec_stats_text(last_.spec).c_str());
  }

 private:
  json messages() const {
    json msgs = json::array();
    if (!system_.empty()) msgs.push_back({{"role", "system"}, {"content", system_}});
    for (const auto& t : turns_) msgs.push_back(t);
    return msgs;
  }

  ChatOptions o_;
  LoadedModel m_;
  ChatPrompt prompt_;
  int32_t n_ctx_ = 0;
  std::unique_ptr<Session> session_;
  std::unique_ptr<Sampler> sampler_;
  std::unique_ptr<Speculation> spec_;
  std::string system_;
  json turns_ = json::array();
  std::vector<int32_t> held_;
  std::shared_ptr<const Grammar> gbnf_;
  std::shared_ptr<const TokenTrie> trie_;
  GenerateStats last_;
};

// Reads one line: with line editing and history on a terminal, plain
// getline otherwise. Returns false at end of input (Ctrl-D).
bool read_line(bool tty, std::string& line) {
  if (tty) {
    char* s = readline(">>> ");
    if (!s) return false;
    line = s;
    if (!line.empty()) add_history(s);
    std::free(s);
    return true;
  }
  return static_cast<bool>(std::getline(std::cin, line));
}

void chat(const ChatOptions& o) {
  o.cache_type.types();  // a bad --cache-type-k/-v fails before the model loads
  std::shared_ptr<const Grammar> grammar = o.grammar.parse();  // a bad grammar fails before the model loads
  Chat c(o, load_for_cli(o.model, o.device), std::move(grammar));
  const bool tty = isatty(STDIN_FILENO);
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  if (tty) std::fprintf(stderr, "kvad chat: /reset, /stats, /system TEXT, /exit; Ctrl-C stops a reply, Ctrl-D exits\n");
  std::string line;
  while (read_line(tty, line)) {
    if (line.empty()) continue;
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      c.reset();
      std::fprintf(stderr, "[kvad] conversation cleared\n");
      continue;
    }
    if (line == "/stats") {
      c.stats_line();
      continue;
    }
    if (line.rfind("/system", 0) == 0) {
      const std::string text = line.size() > 8 ? line.substr(8) : "";
      c.set_system(text);
      std::fprintf(stderr, "[kvad] system prompt set; conversation cleared\n");
      continue;
    }
    try {
      c.turn(line);
    } catch (const ChatTemplateError& e) {
      std::fprintf(stderr, "kvad: error: %s\n", e.what());
    }
  }
}

}  // namespace

void add_chat(CLI::App& app) {
  auto o = std::make_shared<ChatOptions>();
  CLI::App* c = app.add_subcommand("chat", "Chat with a model in the terminal (or over stdin, a line per turn)");
  c->add_option("-s,--system", o->system, "System prompt");
  o->add_to(c, "Most tokens per reply (-1: until the model stops)");
  c->add_flag("--no-prefix-reuse", o->no_prefix_reuse,
              "Prefill the whole conversation every turn (for measuring what prefix reuse saves)");
  o->reasoning.add_to(c);
  o->grammar.add_to(c);
  o->spec.add_to(c);
  c->callback([o] { o->spec.check(); chat(*o); });
}

}  // namespace kvad::cli
