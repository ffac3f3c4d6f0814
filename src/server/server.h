// `kvad serve`'s HTTP server (internals: server_impl.h; server.cpp has the
// connections, the front door and the routes, generation.cpp one request's
// generation for every API): the OpenAI API over a Scheduler (continuous
// batching), on cpp-httplib.
//
// Endpoints:
//   POST /v1/chat/completions, POST /v1/completions   (stream: server-sent events)
//   POST /v1/responses (responses.h), POST /v1/messages (Anthropic, anthropic.h)
//   POST /v1/embeddings (server/embeddings.h; with an Embedder in ServerOptions)
//   GET  /v1/models, GET /v1/models/{id}
//   GET  /health     {"status": "ok"} (503 while shutting down)
//   GET  /metrics    Prometheus text format (server/metrics.h)
//   GET  /           the chat page (server/chat_page.html)
//   with --image-model (server/images_api.h): POST /v1/images/generations,
//   A1111's POST /sdapi/v1/txt2img, /sdapi/v1/interrupt, GET
//   /sdapi/v1/progress, /sdapi/v1/sd-models, /sdapi/v1/samplers, /sdapi/v1/options
//   ollama's API at /api/* (server/ollama_api.h): chat, generate, embed,
//   embeddings, tags, show, ps, version, pull; errors {"error": "..."}
//   llama.cpp's own endpoints (server/llamacpp_api.h): POST /completion,
//   /infill, /tokenize, /detokenize, /apply-template; GET /props, /slots
// With an API key, every request except GET /health needs
// `Authorization: Bearer KEY` or `x-api-key: KEY` (compared in constant time).
// /v1/messages answers errors in Anthropic's shape (anthropic_error_body).
//
// The front door (guard.h), before any body is read: Host must be an allowed
// name (403 host_not_allowed: DNS rebinding); a cross-origin request (Origin
// not the page's own and not --cors-origin) gets 403 origin_not_allowed;
// OPTIONS is answered 204 (with CORS headers for an allowed origin); a POST
// needs Content-Type application/json (415), a Content-Length (411) within
// the body limit (413); Transfer-Encoding gets 501 and Content-Encoding 415.
// A connection refused that way is closed after the answer. Range headers
// are ignored (no multipart range responses). Each connection has a deadline
// for its headers and body (request_timeout_ms), at most 64 KiB of request
// line and headers, and beyond (HTTP threads - 4) connections at once the
// oldest still sending headers get 503 too_many_connections.
//
// Cheap rejection before templating and tokenizing: JSON nested deeper than
// 64 (openai.h); more messages than n_ctx, or more prompt bytes than
// n_ctx x the longest token's bytes, get 400 context_length_exceeded.
//
// Errors are OpenAI's JSON {"error": {"message", "type", "param", "code"}}:
//   400 invalid_request_error: bad JSON, wrong field types or values, n > 1
//       and other unsupported options (code unsupported_value), and a prompt
//       that does not fit the context (code context_length_exceeded, as
//       OpenAI answers it; a prompt that fits but leaves less room than
//       max_tokens is served, and generation stops at the end of the
//       context with finish_reason "length");
//   401 invalid_api_key; 404 model_not_found / unknown_url;
//   405 method_not_allowed; 413 body over the size limit;
//   429 rate_limit_exceeded: --queue requests already wait for a slot;
//   503 server_shutting_down: the server is stopping;
//   500 server_error: the engine failed (the server keeps serving).
// A stream that fails after it started sends one `data: {"error": ...}`
// event and ends without [DONE].
//
// A client that disconnects cancels its generation: the handler polls its
// socket while it waits for tokens (and a failed write does the same), and
// the slot is freed at the next scheduler step. A half-closed client (it shut
// its sending side and still reads) gets no answer: cpp-httplib 0.11.4's
// SocketStream::write() refuses to write once the peer's FIN has arrived
// (test_hardening.py's strict xfail test_half_closed_client_gets_its_answer).
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "engine/scheduler.h"
#include "server/openai.h"

