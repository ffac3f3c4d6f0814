// `kvad serve`: an OpenAI-compatible HTTP server (src/server) with
// continuous batching (src/engine/scheduler.h).
#include <CLI/CLI.hpp>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <algorithm>
#include <thread>

#include "base/error.h"
#include "cli/commands.h"
#include "cli/generation_options.h"
#include "cli/loaded_model.h"
#include "cli/model_store.h"
#include "cli/speculation.h"
#include "io/gguf.h"
#include "model/lora.h"
#include "model/model.h"
#include "server/guard.h"
#include "server/server.h"
#include "engine/chat_prompt.h"
#include "engine/embed.h"
#include "engine/painter.h"
#include "model/image/pipeline.h"
#include "hub/repo_spec.h"
#include "tokenizer/tokenizer.h"

namespace kvad::cli {

namespace {

struct ServeOptions {
  std::string model;
  DeviceOptions device;
  CacheTypeOptions cache_type;
  std::string host = "127.0.0.1";
  int port = 8080;
  int parallel = 4;
  int32_t ctx_size = 0;
  std::string api_key;
  std::string cache_reuse = "key";
  std::string cors_origin;
  double request_timeout = 10;
  int threads = 0;
  int64_t queue = 64;
  int32_t batch = 256;
  bool quiet = false;
  bool embeddings = false;  ///< serve /v1/embeddings for a text model too
  std::string pooling;      ///< "": the model's (engine/embed.h)
  bool no_pull = false;     ///< refuse POST /api/pull
  SpecFlags spec;           ///< --spec-ngram / --model-draft / --spec-mtp, --draft-max, --draft-min, --draft-fixed
  int32_t spec_max_rows = 16;  ///< --spec-max-rows (SchedulerOptions::spec_max_rows)
  const CLI::Option* spec_max_rows_opt = nullptr;
  /// --lora NAME=PATH[@STRENGTH] and vLLM's --lora-modules NAME=PATH: LoRA
  /// adapters served under their own model names.
  std::vector<std::string> lora, lora_modules;
  std::string image_model;  ///< --image-model: a picture pipeline served beside (or instead of) the text model
  int image_threads = 0;    ///< 0: half the cores beside a text model, else --threads
  int64_t image_queue = 8;
};

// The Painter of --image-model, on its own thread pool: beside a text model
// it takes half the cores (at least one), so a text request is not starved
// while a picture paints.
std::shared_ptr<const Painter> load_painter(const ServeOptions& o, bool with_text, std::string* id) {
  const PipelinePath pp = resolve_pipeline(o.image_model);
  PainterOptions po;
  po.device = o.device;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  po.threads = o.image_threads > 0 ? o.image_threads : with_text ? std::max(1, cores / 2) : o.threads;
  po.model_name = pp.name;
  auto p = std::make_shared<const Painter>(image::open_pipeline(pp.path), po);
  *id = p->model_name();
  std::fprintf(stderr, "kvad serve: image model %s (%s, %.1f MiB on %s, %d threads), default %s, %s\n", id->c_str(),
               image::pipeline_class_name(p->pipeline().pipeline_class), p->weight_bytes() / 1048576.0,
               p->device().str().c_str(), po.threads > 0 ? po.threads : cores, p->default_scheduler().c_str(),
               with_text ? "beside the text model" : "no text model (text routes answer 400)");
  return p;
}

// "NAME=PATH[@STRENGTH]" (a bare PATH is named by its file or folder stem)
// loaded for `model`. Throws kvad::Error as parse_lora_arg and load_lora, and
// for a name taken twice or the base model's.
server::ServedLora served_lora(const std::string& arg, const Model& model, const std::vector<server::ServedLora>& have,
                               const std::string& base_id) {
  const size_t eq = arg.find('=');
  const auto [path, strength] = parse_lora_arg(eq == std::string::npos ? arg : arg.substr(eq + 1));
  server::ServedLora l;
  l.name = eq == std::string::npos ? std::filesystem::path(path).stem().string() : arg.substr(0, eq);
  if (l.name.empty()) throw Error("--lora " + arg + ": the adapter's name is empty (NAME=PATH)");
  if (l.name == base_id) throw Error("--lora " + arg + ": '" + l.name + "' is the base model's name");
  for (const server::ServedLora& h : have)
    if (h.name == l.name) throw Error("--lora " + arg + ": the name '" + l.name + "' is given twice");
  auto set = std::make_shared<LoraSet>();
  set->uses.push_back({load_lora(path, model), strength});
  l.set = std::move(set);
  std::fprintf(stderr, "kvad serve: LoRA '%s': %s (%zu adapted weights, %.1f KiB), strength %g\n", l.name.c_str(),
               path.c_str(), l.set->uses[0].adapter->pairs.size(), l.set->uses[0].adapter->bytes / 1024.0, strength);
  return l;
}

std::atomic<int> g_signal{0};
std::atomic<bool> g_served{false};  ///< Server::run() returned
constexpr auto kShutdownGrace = std::chrono::seconds(10);

extern "C" void on_signal(int sig) { g_signal.store(sig); }

void run_server(const ServeOptions& o, const server::ServerOptions& so, std::shared_ptr<Model> model,
                std::shared_ptr<const Tokenizer> tok);

// What every server takes from the command line, whatever models it holds.
server::ServerOptions http_options(const ServeOptions& o) {
  server::ServerOptions so;
  so.host = o.host;
  so.port = o.port;
  so.api_key = o.api_key;
  if (so.api_key.empty())
    if (const char* k = std::getenv("KVAD_API_KEY")) so.api_key = k;
  so.cors_origin = o.cors_origin;
  so.request_timeout_ms = static_cast<int>(o.request_timeout * 1000);
  // Host header allow-list (DNS rebinding): the loopback names, and the
  // address listened on; a wildcard address accepts any Host.
  if (o.host == "0.0.0.0" || o.host == "::" || o.host.empty())
    so.allowed_hosts.clear();
  else
    so.allowed_hosts.push_back(server::host_name_of(o.host));
  so.log_requests = !o.quiet;
  so.image_queue = static_cast<size_t>(o.image_queue);
  return so;
}

// --image-model without --model: the image routes alone.
void serve_images_only(const ServeOptions& o) {
  server::ServerOptions so = http_options(o);
  so.painter = load_painter(o, /*with_text=*/false, &so.image_model_id);
  so.sched.n_slots = 0;
  so.sched.max_queue = 0;
  run_server(o, so, nullptr, nullptr);
}

void serve(const ServeOptions& o) {
  // Limits checked before the model loads: each slot and each queued
  // request holds an HTTP thread, and slots x ctx-size is the KV cache.
  if (o.parallel < 1 || o.parallel > 256)
    throw Error("--parallel must be in [1, 256], got " + std::to_string(o.parallel));
  if (o.queue < 0 || o.queue > 1024) throw Error("--queue must be in [0, 1024], got " + std::to_string(o.queue));
  if (o.ctx_size < 0 || o.ctx_size > (1 << 20))
    throw Error("--ctx-size must be in [0, 1048576] (0: the model's, at most 4096), got " + std::to_string(o.ctx_size));
  if (o.port < 0 || o.port > 65535) throw Error("--port must be in [0, 65535], got " + std::to_string(o.port));
  if (!(o.request_timeout > 0 && o.request_timeout <= 3600))
    throw Error("--request-timeout must be in (0, 3600] seconds, got " + std::to_string(o.request_timeout));
  if (o.batch < 1) throw Error("--batch must be at least 1, got " + std::to_string(o.batch));
  if (o.image_queue < 0 || o.image_queue > 1024)
    throw Error("--image-queue must be in [0, 1024], got " + std::to_string(o.image_queue));
  if (o.image_threads < 0 || o.image_threads > 1024)
    throw Error("--image-threads must be in [0, 1024], got " + std::to_string(o.image_threads));
  if (!o.image_model.empty() && o.model.empty()) return serve_images_only(o);
  const KVTypes kv = o.cache_type.types();
  o.spec.check({o.spec_max_rows_opt});
  LoadedModel m = load_for_cli(o.model, o.device, /*any_kind=*/true);
  refuse_mtp(o.spec, m);
  LoadedModel draft;
  if (!o.spec.model_draft.empty()) draft = load_draft(o.spec.model_draft, m, o.device);
  const HParams& hp = m.model->hparams();

  server::ServerOptions so = http_options(o);
  so.model_id = std::filesystem::path(m.path).stem().string();  // the store name, or the file's stem
  // An HF repo name (from the store or the HF cache) is the model's id as given.
  if (!std::filesystem::exists(o.model) && hub::looks_like_repo_spec(o.model) &&
      o.model.find_first_of("@:") == std::string::npos)
    so.model_id = o.model;
  for (const std::vector<std::string>* list : {&o.lora, &o.lora_modules})
    for (const std::string& arg : *list) so.loras.push_back(served_lora(arg, *m.model, so.loras, so.model_id));
  so.model_kind = model_kind_name(model_kind(*m.model));
  so.model_path = m.path;
  so.gguf = m.file;
  so.allow_pull = !o.no_pull;
  if (model_kind(*m.model) == ModelKind::Embedding || o.embeddings) {
    EmbeddingConfig ec = embedding_config(*m.model, m.file ? "" : m.path);
    if (!o.pooling.empty()) ec.pooling = parse_pooling(o.pooling);
    so.embedder = std::make_shared<Embedder>(m.model, m.tokenizer, ec, o.threads);
    std::fprintf(stderr, "kvad serve: /v1/embeddings: %s pooling%s, %lld dimensions, at most %d tokens per input (%s)\n",
                 pooling_name(ec.pooling), ec.normalize ? ", L2-normalised" : "", static_cast<long long>(hp.n_embd),
                 ec.max_seq_length, ec.source.c_str());
  }
  try {
    so.chat = std::make_shared<const ChatPrompt>(chat_prompt(m));
  } catch (const std::exception& e) {
    so.chat_error = e.what();
  }
  so.sampling_defaults = with_generation_config(server::openai_sampling_defaults(), m.generation_config);
  if (m.generation_config.has_sampling())
    std::fprintf(stderr, "kvad serve: sampling defaults from generation_config.json: %s\n",
                 m.generation_config.sampling_summary().c_str());
  so.sched.n_slots = o.parallel;
  so.sched.n_ctx = o.ctx_size > 0 ? o.ctx_size : static_cast<int32_t>(std::min<int64_t>(4096, hp.n_ctx_train));
  so.sched.n_threads = o.threads;
  so.sched.kv_types = kv;
  so.sched.max_queue = static_cast<size_t>(o.queue);
  so.sched.max_prompt_per_step = o.batch;
  so.sched.cache_reuse_all = o.cache_reuse == "all";
  so.sched.spec_ngram = o.spec.ngram;
  so.sched.spec_draft = draft.model;
  so.sched.spec_mtp = o.spec.mtp;
  so.sched.spec = o.spec.spec;
  so.sched.spec_max_rows = o.spec_max_rows;
  if (!o.image_model.empty()) so.painter = load_painter(o, /*with_text=*/true, &so.image_model_id);

  std::fprintf(stderr, "kvad serve: model %s (%s), %d slots x %d tokens, chat template: %s\n", so.model_id.c_str(),
               m.path.c_str(), so.sched.n_slots, so.sched.n_ctx,
               so.chat ? "the model's" : ("none (" + so.chat_error + ")").c_str());
  run_server(o, so, m.model, m.tokenizer);
}

void run_server(const ServeOptions& o, const server::ServerOptions& so, std::shared_ptr<Model> model,
                std::shared_ptr<const Tokenizer> tok) {
  // Handlers before the "listening" line: a client that reads it may signal
  // at once (a signal before the handlers would kill the process instead of
  // shutting it down cleanly).
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::signal(SIGPIPE, SIG_IGN);
  server::Server srv(std::move(model), std::move(tok), so);
  const int port = srv.bind();
  const char* apis = !model ? ", A1111's at /sdapi/v1"
                     : so.painter ? ", ollama's at /api, A1111's at /sdapi/v1" : ", ollama's at /api";
  std::fprintf(stderr, "kvad serve: listening on http://%s:%d (chat page at /, OpenAI API at /v1%s)%s\n",
               o.host.c_str(), port, apis, so.api_key.empty() ? "" : ", API key required");

  if (so.api_key.empty() && o.host != "127.0.0.1" && o.host != "localhost" && o.host != "::1")
    std::fprintf(stderr, "kvad serve: warning: listening on %s without --api-key: anyone who can reach it can use it\n",
                 o.host.c_str());

  // SIGINT/SIGTERM: a watcher thread turns the flag into stop(), which ends
  // running generations and embeddings and makes run() return once every
  // handler has. A handler that does not return in kShutdownGrace (work
  // that checks for stop() nowhere, e.g. inside one library call) does not
  // hold the process: it exits without running destructors.
  std::atomic<bool> done{false};
  std::thread watcher([&] {
    while (!done.load() && g_signal.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (g_signal.load() != 0) {
      const int sig = g_signal.load();
      std::fprintf(stderr, "kvad serve: signal %d, shutting down\n", sig);
      // Detached, so it reads only globals: serve() may have returned.
      std::thread([sig] {
        const auto deadline = std::chrono::steady_clock::now() + kShutdownGrace;
        while (!g_served.load() && std::chrono::steady_clock::now() < deadline)
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
        if (g_served.load()) return;
        std::fprintf(stderr, "kvad serve: a request still running %lld s after signal %d; exiting without it\n",
                     static_cast<long long>(kShutdownGrace.count()), sig);
        std::fflush(stderr);
        std::_Exit(128 + sig);
      }).detach();
      srv.stop();
    }
  });
  srv.run();
  g_served.store(true);
  done.store(true);
  watcher.join();
}

}  // namespace

void add_serve(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  CLI::App* c = app.add_subcommand("serve", "Serve the OpenAI API (and a chat page) over HTTP");
  c->add_option("-m,--model", o->model, "GGUF file or model-store name (default: " + std::string(kDefaultModel) + ")");
  c->add_option("--lora", o->lora,
                "A LoRA adapter served as model NAME: NAME=PATH[@STRENGTH] (repeatable; a PEFT folder or a llama.cpp "
                "GGUF adapter); a request naming NAME runs through it, beside requests for the base in one batch")
      ->allow_extra_args(false);
  c->add_option("--lora-modules", o->lora_modules, "vLLM's spelling of --lora: NAME=PATH ...");
  c->add_option("--host", o->host, "Address to listen on (loopback by default)")->capture_default_str();
  c->add_option("--port", o->port, "Port to listen on (0: any free port)")->capture_default_str();
  c->add_option("--parallel", o->parallel, "Requests decoded at once (slots)")->capture_default_str();
  c->add_option("-c,--ctx-size", o->ctx_size, "Context size per slot in tokens (0: min(4096, model's))")
      ->capture_default_str();
  c->add_option("--api-key", o->api_key,
                 "Require 'Authorization: Bearer KEY' on every path but /health (default: $KVAD_API_KEY)");
  c->add_option("--cors-origin", o->cors_origin, "Let web pages from ORIGIN (or '*') call the API (default: none)");
  c->add_option("--request-timeout", o->request_timeout,
                "Seconds a connection may take to send a request's headers and body, or sit idle")
      ->check(number_check())
      ->capture_default_str();
  add_threads_option(c, o->threads);
  c->add_option("--queue", o->queue, "Requests that may wait for a slot before new ones get 429")->capture_default_str();
  c->add_option("-b,--batch", o->batch, "Prompt tokens evaluated per step, all slots together")->capture_default_str();
  add_device_options(c, o->device);
  o->cache_type.add_to(c);
  c->add_option("--cache-reuse", o->cache_reuse,
                 "Whose cached prompt prefix a request may reuse: 'key' (only one sent with the same "
                 "Authorization header) or 'all' (any; cached_tokens and timing then show how much of a prompt "
                 "another client sent)")
      ->check(CLI::IsMember({"key", "all"}))
      ->capture_default_str();
  c->add_option("--image-model", o->image_model,
                "Also (or, without --model, only) serve pictures with this pipeline: a diffusers folder, a single-file "
                ".safetensors, or ORG/NAME (as kvad images make --model); /v1/images/generations and A1111's /sdapi/v1");
  c->add_option("--image-threads", o->image_threads,
                "Threads the image model paints with (0: half the cores beside a text model, else --threads)")
      ->check(integer_check())
      ->capture_default_str();
  c->add_option("--image-queue", o->image_queue, "Image jobs that may wait behind the one painting before new ones get 503")
      ->check(integer_check())
      ->capture_default_str();
  c->add_flag("-q,--quiet", o->quiet, "Do not log each request");
  c->add_flag("--embeddings", o->embeddings,
              "Also serve POST /v1/embeddings with a text model (an embedding model always serves it)");
  c->add_flag("--no-pull", o->no_pull, "Refuse ollama's POST /api/pull (which downloads models from the Hub)");
  c->add_option("--pooling", o->pooling, "Embedding pooling instead of the model's: mean, cls or last")
      ->check(CLI::IsMember({"mean", "cls", "last"}));
  o->spec.add_to(c);
  o->spec_max_rows_opt = c->add_option("--spec-max-rows", o->spec_max_rows,
                "Speculation: add proposals to a step only while its rows (decode and prompt tokens and proposals, "
                "all slots) stay at or below N (0: never speculate)")
      ->check(integer_check())
      ->check(CLI::Range(0, 65536))
      ->capture_default_str();
  c->callback([o] { serve(*o); });
}

}  // namespace kvad::cli
