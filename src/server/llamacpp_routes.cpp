// llama.cpp's own endpoints on kvad serve (server/llamacpp_api.h has the
// shapes): /completion and /infill through Server::Impl's
// prepare/collect/stream, /tokenize, /detokenize, /apply-template, /props,
// /slots.
#include <cmath>

#include "jinja/chat_template.h"
#include "server/llamacpp_api.h"
#include "server/server_impl.h"

namespace kvad::server {

using json = nlohmann::ordered_json;

namespace {

/// The sampling of a request (or the defaults) as llama.cpp's `params` /
/// generation_settings show it.
json settings_json(const GenParams& g, int32_t n_ctx, const std::string& model, bool stream, int32_t n_probs) {
  const SamplerParams& s = g.sampling;
  return json{{"n_ctx", n_ctx},
              {"model", model},
              {"n_predict", g.max_tokens},
              {"seed", s.seed},
              {"temperature", s.temp},
              {"top_k", s.top_k},
              {"top_p", s.top_p},
              {"min_p", s.min_p},
              {"repeat_last_n", s.repeat_last_n},
              {"repeat_penalty", s.repeat_penalty},
              {"presence_penalty", s.presence_penalty},
              {"frequency_penalty", s.frequency_penalty},
              {"stop", g.stop},
              {"n_probs", n_probs},
              {"stream", stream},
              {"grammar", g.grammar ? "(set)" : ""},
              {"samplers", json::array({"penalties", "top_k", "top_p", "min_p", "temperature"})}};
}

}  // namespace

void Server::Impl::llamacpp_completion(const httplib::Request& req, httplib::Response& res, bool infill) {
  LlamaCompletion c = parse_llamacpp_completion(req.body, infill, o.sampling_defaults);
  CompletionRequest& r = c.r;
  r.model = o.model_id;
  if (c.repeat_last_n == -1) r.gen.sampling.repeat_last_n = sched->n_ctx();
  if (c.ignore_eos)
    for (int32_t id : tok->eog_ids()) r.gen.sampling.logit_bias.emplace_back(id, -INFINITY);
  const size_t max_bytes = static_cast<size_t>(sched->n_ctx()) * max_token_bytes * 2;
  if (infill) {
    r.prompt_ids = infill_prompt(*tok, fim, o.model_id, c.input_prefix, c.input_suffix, c.input_extra, r.prompt,
                                 sched->n_ctx(), max_token_bytes);
    r.prompt_is_ids = true;
  } else if (c.mixed) {
    // Ids as given, strings tokenized; BOS when the first piece is text and the model adds one (llama.cpp's rule).
    size_t bytes = 0;
    for (const json& e : c.pieces) bytes += e.is_string() ? e.get_ref<const std::string&>().size() : 1;
    if (bytes > max_bytes)
      throw ApiError(400, "The prompt cannot fit the context of " + std::to_string(sched->n_ctx()) + " tokens.",
                     "invalid_request_error", "prompt", "context_length_exceeded");
    for (size_t i = 0; i < c.pieces.size(); ++i) {
      const json& e = c.pieces[i];
      if (e.is_string()) {
        const std::vector<int32_t> ids = tok->encode(e.get<std::string>(), i == 0, /*parse_special=*/true);
        r.prompt_ids.insert(r.prompt_ids.end(), ids.begin(), ids.end());
      } else {
        r.prompt_ids.push_back(static_cast<int32_t>(e.get<int64_t>()));
      }
    }
    r.prompt_is_ids = true;
  }
  // Streams carry each token's id, so the events bring them.
  if (r.stream || c.return_tokens || c.n_probs > 0) r.gen.logprobs = c.n_probs;
  const bool want_ids = r.gen.logprobs >= 0;
  Prepared p = prepare(req, r);
  std::vector<int32_t> prompt_ids = r.prompt_is_ids ? r.prompt_ids : std::vector<int32_t>{};
  const std::string prompt_text = r.prompt_is_ids ? tok->decode(prompt_ids, /*special=*/true) : r.prompt;
  json fields = {{"model", o.model_id},
                 {"generation_settings", settings_json(r.gen, sched->n_ctx(), o.model_id, r.stream, c.n_probs)},
                 {"prompt", prompt_text}};
  auto piece = piece_fn();
  if (r.stream) {
    stream(std::move(p), res, llamacpp_emitter(fields, c.n_probs), want_ids, 0, "text/event-stream",
           [piece](const std::vector<GenTokenLogprobs>& t, size_t*) { return llamacpp_probs(t, piece); });
    return;
  }
  std::string text;
  GenEvent last;
  std::vector<GenTokenLogprobs> lps;
  if (!collect(p, res, &text, &last, want_ids ? &lps : nullptr)) return;
  json out = {{"index", 0}, {"content", text}};
  json ids = json::array();
  if (c.return_tokens)
    for (const GenTokenLogprobs& t : lps) ids.push_back(t.id);
  out["tokens"] = ids;
  out["id_slot"] = -1;
  out["stop"] = true;
  for (const auto& [k, v] : fields.items()) out[k] = v;
  out["tokens_predicted"] = last.usage.completion_tokens;
  out["tokens_evaluated"] = last.usage.prompt_tokens;
  out["has_new_line"] = text.find('\n') != std::string::npos;
  out["truncated"] = last.finish_reason == "length" &&
                     last.usage.prompt_tokens + last.usage.completion_tokens >= sched->n_ctx();
  out["stop_type"] = llamacpp_stop_type(last);
  out["stopping_word"] = last.stop_sequence;
  out["tokens_cached"] = last.usage.cached_tokens;
  out["timings"] = llamacpp_timings(last.usage);
  if (c.n_probs > 0) out["completion_probabilities"] = llamacpp_probs(lps, piece);
  res.set_content(dump(out), "application/json");
}

void Server::Impl::llamacpp_routes() {
  auto guarded = [this](auto fn) { return guarded_as(fn, [](const ApiError& e) { return error_body(e); }); };
  for (const char* path : {"/completion", "/completions"})
    http.Post(path, guarded([this](const auto& req, auto& res) { llamacpp_completion(req, res, false); }));
  http.Post("/infill", guarded([this](const auto& req, auto& res) { llamacpp_completion(req, res, true); }));

  http.Post("/tokenize", guarded([this](const httplib::Request& req, httplib::Response& res) {
    const json body = parse_body(req.body);
    const json* content = field(body, "content");
    if (!content) throw ApiError(400, "Missing required parameter: 'content'.", "invalid_request_error", "content",
                                 "missing_required_parameter");
    if (!content->is_string())
      throw ApiError(400, "Invalid type for 'content': expected a string.", "invalid_request_error", "content", "invalid_type");
    auto flag = [&](const char* k, bool d) {
      const json* v = field(body, k);
      if (!v) return d;
      if (!v->is_boolean())
        throw ApiError(400, std::string("Invalid type for '") + k + "': expected a boolean.", "invalid_request_error", k,
                       "invalid_type");
      return v->get<bool>();
    };
    const bool add_special = flag("add_special", false), parse_special = flag("parse_special", true),
               with_pieces = flag("with_pieces", false);
    const std::vector<int32_t> ids = tok->encode(content->get<std::string>(), add_special, parse_special);
    json tokens = json::array();
    for (int32_t id : ids)
      if (with_pieces) tokens.push_back({{"id", id}, {"piece", llamacpp_piece(tok->token_to_piece(id, true))}});
      else tokens.push_back(id);
    res.set_content(dump(json{{"tokens", tokens}}), "application/json");
  }));

  http.Post("/detokenize", guarded([this](const httplib::Request& req, httplib::Response& res) {
    const json body = parse_body(req.body);
    std::vector<int32_t> ids;
    if (const json* t = field(body, "tokens")) {
      if (!t->is_array())
        throw ApiError(400, "Invalid type for 'tokens': expected an array of token ids.", "invalid_request_error",
                       "tokens", "invalid_type");
      for (const json& e : *t) {
        const bool ok = (e.is_number_integer() || e.is_number_unsigned()) && e.get<int64_t>() >= 0 &&
                        e.get<int64_t>() < tok->n_vocab();
        if (!ok)
          throw ApiError(400, "Invalid value for 'tokens': " + e.dump().substr(0, 40) + " is not a token id of this "
                         "model's " + std::to_string(tok->n_vocab()) + " tokens.", "invalid_request_error", "tokens",
                         "invalid_value");
        ids.push_back(static_cast<int32_t>(e.get<int64_t>()));
      }
    }
    res.set_content(dump(json{{"content", tok->decode(ids, /*special=*/true)}}), "application/json");
  }));

  http.Post("/apply-template", guarded([this](const httplib::Request& req, httplib::Response& res) {
    json body = parse_body(req.body);
    if (!field(body, "model")) body["model"] = o.model_id;  // /apply-template needs none
    CompletionRequest r = parse_completion_request(dump(body), true, o.sampling_defaults);
    if (!o.chat)
      throw ApiError(400, "The model '" + o.model_id + "' has no chat template kvad can use.", "invalid_request_error",
                     "model", "model_not_supported");
    const ChatInput in = build_chat_input(r, tools_caps);
    try {
      res.set_content(dump(json{{"prompt", o.chat->render(in.messages, true, in.tools) + in.reply_prefix}}),
                      "application/json");
    } catch (const ChatTemplateError& e) {
      throw ApiError(400, std::string("The chat template failed on this request: ") + e.what(), "invalid_request_error",
                     "messages", e.raised() ? "invalid_value" : "chat_template_error");
    }
  }));

  http.Get("/props", [this](const httplib::Request&, httplib::Response& res) {
    GenParams d;
    d.sampling = o.sampling_defaults;
    json slot = {{"id", 0}, {"id_task", -1}, {"n_ctx", sched->n_ctx()}, {"speculative", false},
                 {"is_processing", false}, {"params", settings_json(d, sched->n_ctx(), o.model_id, false, 0)}};
    const HParams& hp = model->hparams();
    res.set_content(dump(json{{"default_generation_settings", slot},
                              {"total_slots", sched->n_slots()},
                              {"model_path", o.model_path},
                              {"model_alias", o.model_id},
                              {"chat_template", o.chat ? o.chat->chat_template().source() : ""},
                              {"bos_token", tok->bos() >= 0 ? tok->token_text(tok->bos()) : ""},
                              {"eos_token", tok->eos() >= 0 ? tok->token_text(tok->eos()) : ""},
                              {"modalities", {{"vision", false}, {"audio", false}}},
                              {"n_ctx_train", hp.n_ctx_train},
                              {"infill", fim.ok()},
                              {"build_info", "kvad"},
                              {"is_sleeping", false}}),
                    "application/json");
  });

  http.Get("/slots", [this](const httplib::Request& req, httplib::Response& res) {
    const SchedulerMetrics m = sched->metrics();
    if (req.get_param_value("fail_on_no_slot") == "1" && m.active_slots >= m.n_slots) {
      res.status = 503;
      res.set_content(dump(error_body(ApiError(503, "No slot is free.", "unavailable_error", "", "no_slot"))),
                      "application/json");
      return;
    }
    GenParams d;
    d.sampling = o.sampling_defaults;
    json slots = json::array();
    for (int i = 0; i < m.n_slots; ++i) {
      const bool busy = i < static_cast<int>(m.slot_busy.size()) && m.slot_busy[i];
      slots.push_back({{"id", i}, {"id_task", -1}, {"n_ctx", sched->n_ctx()}, {"speculative", false},
                       {"is_processing", busy}, {"params", settings_json(d, sched->n_ctx(), o.model_id, false, 0)},
                       {"n_cached", i < static_cast<int>(m.slot_cached.size()) ? m.slot_cached[i] : 0}});
    }
    res.set_content(dump(slots), "application/json");
  });

  for (const char* p : {"/completion", "/infill", "/tokenize", "/detokenize", "/apply-template"})
    http.Get(p, [](const httplib::Request& req, httplib::Response& res) {
      res.status = 405;
      res.set_content(dump(error_body(ApiError(405, "Method not allowed: use POST " + req.path + ".",
                                               "invalid_request_error", "", "method_not_allowed"))),
                      "application/json");
    });
}

}  // namespace kvad::server
