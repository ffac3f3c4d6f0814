#include "server/server.h"

#include <dirent.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <algorithm>
#include <functional>

#include "model/model.h"
#include "server/chat_page.h"
#include "server/server_impl.h"
#include "server/embeddings.h"
#include "server/guard.h"
#include "server/metrics.h"
#include "server/anthropic.h"
#include "server/ollama_api.h"
#include "server/openai.h"
#include "server/responses.h"
#include "server/stream.h"
#include "server/tool_prompt.h"
#include "engine/chat_prompt.h"
#include "jinja/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "engine/embed.h"

namespace kvad::server {

using json = nlohmann::ordered_json;

namespace {


// ------------------------------------------------------------ connections

std::string numeric_host(const sockaddr_storage& a, socklen_t len, int* port) {
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&a), len, host, sizeof host, serv, sizeof serv,
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return "";
  *port = std::atoi(serv);
  return host;
}

}  // namespace

// The socket of the connection a request came on, found by its addresses
// (cpp-httplib does not hand handlers the socket). The handler runs while the
// connection is open, so the descriptor stays valid for the request's
// lifetime. Returns -1 when not found (then only failed writes detect a
// disconnect).
int find_connection_fd(const httplib::Request& req) {
  DIR* d = opendir("/proc/self/fd");
  if (!d) return -1;
  int found = -1;
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == dirfd(d)) continue;
    sockaddr_storage local{}, peer{};
    socklen_t ll = sizeof local, pl = sizeof peer;
    if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&local), &ll) != 0) continue;
    if (getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&peer), &pl) != 0) continue;
    int lport = -1, pport = -1;
    numeric_host(local, ll, &lport);
    const std::string paddr = numeric_host(peer, pl, &pport);
    if (lport == req.local_port && pport == req.remote_port && paddr == req.remote_addr) {
      found = static_cast<int>(fd);
      break;
    }
  }
  closedir(d);
  return found;
}

