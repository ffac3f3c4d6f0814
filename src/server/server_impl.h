// kvad serve's server internals, shared by its source files: server.cpp
// (connections, the front door, routes) and generation.cpp (one request's
// generation, whole or streamed, for every API; n > 1 choices). Not a
// public header.
#pragma once
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "engine/chat_prompt.h"
#include "server/embeddings.h"
#include "server/guard.h"
#include "server/image_jobs.h"
#include "server/llamacpp_api.h"
#include "server/metrics.h"
#include "server/openai.h"
#include "server/server.h"
#include "server/stream.h"
#include "server/tool_prompt.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace kvad::server {

/// A client that left is seen within this while no token comes (prefill, queue).
constexpr auto kPoll = std::chrono::milliseconds(10);

/// The socket of the connection a request came on, found by its addresses
/// (cpp-httplib does not hand handlers the socket); -1 when not found (then
/// only failed writes detect a disconnect). Valid for the request's lifetime.
int find_connection_fd(const httplib::Request& req);

/// True when the client has closed (or reset) the connection. Unread bytes
/// (a pipelined request) do not count.
bool peer_closed(int fd);

struct Server::Impl {
  /// A route handler for the ollama and llama.cpp routes: marks the
  /// connection busy for the idle watchdog and answers any error itself
  /// (cpp-httplib runs its own exception handler only when built for it),
  /// as `body(ApiError)` spells that API's error JSON; 429 adds Retry-After.
  template <class Fn, class Body>
  auto guarded_as(Fn fn, Body body) {
    return [this, fn, body](const httplib::Request& req, httplib::Response& res) {
      watchdog.busy(req.remote_addr, req.remote_port);
      auto answer = [&](const ApiError& e) {
        res.status = e.status;
        if (e.status == 429) res.set_header("Retry-After", "1");
        res.set_content(dump(body(e)), "application/json");
      };
      try {
        fn(req, res);
      } catch (const ApiError& e) {
        answer(e);
      } catch (const std::exception& e) {
        answer(ApiError(500, std::string("Internal error: ") + e.what(), "server_error", "", "internal_error"));
      }
    };
  }

  Impl(std::shared_ptr<Model> m, std::shared_ptr<const Tokenizer> t, ServerOptions opts)
      : o(std::move(opts)),
        tok(std::move(t)),
        model(std::move(m)),
        sched(model ? std::make_unique<Scheduler>(model, tok, o.sched) : nullptr),
        images(o.painter ? std::make_unique<ImageQueue>(o.painter, o.image_queue) : nullptr),
        watchdog(std::chrono::milliseconds(o.request_timeout_ms), std::chrono::milliseconds(100),
                 http_threads() > 8 ? http_threads() - 4 : http_threads()),
        created(static_cast<int64_t>(std::time(nullptr))) {
    if (!tok) return;  // an image model alone: no text routes (front_door answers them 400)
    // The most bytes one token can cover: a prompt of more bytes than
    // n_ctx x this (x 2 for normalizers that shrink text, e.g. NFKC) cannot
    // fit, and is refused before it is templated and tokenized.
    size_t longest = 1;
    for (int32_t id = 0; id < tok->n_vocab(); ++id)
      longest = std::max({longest, tok->token_text(id).size(), tok->token_to_piece(id, true).size()});
    max_token_bytes = longest;
    if (o.chat) tools_caps = probe_template(o.chat->chat_template());
    fim = find_fim_tokens(o.gguf.get(), *tok);
    // Replies with tools are decoded with control tokens' text only when
    // the format's markers are control tokens (<|python_tag|>, DeepSeek's);
    // otherwise a stray control token stays out of the content as before.
    for (std::string_view m : tool_format_markers(effective_format(tools_caps))) {
      const std::vector<int32_t> ids = tok->encode(std::string(m), /*add_special=*/false, /*parse_special=*/true);
      if (ids.size() == 1 && tok->token_type(ids[0]) == TokenType::CONTROL) markers_are_control = true;
    }
  }

