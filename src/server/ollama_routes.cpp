// ollama's API on kvad serve (server/ollama_api.h has the shapes): the
// routes, generation through Server::Impl's prepare/collect/stream, the
// served model described as ollama lists models, embeddings, and
// /api/pull through the Hub client (hub/pull.h) with ollama's progress lines.
#include <sys/stat.h>

#include <condition_variable>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include "engine/embed.h"
#include "hub/pull.h"
#include "hub/repo_spec.h"
#include "io/gguf.h"
#include "server/json_parse.h"
#include "server/ollama_api.h"
#include "server/server_impl.h"

namespace kvad::server {

using json = nlohmann::ordered_json;

namespace {

ApiError not_found(const std::string& name, const std::string& model_id) {
  return ApiError(404, "model '" + name.substr(0, 200) + "' not found; this server runs '" +
                           ollama_model_name(model_id) + "'", "invalid_request_error", "model", "model_not_found");
}

/// The body's model name (ollama's older clients send it as `name`).
std::string model_name(const json& body) {
  const json* m = field(body, "model");
  if (!m) m = field(body, "name");
  if (!m) throw ApiError(400, "model is required", "invalid_request_error", "model", "missing_required_parameter");
  if (!m->is_string() || m->get<std::string>().empty())
    throw ApiError(400, "model: expected a non-empty string", "invalid_request_error", "model", "invalid_type");
  return m->get<std::string>();
}

json parse_ollama_body(const std::string& text) {
  try {
    return parse_body(text, /*openai_hint=*/false);
  } catch (const ApiError& e) {
    throw ApiError(400, "invalid JSON body: " + e.message, "invalid_request_error", "", e.code);
  }
}

/// 64 hex digits naming the model's file by path, size and time (not a hash
/// of its bytes: that would read the whole file at start).
std::string file_digest(const std::string& identity) {
  std::string out;
  for (uint64_t seed : {0xcbf29ce484222325ull, 0x84222325cbf29ce4ull, 0x9e3779b97f4a7c15ull, 0x7f4a7c159e3779b9ull}) {
    uint64_t h = seed;
    for (unsigned char c : identity) h = (h ^ c) * 0x100000001b3ull;
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
    out += buf;
  }
  return out;
}

/// "135M", "1.5B", as ollama writes parameter sizes.
std::string parameter_size(int64_t n) {
  char buf[32];
  if (n >= 1000000000) std::snprintf(buf, sizeof buf, "%.1fB", static_cast<double>(n) / 1e9);
  else std::snprintf(buf, sizeof buf, "%.0fM", static_cast<double>(n) / 1e6);
  return buf;
}

/// The served model as /api/tags, /api/show and /api/ps describe it.
struct ModelCard {
  std::string name, digest, modified_at, format, family, quantization, path;
  uint64_t size = 0;
  int64_t n_params = 0;
  json details() const {
    return json{{"parent_model", ""}, {"format", format},          {"family", family},
                {"families", json::array({family})}, {"parameter_size", parameter_size(n_params)},
                {"quantization_level", quantization}};
  }
};

ModelCard model_card(const ServerOptions& o, const HParams& hp) {
  ModelCard c;
  c.name = ollama_model_name(o.model_id);
  c.path = o.model_path;
  c.family = hp.arch;
  c.n_params = hp.n_params;
  c.format = o.gguf ? "gguf" : "safetensors";
  int64_t mtime_ns = 0;
  std::error_code ec;
  namespace fs = std::filesystem;
  if (fs::is_directory(o.model_path, ec)) {
    for (const auto& e : fs::recursive_directory_iterator(o.model_path, ec))
      if (e.is_regular_file(ec)) c.size += e.file_size(ec);
  } else if (!o.model_path.empty()) {
    c.size = fs::file_size(o.model_path, ec);
    if (ec) c.size = 0;
  }
  struct stat st {};
  if (!o.model_path.empty() && ::stat(o.model_path.c_str(), &st) == 0)
    mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  c.modified_at = ollama_time(mtime_ns);
  c.digest = file_digest(o.model_path + "|" + std::to_string(c.size) + "|" + std::to_string(mtime_ns));
  if (o.gguf) {
    // The format holding the most bytes of the weights.
    std::map<DType, size_t> bytes;
    for (const gguf::TensorInfo& t : o.gguf->tensors()) bytes[t.type] += t.n_bytes;
    size_t most = 0;
    for (const auto& [t, b] : bytes)
      if (b > most) {
        most = b;
        c.quantization = dtype_name(t);
      }
    for (char& ch : c.quantization) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  } else {
    c.quantization = "F32";
  }
  return c;
}

/// GGUF metadata as /api/show's model_info: scalars as they are, arrays
/// empty unless `verbose` (as ollama answers).
json model_info(const ServerOptions& o, const HParams& hp, bool verbose) {
  json info = json::object();
  if (!o.gguf) {
    info["general.architecture"] = hp.arch;
    info["general.parameter_count"] = hp.n_params;
    info[hp.arch + ".context_length"] = hp.n_ctx_train;
    info[hp.arch + ".embedding_length"] = hp.n_embd;
    info[hp.arch + ".block_count"] = hp.n_layer;
    return info;
  }
  using VT = gguf::ValueType;
  for (const gguf::Value& v : o.gguf->metadata()) try {
    switch (v.type()) {
      case VT::STRING: info[v.key()] = v.as_string(); break;
      case VT::BOOL: info[v.key()] = v.as_bool(); break;
      case VT::FLOAT32: case VT::FLOAT64: info[v.key()] = v.as_float(); break;
      case VT::ARRAY: {
        json a = json::array();
        if (verbose) {
          if (v.array_type() == VT::STRING) {
            for (const std::string& s : v.as_string_array()) a.push_back(s);
          } else if (v.array_type() == VT::FLOAT32 || v.array_type() == VT::FLOAT64) {
            for (float f : v.as_float_array()) a.push_back(f);
          } else if (v.array_type() != VT::ARRAY) {
            for (int64_t i : v.as_int_array()) a.push_back(i);
          }
        }
        info[v.key()] = std::move(a);
        break;
      }
      case VT::UINT64: info[v.key()] = v.as_uint(); break;
      default: info[v.key()] = v.as_int(); break;
    }
  } catch (const std::exception&) {
    info[v.key()] = nullptr;  // a value no JSON number holds (an array of u64 past 2^63)
  }
  if (!info.contains("general.parameter_count")) info["general.parameter_count"] = hp.n_params;
  return info;
}

/// The pull's progress as ollama's lines, handed from the pulling thread to
/// the response.
struct PullState {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::string> lines;
  bool finished = false;
  std::atomic<bool> cancel{false};
  std::thread worker;
  void put(const json& j) {
    std::lock_guard<std::mutex> lk(mu);
    lines.push_back(dump(j) + "\n");
    cv.notify_all();
  }
};

class PullLines : public hub::PullObserver {
 public:
  explicit PullLines(PullState& s) : s_(s) {}
  void on_plan(const std::string&, const std::string&, const std::vector<std::string>&) override {
    check();
    s_.put({{"status", "pulling manifest"}});
  }
  void on_cached(const std::string& file, uint64_t size) override {
    s_.put({{"status", "pulling " + file}, {"digest", file}, {"total", size}, {"completed", size}});
  }
  void on_start(const std::string& file, uint64_t offset, uint64_t total) override {
    check();
    s_.put({{"status", "pulling " + file}, {"digest", file}, {"total", total}, {"completed", offset}});
    last_ = std::chrono::steady_clock::now();
  }
  void on_progress(const std::string& file, uint64_t done, uint64_t total) override {
    check();
    const auto now = std::chrono::steady_clock::now();
    if (now - last_ < std::chrono::milliseconds(200)) return;  // a line a fifth of a second at most
    last_ = now;
    s_.put({{"status", "pulling " + file}, {"digest", file}, {"total", total}, {"completed", done}});
  }
  void on_done(const std::string& file, uint64_t, uint64_t total) override {
    s_.put({{"status", "pulling " + file}, {"digest", file}, {"total", total}, {"completed", total}});
  }