// True when the client has closed (or reset) the connection. Unread bytes
// (a pipelined request) do not count.
bool peer_closed(int fd) {
  if (fd < 0) return false;
  pollfd p{fd, POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

namespace {

std::string endpoint_label(const std::string& path) {
  for (const char* known : {"/v1/chat/completions", "/v1/completions", "/v1/messages", "/v1/responses",
                            "/v1/embeddings", "/v1/models", "/health", "/metrics", "/", "/api/chat",
                            "/api/generate", "/api/embed", "/api/embeddings", "/api/tags", "/api/show", "/api/ps",
                            "/api/version", "/api/pull", "/completion", "/completions", "/infill", "/tokenize",
                            "/detokenize", "/apply-template", "/props", "/slots", "/get_model_info", "/model_info",
                            "/get_server_info", "/server_info", "/v1/images/generations", "/sdapi/v1/txt2img",
                            "/sdapi/v1/progress", "/sdapi/v1/interrupt", "/sdapi/v1/sd-models", "/sdapi/v1/samplers",
                            "/sdapi/v1/options"})
    if (path == known) return known;
  if (path.rfind("/v1/models/", 0) == 0) return "/v1/models/{id}";
  return "other";
}

/// Each API's clients read errors in their API's shape: Anthropic's for
/// /v1/messages, ollama's {"error": "..."} for /api/*, OpenAI's elsewhere.
enum class ErrorShape { openai, anthropic, ollama };
ErrorShape error_shape(const std::string& path) {
  if (path == "/v1/messages") return ErrorShape::anthropic;
  if (path.rfind("/api/", 0) == 0) return ErrorShape::ollama;
  return ErrorShape::openai;
}

void send_error(httplib::Response& res, const ApiError& e, ErrorShape shape = ErrorShape::openai) {
  res.status = e.status;
  if (e.status == 429) res.set_header("Retry-After", "1");
  const json body = shape == ErrorShape::anthropic ? anthropic_error_body(e)
                    : shape == ErrorShape::ollama  ? ollama_error_body(e)
                                                   : error_body(e);
  res.set_content(dump(body), "application/json");
}

// Set by the pre-routing handler when it refused a request whose body (if
// any) is still unread; the logger, which runs on the same connection thread
// after the answer is written, then shuts the connection down so the library
// does not read the body as further requests.
thread_local bool t_close_after_answer = false;

bool same_origin(const std::string& origin, const std::string& host) {
  for (const char* scheme : {"http://", "https://"})
    if (origin == scheme + host) return true;
  return false;
}

}  // namespace
// The checks made after the headers and before the body is read (guard.h).
httplib::Server::HandlerResponse Server::Impl::front_door(const httplib::Request& req, httplib::Response& res) {
  using HR = httplib::Server::HandlerResponse;
  t_close_after_answer = false;
  auto refuse = [&](const ApiError& e) {
    send_error(res, e, error_shape(req.path));
    res.set_header("Connection", "close");
    t_close_after_answer = true;
    return HR::Handled;
  };
  // Ranges: served whole (cpp-httplib would build multipart/byteranges of
  // any number of overlapping ranges). The Request object is not const in
  // the library; only this callback's view of it is.
  const_cast<httplib::Request&>(req).ranges.clear();

  const std::string host = req.get_header_value("Host");
  if (!host_allowed(host, o.allowed_hosts))
    return refuse(ApiError(403, "Host '" + sanitize_for_log(host, 64) + "' is not served here (allowed: the "
                           "loopback names and --host).", "invalid_request_error", "", "host_not_allowed"));

  const std::string origin = req.get_header_value("Origin");
  const bool cors_ok = !origin.empty() && !o.cors_origin.empty() && (o.cors_origin == "*" || origin == o.cors_origin);
  if (cors_ok) {
    res.set_header("Access-Control-Allow-Origin", o.cors_origin == "*" ? "*" : origin);
    res.set_header("Vary", "Origin");
  }
  if (!origin.empty() && !cors_ok && !same_origin(origin, host))
    return refuse(ApiError(403, "Cross-origin requests from '" + sanitize_for_log(origin, 64) +
                                    "' are not allowed (see --cors-origin).",
                           "invalid_request_error", "", "origin_not_allowed"));
  if (req.method == "OPTIONS") {
    res.status = 204;
    res.set_header("Allow", "GET, POST, OPTIONS");
    if (cors_ok) {
      res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
      res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type, x-api-key, anthropic-version");
      res.set_header("Access-Control-Max-Age", "600");
    }
    t_close_after_answer = req.has_header("Content-Length") || req.has_header("Transfer-Encoding");
    return HR::Handled;
  }

  if (!o.api_key.empty() && req.path != "/health") {
    const std::string auth = req.get_header_value("Authorization");
    const std::string xkey = req.get_header_value("x-api-key");  // Anthropic's clients send the key so
    const bool ok_bearer = constant_time_equal(auth, "Bearer " + o.api_key);
    const bool ok_xkey = constant_time_equal(xkey, o.api_key);
    if (!ok_bearer && !ok_xkey)
      return refuse(ApiError(401,
                             auth.empty() && xkey.empty() ? "You didn't provide an API key. Send it as 'Authorization: Bearer KEY' or 'x-api-key: KEY'."
                                          : "Incorrect API key provided.",
                             "invalid_request_error", "", "invalid_api_key"));
  }

  // Body framing: only identity bodies with a length (cpp-httplib 0.11.4
  // reads chunked and compressed bodies without its payload limit).
  if (req.has_header("Transfer-Encoding"))
    return refuse(ApiError(501, "Transfer-Encoding is not supported; send the body with a Content-Length.",
                           "invalid_request_error", "", "unsupported_transfer_encoding"));
  if (req.has_header("Content-Encoding"))
    return refuse(ApiError(415, "Content-Encoding is not supported; send the body uncompressed.",
                           "invalid_request_error", "", "unsupported_content_encoding"));
  const bool has_length = req.has_header("Content-Length");
  if (has_length) {
    const std::string v = req.get_header_value("Content-Length");
    if (v.empty() || v.size() > 19 || v.find_first_not_of("0123456789") != std::string::npos)
      return refuse(ApiError(400, "Content-Length is not a number.", "invalid_request_error", "", "invalid_length"));
    if (std::stoull(v) > o.max_body_bytes)
      return refuse(ApiError(413, "The request body is too large (" + v + " bytes; the limit is " +
                                      std::to_string(o.max_body_bytes) + ").",
                             "invalid_request_error", "", "payload_too_large"));
  }
  if (req.method == "POST") {
    if (!has_length)
      return refuse(ApiError(411, "A POST needs a Content-Length.", "invalid_request_error", "", "length_required"));
    const std::string ct = req.get_header_value("Content-Type");
    // ollama's documented examples are `curl -d '{...}'`, which sends
    // application/x-www-form-urlencoded; its clients' bodies are JSON all
    // the same. (A browser's cross-site form post carries an Origin and is
    // refused above.)
    const bool form_ok = error_shape(req.path) == ErrorShape::ollama &&
                         ct.rfind("application/x-www-form-urlencoded", 0) == 0;
    // A1111's clients post /sdapi/v1/interrupt with no body and no type.
    const bool empty_ok = req.path == "/sdapi/v1/interrupt" && req.get_header_value("Content-Length") == "0";
    if (ct.rfind("application/json", 0) != 0 && !form_ok && !empty_ok)
      return refuse(ApiError(415, "Content-Type must be application/json, got '" + sanitize_for_log(ct, 64) + "'.",
                             "invalid_request_error", "", "unsupported_media_type"));
  }
  // A server of an image model alone: the text routes have no model behind them.
  if (!sched) {
    const std::string label = endpoint_label(req.path);
    const bool shared = label == "/" || label == "/health" || label == "/metrics" || label == "/v1/models" ||
                        label == "/v1/models/{id}" || label.rfind("/v1/images/", 0) == 0 ||
                        label.rfind("/sdapi/", 0) == 0;
    if (label != "other" && !shared)
      return refuse(ApiError(400, "This server holds only the image model '" + o.image_model_id + "'; " +
                                      sanitize_for_log(req.path, 64) + " needs a text model (kvad serve --model).",
                             "invalid_request_error", "model", "model_not_supported"));
  }
  watchdog.body(req.remote_addr, req.remote_port);
  return HR::Unhandled;
}

void Server::Impl::routes() {
  const size_t n_threads = http_threads();
  http.new_task_queue = [n_threads] { return new httplib::ThreadPool(n_threads); };
  http.set_payload_max_length(o.max_body_bytes);
  // cpp-httplib's default also sets SO_REUSEPORT, which lets a second server
  // bind the same port and silently share its connections; a port in use
  // must be an error instead.
  http.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  // An idle keep-alive connection holds a thread, and stop() waits for it
  // up to this long.
  http.set_keep_alive_timeout(5);
  http.set_keep_alive_max_count(1000);

  http.set_pre_routing_handler(
      [this](const httplib::Request& req, httplib::Response& res) { return front_door(req, res); });

  http.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;  // our own JSON error
    if (res.status == 404) {
      send_error(res, ApiError(404, "Unknown request URL: " + req.method + " " + req.path + ".",
                               "invalid_request_error", "", "unknown_url"), error_shape(req.path));
    } else if (res.status == 413) {
      send_error(res, ApiError(413, "The request body is too large.", "invalid_request_error", "", "payload_too_large"),
                 error_shape(req.path));
    } else if (res.status == 499) {
      return httplib::Server::HandlerResponse::Unhandled;
    } else {
      send_error(res, ApiError(res.status, "HTTP error " + std::to_string(res.status) + ".",
                               res.status >= 500 ? "server_error" : "invalid_request_error"), error_shape(req.path));
    }
    return httplib::Server::HandlerResponse::Handled;
  }));

  http.set_exception_handler([](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
    const ErrorShape shape = error_shape(req.path);
    try {
      std::rethrow_exception(ep);
    } catch (const ApiError& e) {
      send_error(res, e, shape);
    } catch (const std::exception& e) {
      send_error(res, ApiError(500, std::string("Internal error: ") + e.what(), "server_error", "", "internal_error"),
                 shape);
    } catch (...) {
      send_error(res, ApiError(500, "Internal error.", "server_error", "", "internal_error"), shape);
    }
  });

  http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    metrics.count_request(endpoint_label(req.path), res.status);
    watchdog.done(req.remote_addr, req.remote_port);
    if (req.body.size() > (1u << 20)) watchdog.request_trim();
    if (t_close_after_answer) {
      t_close_after_answer = false;
      const int fd = find_connection_fd(req);
      if (fd >= 0) ::shutdown(fd, SHUT_RDWR);
    }
    if (o.log_requests)
      std::fprintf(stderr, "kvad serve: %s %s %d (%s:%d)\n", sanitize_for_log(req.method, 16).c_str(),
                   sanitize_for_log(req.path).c_str(), res.status, req.remote_addr.c_str(), req.remote_port);
  });

  // Handlers catch their own errors: cpp-httplib's exception handler only
  // runs when it was built with exceptions enabled for handlers.
  auto guarded = [this](auto fn) {
    return [this, fn](const httplib::Request& req, httplib::Response& res) {
      watchdog.busy(req.remote_addr, req.remote_port);  // generating: no deadline until the answer is written
      const ErrorShape shape = error_shape(req.path);
      try {
        fn(req, res);
      } catch (const ApiError& e) {
        send_error(res, e, shape);
      } catch (const std::exception& e) {
        send_error(res, ApiError(500, std::string("Internal error: ") + e.what(), "server_error", "", "internal_error"),
                   shape);
      }
    };
  };

  http.Post("/v1/chat/completions", guarded([this](const auto& req, auto& res) { completion(req, res, true); }));
  http.Post("/v1/completions", guarded([this](const auto& req, auto& res) { completion(req, res, false); }));
  http.Post("/v1/messages", guarded([this](const auto& req, auto& res) { anthropic_messages(req, res); }));
  http.Post("/v1/responses", guarded([this](const auto& req, auto& res) { responses(req, res); }));
  http.Post("/v1/embeddings", guarded([this](const httplib::Request& req, httplib::Response& res) {
    if (!o.embedder)
      throw ApiError(400, "The model '" + o.model_id + "' (kind " + o.model_kind + ") is not serving embeddings; "
                     "start kvad serve with --embeddings.", "invalid_request_error", "model", "model_not_supported");
    const EmbeddingsModel m = embeddings_model(o.model_id, *o.embedder);
    EmbeddingsRequest r;
    std::vector<float> vecs;
    if (run_embeddings(req, res, [&] { return (r = parse_embeddings_request(req.body, m)).inputs; }, &vecs))
      res.set_content(embeddings_response_body(r, vecs, m), "application/json");
  }));
  for (const char* p : {"/v1/chat/completions", "/v1/completions", "/v1/messages", "/v1/responses", "/v1/embeddings"})
    http.Get(p, [](const httplib::Request& req, httplib::Response& res) {
      send_error(res, ApiError(405, "Method not allowed: use POST " + req.path + ".", "invalid_request_error", "",
                               "method_not_allowed"));
    });
  http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    std::vector<std::string> adapters;
    for (const ServedLora& l : o.loras) adapters.push_back(l.name);
    json list = sched ? model_list(o.model_id, created, adapters) : json{{"object", "list"}, {"data", json::array()}};
    if (images) {
      json m = model_object(o.image_model_id, created);
      m["kind"] = "image";
      list["data"].push_back(std::move(m));
    }
    res.set_content(dump(list), "application/json");
  });
  http.Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
    const auto lora = std::find_if(o.loras.begin(), o.loras.end(),
                                   [&](const ServedLora& l) { return l.name == req.matches[1]; });
    if (images && req.matches[1] == o.image_model_id) {
      json m = model_object(o.image_model_id, created);
      m["kind"] = "image";
      res.set_content(dump(m), "application/json");
    } else if (sched && req.matches[1] == o.model_id)
      res.set_content(dump(model_object(o.model_id, created)), "application/json");
    else if (lora != o.loras.end())
      res.set_content(dump(model_object(lora->name, created, o.model_id)), "application/json");
    else
      send_error(res, ApiError(404, "The model '" + std::string(req.matches[1]) + "' does not exist.",
                               "invalid_request_error", "model", "model_not_found"));
  });
  http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (stopping) {
      res.status = 503;
      res.set_content(R"({"status":"shutting down"})", "application/json");
    } else {
      res.set_content(R"({"status":"ok"})", "application/json");
    }
  });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    std::string page = metrics.render(sched ? sched->metrics() : SchedulerMetrics{},
                                      o.embedder ? static_cast<int64_t>(o.embedder->forward_calls()) : -1);
    if (images) page += render_image_metrics(images->counters());
    res.set_content(page, "text/plain; version=0.0.4; charset=utf-8");
  });
  http.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(kChatPageHtml, "text/html; charset=utf-8");
  });
  if (sched) {  // they describe the text model (front_door answers them 400 without one)
    ollama_routes();
    llamacpp_routes();
    router_routes();
  }
  image_routes();
}

