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
#include "server/embeddings.h"
#include "server/guard.h"
#include "server/metrics.h"
#include "server/anthropic.h"
#include "server/openai.h"
#include "server/responses.h"
#include "server/stream.h"
#include "server/tool_prompt.h"
#include "engine/chat_prompt.h"
#include "jinja/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace kvad::server {

using json = nlohmann::ordered_json;

namespace {

constexpr auto kPoll = std::chrono::milliseconds(10);  // a client that left is seen within this while no token comes (prefill, queue)

// ------------------------------------------------------------ connections

std::string numeric_host(const sockaddr_storage& a, socklen_t len, int* port) {
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&a), len, host, sizeof host, serv, sizeof serv,
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return "";
  *port = std::atoi(serv);
  return host;
}

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

std::string endpoint_label(const std::string& path) {
  for (const char* known : {"/v1/chat/completions", "/v1/completions", "/v1/messages", "/v1/responses",
                            "/v1/embeddings", "/v1/models", "/health", "/metrics", "/"})
    if (path == known) return known;
  if (path.rfind("/v1/models/", 0) == 0) return "/v1/models/{id}";
  return "other";
}

/// Anthropic's clients read errors in Anthropic's shape.
bool anthropic_path(const std::string& path) { return path == "/v1/messages"; }

