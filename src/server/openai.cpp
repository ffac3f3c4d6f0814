#include "server/openai.h"

#include <algorithm>
#include <functional>
#include "engine/grammar/json_schema.h"
#include "server/json_parse.h"

#include <random>

namespace kvad::server {

using json = nlohmann::ordered_json;

namespace {

std::string type_name(const json& v) {
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer() || v.is_number_unsigned()) return "an integer";
  if (v.is_number_float()) return "a decimal";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return "null";
}

[[noreturn]] void bad_type(const std::string& param, const std::string& expected, const json& got) {
  throw ApiError(400, "Invalid type for '" + param + "': expected " + expected + ", but got " + type_name(got) + " instead.",
                 "invalid_request_error", param, "invalid_type");
}

[[noreturn]] void bad_value(const std::string& param, const std::string& message) {
  throw ApiError(400, "Invalid value for '" + param + "': " + message, "invalid_request_error", param, "invalid_value");
}

[[noreturn]] void unsupported(const std::string& param, const std::string& message) {
  throw ApiError(400, message, "invalid_request_error", param, "unsupported_value");
}

[[noreturn]] void missing(const std::string& param) {
  throw ApiError(400, "Missing required parameter: '" + param + "'.", "invalid_request_error", param,
                 "missing_required_parameter");
}

/// The field, or nullptr when absent or null.

double number_in(const json& body, const char* name, double lo, double hi, double dflt) {
  const json* v = field(body, name);
  if (!v) return dflt;
  if (!v->is_number()) bad_type(name, "a number", *v);
  const double x = v->get<double>();
  if (!(x >= lo && x <= hi))
    bad_value(name, "expected a number in [" + json(lo).dump() + ", " + json(hi).dump() + "], got " + v->dump() + ".");
  return x;
}

bool is_int(const json& v) { return v.is_number_integer() || v.is_number_unsigned(); }

int64_t integer_in(const json& body, const char* name, int64_t lo, int64_t hi, int64_t dflt) {
  const json* v = field(body, name);
  if (!v) return dflt;
  if (!is_int(*v)) bad_type(name, "an integer", *v);
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    bad_value(name, "out of range.");
  const int64_t x = v->get<int64_t>();
  if (x < lo || x > hi)
    bad_value(name, "expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
                        std::to_string(x) + ".");
  return x;
}

bool boolean(const json& body, const char* name, bool dflt) {
  const json* v = field(body, name);
  if (!v) return dflt;
  if (!v->is_boolean()) bad_type(name, "a boolean", *v);
  return v->get<bool>();
}

std::string message_content(const json& m, const std::string& param, bool required) {
  const json* c = field(m, "content");
  if (!c) {
    if (required) throw ApiError(400, "Missing required parameter: '" + param + "'.", "invalid_request_error", param,
                                 "missing_required_parameter");
    return "";
  }
  if (c->is_string()) return c->get<std::string>();
  if (!c->is_array()) bad_type(param, "a string or an array of content parts", *c);
  std::string text;
  for (size_t i = 0; i < c->size(); ++i) {
    const json& part = (*c)[i];
    const std::string pp = param + "[" + std::to_string(i) + "]";
    if (!part.is_object()) bad_type(pp, "an object", part);
    const json* type = field(part, "type");
    if (!type || !type->is_string()) bad_type(pp + ".type", "a string", type ? *type : json());
    if (type->get<std::string>() != "text")
      unsupported(pp + ".type", "Content parts of type '" + type->get<std::string>() +
                                    "' are not supported; this server takes text only.");
    const json* t = field(part, "text");
    if (!t || !t->is_string()) bad_type(pp + ".text", "a string", t ? *t : json());
    text += t->get<std::string>();
  }
  return text;
}

void parse_messages(const json& body, CompletionRequest& r) {
  const json* msgs = field(body, "messages");
  if (!msgs)
    throw ApiError(400, "Missing required parameter: 'messages'.", "invalid_request_error", "messages",
                   "missing_required_parameter");
  if (!msgs->is_array()) bad_type("messages", "an array", *msgs);
  if (msgs->empty()) bad_value("messages", "expected an array with minimum length 1, but got an empty array.");
  // The calls a tool message may answer: those of the assistant message
  // just before it (tool messages between them), as OpenAI checks.
  size_t open_calls = SIZE_MAX;  // that message's index in r.messages
  for (size_t i = 0; i < msgs->size(); ++i) {
    const json& m = (*msgs)[i];
    const std::string p = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) bad_type(p, "an object", m);
    const json* role = field(m, "role");
    if (!role)
      throw ApiError(400, "Missing required parameter: '" + p + ".role'.", "invalid_request_error", p + ".role",
                     "missing_required_parameter");
    if (!role->is_string()) bad_type(p + ".role", "a string", *role);
    ChatMessage cm;
    cm.role = role->get<std::string>();
    if (cm.role == "developer") cm.role = "system";
    if (cm.role != "system" && cm.role != "user" && cm.role != "assistant" && cm.role != "tool")
      bad_value(p + ".role", "expected one of 'system', 'developer', 'user', 'assistant', 'tool', got '" + cm.role +
                                 "'.");
    if (const json* tc = field(m, "tool_calls"); tc && cm.role == "assistant") {
      if (!tc->is_array()) bad_type(p + ".tool_calls", "an array", *tc);
      if (tc->size() > kMaxTools) bad_value(p + ".tool_calls", "at most " + std::to_string(kMaxTools) + " calls.");
      for (size_t k = 0; k < tc->size(); ++k) {
        const json& c = (*tc)[k];
        const std::string cp = p + ".tool_calls[" + std::to_string(k) + "]";
        if (!c.is_object()) bad_type(cp, "an object", c);
        ToolCall call;
        if (const json* id = field(c, "id")) {
          if (!id->is_string()) bad_type(cp + ".id", "a string", *id);
          call.id = id->get<std::string>();
        }
        if (const json* ty = field(c, "type"); ty && !(ty->is_string() && *ty == "function"))
          bad_value(cp + ".type", "expected 'function'.");
        const json* fn = field(c, "function");
        if (!fn) missing(cp + ".function");
        if (!fn->is_object()) bad_type(cp + ".function", "an object", *fn);
        const json* name = field(*fn, "name");
        if (!name) missing(cp + ".function.name");
        if (!name->is_string()) bad_type(cp + ".function.name", "a string", *name);
        call.name = name->get<std::string>();
        call.arguments = "{}";
        if (const json* a = field(*fn, "arguments")) {
          if (a->is_string()) call.arguments = a->get<std::string>();
          else if (a->is_object()) call.arguments = a->dump();
          else bad_type(cp + ".function.arguments", "a string", *a);
        }
        cm.tool_calls.push_back(std::move(call));
      }
    }
    if (cm.role == "tool") {
      const json* id = field(m, "tool_call_id");
      if (!id) missing(p + ".tool_call_id");
      if (!id->is_string()) bad_type(p + ".tool_call_id", "a string", *id);
      cm.tool_call_id = id->get<std::string>();
      if (open_calls == SIZE_MAX)
        bad_value(p + ".role", "messages with role 'tool' must be a response to a preceding message with 'tool_calls'.");
      const std::vector<ToolCall>& calls = r.messages[open_calls].tool_calls;
      if (std::none_of(calls.begin(), calls.end(),
                       [&](const ToolCall& c) { return c.id == cm.tool_call_id; }))
        bad_value(p + ".tool_call_id", "'" + cm.tool_call_id.substr(0, 80) +
                                           "' is not the id of a call in 'tool_calls' of the preceding assistant message.");
    }
    cm.content = message_content(m, p + ".content", cm.role != "assistant");
    cm.content_null = cm.role == "assistant" && !field(m, "content") && !cm.tool_calls.empty();
    r.messages.push_back(std::move(cm));
    if (r.messages.back().role != "tool")
      open_calls = r.messages.back().tool_calls.empty() ? SIZE_MAX : r.messages.size() - 1;
  }
}

