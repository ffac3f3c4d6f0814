#include "server/ollama_api.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <ctime>

#include "server/json_parse.h"

namespace kvad::server {

using json = nlohmann::ordered_json;

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& message, const std::string& code = "invalid_value") {
  throw ApiError(400, param.empty() ? message : param + ": " + message, "invalid_request_error", param, code);
}

std::string type_of(const json& v) {
  if (v.is_boolean()) return "a boolean";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return "null";
}

[[noreturn]] void bad_type(const std::string& param, const std::string& expected, const json& got) {
  bad(param, "expected " + expected + ", got " + type_of(got), "invalid_type");
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

/// A name with its ':latest' tag, 'hf.co/' host and spelling of ':' as '-' folded away.
std::string fold_name(std::string_view name) {
  std::string s = lower(name);
  for (const char* host : {"hf.co/", "huggingface.co/"})
    if (s.rfind(host, 0) == 0) s = s.substr(std::string_view(host).size());
  if (s.size() > 7 && s.compare(s.size() - 7, 7, ":latest") == 0) s.resize(s.size() - 7);
  std::replace(s.begin(), s.end(), ':', '-');
  return s;
}

bool is_int(const json& v) { return v.is_number_integer() || v.is_number_unsigned(); }

int64_t int_of(const json& v, const std::string& param) {
  if (!is_int(v)) {
    // ollama's clients send integers; a float that is a whole number passes.
    if (v.is_number_float() && v.get<double>() == static_cast<double>(static_cast<int64_t>(v.get<double>())))
      return static_cast<int64_t>(v.get<double>());
    bad_type(param, "an integer", v);
  }
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) bad(param, "out of range");
  return v.get<int64_t>();
}

int64_t ns(double seconds) { return static_cast<int64_t>(std::max(0.0, seconds) * 1e9); }

void add_stats(json& j, const GenUsage& u) {
  const double prompt_s = u.ttft_s >= 0 ? u.ttft_s - u.queue_s : u.total_s - u.queue_s;
  j["total_duration"] = ns(u.total_s);
  j["load_duration"] = 0;
  j["prompt_eval_count"] = u.prompt_tokens;
  j["prompt_eval_duration"] = ns(prompt_s);
  j["eval_count"] = u.completion_tokens;
  j["eval_duration"] = ns(u.ttft_s >= 0 ? u.total_s - u.ttft_s : 0);
}

json call_json(const ToolCall& c, int index) {
  json args = parse_json_ordered_or_discarded(c.arguments);
  if (!args.is_object()) args = json::object();
  return json{{"id", c.id}, {"function", {{"index", index}, {"name", c.name}, {"arguments", args}}}};
}

/// ollama's messages as OpenAI's: ids for past calls (ollama has none) and
/// tool results tied to the call they answer by tool_name.
json openai_messages(const json& msgs) {
  if (!msgs.is_array()) bad_type("messages", "an array", msgs);
  json out = json::array();
  std::vector<std::pair<std::string, std::string>> open;  // (id, name) of calls not yet answered
  for (size_t i = 0; i < msgs.size(); ++i) {
    const json& m = msgs[i];
    const std::string p = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) bad_type(p, "an object", m);
    const json* role = field(m, "role");
    if (!role) bad(p + ".role", "field required", "missing_required_parameter");
    if (!role->is_string()) bad_type(p + ".role", "a string", *role);
    if (const json* im = field(m, "images"); im && !(im->is_array() && im->empty()))
      bad(p + ".images", "images are not supported: this server runs a text model", "unsupported_value");
    json om = {{"role", *role}};
    if (const json* c = field(m, "content")) {
      if (!c->is_string()) bad_type(p + ".content", "a string", *c);
      om["content"] = *c;
    } else if (*role != "assistant") {
      om["content"] = "";
    }
    if (*role == "assistant") open.clear();
    if (const json* tc = field(m, "tool_calls"); tc && *role == "assistant") {
      if (!tc->is_array()) bad_type(p + ".tool_calls", "an array", *tc);
      json calls = json::array();
      for (size_t k = 0; k < tc->size(); ++k) {
        const json& c = (*tc)[k];
        const std::string cp = p + ".tool_calls[" + std::to_string(k) + "]";
        if (!c.is_object()) bad_type(cp, "an object", c);
        const json* fn = field(c, "function");
        if (!fn || !fn->is_object()) bad_type(cp + ".function", "an object", fn ? *fn : json());
        const json* name = field(*fn, "name");
        if (!name || !name->is_string()) bad_type(cp + ".function.name", "a string", name ? *name : json());
        json args = json::object();
        if (const json* a = field(*fn, "arguments")) {
          if (!a->is_object() && !a->is_string()) bad_type(cp + ".function.arguments", "an object", *a);
          args = *a;
        }
        std::string id = "call_" + std::to_string(i) + "_" + std::to_string(k);
        if (const json* cid = field(c, "id"); cid && cid->is_string() && !cid->get<std::string>().empty())
          id = cid->get<std::string>();
        calls.push_back({{"id", id}, {"type", "function"},
                         {"function", {{"name", *name}, {"arguments", args.is_string() ? args : json(args.dump())}}}});
        open.emplace_back(id, name->get<std::string>());
      }
      if (!calls.empty()) om["tool_calls"] = calls;
      if (!field(m, "content") && calls.empty()) om["content"] = "";
    }
    if (*role == "tool") {
      // The call answered: the first open one of that tool_name, else the first open one.
      std::string name;
      if (const json* tn = field(m, "tool_name")) {
        if (!tn->is_string()) bad_type(p + ".tool_name", "a string", *tn);
        name = tn->get<std::string>();
      }
      auto it = std::find_if(open.begin(), open.end(), [&](const auto& c) { return c.second == name; });
      if (it == open.end()) it = open.begin();
      if (it == open.end())
        bad(p + ".role", "a 'tool' message answers a tool call of the assistant message before it; there is none open");
      om["tool_call_id"] = it->first;
      open.erase(it);
    }
    out.push_back(std::move(om));
  }
  return out;
}

