// One request's generation for every API (server_impl.h): the prompt
// rendered and checked, the job submitted, the reply collected whole or
// streamed through an API's emitter (stream.h), split into reasoning,
// content and tool calls (tool_calls.h); n > 1 choices.
#include <algorithm>
#include <ctime>
#include <functional>
#include <optional>

#include "jinja/chat_template.h"
#include "server/anthropic.h"
#include "server/responses.h"
#include "server/server_impl.h"

namespace kvad::server {

using json = nlohmann::ordered_json;

std::vector<int32_t> Server::Impl::tokenize_chat(const CompletionRequest& r, OutputFormat* fmt) const {
  if (!o.chat)
    // The reason (kvad serve prints it at start) names the model's files:
    // not for clients. A client's request to an endpoint this model cannot
    // serve is a 400, as for an embedding model.
    throw ApiError(400, "The model '" + o.model_id + "' has no chat template kvad can use, so it serves only "
                   "/v1/completions (a prompt without a template).", "invalid_request_error", "model",
                   "model_not_supported");
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
    // Any other failure of the model's template on this request (e.g. gpt-oss's
    // reads every tool's `description`, which the API makes optional): the
    // request cannot be rendered, a 400 as vLLM gives, naming the template's error.
    throw ApiError(400, std::string("The chat template failed on this request: ") + e.what(), "invalid_request_error",
                   "messages", "chat_template_error");
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
  if (r.model != o.model_id) {
    auto it = std::find_if(o.loras.begin(), o.loras.end(), [&](const ServedLora& l) { return l.name == r.model; });
    if (it == o.loras.end()) {
      std::string names = "'" + o.model_id + "'";
      for (const ServedLora& l : o.loras) names += ", '" + l.name + "'";
      throw ApiError(404, "The model '" + r.model + "' does not exist; this server has " + names + ".",
                     "invalid_request_error", "model", "model_not_found");
    }
    r.gen.lora = it->set;  // this request's rows run through the adapter (Scheduler mixes them per row)
    r.gen.lora_key = it->name;
  }
  for (const auto& [id, bias] : r.gen.sampling.logit_bias)
    if (id >= tok->n_vocab())
      throw ApiError(400, "Invalid value for 'logit_bias': token id " + std::to_string(id) +
                              " is not in the vocabulary (" + std::to_string(tok->n_vocab()) + " tokens).",
                     "invalid_request_error", "logit_bias", "invalid_value");
  const char* pparam = r.chat ? "messages" : "prompt";
  {
    // Cheap bounds before the template and the tokenizer see the text.
    const int64_t n_ctx = sched->n_ctx();
    size_t bytes = r.prompt.size();
    for (const auto& m : r.messages) {
      bytes += m.role.size() + m.content.size() + m.tool_call_id.size();
      for (const ToolCall& c : m.tool_calls) bytes += c.id.size() + c.name.size() + c.arguments.size();
    }
    for (const ToolSpec& t : r.tools) bytes += t.name.size() + t.description.size() + t.parameters.dump().size();
    const uint64_t max_bytes = static_cast<uint64_t>(n_ctx) * max_token_bytes * 2;
    if (r.prompt_is_ids && static_cast<int64_t>(r.prompt_ids.size()) >= n_ctx)
      throw ApiError(400,
                     "This model's maximum context length is " + std::to_string(n_ctx) + " tokens. However, your "
                     "prompt has " + std::to_string(r.prompt_ids.size()) + " tokens, which leaves no room for the "
                     "completion. Shorten the prompt or raise --ctx-size.",
                     "invalid_request_error", pparam, "context_length_exceeded");
    if ((r.chat && static_cast<int64_t>(r.messages.size()) >= n_ctx) || bytes > max_bytes)
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
  if (static_cast<int64_t>(prompt.size()) >= sched->n_ctx())
    throw ApiError(400,
                   "This model's maximum context length is " + std::to_string(sched->n_ctx()) +
                       " tokens. However, your " + pparam + " resulted in " +
                       std::to_string(prompt.size()) + " tokens, which leaves no room for the completion. " +
                       "Shorten the prompt or raise --ctx-size.",
                   "invalid_request_error", pparam, "context_length_exceeded");
  // A forced call decodes under a grammar: it always parses, and its
  // arguments are valid under the function's parameters.
  if (std::shared_ptr<const Grammar> g = forced_call_grammar(r, p.fmt)) {
    if (r.gen.grammar)
      throw ApiError(400, "tool_choice required or named cannot be combined with response_format or grammar.",
                     "invalid_request_error", "tool_choice", "invalid_value");
    r.gen.grammar = std::move(g);
  }
  try {
    // Prefix-cache isolation: a cached prefix is reused only by requests with the same key, whichever
    // header carried it
    r.gen.tenant = req.get_header_value("Authorization") + "|" + req.get_header_value("x-api-key");
    // Harmony's channels are control tokens the parser reads with or without tools.
    r.gen.special_text = (p.fmt.tools || p.fmt.format == ToolFormat::harmony) && markers_are_control;
    p.n_prompt = static_cast<int32_t>(prompt.size());
    if (r.n > 1) {
      p.choices = sched->submit_n(std::move(prompt), r.gen, r.n);
      p.job = p.choices[0];
    } else {
      p.job = sched->submit(std::move(prompt), r.gen);
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
                          size_t offset0, const char* content_type, LogprobsFormat lp_format) {
  // One provider call per event; the provider returns false to drop the
  // connection (client gone), and the releaser cancels whatever is still
  // running.
  struct State {
    std::shared_ptr<Job> job;
    OutputStream os;
    std::shared_ptr<StreamEmitter> em;
    bool started = false, finished = false;
    std::vector<GenTokenLogprobs> pending{};  ///< logprobs of tokens whose text is not out yet
    size_t text_offset = 0;
  };
  auto st = std::make_shared<State>(State{p.job, OutputStream(p.fmt), std::move(em)});
  st->text_offset = offset0;
  if (!lp_format) {
    auto piece = piece_fn();
    const bool chat = p.chat;
    lp_format = [piece, chat](const std::vector<GenTokenLogprobs>& t, size_t* off) {
      return logprobs_json(chat, t, piece, off);
    };
  }
  ++open_streams;
  const int fd = p.fd;
  const bool stop_after_call = p.fmt.stop_after_call;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      content_type,
      [this, st, fd, stop_after_call, logprobs, lp_format](size_t, httplib::DataSink& sink) -> bool {
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
          st->em->set_logprobs(lp_format(st->pending, &st->text_offset));
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
        OutputDelta d = st->os.finish();
        // A forced call cut off by the length limit: its opening is not content.
        if (stop_after_call && st->os.n_calls() == 0 && ev->finish_reason == "length") d = OutputDelta{};
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
  const bool want_logprobs = r.gen.logprobs >= 0;
  // completions' text_offset counts from the start of the prompt text, as
  // llama-cpp-python does (without echo).
  const size_t offset0 = r.chat || r.prompt_is_ids ? 0 : r.prompt.size();
  if (r.stream) {
    stream(std::move(p), res,
           is_chat ? chat_emitter(meta, r.include_usage, p.fmt.stop_after_call) : text_emitter(meta, r.include_usage),
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
  ParsedOutput out = parse_output(text, p.fmt);
  if (p.fmt.tools) check_tool_choice(r, out, p.fmt.prefix + text, last.finish_reason);
  const std::string finish = out.calls.empty() ? last.finish_reason : "tool_calls";
  res.set_content(dump(chat_response(meta, out, finish, last.usage, lp)), "application/json");
}

void Server::Impl::anthropic_messages(const httplib::Request& req, httplib::Response& res) {
  CompletionRequest r = parse_anthropic_request(req.body);
  Prepared p = prepare(req, r);
  const std::string id = new_response_id("msg_");
  const bool forced = p.fmt.stop_after_call;  // tools given and tool_choice required or named
  if (r.stream) {
    const int32_t n_prompt = p.n_prompt;
    stream(std::move(p), res, anthropic_emitter(id, o.model_id, n_prompt, forced));
    return;
  }
  std::string text;
  GenEvent last;
  if (!collect(p, res, &text, &last)) return;
  ParsedOutput out = parse_output(text, p.fmt);
  if (p.fmt.tools) check_tool_choice(r, out, p.fmt.prefix + text, last.finish_reason);
  res.set_content(dump(anthropic_message(id, o.model_id, out, last.finish_reason, last.stop_sequence, last.usage)),
                  "application/json");
}

void Server::Impl::responses(const httplib::Request& req, httplib::Response& res) {
  ResponsesEcho echo;
  CompletionRequest r = parse_responses_request(req.body, &echo);
  Prepared p = prepare(req, r);
  const std::string id = new_response_id("resp_");
  const bool forced = p.fmt.stop_after_call;  // tools given and tool_choice required or named
  if (r.stream) {
    const int64_t created = p.created;
    stream(std::move(p), res, responses_emitter(id, created, o.model_id, echo, forced));
    return;
  }
  std::string text;
  GenEvent last;
  if (!collect(p, res, &text, &last)) return;
  ParsedOutput out = parse_output(text, p.fmt);
  if (p.fmt.tools) check_tool_choice(r, out, p.fmt.prefix + text, last.finish_reason);
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
    for (size_t i = 1; i < n; ++i) {
      t.completion_tokens += u[i].completion_tokens;
      t.draft_tokens += u[i].draft_tokens;
      t.draft_accepted += u[i].draft_accepted;
    }
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
          const std::string s = sse_data(j);
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
        if (!sink.write(kSseDone.data(), kSseDone.size())) return false;
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

}  // namespace kvad::server