void send_error(httplib::Response& res, const ApiError& e, bool anthropic = false) {
  res.status = e.status;
  res.set_content(dump(anthropic ? anthropic_error_body(e) : error_body(e)), "application/json");
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

// ------------------------------------------------------------------ Impl

struct Server::Impl {
  Impl(std::shared_ptr<Model> model, std::shared_ptr<const Tokenizer> t, ServerOptions opts)
      : o(std::move(opts)),
        tok(std::move(t)),
        sched(std::move(model), tok, o.sched),
        watchdog(std::chrono::milliseconds(o.request_timeout_ms), std::chrono::milliseconds(100),
                 http_threads() > 8 ? http_threads() - 4 : http_threads()),
        created(static_cast<int64_t>(std::time(nullptr))) {
    // The most bytes one token can cover: a prompt of more bytes than
    // n_ctx x this (x 2 for normalizers that shrink text, e.g. NFKC) cannot
    // fit, and is refused before it is templated and tokenized.
    size_t longest = 1;
    for (int32_t id = 0; id < tok->n_vocab(); ++id)
      longest = std::max({longest, tok->token_text(id).size(), tok->token_to_piece(id, true).size()});
    max_token_bytes = longest;
    if (o.chat) tools_caps = probe_template(o.chat->chat_template());
  }

  void routes();
  /// Threads serving connections: each waiting request holds one.
  size_t http_threads() const {
    return o.http_threads > 0 ? static_cast<size_t>(o.http_threads)
                              : static_cast<size_t>(o.sched.n_slots) + o.sched.max_queue + 64;
  }
  void completion(const httplib::Request& req, httplib::Response& res, bool chat);
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
  /// Streams the reply through `em`.
  /// Streams the reply through `em`; with `logprobs`, each token's logprobs
  /// go with the delta that carries its text (text_offset from `offset0`).
  void stream(Prepared p, httplib::Response& res, std::shared_ptr<StreamEmitter> em, bool logprobs = false,
              size_t offset0 = 0);

  ServerOptions o;
  std::shared_ptr<const Tokenizer> tok;
  Scheduler sched;
  Metrics metrics;
  httplib::Server http;
  std::atomic<bool> stopping{false};
  std::atomic<bool> in_run{false}, run_done{false};  ///< Server::run() entered / returned
  std::atomic<int> open_streams{0};  ///< streamed responses not yet finished
  ConnectionWatchdog watchdog;
  size_t max_token_bytes = 1;
  TemplateTools tools_caps;  ///< what the chat template does with tools (probed once)
  int64_t created;
  httplib::Server::HandlerResponse front_door(const httplib::Request& req, httplib::Response& res);
};

std::vector<int32_t> Server::Impl::tokenize_chat(const CompletionRequest& r, OutputFormat* fmt) const {
  if (!o.chat)
    throw ApiError(500, "This model's chat template cannot be used (" + o.chat_error + "); use /v1/completions.",
                   "server_error", "", "chat_template_error");
  ChatInput in = build_chat_input(r, tools_caps);
  try {
    std::string rendered;
    std::vector<int32_t> ids = o.chat->tokenize(in.messages, /*add_generation_prompt=*/true, in.tools, &rendered,
                                                in.reply_prefix);
    *fmt = output_format(r, tools_caps, in, rendered);
    if (fmt->think_open && !in.reply_prefix.empty())  // no forced call inside <think>
      ids = o.chat->tokenize(in.messages, true, in.tools);
    return ids;
  } catch (const ChatTemplateError& e) {
    // raise_exception(): the conversation is at fault (e.g. roles that do not alternate).
    if (e.raised()) throw ApiError(400, e.message(), "invalid_request_error", "messages", "invalid_value");
    throw ApiError(500, std::string("The chat template failed: ") + e.what(), "server_error", "", "chat_template_error");
  }
}

std::vector<int32_t> Server::Impl::tokenize(const CompletionRequest& r, OutputFormat* fmt) const {
  if (r.chat) return tokenize_chat(r, fmt);
  fmt->tools = fmt->reasoning = false;
  if (r.prompt_is_ids) {
    for (int32_t id : r.prompt_ids)
      if (id < 0 || id >= tok->n_vocab())
        throw ApiError(400, "Invalid value for 'prompt': token id " + std::to_string(id) + " is not in the vocabulary (" +
                                std::to_string(tok->n_vocab()) + " tokens).",
                       "invalid_request_error", "prompt", "invalid_value");
    return r.prompt_ids;
  }
  // As llama.cpp's server: BOS as the model asks, special-token text parsed.
  return tok->encode(r.prompt, /*add_special=*/true, /*parse_special=*/true);
}

Server::Impl::Prepared Server::Impl::prepare(const httplib::Request& req, CompletionRequest& r) {
  if (o.model_kind != "text")
    throw ApiError(400, "The model '" + o.model_id + "' is an " + o.model_kind + " model (kind " + o.model_kind +
                            "): it serves POST /v1/embeddings, not " + req.path + ".",
                   "invalid_request_error", "model", "model_not_supported");
  if (r.model != o.model_id)
    throw ApiError(404, "The model '" + r.model + "' does not exist; this server has '" + o.model_id + "'.",
                   "invalid_request_error", "model", "model_not_found");
  for (const auto& [id, bias] : r.gen.sampling.logit_bias)
    if (id >= tok->n_vocab())
      throw ApiError(400, "Invalid value for 'logit_bias': token id " + std::to_string(id) +
                              " is not in the vocabulary (" + std::to_string(tok->n_vocab()) + " tokens).",
                     "invalid_request_error", "logit_bias", "invalid_value");
  const char* pparam = r.chat ? "messages" : "prompt";
  {
    // Cheap bounds before the template and the tokenizer see the text.
    const int64_t n_ctx = sched.n_ctx();
    size_t bytes = r.prompt.size();
    for (const auto& m : r.messages) {
      bytes += m.role.size() + m.content.size() + m.tool_call_id.size();
      for (const ToolCall& c : m.tool_calls) bytes += c.id.size() + c.name.size() + c.arguments.size();
    }
    for (const ToolSpec& t : r.tools) bytes += t.name.size() + t.description.size() + t.parameters.dump().size();
    const uint64_t max_bytes = static_cast<uint64_t>(n_ctx) * max_token_bytes * 2;
    if ((r.chat && static_cast<int64_t>(r.messages.size()) >= n_ctx) || bytes > max_bytes ||
        (r.prompt_is_ids && static_cast<int64_t>(r.prompt_ids.size()) >= n_ctx))
      throw ApiError(400,
                     "This model's maximum context length is " + std::to_string(n_ctx) + " tokens. However, your " +
                         pparam + " (" + std::to_string(bytes) + " bytes, " + std::to_string(r.messages.size()) +
                         " messages) cannot fit in it. Shorten the prompt or raise --ctx-size.",
                     "invalid_request_error", pparam, "context_length_exceeded");
  }
  Prepared p;
  p.chat = r.chat;
  std::vector<int32_t> prompt = tokenize(r, &p.fmt);
  if (prompt.empty())
    throw ApiError(400, "The prompt is empty (0 tokens).", "invalid_request_error", pparam, "invalid_value");
  if (static_cast<int64_t>(prompt.size()) >= sched.n_ctx())
    throw ApiError(400,
                   "This model's maximum context length is " + std::to_string(sched.n_ctx()) +
                       " tokens. However, your " + pparam + " resulted in " +
                       std::to_string(prompt.size()) + " tokens, which leaves no room for the completion. " +
                       "Shorten the prompt or raise --ctx-size.",
                   "invalid_request_error", pparam, "context_length_exceeded");
  try {
    // prefix-cache isolation (issue 15, finding 6): the key, whichever header carried it
    r.gen.tenant = req.get_header_value("Authorization") + "|" + req.get_header_value("x-api-key");
    r.gen.special_text = p.fmt.tools;
    p.n_prompt = static_cast<int32_t>(prompt.size());
    if (r.n > 1) {
      p.choices = sched.submit_n(std::move(prompt), r.gen, r.n);
      p.job = p.choices[0];
    } else {
      p.job = sched.submit(std::move(prompt), r.gen);
    }
  } catch (const QueueFullError& e) {
    throw ApiError(429, std::string(e.what()) + "; retry later.", "rate_limit_error", "", "rate_limit_exceeded");
  } catch (const ShuttingDownError& e) {
    throw ApiError(503, e.what(), "server_error", "", "server_shutting_down");
  } catch (const Error& e) {
    throw ApiError(400, e.what(), "invalid_request_error", pparam, "invalid_value");
  }
  p.fd = find_connection_fd(req);
  p.created = static_cast<int64_t>(std::time(nullptr));
  return p;
}

bool Server::Impl::collect(Prepared& p, httplib::Response& res, std::string* text, GenEvent* last,
                           std::vector<GenTokenLogprobs>* logprobs) {
  // A forced call ends the reply: generation stops once it has parsed.
  std::optional<OutputStream> watch;
  if (p.fmt.stop_after_call) watch.emplace(p.fmt);
  for (;;) {
    std::optional<GenEvent> ev = p.job->wait(kPoll);
    // After every event too, not only when none came: tokens arriving
    // faster than kPoll must not hide a client that left.
    if (peer_closed(p.fd) && !(ev && ev->done)) {
      p.job->cancel();
      metrics.count_finish("cancelled");
      res.status = 499;  // nginx's "client closed request"; nobody reads it
      return false;
    }
    if (!ev) continue;
    *text += ev->text;
    if (logprobs)
      for (GenTokenLogprobs& t : ev->logprobs) logprobs->push_back(std::move(t));
    if (watch && !ev->done && !ev->text.empty()) {
      watch->push(ev->text);
      if (watch->n_calls() > 0) p.job->cancel();
    }
    if (ev->done) {
      *last = std::move(*ev);
      if (last->finish_reason == "cancelled" && watch && watch->n_calls() > 0) last->finish_reason = "stop";
      break;
    }
  }
  metrics.count_finish(last->finish_reason);
  if (last->finish_reason == "error") throw generation_error(last->error);
  return true;
}

void Server::Impl::stream(Prepared p, httplib::Response& res, std::shared_ptr<StreamEmitter> em, bool logprobs,
                          size_t offset0) {
  // One provider call per event; the provider returns false to drop the
  // connection (client gone), and the releaser cancels whatever is still
  // running.
  struct State {
    std::shared_ptr<Job> job;
    OutputStream os;
    std::shared_ptr<StreamEmitter> em;
    bool started = false, finished = false;
    std::vector<GenTokenLogprobs> pending;  ///< logprobs of tokens whose text is not out yet
    size_t text_offset = 0;
  };
  auto st = std::make_shared<State>(State{p.job, OutputStream(p.fmt), std::move(em)});
  st->text_offset = offset0;
  auto piece = piece_fn();
  const bool chat = p.chat;
  ++open_streams;
  const int fd = p.fd;
  const bool stop_after_call = p.fmt.stop_after_call;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, st, fd, stop_after_call, logprobs, piece, chat](size_t, httplib::DataSink& sink) -> bool {
        auto send = [&](const std::string& s) { return s.empty() || sink.write(s.data(), s.size()); };
        auto drop = [&] {
          st->job->cancel();
          return false;
        };
        if (!st->started) {
          st->started = true;
          return send(st->em->begin()) ? true : drop();
        }
        std::optional<GenEvent> ev = st->job->wait(kPoll);
        if (!ev) return peer_closed(fd) ? drop() : true;
        for (GenTokenLogprobs& t : ev->logprobs) st->pending.push_back(std::move(t));
        // Logprobs ride on the next delta that sends text.
        auto attach = [&] {
          if (!logprobs || st->pending.empty()) return;
          st->em->set_logprobs(logprobs_json(chat, st->pending, piece,
                                             &st->text_offset));
          st->pending.clear();
        };
        if (!ev->text.empty()) {
          const OutputDelta d = st->os.push(ev->text);
          if (!d.empty()) attach();
          if (!d.empty() && !send(st->em->delta(d))) return drop();
          if (stop_after_call && st->os.n_calls() > 0) st->job->cancel();  // a forced call ends the reply
        }
        if (!ev->done) return true;
        st->finished = true;
        if (ev->finish_reason == "cancelled" && stop_after_call && st->os.n_calls() > 0) ev->finish_reason = "stop";
        metrics.count_finish(ev->finish_reason);
        if (ev->finish_reason == "cancelled") return false;
        if (ev->finish_reason == "error") {
          send(st->em->error(generation_error(ev->error)));
          sink.done();
          return true;
        }
        const OutputDelta d = st->os.finish();
        if (!d.empty()) attach();
        if (!d.empty() && !send(st->em->delta(d))) return false;
        if (!send(st->em->end(*ev, st->os))) return false;
        sink.done();
        return true;
      },
      [this, st](bool) {
        if (!st->finished) {
          st->job->cancel();
          metrics.count_finish("cancelled");
        }
        --open_streams;
      });
}