// Options onto the OpenAI fields kvad's parser checks (same names, except num_predict).
constexpr const char* kSamplingOptions[] = {"temperature", "top_p", "top_k", "min_p", "repeat_penalty",
                                            "presence_penalty", "frequency_penalty"};

}  // namespace

json ollama_error_body(const ApiError& e) { return json{{"error", e.message}}; }

bool ollama_name_matches(std::string_view name, std::string_view model_id) {
  return !name.empty() && fold_name(name) == fold_name(model_id);
}

std::string ollama_model_name(const std::string& model_id) {
  const size_t slash = model_id.rfind('/');
  return model_id.find(':', slash == std::string::npos ? 0 : slash) == std::string::npos ? model_id + ":latest"
                                                                                          : model_id;
}

OllamaRequest parse_ollama_request(const std::string& text, bool chat, const SamplerParams& defaults) {
  json body;
  try {
    body = parse_body(text, /*openai_hint=*/false);
  } catch (const ApiError& e) {
    bad("", "invalid JSON body: " + e.message, e.code);
  }
  OllamaRequest out;
  CompletionRequest& r = out.r;
  const json* model = field(body, "model");
  if (!model) bad("model", "model is required", "missing_required_parameter");
  if (!model->is_string()) bad_type("model", "a string", *model);
  if (model->get<std::string>().empty()) bad("model", "model is required", "missing_required_parameter");

  json oa = json::object();
  oa["model"] = *model;
  bool as_chat = chat;
  if (chat) {
    const json* msgs = field(body, "messages");
    if (!msgs || (msgs->is_array() && msgs->empty())) out.load_only = true;
    else oa["messages"] = openai_messages(*msgs);
    if (const json* t = field(body, "tools")) oa["tools"] = *t;
  } else {
    for (const char* k : {"images", "context"})
      if (const json* v = field(body, k); v && !(v->is_array() && v->empty()))
        bad(k, std::string(k) == "images" ? "images are not supported: this server runs a text model"
                                          : "context (deprecated by ollama) is not supported; send the conversation "
                                            "to /api/chat",
            "unsupported_value");
    if (const json* t = field(body, "template"); t && !(t->is_string() && t->get<std::string>().empty()))
      bad("template", "a template other than the model's own is not supported", "unsupported_value");
    auto str = [&](const char* k) {
      const json* v = field(body, k);
      if (!v) return std::string();
      if (!v->is_string()) bad_type(k, "a string", *v);
      return v->get<std::string>();
    };
    const std::string prompt = str("prompt"), system = str("system");
    out.suffix = str("suffix");
    out.prompt = prompt;
    bool raw = false;
    if (const json* rv = field(body, "raw")) {
      if (!rv->is_boolean()) bad_type("raw", "a boolean", *rv);
      raw = rv->get<bool>();
    }
    if (prompt.empty() && out.suffix.empty()) out.load_only = true;
    if (raw || !out.suffix.empty()) {
      as_chat = false;
      oa["prompt"] = prompt.empty() ? " " : prompt;  // a suffix request builds its own prompt
    } else {
      as_chat = true;
      json msgs = json::array();
      if (!system.empty()) msgs.push_back({{"role", "system"}, {"content", system}});
      msgs.push_back({{"role", "user"}, {"content", prompt}});
      oa["messages"] = msgs;
    }
  }
  if (const json* f = field(body, "format")) {
    if (f->is_string()) {
      if (*f == "json") oa["response_format"] = {{"type", "json_object"}};
      else if (!f->get<std::string>().empty())
        bad("format", "expected \"json\" or a JSON schema object, got \"" + f->get<std::string>().substr(0, 40) + "\"");
    } else if (f->is_object()) {
      oa["json_schema"] = *f;
    } else {
      bad_type("format", "\"json\" or a JSON schema object", *f);
    }
  }
  if (const json* t = field(body, "think")) {
    if (t->is_boolean()) out.show_thinking = t->get<bool>();
    else if (!(t->is_string() && (*t == "low" || *t == "medium" || *t == "high")))
      bad("think", "expected true, false, \"low\", \"medium\" or \"high\"");
  }
  r.stream = true;
  if (const json* s = field(body, "stream")) {
    if (!s->is_boolean()) bad_type("stream", "a boolean", *s);
    r.stream = s->get<bool>();
  }
  if (const json* k = field(body, "keep_alive"); k && !k->is_number() && !k->is_string())
    bad_type("keep_alive", "a number of seconds or a duration such as \"5m\"", *k);

  int64_t num_predict = -1;
  if (const json* opt = field(body, "options")) {
    if (!opt->is_object()) bad_type("options", "an object", *opt);
    for (const char* k : kSamplingOptions)
      if (const json* v = field(*opt, k)) oa[k] = *v;
    if (const json* v = field(*opt, "seed")) {
      const int64_t seed = int_of(*v, "options.seed");
      if (seed >= 0) oa["seed"] = seed;  // ollama: -1 draws one
    }
    if (const json* v = field(*opt, "stop")) oa["stop"] = *v;
    if (const json* v = field(*opt, "num_predict")) {
      num_predict = int_of(*v, "options.num_predict");
      if (num_predict < -2) bad("options.num_predict", "expected -1 (no limit), -2 (fill the context) or a count >= 0");
    }
    if (const json* v = field(*opt, "repeat_last_n")) {
      const int64_t n = int_of(*v, "options.repeat_last_n");
      if (n < -1 || n > INT32_MAX) bad("options.repeat_last_n", "expected -1 (the context) or a count >= 0");
      out.repeat_last_n = static_cast<int32_t>(n);
    }
  }
  if (out.load_only) {
    r.model = model->get<std::string>();
    return out;
  }

  try {
    r = parse_completion_request(oa.dump(), as_chat, defaults);
  } catch (const ApiError& e) {
    // The OpenAI parser names OpenAI's fields; say ollama's.
    std::string param = e.param, message = e.message;
    auto rename = [&](const std::string& from, const std::string& to) {
      if (param.rfind(from, 0) != 0) return;
      auto word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
      size_t at = message.find(from);
      while (at != std::string::npos) {
        const size_t end = at + from.size();
        if ((at > 0 && word(message[at - 1])) || (end < message.size() && word(message[end]))) {
          at = message.find(from, end);
          continue;
        }
        message.replace(at, from.size(), to);
        at = message.find(from, at + to.size());
      }
      param = to + param.substr(from.size());
    };
    for (const char* k : kSamplingOptions) rename(k, std::string("options.") + k);
    rename("seed", "options.seed");
    rename("stop", "options.stop");
    rename("json_schema", "format");
    rename("response_format", "format");
    throw ApiError(400, message, "invalid_request_error", param, e.code.empty() ? "invalid_value" : e.code);
  }
  r.stream = field(body, "stream") ? body["stream"].get<bool>() : true;
  r.gen.max_tokens = num_predict >= 0 ? static_cast<int32_t>(std::min<int64_t>(num_predict, INT32_MAX)) : -1;
  if (const json* lp = field(body, "logprobs")) {
    if (!lp->is_boolean()) bad_type("logprobs", "a boolean", *lp);
    int64_t top = 0;
    if (const json* t = field(body, "top_logprobs")) {
      top = int_of(*t, "top_logprobs");
      if (top < 0 || top > kMaxTopLogprobs) bad("top_logprobs", "expected 0 to " + std::to_string(kMaxTopLogprobs));
    }
    r.gen.logprobs = lp->get<bool>() ? static_cast<int32_t>(top) : -1;
  }
  return out;
}