namespace kvad {
class ChatPrompt;
class Embedder;
class Model;
class Painter;
class Tokenizer;
namespace gguf { class File; }
}

namespace kvad::server {

/// A LoRA adapter the server offers under its own model name (kvad serve
/// --lora NAME=PATH, vLLM's --lora-modules): a request whose "model" is
/// `name` runs through `set`; GET /v1/models lists it with the base model
/// as its parent.
struct ServedLora {
  std::string name;
  std::shared_ptr<const LoraSet> set;
};

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                 ///< 0: any free port (bind() returns it)
  std::string api_key;             ///< "": no authentication
  std::string model_id;            ///< what /v1/models lists and requests must name
  std::vector<ServedLora> loras;   ///< adapters requests may name instead of model_id
  /// The model's chat format (engine/chat_prompt.h); null when it has
  /// none or it does not parse: /v1/chat/completions, /v1/messages and
  /// /v1/responses then answer 400 model_not_supported (chat_error, which
  /// names the model's files, is for the server's log, not for clients).
  std::shared_ptr<const ChatPrompt> chat;
  std::string chat_error;
  SchedulerOptions sched;          ///< slots, context per slot, threads, queue bound
  /// Sampling for fields a request leaves out (openai.h): OpenAI's
  /// defaults, or an HF checkpoint's generation_config.json over them.
  SamplerParams sampling_defaults = openai_sampling_defaults();
  int http_threads = 0;            ///< 0: n_slots + max_queue + 8 (a waiting request holds one)
  size_t max_body_bytes = 16u << 20;
  /// Host header names accepted (lower case, no port); loopback names plus
  /// --host by default (serve.cpp). Empty: any Host (a wildcard --host).
  std::vector<std::string> allowed_hosts = {"localhost", "127.0.0.1", "::1"};
  /// An origin allowed to call the API from a browser (CORS), "*" for any;
  /// "": only same-origin pages (the chat page).
  std::string cors_origin;
  /// Deadline for a request's line, headers and body, and for keep-alive
  /// idleness (slowloris); a handler running (generation) is exempt.
  int request_timeout_ms = 10000;
  bool log_requests = true;        ///< one line per request on stderr
  /// Serves POST /v1/embeddings when set (else it answers 400 naming the
  /// model kind). A model of kind "embedding" answers chat and completions
  /// with 400 model_not_supported.
  std::shared_ptr<Embedder> embedder;
  std::string model_kind = "text";  ///< model_kind_name() of the model (model/registry.h)
  /// The model's file or checkpoint folder, as loaded (llama.cpp's GET
  /// /props model_path, ollama's /api/show and /api/tags).
  std::string model_path;
  /// The GGUF the model came from (null for an HF checkpoint): its metadata
  /// for ollama's /api/show model_info and the fill-in-the-middle tokens of
  /// llama.cpp's /infill (tokenizer.ggml.fim_*_token_id).
  std::shared_ptr<const gguf::File> gguf;
  /// POST /api/pull downloads from the Hub (hub::HubOptions::from_env()).
  bool allow_pull = true;
  /// An image pipeline (kvad serve --image-model): /v1/images/generations
  /// and A1111's /sdapi/v1/* paint with it, one job at a time on its own
  /// thread (server/image_jobs.h); image_queue jobs may wait (503 beyond).
  std::shared_ptr<const Painter> painter;
  std::string image_model_id;  ///< what /v1/models lists for it and image requests may name
  size_t image_queue = 8;
};

class Server {
 public:
  /// Builds the scheduler (Session) and the routes. Throws kvad::Error.
  /// `model` and `tok` may be null when o.painter is set: a server of an
  /// image model alone answers text routes 400 model_not_supported.
  Server(std::shared_ptr<Model> model, std::shared_ptr<const Tokenizer> tok, ServerOptions o);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  /// Binds host:port; returns the port bound. Throws kvad::Error when it cannot.
  int bind();
  /// Serves until stop(); returns once the listening socket is closed and
  /// in-flight requests have ended.
  void run();
  /// Thread-safe, callable from any thread: ends running generations, answers
  /// 503 to new ones, and stops listening.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvad::server