void parse_prompt(const json& body, CompletionRequest& r) {
  const json* p = field(body, "prompt");
  if (!p)
    throw ApiError(400, "Missing required parameter: 'prompt'.", "invalid_request_error", "prompt",
                   "missing_required_parameter");
  auto ids_of = [](const json& arr, const std::string& param) {
    std::vector<int32_t> ids;
    for (const json& t : arr) {
      if (!is_int(t)) bad_type(param, "a string, an array of strings, or an array of token ids", t);
      const int64_t v = t.is_number_unsigned() ? static_cast<int64_t>(std::min<uint64_t>(t.get<uint64_t>(), INT64_MAX))
                                               : t.get<int64_t>();
      if (v < 0 || v > INT32_MAX) bad_value(param, "token id " + std::to_string(v) + " is not in the vocabulary.");
      ids.push_back(static_cast<int32_t>(v));
    }
    return ids;
  };
  if (p->is_string()) {
    r.prompt = p->get<std::string>();
    return;
  }
  if (!p->is_array()) bad_type("prompt", "a string, an array of strings, or an array of token ids", *p);
  if (p->empty()) bad_value("prompt", "expected a non-empty prompt.");
  if ((*p)[0].is_string() || (*p)[0].is_array()) {
    // A list of prompts: each would be its own choice, like n > 1.
    if (p->size() > 1) unsupported("prompt", "Only one prompt per request is supported (got " + std::to_string(p->size()) + ").");
    const json& one = (*p)[0];
    if (one.is_string()) {
      r.prompt = one.get<std::string>();
      return;
    }
    if (one.empty()) bad_value("prompt", "expected a non-empty prompt.");
    r.prompt_ids = ids_of(one, "prompt");
  } else {
    r.prompt_ids = ids_of(*p, "prompt");
  }
  r.prompt_is_ids = true;
}

}  // namespace