  void routes();
  /// Threads serving connections: each waiting request holds one.
  size_t http_threads() const {
    return o.http_threads > 0 ? static_cast<size_t>(o.http_threads)
                              : static_cast<size_t>(o.sched.n_slots) + o.sched.max_queue + 64 +
                                    (o.painter ? o.image_queue + 1 : 0);
  }
  void completion(const httplib::Request& req, httplib::Response& res, bool chat);
  /// ollama's /api/* (ollama_routes.cpp) and llama.cpp's own endpoints
  /// (llamacpp_routes.cpp), registered by routes().
  void ollama_routes();
  /// OpenAI's /v1/images/generations and A1111's /sdapi/v1/* (image_routes.cpp).
  void image_routes();
  /// Queues `batches` (settled) and waits for the job: nullptr when the
  /// client left (res is 499; the job is cancelled). Throws ApiError 400
  /// without an image model, 503 when the queue is full or the server stops,
  /// 500 when painting failed.
  std::shared_ptr<ImageJob> paint(const httplib::Request& req, httplib::Response& res,
                                  std::vector<PaintRequest> batches);
  void llamacpp_routes();
  /// The model- and server-info routes a router in front of kvad asks
  /// (router_routes.cpp), registered by routes().
  void router_routes();
  void ollama_generate(const httplib::Request& req, httplib::Response& res, bool chat);
  void ollama_pull(const httplib::Request& req, httplib::Response& res);
  void ollama_embed(const httplib::Request& req, httplib::Response& res, bool legacy);
  void llamacpp_completion(const httplib::Request& req, httplib::Response& res, bool infill);
  /// Embeddings for /v1/embeddings and ollama's: one request runs and
  /// --queue wait (more: ApiError 429; stopping: 503; no Embedder: 400).
  /// Once admitted, `inputs()` validates the request and gives its token
  /// ids (throwing ApiError), whose vectors go to *out ([n, dim] f32).
  /// False when the client left (res is 499).
  bool run_embeddings(const httplib::Request& req, httplib::Response& res,
                      const std::function<std::vector<std::vector<int32_t>>()>& inputs, std::vector<float>* out);
  void anthropic_messages(const httplib::Request& req, httplib::Response& res);
  void responses(const httplib::Request& req, httplib::Response& res);
  std::vector<int32_t> tokenize(const CompletionRequest& r, OutputFormat* fmt) const;
  std::vector<int32_t> tokenize_chat(const CompletionRequest& r, OutputFormat* fmt) const;

  /// A request submitted: its job, how to read its reply, its connection.
  struct Prepared {
    std::shared_ptr<Job> job;
    OutputFormat fmt;
    int fd = -1;
    int64_t created = 0;
    int32_t n_prompt = 0;  ///< prompt tokens
    std::vector<std::shared_ptr<Job>> choices;  ///< n > 1: every choice's job (job is choices[0])
    bool chat = false;     ///< /v1/chat/completions shapes (logprobs)
  };
  /// Checks the model and the prompt's size, renders and tokenizes it,
  /// submits it. Throws ApiError.
  Prepared prepare(const httplib::Request& req, CompletionRequest& r);
  /// Waits for the whole reply; false when the client left (res is 499).
  /// Throws ApiError when generation failed.
  bool collect(Prepared& p, httplib::Response& res, std::string* text, GenEvent* last,
               std::vector<GenTokenLogprobs>* logprobs = nullptr);
  /// n > 1 choices (Scheduler::submit_n: the prompt is evaluated once),
  /// streamed or not; each choice carries its index. Plain text (no tool
  /// calls: refused with n > 1 before this).
  void completion_n(const CompletionRequest& r, Prepared& p, httplib::Response& res);
  /// Token texts for logprobs: control tokens by their text (<|im_end|>).
  std::function<std::string(int32_t)> piece_fn() const {
    std::shared_ptr<const Tokenizer> t = tok;
    return [t](int32_t id) { return t->token_to_piece(id, /*special=*/true); };
  }
  /// A `logprobs` object for tokens (advancing *text_offset), in an API's shape.
  using LogprobsFormat = std::function<nlohmann::ordered_json(const std::vector<GenTokenLogprobs>&, size_t*)>;
  /// Streams the reply through `em` as `content_type` (server-sent events,
  /// or ollama's NDJSON); with `logprobs`, each token's logprobs go with the
  /// delta that carries its text (text_offset from `offset0`), shaped by
  /// `lp_format` (default: logprobs_json, OpenAI's).
  void stream(Prepared p, httplib::Response& res, std::shared_ptr<StreamEmitter> em, bool logprobs = false,
              size_t offset0 = 0, const char* content_type = "text/event-stream", LogprobsFormat lp_format = nullptr);

  ServerOptions o;
  std::shared_ptr<const Tokenizer> tok;
  std::shared_ptr<Model> model;  ///< its hparams for /api/show and /props
  std::unique_ptr<Scheduler> sched;  ///< null when the server holds only an image model
  std::unique_ptr<ImageQueue> images;  ///< null without --image-model
  Metrics metrics;
  httplib::Server http;
  std::atomic<bool> stopping{false};
  std::atomic<bool> in_run{false}, run_done{false};  ///< Server::run() entered / returned
  std::atomic<int> open_streams{0};  ///< streamed responses not yet finished
  ConnectionWatchdog watchdog;
  size_t max_token_bytes = 1;
  bool markers_are_control = false;  ///< the tool-call markers are control tokens
  TemplateTools tools_caps;  ///< what the chat template does with tools (probed once)
  FimTokens fim;             ///< the model's fill-in-the-middle tokens (llamacpp_api.h)
  int64_t created;
  httplib::Server::HandlerResponse front_door(const httplib::Request& req, httplib::Response& res);
};

}  // namespace kvad::server