bool Server::Impl::run_embeddings(const httplib::Request& req, httplib::Response& res,
                                  const std::function<std::vector<std::vector<int32_t>>()>& inputs,
                                  std::vector<float>* out) {
  if (!o.embedder)
    throw ApiError(400, "The model '" + o.model_id + "' (kind " + o.model_kind + ") is not serving embeddings; "
                   "start kvad serve with --embeddings.", "invalid_request_error", "model", "model_not_supported");
  if (stopping) throw ApiError(503, "The server is shutting down.", "server_error", "", "server_shutting_down");
  // Bounded as generation's queue is: one running and --queue waiting
  // (they take turns batch by batch, Embedder); more is a 429.
  const int limit = static_cast<int>(o.sched.max_queue) + 1;
  struct InFlight {
    std::atomic<int>& n;
    ~InFlight() { --n; }
  } in_flight{metrics.embedding_requests};
  if (++metrics.embedding_requests > limit)
    throw ApiError(429, "Too many embedding requests at once (" + std::to_string(limit) + " are running or "
                   "waiting); retry later.", "rate_limit_error", "", "rate_limit_exceeded");
  const std::vector<std::vector<int32_t>> ids = inputs();
  const int fd = find_connection_fd(req);
  try {
    *out = o.embedder->embed(ids, [this, fd] { return stopping.load() || peer_closed(fd); });
  } catch (const EmbedCancelled&) {
    if (stopping) throw ApiError(503, "The server is shutting down.", "server_error", "", "server_shutting_down");
    res.status = 499;  // the client left; nobody reads it
    return false;
  }
  return true;
}