json error_body(const ApiError& e) {
  json err = {{"message", e.message}, {"type", e.type}, {"param", nullptr}, {"code", nullptr}};
  if (!e.param.empty()) err["param"] = e.param;
  if (!e.code.empty()) err["code"] = e.code;
  return json{{"error", err}};
}

std::shared_ptr<const Grammar> json_object_grammar(const JsonSchemaOptions& opt) {
  auto make = [](JsonSchemaOptions::Whitespace ws) {
    JsonSchemaOptions o;
    o.whitespace = ws;
    o.max_string_length = kDefaultJsonMaxString;
    return Grammar::parse(json_any_gbnf(true, o));
  };
  static const std::shared_ptr<const Grammar> compact = make(JsonSchemaOptions::Whitespace::kCompact);
  static const std::shared_ptr<const Grammar> pretty = make(JsonSchemaOptions::Whitespace::kPretty);
  if (opt.max_string_length != kDefaultJsonMaxString) return Grammar::parse(json_any_gbnf(true, opt));
  return opt.whitespace == JsonSchemaOptions::Whitespace::kPretty ? pretty : compact;
}

JsonSchemaOptions json_schema_options(const json& body) {
  JsonSchemaOptions opt;
  // Strings the schema leaves unbounded end within 512 characters by
  // default, so that a reply under a schema finishes (a schema's own
  // maxLength or minLength wins; kvad.json_max_string_length 0 lifts it).
  opt.max_string_length = kDefaultJsonMaxString;
  const json* k = field(body, "kvad");
  if (!k) return opt;
  if (!k->is_object()) bad_type("kvad", "an object", *k);
  if (const json* ws = field(*k, "json_whitespace")) {
    if (!ws->is_string()) bad_type("kvad.json_whitespace", "a string", *ws);
    const std::string v = ws->get<std::string>();
    if (v == "pretty") opt.whitespace = JsonSchemaOptions::Whitespace::kPretty;
    else if (v != "compact")
      bad_value("kvad.json_whitespace", "expected 'compact' or 'pretty', got '" + v.substr(0, 40) + "'.");
  }
  opt.max_string_length = static_cast<uint32_t>(integer_in(*k, "json_max_string_length", 0, 10000, kDefaultJsonMaxString));
  return opt;
}