 private:
  void check() {
    if (s_.cancel) throw Error("pull cancelled: the client left");
  }
  PullState& s_;
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace

void Server::Impl::ollama_generate(const httplib::Request& req, httplib::Response& res, bool chat) {
  OllamaRequest q = parse_ollama_request(req.body, chat, o.sampling_defaults);
  const std::string name = q.r.model;
  if (!ollama_name_matches(name, o.model_id)) throw not_found(name, o.model_id);
  const OllamaMeta meta{name, chat, q.show_thinking};
  if (q.load_only) {
    res.set_content(dump(ollama_load_response(meta)) + (q.r.stream ? "\n" : ""),
                    q.r.stream ? "application/x-ndjson" : "application/json");
    return;
  }
  q.r.model = o.model_id;
  if (q.repeat_last_n != -2)
    q.r.gen.sampling.repeat_last_n = q.repeat_last_n == -1 ? sched->n_ctx() : q.repeat_last_n;
  if (!q.suffix.empty()) {
    // ollama's suffix: fill in the middle with the model's FIM tokens.
    q.r.prompt_ids = infill_prompt(*tok, fim, o.model_id, q.prompt, q.suffix, {}, "", sched->n_ctx(), max_token_bytes);
    q.r.prompt_is_ids = true;
    q.r.chat = false;
  }
  Prepared p = prepare(req, q.r);
  auto piece = piece_fn();
  if (q.r.stream) {
    stream(std::move(p), res, ollama_emitter(meta), q.r.gen.logprobs >= 0, 0, "application/x-ndjson",
           [piece](const std::vector<GenTokenLogprobs>& t, size_t*) { return ollama_logprobs(t, piece); });
    return;
  }
  std::string text;
  GenEvent last;
  std::vector<GenTokenLogprobs> lps;
  if (!collect(p, res, &text, &last, q.r.gen.logprobs >= 0 ? &lps : nullptr)) return;
  const ParsedOutput out = parse_output(text, p.fmt);
  const json lp = q.r.gen.logprobs >= 0 ? ollama_logprobs(lps, piece) : json(nullptr);
  res.set_content(dump(ollama_response(meta, out, last.finish_reason, last.usage, lp)), "application/json");
}

void Server::Impl::ollama_embed(const httplib::Request& req, httplib::Response& res, bool legacy) {
  const json body = parse_ollama_body(req.body);
  const std::string name = model_name(body);
  if (!ollama_name_matches(name, o.model_id)) throw not_found(name, o.model_id);
  if (!o.embedder)
    throw ApiError(400, "model '" + name + "' does not serve embeddings (kind " + o.model_kind +
                            "); start kvad serve with --embeddings", "invalid_request_error", "model",
                   "model_not_supported");
  std::vector<std::string> texts;
  auto text_of = [](const json& v, const std::string& param) {
    if (!v.is_string()) throw ApiError(400, param + ": expected a string", "invalid_request_error", param, "invalid_type");
    return v.get<std::string>();
  };
  if (legacy) {
    const json* p = field(body, "prompt");
    texts.push_back(p ? text_of(*p, "prompt") : "");
  } else {
    const json* in = field(body, "input");
    if (!in) throw ApiError(400, "input is required", "invalid_request_error", "input", "missing_required_parameter");
    if (in->is_array()) {
      if (in->empty() || in->size() > kMaxEmbeddingInputs)
        throw ApiError(400, "input: expected 1 to " + std::to_string(kMaxEmbeddingInputs) + " strings",
                       "invalid_request_error", "input", "invalid_value");
      for (size_t i = 0; i < in->size(); ++i) texts.push_back(text_of((*in)[i], "input[" + std::to_string(i) + "]"));
    } else {
      texts.push_back(text_of(*in, "input"));
    }
  }
  bool truncate = true;
  if (const json* t = field(body, "truncate")) {
    if (!t->is_boolean()) throw ApiError(400, "truncate: expected a boolean", "invalid_request_error", "truncate", "invalid_type");
    truncate = t->get<bool>();
  }
  if (const json* d = field(body, "dimensions")) {
    if (!(d->is_number_integer() || d->is_number_unsigned()) || d->get<int64_t>() != o.embedder->dim())
      throw ApiError(400, "dimensions: this model's embeddings have " + std::to_string(o.embedder->dim()) +
                              " dimensions; kvad does not shorten them", "invalid_request_error", "dimensions",
                     "unsupported_value");
  }
  const int32_t max_len = o.embedder->config().max_seq_length;
  size_t total = 0;
  auto tokenize = [&] {
    std::vector<std::vector<int32_t>> inputs;
    for (size_t i = 0; i < texts.size(); ++i) {
      const std::string param = legacy ? "prompt" : "input";
      if (texts[i].size() > static_cast<size_t>(max_len) * max_token_bytes * 2 && truncate)
        texts[i].resize(static_cast<size_t>(max_len) * max_token_bytes * 2);  // more than max_len tokens either way
      if (!truncate && tok->encode(texts[i], true, true).size() > static_cast<size_t>(max_len))
        throw ApiError(400, param + ": input " + std::to_string(i) + " is longer than the model's " +
                                std::to_string(max_len) + " tokens and truncate is false",
                       "invalid_request_error", param, "context_length_exceeded");
      inputs.push_back(o.embedder->tokenize(texts[i]));
      if (inputs.back().empty())
        throw ApiError(400, param + ": input " + std::to_string(i) + " is empty", "invalid_request_error", param,
                       "invalid_value");
      total += inputs.back().size();
    }
    if (total > kMaxEmbeddingTokens)
      throw ApiError(400, "the inputs have " + std::to_string(total) + " tokens; at most " +
                              std::to_string(kMaxEmbeddingTokens) + " per request", "invalid_request_error", "input",
                     "invalid_value");
    return inputs;
  };
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<float> vecs;
  if (!run_embeddings(req, res, tokenize, &vecs)) return;
  const size_t dim = static_cast<size_t>(o.embedder->dim());
  auto row = [&](size_t i) { return std::vector<float>(vecs.begin() + i * dim, vecs.begin() + (i + 1) * dim); };
  if (legacy) {
    res.set_content(dump(json{{"embedding", row(0)}}), "application/json");
    return;
  }
  json embs = json::array();
  for (size_t i = 0; i < texts.size(); ++i) embs.push_back(row(i));
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  res.set_content(dump(json{{"model", name}, {"embeddings", embs}, {"total_duration", static_cast<int64_t>(secs * 1e9)},
                            {"load_duration", 0}, {"prompt_eval_count", total}}),
                  "application/json");
}

void Server::Impl::ollama_pull(const httplib::Request& req, httplib::Response& res) {
  const json body = parse_ollama_body(req.body);
  const std::string name = model_name(body);
  bool streamed = true;
  if (const json* s = field(body, "stream")) {
    if (!s->is_boolean()) throw ApiError(400, "stream: expected a boolean", "invalid_request_error", "stream", "invalid_type");
    streamed = s->get<bool>();
  }
  if (ollama_name_matches(name, o.model_id)) {  // already here
    res.set_content(streamed ? dump(json{{"status", "success"}}) + "\n" : dump(json{{"status", "success"}}),
                    streamed ? "application/x-ndjson" : "application/json");
    return;
  }
  if (!o.allow_pull) throw ApiError(403, "pulling models is turned off on this server (--no-pull)", "invalid_request_error", "model", "pull_disabled");
  std::string spec_text = name;
  for (const char* host : {"hf.co/", "huggingface.co/"})
    if (spec_text.rfind(host, 0) == 0) spec_text = spec_text.substr(std::string_view(host).size());
  if (spec_text.size() > 7 && spec_text.compare(spec_text.size() - 7, 7, ":latest") == 0) spec_text.resize(spec_text.size() - 7);
  if (!hub::looks_like_repo_spec(spec_text))
    throw ApiError(404, "model '" + name.substr(0, 200) + "' not found: kvad pulls from the Hugging Face Hub; name a "
                   "repo as hf.co/ORG/NAME[:QUANT]", "invalid_request_error", "model", "model_not_found");
  hub::RepoSpec spec;
  try {
    spec = hub::parse_repo_spec(spec_text);
  } catch (const Error& e) {
    throw ApiError(400, e.what(), "invalid_request_error", "model", "invalid_value");
  }
  const hub::HubOptions opt = hub::HubOptions::from_env();
  // What the Hub said, as a status: the name matches nothing (404), is
  // ambiguous (400), is gated (403); the Hub or the disk failed (502).
  auto pull_error = [](const Error& e) {
    const std::string m = e.what();
    auto has = [&](const char* w) { return m.find(w) != std::string::npos; };
    const int status = has("matches several") ? 400
                       : has("not found") || has("no such file") || has("no GGUF") || has(" has no ") ? 404
                       : has("gated") || has("access denied") || has("token") ? 403
                                                                             : 502;
    return ApiError(status, "pull: " + m, status == 502 ? "server_error" : "invalid_request_error", "model",
                    status == 404 ? "model_not_found" : status == 502 ? "pull_failed" : "invalid_value");
  };
  if (!streamed) {
    try {
      hub::pull(spec, opt);
    } catch (const Error& e) {
      throw pull_error(e);
    }
    res.set_content(dump(json{{"status", "success"}}), "application/json");
    return;
  }
  auto st = std::make_shared<PullState>();
  st->worker = std::thread([st, spec, opt, pull_error] {
    try {
      PullLines obs(*st);
      hub::pull(spec, opt, &obs);
      st->put({{"status", "verifying sha256 digest"}});
      st->put({{"status", "writing manifest"}});
      st->put({{"status", "success"}});
    } catch (const Error& e) {
      if (!st->cancel) st->put(ollama_error_body(pull_error(e)));
    } catch (const std::exception& e) {
      st->put(json{{"error", std::string("pull failed: ") + e.what()}});
    }
    std::lock_guard<std::mutex> lk(st->mu);
    st->finished = true;
    st->cv.notify_all();
  });
  const int fd = find_connection_fd(req);
  ++open_streams;
  res.set_chunked_content_provider(
      "application/x-ndjson",
      [this, st, fd](size_t, httplib::DataSink& sink) -> bool {
        std::unique_lock<std::mutex> lk(st->mu);
        st->cv.wait_for(lk, kPoll, [&] { return !st->lines.empty() || st->finished; });
        while (!st->lines.empty()) {
          const std::string line = std::move(st->lines.front());
          st->lines.pop_front();
          if (!sink.write(line.data(), line.size())) {
            st->cancel = true;
            return false;
          }
        }
        if (st->finished) {
          sink.done();
          return true;
        }
        if (peer_closed(fd) || stopping) {
          st->cancel = true;
          return false;
        }
        return true;
      },
      [this, st](bool) {
        st->cancel = true;
        if (st->worker.joinable()) st->worker.join();
        --open_streams;
      });
}

void Server::Impl::ollama_routes() {
  auto guarded = [this](auto fn) { return guarded_as(fn, [](const ApiError& e) { return ollama_error_body(e); }); };
  http.Post("/api/chat", guarded([this](const auto& req, auto& res) { ollama_generate(req, res, true); }));
  http.Post("/api/generate", guarded([this](const auto& req, auto& res) { ollama_generate(req, res, false); }));
  http.Post("/api/embed", guarded([this](const auto& req, auto& res) { ollama_embed(req, res, false); }));
  http.Post("/api/embeddings", guarded([this](const auto& req, auto& res) { ollama_embed(req, res, true); }));
  http.Post("/api/pull", guarded([this](const auto& req, auto& res) { ollama_pull(req, res); }));
  const auto card = std::make_shared<const ModelCard>(model_card(o, model->hparams()));
  http.Get("/api/version", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(dump(json{{"version", kOllamaApiVersion}}), "application/json");
  });
  http.Get("/api/tags", [card](const httplib::Request&, httplib::Response& res) {
    json m = {{"name", card->name}, {"model", card->name}, {"modified_at", card->modified_at},
              {"size", card->size}, {"digest", card->digest}, {"details", card->details()}};
    res.set_content(dump(json{{"models", json::array({m})}}), "application/json");
  });
  http.Get("/api/ps", [this, card](const httplib::Request&, httplib::Response& res) {
    // kvad serve keeps its model loaded until it stops: expiry a century away.
    const int64_t now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                               std::chrono::system_clock::now().time_since_epoch()).count();
    json m = {{"name", card->name}, {"model", card->name}, {"size", card->size}, {"digest", card->digest},
              {"details", card->details()}, {"expires_at", ollama_time(now_ns + 100LL * 365 * 86400 * 1000000000LL)},
              {"size_vram", 0}, {"context_length", sched->n_ctx()}};
    res.set_content(dump(json{{"models", json::array({m})}}), "application/json");
  });
  http.Post("/api/show", guarded([this, card](const httplib::Request& req, httplib::Response& res) {
    const json body = parse_ollama_body(req.body);
    const std::string name = model_name(body);
    if (!ollama_name_matches(name, o.model_id)) throw not_found(name, o.model_id);
    bool verbose = false;
    if (const json* v = field(body, "verbose"); v && v->is_boolean()) verbose = v->get<bool>();
    const SamplerParams& d = o.sampling_defaults;
    char params[256];
    std::snprintf(params, sizeof params, "temperature %g\ntop_p %g\ntop_k %d\nmin_p %g\nrepeat_penalty %g",
                  static_cast<double>(d.temp), static_cast<double>(d.top_p), d.top_k, static_cast<double>(d.min_p),
                  static_cast<double>(d.repeat_penalty));
    json caps = json::array();
    if (o.model_kind == "text") caps.push_back("completion");
    if (o.chat) caps.push_back("tools");  // any chat template: kvad describes tools itself when it does not
    if (o.embedder) caps.push_back("embedding");
    if (fim.ok()) caps.push_back("insert");
    res.set_content(dump(json{{"modelfile", "# Modelfile of the model kvad serve runs\nFROM " + card->path + "\n"},
                              {"parameters", params},
                              {"template", o.chat ? o.chat->chat_template().source() : ""},
                              {"details", card->details()},
                              {"model_info", model_info(o, model->hparams(), verbose)},
                              {"capabilities", caps},
                              {"modified_at", card->modified_at}}),
                    "application/json");
  }));
  for (const char* p : {"/api/chat", "/api/generate", "/api/embed", "/api/embeddings", "/api/pull", "/api/show"})
    http.Get(p, [](const httplib::Request& req, httplib::Response& res) {
      res.status = 405;
      res.set_content(dump(json{{"error", "method not allowed: use POST " + req.path}}), "application/json");
    });
}

}  // namespace kvad::server