void Server::Impl::completion(const httplib::Request& req, httplib::Response& res, bool is_chat) {
  CompletionRequest r = parse_completion_request(req.body, is_chat, o.sampling_defaults);
  if (r.n > 1 && !r.tools.empty() && r.tool_choice.kind != ToolChoice::none)
    throw ApiError(400, "n > 1 with tools is not supported: ask for one choice, or set tool_choice to 'none'.",
                   "invalid_request_error", "n", "unsupported_value");
  Prepared p = prepare(req, r);
  if (r.n > 1) return completion_n(r, p, res);
  const ResponseMeta meta{new_response_id(is_chat ? "chatcmpl-" : "cmpl-"), p.created, o.model_id, is_chat};
  const bool forced = r.tool_choice.kind == ToolChoice::required || r.tool_choice.kind == ToolChoice::named;
  const bool want_logprobs = r.gen.logprobs >= 0;
  // completions' text_offset counts from the start of the prompt text, as
  // llama-cpp-python does (without echo).
  const size_t offset0 = r.chat || r.prompt_is_ids ? 0 : r.prompt.size();
  if (r.stream) {
    stream(std::move(p), res,
           is_chat ? chat_emitter(meta, r.include_usage, forced && p.fmt.tools) : text_emitter(meta, r.include_usage),
           want_logprobs, offset0);
    return;
  }
  std::string text;
  GenEvent last;
  std::vector<GenTokenLogprobs> lps;
  if (!collect(p, res, &text, &last, want_logprobs ? &lps : nullptr)) return;
  size_t offset = offset0;
  const json lp = want_logprobs ? logprobs_json(is_chat, lps, piece_fn(), &offset) : json(nullptr);
  if (!is_chat) {
    res.set_content(dump(completion_response(meta, text, last.finish_reason, last.usage, lp)), "application/json");
    return;
  }
  const ParsedOutput out = parse_output(text, p.fmt);
  if (p.fmt.tools) check_tool_choice(r, out, p.fmt.prefix + text);
  const std::string finish = out.calls.empty() ? last.finish_reason : "tool_calls";
  res.set_content(dump(chat_response(meta, out, finish, last.usage, lp)), "application/json");
}