// response_format (OpenAI) and grammar / json_schema (llama.cpp's server):
// the grammar that constrains the output, or null. A schema or grammar the
// compiler refuses is a 400 naming the keyword (never ignored).
static std::shared_ptr<const Grammar> parse_grammar_fields(const json& body) {
  const JsonSchemaOptions opt = json_schema_options(body);
  std::shared_ptr<const Grammar> out;
  std::string from;
  auto set = [&](const std::string& param, auto make) {
    if (out) bad_value(param, "only one of response_format, grammar and json_schema may constrain the output (" +
                                  from + " is already given).");
    try {
      out = make();
    } catch (const SchemaError& e) {
      throw ApiError(400, std::string("Invalid schema for ") + param + ": " + e.what(), "invalid_request_error", param,
                     "invalid_schema");
    } catch (const GrammarError& e) {
      throw ApiError(400, std::string("Invalid ") + param + ": " + e.what(), "invalid_request_error", param,
                     "invalid_grammar");
    }
    from = param;
  };
  if (const json* rf = field(body, "response_format")) {
    if (!rf->is_object()) bad_type("response_format", "an object", *rf);
    const json* t = field(*rf, "type");
    if (!t || !t->is_string()) bad_type("response_format.type", "a string", t ? *t : json());
    const std::string type = t->get<std::string>();
    if (type == "json_object") {
      set("response_format", [&] { return json_object_grammar(opt); });
    } else if (type == "json_schema") {
      const json* js = field(*rf, "json_schema");
      if (!js || !js->is_object()) bad_type("response_format.json_schema", "an object", js ? *js : json());
      if (const json* name = field(*js, "name"); name && !name->is_string())
        bad_type("response_format.json_schema.name", "a string", *name);
      if (const json* strict = field(*js, "strict"); strict && !strict->is_boolean())
        bad_type("response_format.json_schema.strict", "a boolean", *strict);
      const json* schema = field(*js, "schema");
      if (!schema) throw ApiError(400, "Missing required parameter: 'response_format.json_schema.schema'.",
                                  "invalid_request_error", "response_format.json_schema.schema",
                                  "missing_required_parameter");
      set("response_format.json_schema.schema", [&] { return json_schema_grammar(*schema, opt); });
    } else if (type != "text") {
      unsupported("response_format", "response_format '" + type + "' is not supported; use 'text', 'json_object' or 'json_schema'.");
    }
  }
  if (const json* gr = field(body, "grammar")) {
    if (!gr->is_string()) bad_type("grammar", "a string", *gr);
    set("grammar", [&] { return Grammar::parse(gr->get<std::string>()); });
  }
  if (const json* js = field(body, "json_schema")) set("json_schema", [&] { return json_schema_grammar(*js, opt); });
  return out;
}

json parse_body(const std::string& body_text, bool openai_hint) {
  if (json_depth_over(body_text, kMaxJsonDepth) != 0)
    throw ApiError(400, "The JSON body of your request is nested more than " + std::to_string(kMaxJsonDepth) +
                            " levels deep.", "invalid_request_error", "", "invalid_json");
  json body;
  try {
    body = parse_json_ordered(body_text);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for numbers such as 1e400
    throw ApiError(400,
                   std::string("We could not parse the JSON body of your request. ") +
                       (openai_hint ? "(HINT: This likely means you aren't using your HTTP library correctly. The "
                                      "OpenAI API expects a JSON payload.) "
                                    : "") +
                       e.what(),
                   "invalid_request_error", "", "invalid_json");
  }
  if (!body.is_object())
    throw ApiError(400, "The request body must be a JSON object, got " + type_name(body) + ".", "invalid_request_error",
                   "", "invalid_type");
  return body;
}