std::string ollama_time(int64_t unix_ns) {
  if (unix_ns < 0)
    unix_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
                  .count();
  const std::time_t secs = static_cast<std::time_t>(unix_ns / 1000000000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%09lldZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<long long>(unix_ns % 1000000000));
  return buf;
}

namespace {

json base(const OllamaMeta& m) { return json{{"model", m.model}, {"created_at", ollama_time()}}; }

/// The reply's parts, in a message (chat) or at the top (generate).
void put_parts(json& j, const OllamaMeta& m, const std::string& reasoning, const std::string& content,
               const json& calls) {
  if (m.chat) {
    json msg = {{"role", "assistant"}, {"content", content}};
    if (m.show_thinking && !reasoning.empty()) msg["thinking"] = reasoning;
    if (!calls.empty()) msg["tool_calls"] = calls;
    j["message"] = std::move(msg);
  } else {
    j["response"] = content;
    if (m.show_thinking && !reasoning.empty()) j["thinking"] = reasoning;
  }
}

std::string done_reason(const std::string& finish_reason) { return finish_reason == "length" ? "length" : "stop"; }

}  // namespace

json ollama_response(const OllamaMeta& m, const ParsedOutput& out, const std::string& finish_reason,
                     const GenUsage& usage, const json& logprobs) {
  json calls = json::array();
  for (size_t i = 0; i < out.calls.size(); ++i) calls.push_back(call_json(out.calls[i], static_cast<int>(i)));
  json j = base(m);
  put_parts(j, m, out.reasoning, out.content, calls);
  j["done"] = true;
  j["done_reason"] = done_reason(finish_reason);
  add_stats(j, usage);
  if (!logprobs.is_null()) j["logprobs"] = logprobs;
  return j;
}