void Server::Impl::anthropic_messages(const httplib::Request& req, httplib::Response& res) {
  CompletionRequest r = parse_anthropic_request(req.body);
  Prepared p = prepare(req, r);
  const std::string id = new_response_id("msg_");
  const bool forced = p.fmt.tools && (r.tool_choice.kind == ToolChoice::required || r.tool_choice.kind == ToolChoice::named);
  if (r.stream) {
    const int32_t n_prompt = p.n_prompt;
    stream(std::move(p), res, anthropic_emitter(id, o.model_id, n_prompt, forced));
    return;
  }
  std::string text;
  GenEvent last;
  if (!collect(p, res, &text, &last)) return;
  const ParsedOutput out = parse_output(text, p.fmt);
  if (p.fmt.tools) check_tool_choice(r, out, p.fmt.prefix + text);
  res.set_content(dump(anthropic_message(id, o.model_id, out, last.finish_reason, last.stop_sequence, last.usage)),
                  "application/json");
}

void Server::Impl::responses(const httplib::Request& req, httplib::Response& res) {
  ResponsesEcho echo;
  CompletionRequest r = parse_responses_request(req.body, &echo);
  Prepared p = prepare(req, r);
  const std::string id = new_response_id("resp_");
  const bool forced = p.fmt.tools && (r.tool_choice.kind == ToolChoice::required || r.tool_choice.kind == ToolChoice::named);
  if (r.stream) {
    const int64_t created = p.created;
    stream(std::move(p), res, responses_emitter(id, created, o.model_id, echo, forced));
    return;
  }
  std::string text;
  GenEvent last;
  if (!collect(p, res, &text, &last)) return;
  const ParsedOutput out = parse_output(text, p.fmt);
  if (p.fmt.tools) check_tool_choice(r, out, p.fmt.prefix + text);
  res.set_content(dump(responses_object(id, p.created, o.model_id, out, last.finish_reason, last.usage, echo)),
                  "application/json");
}