void parse_sampling(const json& body, GenParams& g, const SamplerParams& defaults) {
  SamplerParams& sp = g.sampling;
  sp.temp = static_cast<float>(number_in(body, "temperature", 0, 2, defaults.temp));
  sp.top_p = static_cast<float>(number_in(body, "top_p", 0, 1, defaults.top_p));
  sp.presence_penalty = static_cast<float>(number_in(body, "presence_penalty", -2, 2, 0));
  sp.frequency_penalty = static_cast<float>(number_in(body, "frequency_penalty", -2, 2, 0));
  sp.top_k = static_cast<int32_t>(integer_in(body, "top_k", 0, INT32_MAX, defaults.top_k));
  sp.min_p = static_cast<float>(number_in(body, "min_p", 0, 1, defaults.min_p));
  sp.repeat_penalty = static_cast<float>(number_in(body, "repeat_penalty", 0.01, 100, defaults.repeat_penalty));
  if (const json* lb = field(body, "logit_bias")) {
    // {"token id as a string": bias in [-100, 100]} (OpenAI). Applied, not
    // ignored; bounded, because the sampler walks it at every token.
    if (!lb->is_object()) bad_type("logit_bias", "an object mapping token ids to numbers", *lb);
    if (lb->size() > kMaxLogitBias)
      bad_value("logit_bias", "expected at most " + std::to_string(kMaxLogitBias) + " entries, got " +
                                  std::to_string(lb->size()) + ".");
    for (const auto& [key, v] : lb->items()) {
      const bool digits = !key.empty() && key.size() <= 10 &&
                          key.find_first_not_of("0123456789") == std::string::npos;
      if (!digits || std::stoll(key) > INT32_MAX)
        bad_value("logit_bias", "keys must be token ids (non-negative integers as strings), got \"" +
                                    key.substr(0, 64) + "\".");
      if (!v.is_number()) bad_type("logit_bias", "an object mapping token ids to numbers", v);
      const double b = v.get<double>();
      if (!(b >= -100 && b <= 100)) bad_value("logit_bias", "a bias is a number in [-100, 100], got " + v.dump() + ".");
      sp.logit_bias.emplace_back(static_cast<int32_t>(std::stoll(key)), static_cast<float>(b));
    }
  }
  if (const json* seed = field(body, "seed")) {
    if (!is_int(*seed)) bad_type("seed", "an integer", *seed);
    sp.seed = seed->is_number_unsigned() ? seed->get<uint64_t>() : static_cast<uint64_t>(seed->get<int64_t>());
  } else {
    static thread_local std::mt19937_64 rng{std::random_device{}()};
    sp.seed = rng();
  }
}

