#include "server/llamacpp_api.h"

#include <cmath>


namespace kvad::server {

using json = nlohmann::ordered_json;

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& message, const std::string& code = "invalid_value") {
  throw ApiError(400, "Invalid value for '" + param + "': " + message, "invalid_request_error", param, code);
}

bool is_int(const json& v) { return v.is_number_integer() || v.is_number_unsigned(); }

int64_t int_field(const json& body, const char* name, int64_t lo, int64_t hi, int64_t dflt) {
  const json* v = field(body, name);
  if (!v) return dflt;
  if (!is_int(*v)) bad(name, "expected an integer.", "invalid_type");
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) bad(name, "out of range.");
  const int64_t x = v->get<int64_t>();
  if (x < lo || x > hi) bad(name, "expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "].");
  return x;
}

bool bool_field(const json& body, const char* name, bool dflt) {
  const json* v = field(body, name);
  if (!v) return dflt;
  if (!v->is_boolean()) bad(name, "expected a boolean.", "invalid_type");
  return v->get<bool>();
}

std::string string_field(const json& body, const char* name) {
  const json* v = field(body, name);
  if (!v) return "";
  if (!v->is_string()) bad(name, "expected a string.", "invalid_type");
  return v->get<std::string>();
}

}  // namespace

LlamaCompletion parse_llamacpp_completion(const std::string& body_text, bool infill, const SamplerParams& defaults) {
  const json body = parse_body(body_text);
  LlamaCompletion out;
  json oa = json::object();
  oa["model"] = "";
  const json* p = field(body, "prompt");
  if (infill) {
    if (p && !p->is_string()) bad("prompt", "expected a string.", "invalid_type");
    out.input_prefix = string_field(body, "input_prefix");
    out.input_suffix = string_field(body, "input_suffix");
    if (const json* ex = field(body, "input_extra")) {
      if (!ex->is_array()) bad("input_extra", "expected an array of {filename, text}.", "invalid_type");
      if (ex->size() > 1024) bad("input_extra", "at most 1024 chunks.");
      for (const json& c : *ex) {
        if (!c.is_object()) bad("input_extra", "expected an array of {filename, text}.", "invalid_type");
        out.input_extra.push_back({string_field(c, "filename"), string_field(c, "text")});
      }
    }
    oa["prompt"] = " ";  // the handler builds the prompt's ids
    out.r.prompt = p ? p->get<std::string>() : "";
  } else {
    if (!p) throw ApiError(400, "Missing required parameter: 'prompt'.", "invalid_request_error", "prompt",
                           "missing_required_parameter");
    bool mixed = false;
    if (p->is_array() && !p->empty()) {
      bool ints = false, strs = false, nested = false;
      for (const json& e : *p) {
        ints = ints || is_int(e);
        strs = strs || e.is_string();
        nested = nested || e.is_array() || e.is_object();
      }
      if (nested || (strs && !ints && p->size() > 1))
        throw ApiError(400, "Only one prompt per request is supported (a string, token ids, or both mixed).",
                       "invalid_request_error", "prompt", "unsupported_value");
      mixed = ints && strs;
    }
    if (mixed) {
      for (const json& e : *p) {
        if (is_int(e) && (e.is_number_unsigned() ? e.get<uint64_t>() > INT32_MAX : e.get<int64_t>() < 0))
          bad("prompt", "token id " + e.dump() + " is not in the vocabulary.");
        out.pieces.push_back(e);
      }
      out.mixed = true;
      oa["prompt"] = " ";
    } else {
      oa["prompt"] = *p;
    }
  }
  for (const char* k : {"temperature", "top_k", "top_p", "min_p", "repeat_penalty", "presence_penalty",
                        "frequency_penalty", "stop", "grammar", "json_schema", "stream"})
    if (const json* v = field(body, k)) oa[k] = *v;
  if (const json* s = field(body, "seed")) {
    if (!is_int(*s)) bad("seed", "expected an integer.", "invalid_type");
    const bool random = s->is_number_integer() ? s->get<int64_t>() < 0 : s->get<uint64_t>() == 0xFFFFFFFFull;
    if (!random) oa["seed"] = *s;
  }
  out.n_probs = static_cast<int32_t>(int_field(body, "n_probs", 0, kMaxTopLogprobs, 0));
  if (out.n_probs > 0) oa["logprobs"] = out.n_probs;
  // Samplers kvad does not have: accepted switched off (llama.cpp's web UI sends them so).
  struct Off { const char* name; double off; };
  for (const Off& s : {Off{"mirostat", 0}, Off{"typical_p", 1}, Off{"dry_multiplier", 0}, Off{"xtc_probability", 0},
                       Off{"dynatemp_range", 0}, Off{"top_n_sigma", -1}})
    if (const json* v = field(body, s.name)) {
      if (!v->is_number()) bad(s.name, "expected a number.", "invalid_type");
      if (v->get<double>() != s.off && !(s.off < 0 && v->get<double>() <= 0))
        throw ApiError(400, std::string("The sampler '") + s.name + "' is not supported by kvad; leave it at " +
                                json(s.off).dump() + ".", "invalid_request_error", s.name, "unsupported_value");
    }
  try {
    out.r = [&] {
      CompletionRequest r = parse_completion_request(oa.dump(), false, defaults);
      if (infill) r.prompt = out.r.prompt;
      return r;
    }();
  } catch (const ApiError& e) {
    if (e.param == "logprobs") bad("n_probs", e.message);
    throw;
  }
  const int64_t n_predict = int_field(body, "n_predict", -1, INT32_MAX, -1);
  out.r.gen.max_tokens = static_cast<int32_t>(n_predict);
  out.repeat_last_n = static_cast<int32_t>(int_field(body, "repeat_last_n", -1, INT32_MAX, 64));
  out.r.gen.sampling.repeat_last_n = out.repeat_last_n;
  out.return_tokens = bool_field(body, "return_tokens", false);
  out.ignore_eos = bool_field(body, "ignore_eos", false);
  bool_field(body, "cache_prompt", true);  // kvad reuses a cached prefix whenever one matches
  if (const json* lb = field(body, "logit_bias")) {
    // [[id, bias | false], ...] (llama.cpp) or {"id": bias} (OpenAI); false bans the token.
    auto add = [&](const json& id, const json& b) {
      if (!is_int(id) || (id.is_number_integer() && id.get<int64_t>() < 0) ||
          (id.is_number_unsigned() && id.get<uint64_t>() > INT32_MAX))
        bad("logit_bias", "token ids (non-negative integers) only; token strings are not supported.");
      float bias;
      if (b.is_boolean() && !b.get<bool>()) bias = -INFINITY;
      else if (b.is_number() && std::isfinite(b.get<double>())) bias = static_cast<float>(b.get<double>());
      else bad("logit_bias", "a bias is a finite number or false.");
      out.r.gen.sampling.logit_bias.emplace_back(static_cast<int32_t>(id.get<int64_t>()), bias);
    };
    if (lb->is_array()) {
      if (lb->size() > kMaxLogitBias) bad("logit_bias", "at most " + std::to_string(kMaxLogitBias) + " entries.");
      for (const json& e : *lb) {
        if (!e.is_array() || e.size() != 2) bad("logit_bias", "expected [[token id, bias], ...].");
        add(e[0], e[1]);
      }
    } else if (lb->is_object()) {
      if (lb->size() > kMaxLogitBias) bad("logit_bias", "at most " + std::to_string(kMaxLogitBias) + " entries.");
      for (const auto& [k, v] : lb->items()) {
        if (k.empty() || k.size() > 10 || k.find_first_not_of("0123456789") != std::string::npos)
          bad("logit_bias", "keys must be token ids.");
        add(json(std::stoll(k)), v);
      }
    } else {
      bad("logit_bias", "expected [[token id, bias], ...] or {\"token id\": bias}.", "invalid_type");
    }
  }
  return out;
}