void Server::Impl::completion_n(const CompletionRequest& r, Prepared& p, httplib::Response& res) {
  const size_t n = p.choices.size();
  std::vector<std::shared_ptr<Job>> jobs = p.choices;
  const ResponseMeta meta{new_response_id(r.chat ? "chatcmpl-" : "cmpl-"), p.created, o.model_id, r.chat};
  const int fd = p.fd;
  auto piece = piece_fn();
  const bool want_logprobs = r.gen.logprobs >= 0;
  const size_t offset0 = r.chat || r.prompt_is_ids ? 0 : r.prompt.size();
  const auto poll = std::chrono::milliseconds(std::max<int64_t>(1, kPoll.count() / static_cast<int64_t>(n)));
  // usage: the prompt once, the completions summed (OpenAI's accounting).
  auto total_usage = [n](const std::vector<GenUsage>& u) {
    GenUsage t = u[0];
    for (size_t i = 1; i < n; ++i) t.completion_tokens += u[i].completion_tokens;
    return t;
  };
  auto with_index = [](json j, size_t i) {
    if (!j["choices"].empty()) j["choices"][0]["index"] = i;
    return j;
  };

  if (!r.stream) {
    std::vector<std::string> text(n);
    std::vector<std::vector<GenTokenLogprobs>> lps(n);
    std::vector<GenEvent> last(n);
    std::vector<bool> done(n, false);
    for (size_t left = n; left > 0;) {
      for (size_t i = 0; i < n; ++i) {
        if (done[i]) continue;
        std::optional<GenEvent> ev = jobs[i]->wait(poll);
        if (!ev) continue;
        text[i] += ev->text;
        for (GenTokenLogprobs& t : ev->logprobs) lps[i].push_back(std::move(t));
        if (ev->done) {
          last[i] = std::move(*ev);
          done[i] = true;
          --left;
        }
      }
      if (left > 0 && peer_closed(fd)) {
        for (auto& j : jobs) j->cancel();
        metrics.count_finish("cancelled");
        res.status = 499;
        return;
      }
    }
    std::vector<GenUsage> usage;
    for (size_t i = 0; i < n; ++i) {
      metrics.count_finish(last[i].finish_reason);
      if (last[i].finish_reason == "error") throw generation_error(last[i].error);
      usage.push_back(last[i].usage);
    }
    json out;
    for (size_t i = 0; i < n; ++i) {
      size_t offset = offset0;
      const json lp = want_logprobs ? logprobs_json(r.chat, lps[i], piece, &offset) : json(nullptr);
      json one = completion_response(meta, text[i], last[i].finish_reason, last[i].usage, lp);
      if (i == 0) {
        out = one;
      } else {
        one["choices"][0]["index"] = i;
        out["choices"].push_back(one["choices"][0]);
      }
    }
    out["usage"] = usage_json(total_usage(usage));
    res.set_content(dump(out), "application/json");
    return;
  }

  struct State {
    std::vector<std::shared_ptr<Job>> jobs;
    std::vector<std::vector<GenTokenLogprobs>> pending;
    std::vector<size_t> text_offset;
    std::vector<bool> done;
    std::vector<GenUsage> usage;
    size_t left = 0;
    bool started = false, finished = false;
  };
  auto st = std::make_shared<State>();
  st->jobs = std::move(jobs);
  st->pending.resize(n);
  st->text_offset.assign(n, offset0);
  st->done.assign(n, false);
  st->usage.resize(n);
  st->left = n;
  ++open_streams;
  const bool include_usage = r.include_usage;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, st, fd, meta, include_usage, want_logprobs, piece, poll, n, with_index,
       total_usage](size_t, httplib::DataSink& sink) -> bool {
        auto send = [&](const json& j) {
          const std::string s = "data: " + dump(j) + "\n\n";
          return sink.write(s.data(), s.size());
        };
        auto drop = [&] {
          for (auto& j : st->jobs) j->cancel();
          return false;
        };
        if (!st->started) {
          st->started = true;
          if (meta.chat)
            for (size_t i = 0; i < n; ++i)
              if (!send(with_index(chat_role_chunk(meta, include_usage), i))) return drop();
          return true;
        }
        bool any = false;
        for (size_t i = 0; i < n; ++i) {
          if (st->done[i]) continue;
          std::optional<GenEvent> ev = st->jobs[i]->wait(poll);
          if (!ev) continue;
          any = true;
          for (GenTokenLogprobs& t : ev->logprobs) st->pending[i].push_back(std::move(t));
          const bool failed = ev->finish_reason == "error" || ev->finish_reason == "cancelled";
          if (!ev->text.empty() || (ev->done && !st->pending[i].empty() && !failed)) {
            json lp = nullptr;
            if (want_logprobs) {
              lp = logprobs_json(meta.chat, st->pending[i], piece, &st->text_offset[i]);
              st->pending[i].clear();
            }
            if (!send(with_index(completion_chunk(meta, ev->text, nullptr, include_usage, lp), i))) return drop();
          }
          if (!ev->done) continue;
          st->done[i] = true;
          --st->left;
          st->usage[i] = ev->usage;
          metrics.count_finish(ev->finish_reason);
          if (ev->finish_reason == "cancelled") return drop();
          if (ev->finish_reason == "error") {
            st->finished = true;
            for (auto& j : st->jobs) j->cancel();
            send(error_body(generation_error(ev->error)));
            sink.done();
            return true;
          }
          if (!send(with_index(completion_chunk(meta, "", ev->finish_reason, include_usage), i))) return drop();
        }
        if (st->left > 0) return any || !peer_closed(fd) ? true : drop();
        st->finished = true;
        if (include_usage && !send(usage_chunk(meta, total_usage(st->usage)))) return false;
        const std::string done = "data: [DONE]\n\n";
        if (!sink.write(done.data(), done.size())) return false;
        sink.done();
        return true;
      },
      [this, st](bool) {
        if (!st->finished) {
          for (auto& j : st->jobs) j->cancel();
          metrics.count_finish("cancelled");
        }
        --open_streams;
      });
}