ToolSpec tool_spec(const json* name, const json* description, const json* parameters, const std::string& p) {
  ToolSpec t;
  if (!name) missing(p + ".name");
  if (!name->is_string()) bad_type(p + ".name", "a string", *name);
  t.name = name->get<std::string>();
  const bool ok_chars = std::all_of(t.name.begin(), t.name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
  if (t.name.empty() || t.name.size() > 64 || !ok_chars)
    bad_value(p + ".name", "a function name is 1 to 64 of a-z, A-Z, 0-9, '_' and '-', got '" +
                               t.name.substr(0, 80) + "'.");
  if (description) {
    if (!description->is_string()) bad_type(p + ".description", "a string", *description);
    t.description = description->get<std::string>();
  }
  if (parameters) {
    if (!parameters->is_object()) bad_type(p + ".parameters", "an object", *parameters);
    t.parameters = *parameters;
  }
  return t;
}

void parse_tools(const json& body, CompletionRequest& r, bool flat) {
  if (const json* t = field(body, "tools")) {
    if (!t->is_array()) bad_type("tools", "an array", *t);
    if (t->size() > kMaxTools)
      bad_value("tools", "expected at most " + std::to_string(kMaxTools) + " tools, got " + std::to_string(t->size()) + ".");
    for (size_t i = 0; i < t->size(); ++i) {
      const json& tool = (*t)[i];
      const std::string p = "tools[" + std::to_string(i) + "]";
      if (!tool.is_object()) bad_type(p, "an object", tool);
      const json* ty = field(tool, "type");
      if (!ty) missing(p + ".type");
      if (!ty->is_string()) bad_type(p + ".type", "a string", *ty);
      if (*ty != "function")
        unsupported(p + ".type", "Tools of type '" + ty->get<std::string>() + "' are not supported; only 'function'.");
      const json* fn = &tool;
      std::string fp = p;
      if (!flat) {
        fn = field(tool, "function");
        fp = p + ".function";
        if (!fn) missing(fp);
        if (!fn->is_object()) bad_type(fp, "an object", *fn);
      }
      ToolSpec spec = tool_spec(field(*fn, "name"), field(*fn, "description"), field(*fn, "parameters"), fp);
      for (const ToolSpec& other : r.tools)
        if (other.name == spec.name) bad_value(fp + ".name", "two tools are named '" + spec.name + "'.");
      r.tools.push_back(std::move(spec));
    }
  }
  r.tool_choice.kind = r.tools.empty() ? ToolChoice::none : ToolChoice::automatic;
  if (const json* tc = field(body, "tool_choice")) {
    if (tc->is_string()) {
      const std::string v = tc->get<std::string>();
      if (v == "none") r.tool_choice.kind = ToolChoice::none;
      else if (v == "auto") r.tool_choice.kind = r.tools.empty() ? ToolChoice::none : ToolChoice::automatic;
      else if (v == "required") r.tool_choice.kind = ToolChoice::required;
      else bad_value("tool_choice", "expected 'none', 'auto', 'required' or a function, got '" + v.substr(0, 80) + "'.");
    } else if (tc->is_object()) {
      const json* ty = field(*tc, "type");
      if (!ty || !ty->is_string() || *ty != "function") bad_value("tool_choice.type", "expected 'function'.");
      const json* fn = flat ? tc : field(*tc, "function");
      if (!fn) missing("tool_choice.function");
      if (!fn->is_object()) bad_type("tool_choice.function", "an object", *fn);
      const json* name = field(*fn, "name");
      if (!name) missing(flat ? "tool_choice.name" : "tool_choice.function.name");
      if (!name->is_string()) bad_type("tool_choice.function.name", "a string", *name);
      r.tool_choice.kind = ToolChoice::named;
      r.tool_choice.name = name->get<std::string>();
      if (std::none_of(r.tools.begin(), r.tools.end(), [&](const ToolSpec& t) { return t.name == r.tool_choice.name; }))
        bad_value("tool_choice", "the function '" + r.tool_choice.name.substr(0, 80) + "' is not one of the tools.");
    } else {
      bad_type("tool_choice", "a string or an object", *tc);
    }
    if (r.tool_choice.kind == ToolChoice::required && r.tools.empty())
      bad_value("tool_choice", "'required' needs at least one tool in 'tools'.");
  }
  r.parallel_tool_calls = boolean(body, "parallel_tool_calls", true);
}

CompletionRequest parse_completion_request(const std::string& body_text, bool chat, const SamplerParams& defaults) {
  const json body = parse_body(body_text);
  CompletionRequest r;
  r.chat = chat;
  const json* model = field(body, "model");
  if (!model)
    throw ApiError(400, "Missing required parameter: 'model'.", "invalid_request_error", "model",
                   "missing_required_parameter");
  if (!model->is_string()) bad_type("model", "a string", *model);
  r.model = model->get<std::string>();

  if (chat)
    parse_messages(body, r);
  else
    parse_prompt(body, r);

  r.n = static_cast<int>(integer_in(body, "n", 1, kMaxChoices, 1));
  if (!chat && integer_in(body, "best_of", 1, 128, 1) != 1)
    unsupported("best_of", "Only best_of = 1 is supported.");
  if (!chat && boolean(body, "echo", false)) unsupported("echo", "echo is not supported.");
  if (const json* s = field(body, "suffix"); !chat && s) {
    if (!s->is_string()) bad_type("suffix", "a string", *s);
    if (!s->get<std::string>().empty()) unsupported("suffix", "suffix is not supported.");
  }
  // logprobs: chat takes `logprobs: true` and `top_logprobs` 0..20; the
  // legacy endpoint takes `logprobs: N` alternatives (OpenAI allows 0..5,
  // llama.cpp more: 0..20 here).
  if (chat) {
    const bool on = boolean(body, "logprobs", false);
    const int64_t top = integer_in(body, "top_logprobs", 0, kMaxTopLogprobs, -1);
    if (top >= 0 && !on) bad_value("top_logprobs", "top_logprobs needs logprobs: true.");
    if (on) r.gen.logprobs = static_cast<int32_t>(std::max<int64_t>(top, 0));
  } else {
    r.gen.logprobs = static_cast<int32_t>(integer_in(body, "logprobs", 0, kMaxTopLogprobs, -1));
  }
  if (chat) {
    parse_tools(body, r);
    if (const json* rf = field(body, "reasoning_format")) {
      if (!rf->is_string()) bad_type("reasoning_format", "a string", *rf);
      const std::string v = rf->get<std::string>();
      if (v != "none" && v != "auto" && v != "deepseek" && v != "deepseek-legacy")
        bad_value("reasoning_format", "expected 'none', 'auto' or 'deepseek', got '" + v.substr(0, 80) + "'.");
      r.reasoning = v != "none";
    }
  } else if (const json* t = field(body, "tools")) {
    if (!t->is_array()) bad_type("tools", "an array", *t);
    if (!t->empty()) unsupported("tools", "Tools are for /v1/chat/completions, not /v1/completions.");
  }
  if (const json* f = field(body, "functions"); f && !(f->is_array() && f->empty()))
    unsupported("functions", "Function calling is not supported by this server.");
  GenParams& g = r.gen;
  g.grammar = parse_grammar_fields(body);
  int64_t max_tokens = integer_in(body, "max_tokens", 0, INT32_MAX, -1);
  if (chat) max_tokens = integer_in(body, "max_completion_tokens", 0, INT32_MAX, max_tokens);
  if (!chat && max_tokens < 0) max_tokens = 16;  // the legacy endpoint's documented default
  g.max_tokens = static_cast<int32_t>(max_tokens);
  parse_sampling(body, g, defaults);
  if (const json* stop = field(body, "stop")) {
    // Each stop sequence is matched against the text after every token: bound its length.
    auto check_len = [](const std::string& s) {
      if (s.size() > kMaxStopBytes)
        bad_value("stop", "a stop sequence is at most " + std::to_string(kMaxStopBytes) + " bytes, got " +
                              std::to_string(s.size()) + ".");
    };
    if (stop->is_string()) {
      g.stop.push_back(stop->get<std::string>());
      check_len(g.stop.back());
    } else if (stop->is_array()) {
      if (stop->size() > 16) bad_value("stop", "expected at most 16 stop sequences, got " + std::to_string(stop->size()) + ".");
      for (const json& s : *stop) {
        if (!s.is_string()) bad_type("stop", "a string or an array of strings", s);
        g.stop.push_back(s.get<std::string>());
        check_len(g.stop.back());
      }
    } else {
      bad_type("stop", "a string or an array of strings", *stop);
    }
  }

  r.stream = boolean(body, "stream", false);
  if (const json* so = field(body, "stream_options")) {
    if (!so->is_object()) bad_type("stream_options", "an object", *so);
    if (const json* iu = field(*so, "include_usage")) {
      if (!iu->is_boolean()) bad_type("stream_options.include_usage", "a boolean", *iu);
      r.include_usage = iu->get<bool>();
    }
  }
  return r;
}

json usage_json(const GenUsage& u) {
  return json{{"prompt_tokens", u.prompt_tokens},
              {"completion_tokens", u.completion_tokens},
              {"total_tokens", u.prompt_tokens + u.completion_tokens},
              {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

json response_base(const ResponseMeta& m, bool chunk) {
  return json{{"id", m.id},
              {"object", m.chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion"},
              {"created", m.created},
              {"model", m.model}};
}

json logprobs_json(bool chat, const std::vector<GenTokenLogprobs>& tokens,
                   const std::function<std::string(int32_t)>& piece, size_t* text_offset) {
  auto bytes = [](const std::string& t) {
    json b = json::array();
    for (unsigned char c : t) b.push_back(static_cast<int>(c));
    return b;
  };
  if (chat) {
    json content = json::array();
    for (const GenTokenLogprobs& t : tokens) {
      const std::string p = piece(t.id);
      json top = json::array();
      for (const TokenLogprob& a : t.top) {
        const std::string ap = piece(a.id);
        top.push_back({{"token", ap}, {"logprob", a.logprob}, {"bytes", bytes(ap)}});
      }
      content.push_back({{"token", p}, {"logprob", t.logprob}, {"bytes", bytes(p)}, {"top_logprobs", top}});
    }
    return json{{"content", content}, {"refusal", nullptr}};
  }
  json toks = json::array(), lps = json::array(), tops = json::array(), offs = json::array();
  for (const GenTokenLogprobs& t : tokens) {
    const std::string p = piece(t.id);
    toks.push_back(p);
    lps.push_back(t.logprob);
    json top = json::object();
    for (const TokenLogprob& a : t.top) {
      const std::string ap = piece(a.id);
      if (!top.contains(ap)) top[ap] = a.logprob;  // two ids with one text: the likelier
    }
    tops.push_back(top);
    offs.push_back(*text_offset);
    *text_offset += p.size();
  }
  return json{{"tokens", toks}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offs}};
}

json completion_response(const ResponseMeta& m, const std::string& text, const std::string& finish_reason,
                         const GenUsage& usage, const json& logprobs) {
  json out = response_base(m, false);
  json choice = {{"index", 0}};
  if (m.chat)
    choice["message"] = {{"role", "assistant"}, {"content", text}, {"refusal", nullptr}};
  else
    choice["text"] = text;
  choice["logprobs"] = logprobs;
  choice["finish_reason"] = finish_reason;
  out["choices"] = json::array({choice});
  out["usage"] = usage_json(usage);
  return out;
}

json completion_chunk(const ResponseMeta& m, const std::string& text, const json& finish_reason, bool include_usage,
                      const json& logprobs) {
  json c = response_base(m, true);
  json choice = {{"index", 0}};
  if (m.chat) {
    choice["delta"] = finish_reason.is_null() ? json{{"content", text}} : json::object();
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = logprobs;
  choice["finish_reason"] = finish_reason;
  c["choices"] = json::array({choice});
  if (include_usage) c["usage"] = nullptr;
  return c;
}

json chat_role_chunk(const ResponseMeta& m, bool include_usage) {
  json c = response_base(m, true);
  c["choices"] = json::array({{{"index", 0},
                               {"delta", {{"role", "assistant"}, {"content", ""}, {"refusal", nullptr}}},
                               {"logprobs", nullptr},
                               {"finish_reason", nullptr}}});
  if (include_usage) c["usage"] = nullptr;
  return c;
}

json usage_chunk(const ResponseMeta& m, const GenUsage& usage) {
  json u = response_base(m, true);
  u["choices"] = json::array();
  u["usage"] = usage_json(usage);
  return u;
}

json model_object(const std::string& id, int64_t created) {
  return json{{"id", id}, {"object", "model"}, {"created", created}, {"owned_by", "kvad"}};
}

json model_list(const std::string& id, int64_t created) {
  return json{{"object", "list"}, {"data", json::array({model_object(id, created)})}};
}

ApiError generation_error(const std::string& error) {
  // The request's own grammar could not go on (no token continues it, or it
  // is too ambiguous for the matcher's caps): the client's input.
  // Admission (the grammar's first state) is the same: a grammar of more
  // alternatives than the matcher keeps parse stacks for fails there.
  std::string_view g = error;
  if (g.rfind("admission failed: ", 0) == 0) g.remove_prefix(std::string_view("admission failed: ").size());
  if (g.rfind("grammar:", 0) == 0)
    return ApiError(400, "The output constraint (grammar, JSON schema or tool parameters) could not be followed: " +
                             std::string(g), "invalid_request_error", "", "invalid_grammar");
  const bool down = error.find("shutting down") != std::string::npos;
  return ApiError(down ? 503 : 500, "The generation failed: " + error, "server_error", "",
                  down ? "server_shutting_down" : "internal_error");
}

std::string new_response_id(const std::string& prefix) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* hex = "0123456789abcdef";
  std::string id = prefix;
  for (int i = 0; i < 24; ++i) id += hex[rng() & 15];
  return id;
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace kvad::server