std::string llamacpp_stop_type(const GenEvent& last) {
  if (last.finish_reason == "length") return "limit";
  return last.stop_sequence.empty() ? "eos" : "word";
}

json llamacpp_probs(const std::vector<GenTokenLogprobs>& tokens, const std::function<std::string(int32_t)>& piece) {
  auto bytes = [](const std::string& t) {
    json b = json::array();
    for (unsigned char c : t) b.push_back(static_cast<int>(c));
    return b;
  };
  json out = json::array();
  for (const GenTokenLogprobs& t : tokens) {
    json top = json::array();
    for (const TokenLogprob& a : t.top) {
      const std::string ap = piece(a.id);
      top.push_back({{"id", a.id}, {"token", ap}, {"logprob", a.logprob}, {"bytes", bytes(ap)}});
    }
    const std::string p = piece(t.id);
    out.push_back({{"id", t.id}, {"token", p}, {"logprob", t.logprob}, {"bytes", bytes(p)}, {"top_logprobs", top}});
  }
  return out;
}

json llamacpp_timings(const GenUsage& u) {
  const double prompt_ms = std::max(0.0, (u.ttft_s >= 0 ? u.ttft_s : u.total_s) - u.queue_s) * 1000;
  const double pred_ms = u.ttft_s >= 0 ? std::max(0.0, u.total_s - u.ttft_s) * 1000 : 0;
  const int32_t prompt_n = u.prompt_tokens - u.cached_tokens;
  auto per = [](double ms, int32_t n) { return n > 0 ? ms / n : 0.0; };
  auto rate = [](double ms, int32_t n) { return ms > 0 ? 1000.0 * n / ms : 0.0; };
  json t{{"cache_n", u.cached_tokens},
              {"prompt_n", prompt_n},
              {"prompt_ms", prompt_ms},
              {"prompt_per_token_ms", per(prompt_ms, prompt_n)},
              {"prompt_per_second", rate(prompt_ms, prompt_n)},
              {"predicted_n", u.completion_tokens},
              {"predicted_ms", pred_ms},
              {"predicted_per_token_ms", per(pred_ms, u.completion_tokens)},
              {"predicted_per_second", rate(pred_ms, u.completion_tokens)}};
  if (u.draft_tokens > 0) {  // as llama.cpp: only when speculation proposed something
    t["draft_n"] = u.draft_tokens;
    t["draft_n_accepted"] = u.draft_accepted;
  }
  return t;
}