json ollama_load_response(const OllamaMeta& m) {
  json j = base(m);
  put_parts(j, m, "", "", json::array());
  j["done"] = true;
  j["done_reason"] = "load";
  return j;
}

json ollama_logprobs(const std::vector<GenTokenLogprobs>& tokens, const std::function<std::string(int32_t)>& piece) {
  json out = json::array();
  for (const GenTokenLogprobs& t : tokens) {
    json top = json::array();
    for (const TokenLogprob& a : t.top) top.push_back({{"token", piece(a.id)}, {"logprob", a.logprob}});
    out.push_back({{"token", piece(t.id)}, {"logprob", t.logprob}, {"top_logprobs", top}});
  }
  return out;
}

namespace {

class OllamaEmitter : public StreamEmitter {
 public:
  explicit OllamaEmitter(OllamaMeta m) : m_(std::move(m)) {}

  std::string begin() override { return ""; }

  std::string delta(const OutputDelta& d) override {
    json calls = json::array();
    for (const auto& [index, call] : d.calls) calls.push_back(call_json(call, index));
    const std::string reasoning = m_.show_thinking ? d.reasoning : "";
    if (reasoning.empty() && d.content.empty() && calls.empty()) return "";
    json j = base(m_);
    put_parts(j, m_, reasoning, d.content, calls);
    j["done"] = false;
    if (json lp = take_logprobs(); !lp.is_null()) j["logprobs"] = std::move(lp);
    return dump(j) + "\n";
  }

  std::string end(const GenEvent& last, const OutputStream&) override {
    json j = base(m_);
    put_parts(j, m_, "", "", json::array());
    j["done"] = true;
    j["done_reason"] = done_reason(last.finish_reason);
    add_stats(j, last.usage);
    return dump(j) + "\n";
  }

  std::string error(const ApiError& e) override { return dump(ollama_error_body(e)) + "\n"; }

 private:
  OllamaMeta m_;
};

}  // namespace

std::unique_ptr<StreamEmitter> ollama_emitter(const OllamaMeta& m) { return std::make_unique<OllamaEmitter>(m); }

}  // namespace kvad::server