// ---------------------------------------------------------------- Server

Server::Server(std::shared_ptr<Model> model, std::shared_ptr<const Tokenizer> tok, ServerOptions o)
    : impl_((!model || !tok) && !o.painter ? throw Error("kvad serve needs a text model or an image model")
                                           : std::make_unique<Impl>(std::move(model), std::move(tok), std::move(o))) {
  impl_->routes();
}

Server::~Server() {
  stop();
}

int Server::bind() {
  const ServerOptions& o = impl_->o;
  int port = o.port;
  if (port == 0) {
    port = impl_->http.bind_to_any_port(o.host);
    if (port < 0) throw Error("cannot listen on " + o.host + " (any port)");
  } else if (!impl_->http.bind_to_port(o.host, port)) {
    throw Error("cannot listen on " + o.host + ":" + std::to_string(port) + " (in use, or not an address of this machine)");
  }
  impl_->watchdog.start(port);
  return port;
}

void Server::run() {
  // stop() may come first (a signal right after bind()): then it has set
  // `stopping` before this reads it, or it sees in_run and stops the loop
  // once it runs (cpp-httplib's stop() does nothing before listening began).
  impl_->in_run = true;
  if (!impl_->stopping) impl_->http.listen_after_bind();
  impl_->run_done = true;
}

void Server::stop() {
  impl_->stopping = true;
  if (impl_->sched) impl_->sched->shutdown();
  if (impl_->images) impl_->images->shutdown();
  // Streams end with an error event, which they can only send before the
  // HTTP server stops (it ends chunked responses once it is not running).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (impl_->open_streams.load() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  impl_->http.stop();
  for (int i = 0; i < 500 && impl_->in_run && !impl_->run_done; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    impl_->http.stop();
  }
  impl_->watchdog.stop();
}

}  // namespace kvad::server