namespace {

class LlamaEmitter : public StreamEmitter {
 public:
  LlamaEmitter(json final_fields, int32_t n_probs) : final_(std::move(final_fields)), n_probs_(n_probs) {}

  std::string begin() override { return ""; }

  std::string delta(const OutputDelta& d) override {
    json probs = take_logprobs();
    json tokens = json::array();
    if (probs.is_array())
      for (const json& t : probs) tokens.push_back(t["id"]);
    n_predicted_ += static_cast<int32_t>(tokens.size());
    json j = {{"index", 0}, {"content", d.content + d.reasoning}, {"tokens", tokens}, {"stop", false},
              {"id_slot", -1}, {"tokens_predicted", n_predicted_}};
    if (n_probs_ > 0 && probs.is_array()) j["completion_probabilities"] = probs;
    return sse_data(j);
  }

  std::string end(const GenEvent& last, const OutputStream&) override {
    json j = {{"index", 0}, {"content", ""}, {"tokens", json::array()}, {"stop", true}, {"id_slot", -1}};
    for (const auto& [k, v] : final_.items()) j[k] = v;
    j["tokens_predicted"] = last.usage.completion_tokens;
    j["tokens_evaluated"] = last.usage.prompt_tokens;
    j["tokens_cached"] = last.usage.cached_tokens;
    j["stop_type"] = llamacpp_stop_type(last);
    j["stopping_word"] = last.stop_sequence;
    j["timings"] = llamacpp_timings(last.usage);
    return sse_data(j);
  }

  std::string error(const ApiError& e) override { return sse_data(error_body(e)); }

 private:
  json final_;
  int32_t n_probs_;
  int32_t n_predicted_ = 0;
};

}  // namespace

std::unique_ptr<StreamEmitter> llamacpp_emitter(json final_fields, int32_t n_probs) {
  return std::make_unique<LlamaEmitter>(std::move(final_fields), n_probs);
}

}  // namespace kvad::server