// The checks made after the headers and before the body is read (guard.h).
httplib::Server::HandlerResponse Server::Impl::front_door(const httplib::Request& req, httplib::Response& res) {
  using HR = httplib::Server::HandlerResponse;
  t_close_after_answer = false;
  auto refuse = [&](const ApiError& e) {
    send_error(res, e, anthropic_path(req.path));
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
    if (ct.rfind("application/json", 0) != 0)
      return refuse(ApiError(415, "Content-Type must be application/json, got '" + sanitize_for_log(ct, 64) + "'.",
                             "invalid_request_error", "", "unsupported_media_type"));
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
                               "invalid_request_error", "", "unknown_url"));
    } else if (res.status == 413) {
      send_error(res, ApiError(413, "The request body is too large.", "invalid_request_error", "", "payload_too_large"));
    } else if (res.status == 499) {
      return httplib::Server::HandlerResponse::Unhandled;
    } else {
      send_error(res, ApiError(res.status, "HTTP error " + std::to_string(res.status) + ".",
                               res.status >= 500 ? "server_error" : "invalid_request_error"));
    }
    return httplib::Server::HandlerResponse::Handled;
  }));

  http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    try {
      std::rethrow_exception(ep);
    } catch (const ApiError& e) {
      send_error(res, e);
    } catch (const std::exception& e) {
      send_error(res, ApiError(500, std::string("Internal error: ") + e.what(), "server_error", "", "internal_error"));
    } catch (...) {
      send_error(res, ApiError(500, "Internal error.", "server_error", "", "internal_error"));
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
      const bool anthropic = anthropic_path(req.path);
      try {
        fn(req, res);
      } catch (const ApiError& e) {
        send_error(res, e, anthropic);
      } catch (const std::exception& e) {
        send_error(res, ApiError(500, std::string("Internal error: ") + e.what(), "server_error", "", "internal_error"),
                   anthropic);
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
    res.set_content(embeddings_response(req.body, o.model_id, *o.embedder), "application/json");
  }));
  for (const char* p : {"/v1/chat/completions", "/v1/completions", "/v1/messages", "/v1/responses", "/v1/embeddings"})
    http.Get(p, [](const httplib::Request& req, httplib::Response& res) {
      send_error(res, ApiError(405, "Method not allowed: use POST " + req.path + ".", "invalid_request_error", "",
                               "method_not_allowed"));
    });
  http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(dump(model_list(o.model_id, created)), "application/json");
  });
  http.Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
    if (req.matches[1] == o.model_id)
      res.set_content(dump(model_object(o.model_id, created)), "application/json");
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
    res.set_content(metrics.render(sched.metrics()), "text/plain; version=0.0.4; charset=utf-8");
  });
  http.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(kChatPageHtml, "text/html; charset=utf-8");
  });
}

// ---------------------------------------------------------------- Server

Server::Server(std::shared_ptr<Model> model, std::shared_ptr<const Tokenizer> tok, ServerOptions o)
    : impl_(std::make_unique<Impl>(std::move(model), std::move(tok), std::move(o))) {
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
  impl_->sched.shutdown();
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
