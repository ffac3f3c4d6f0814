#include "server/responses.h"

#include "engine/grammar/json_schema.h"

namespace kvad::server {

using json = nlohmann::ordered_json;

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& message, const std::string& code = "invalid_value") {
  throw ApiError(400, "Invalid value for '" + param + "': " + message, "invalid_request_error", param, code);
}

const json& required(const json& o, const char* name, const std::string& param) {
  const json* v = field(o, name);
  if (!v)
    throw ApiError(400, "Missing required parameter: '" + param + "'.", "invalid_request_error", param,
                   "missing_required_parameter");
  return *v;
}

std::string string_of(const json& v, const std::string& param) {
  if (!v.is_string()) bad(param, "expected a string.", "invalid_type");
  return v.get<std::string>();
}

/// A message's content: a string, or input_text / output_text parts joined.
std::string content_text(const json& c, const std::string& param) {
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) bad(param, "expected a string or an array of content parts.", "invalid_type");
  std::string out;
  for (size_t i = 0; i < c.size(); ++i) {
    const std::string p = param + "[" + std::to_string(i) + "]";
    if (!c[i].is_object()) bad(p, "expected an object.", "invalid_type");
    const std::string type = string_of(required(c[i], "type", p + ".type"), p + ".type");
    if (type != "input_text" && type != "output_text" && type != "text")
      throw ApiError(400, "Content parts of type '" + type.substr(0, 40) + "' are not supported; this server takes text only.",
                     "invalid_request_error", p + ".type", "unsupported_value");
    out += string_of(required(c[i], "text", p + ".text"), p + ".text");
  }
  return out;
}

void parse_input(const json& body, CompletionRequest& r) {
  const json& input = required(body, "input", "input");
  if (input.is_string()) {
    r.messages.push_back({"user", input.get<std::string>(), false, {}, ""});
    return;
  }
  if (!input.is_array()) bad("input", "expected a string or an array of items.", "invalid_type");
  if (input.empty()) bad("input", "expected at least one item.");
  for (size_t i = 0; i < input.size(); ++i) {
    const json& it = input[i];
    const std::string p = "input[" + std::to_string(i) + "]";
    if (!it.is_object()) bad(p, "expected an object.", "invalid_type");
    std::string type = "message";
    if (const json* t = field(it, "type")) type = string_of(*t, p + ".type");
    if (type == "message") {
      ChatMessage m;
      m.role = string_of(required(it, "role", p + ".role"), p + ".role");
      if (m.role == "developer") m.role = "system";
      if (m.role != "user" && m.role != "assistant" && m.role != "system")
        bad(p + ".role", "expected 'user', 'assistant', 'system' or 'developer'.");
      m.content = content_text(required(it, "content", p + ".content"), p + ".content");
      r.messages.push_back(std::move(m));
    } else if (type == "function_call") {
      ToolCall c;
      c.id = string_of(required(it, "call_id", p + ".call_id"), p + ".call_id");
      c.name = string_of(required(it, "name", p + ".name"), p + ".name");
      c.arguments = string_of(required(it, "arguments", p + ".arguments"), p + ".arguments");
      // Calls in a row are one assistant turn.
      if (r.messages.empty() || r.messages.back().role != "assistant")
        r.messages.push_back({"assistant", "", true, {}, ""});
      r.messages.back().tool_calls.push_back(std::move(c));
      r.messages.back().content_null = r.messages.back().content.empty();
    } else if (type == "function_call_output") {
      ChatMessage m;
      m.role = "tool";
      m.tool_call_id = string_of(required(it, "call_id", p + ".call_id"), p + ".call_id");
      const json& out = required(it, "output", p + ".output");
      m.content = out.is_string() ? out.get<std::string>() : content_text(out, p + ".output");
      r.messages.push_back(std::move(m));
    } else if (type == "reasoning") {
      // Earlier reasoning: dropped from past turns, as chat templates do.
    } else {
      throw ApiError(400, "Input items of type '" + type.substr(0, 40) + "' are not supported by this server.",
                     "invalid_request_error", p + ".type", "unsupported_value");
    }
  }
}

std::string hex_id(const std::string& prefix) { return new_response_id(prefix); }

json usage_of(const GenUsage& u) {
  return json{{"input_tokens", u.prompt_tokens},
              {"input_tokens_details", {{"cached_tokens", u.cached_tokens}}},
              {"output_tokens", u.completion_tokens},
              {"output_tokens_details", {{"reasoning_tokens", 0}}},
              {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

json base_object(const std::string& id, int64_t created_at, const std::string& model, const ResponsesEcho& echo) {
  json o = {{"id", id},       {"object", "response"}, {"created_at", created_at}, {"status", "in_progress"},
            {"model", model}, {"output", json::array()}, {"error", nullptr}, {"incomplete_details", nullptr}};
  for (const auto& [k, v] : echo.fields.items()) o[k] = v;
  return o;
}

void finish_object(json& o, const std::string& finish_reason, const GenUsage& usage) {
  const bool cut = finish_reason == "length";
  o["status"] = cut ? "incomplete" : "completed";
  o["incomplete_details"] = cut ? json{{"reason", "max_output_tokens"}} : json(nullptr);
  o["usage"] = usage_of(usage);
}

json reasoning_item(const std::string& id, const std::string& text, const char* status) {
  return json{{"type", "reasoning"},
              {"id", id},
              {"summary", json::array()},
              {"content", json::array({{{"type", "reasoning_text"}, {"text", text}}})},
              {"status", status}};
}

json text_part(const std::string& text) {
  return json{{"type", "output_text"}, {"text", text}, {"annotations", json::array()}, {"logprobs", json::array()}};
}

json message_item(const std::string& id, const std::string& text, bool done) {
  return json{{"type", "message"},
              {"id", id},
              {"status", done ? "completed" : "in_progress"},
              {"role", "assistant"},
              {"content", done ? json::array({text_part(text)}) : json::array()}};
}

json call_item(const std::string& id, const ToolCall& c, bool done) {
  return json{{"type", "function_call"},
              {"id", id},
              {"call_id", c.id},
              {"name", c.name},
              {"arguments", done ? c.arguments : ""},
              {"status", done ? "completed" : "in_progress"}};
}

}  // namespace

CompletionRequest parse_responses_request(const std::string& body_text, ResponsesEcho* echo) {
  const json body = parse_body(body_text);
  CompletionRequest r;
  r.chat = true;
  r.model = string_of(required(body, "model", "model"), "model");
  if (field(body, "previous_response_id") || field(body, "conversation"))
    throw ApiError(400, "This server is stateless: previous_response_id and conversation are not supported; send "
                        "the whole conversation in 'input'.",
                   "invalid_request_error", field(body, "conversation") ? "conversation" : "previous_response_id",
                   "unsupported_value");
  json& e = echo->fields;
  if (const json* ins = field(body, "instructions")) {
    r.messages.push_back({"system", string_of(*ins, "instructions"), false, {}, ""});
    e["instructions"] = *ins;
  } else {
    e["instructions"] = nullptr;
  }
  parse_input(body, r);
  parse_tools(body, r, /*flat=*/true);
  if (const json* mt = field(body, "max_output_tokens")) {
    if (!(mt->is_number_integer() || mt->is_number_unsigned())) bad("max_output_tokens", "expected an integer.", "invalid_type");
    if (mt->is_number_integer() && mt->get<int64_t>() < 1) bad("max_output_tokens", "expected an integer >= 1.");
    r.gen.max_tokens = static_cast<int32_t>(std::min<uint64_t>(mt->is_number_unsigned() ? mt->get<uint64_t>() : mt->get<int64_t>(), INT32_MAX));
  }
  parse_sampling(body, r.gen);
  if (const json* t = field(body, "text")) {
    if (!t->is_object()) bad("text", "expected an object.", "invalid_type");
    if (const json* f = field(*t, "format")) {
      const json* ty = f->is_object() ? field(*f, "type") : nullptr;
      if (!ty || !ty->is_string()) bad("text.format.type", "expected a string.", "invalid_type");
      // Structured output as chat's response_format, in the Responses API's
      // flat shape: {"type": "json_schema", "name", "schema", "strict"} or
      // {"type": "json_object"}; a schema the compiler refuses is a 400
      // naming the keyword.
      try {
        if (*ty == "json_object") {
          r.gen.grammar = json_object_grammar(json_schema_options(body));
        } else if (*ty == "json_schema") {
          const json* schema = field(*f, "schema");
          if (!schema) bad("text.format.schema", "text.format json_schema needs a schema.", "missing_required_parameter");
          if (const json* name = field(*f, "name"); name && !name->is_string())
            bad("text.format.name", "expected a string.", "invalid_type");
          r.gen.grammar = json_schema_grammar(*schema, json_schema_options(body));
        } else if (*ty != "text") {
          throw ApiError(400, "text.format '" + ty->get<std::string>().substr(0, 40) +
                                  "' is not supported; use 'text', 'json_object' or 'json_schema'.",
                         "invalid_request_error", "text.format", "unsupported_value");
        }
      } catch (const SchemaError& err) {
        throw ApiError(400, std::string("Invalid schema for text.format.schema: ") + err.what(),
                       "invalid_request_error", "text.format.schema", "invalid_schema");
      } catch (const GrammarError& err) {
        throw ApiError(400, std::string("Invalid text.format: ") + err.what(), "invalid_request_error",
                       "text.format", "invalid_grammar");
      }
      e["text"] = {{"format", *f}};
    }
  }
  if (const json* s = field(body, "stream")) {
    if (!s->is_boolean()) bad("stream", "expected a boolean.", "invalid_type");
    r.stream = s->get<bool>();
  }
  e["max_output_tokens"] = r.gen.max_tokens >= 0 ? json(r.gen.max_tokens) : json(nullptr);
  e["parallel_tool_calls"] = r.parallel_tool_calls;
  e["temperature"] = r.gen.sampling.temp;
  e["top_p"] = r.gen.sampling.top_p;
  e["tool_choice"] = field(body, "tool_choice") ? body["tool_choice"] : json("auto");
  e["tools"] = field(body, "tools") ? body["tools"] : json::array();
  if (!e.contains("text")) e["text"] = {{"format", {{"type", "text"}}}};
  e["store"] = false;
  e["truncation"] = "disabled";
  e["metadata"] = json::object();
  return r;
}

json responses_object(const std::string& id, int64_t created_at, const std::string& model, const ParsedOutput& out,
                      const std::string& finish_reason, const GenUsage& usage, const ResponsesEcho& echo) {
  json o = base_object(id, created_at, model, echo);
  json items = json::array();
  if (!out.reasoning.empty()) items.push_back(reasoning_item(hex_id("rs_"), out.reasoning, "completed"));
  if (!out.content.empty() || out.calls.empty()) items.push_back(message_item(hex_id("msg_"), out.content, true));
  for (const ToolCall& c : out.calls) items.push_back(call_item(hex_id("fc_"), c, true));
  o["output"] = items;
  finish_object(o, finish_reason, usage);
  return o;
}

namespace {

class ResponsesEmitter : public StreamEmitter {
 public:
  ResponsesEmitter(std::string id, int64_t created_at, std::string model, ResponsesEcho echo, bool forced)
      : obj_(base_object(id, created_at, model, echo)), forced_(forced) {}

  std::string begin() override {
    std::string s = event("response.created", {{"response", obj_}});
    return s + event("response.in_progress", {{"response", obj_}});
  }

  std::string delta(const OutputDelta& d) override {
    std::string s;
    if (!d.reasoning.empty()) {
      if (open_ != Open::reasoning) {
        s += close();
        open_ = Open::reasoning;
        item_id_ = hex_id("rs_");
        text_.clear();
        s += event("response.output_item.added",
                   {{"output_index", index_}, {"item", reasoning_item(item_id_, "", "in_progress")}});
      }
      text_ += d.reasoning;
      s += event("response.reasoning_text.delta",
                 {{"item_id", item_id_}, {"output_index", index_}, {"content_index", 0}, {"delta", d.reasoning}});
    }
    if (!d.content.empty()) {
      if (open_ != Open::message) {
        s += close();
        open_ = Open::message;
        item_id_ = hex_id("msg_");
        text_.clear();
        s += event("response.output_item.added", {{"output_index", index_}, {"item", message_item(item_id_, "", false)}});
        s += event("response.content_part.added",
                   {{"item_id", item_id_}, {"output_index", index_}, {"content_index", 0}, {"part", text_part("")}});
      }
      text_ += d.content;
      s += event("response.output_text.delta", {{"item_id", item_id_},
                                                {"output_index", index_},
                                                {"content_index", 0},
                                                {"delta", d.content},
                                                {"logprobs", json::array()}});
    }
    for (const auto& [i, call] : d.calls) {
      (void)i;
      s += close();
      const std::string fid = hex_id("fc_");
      s += event("response.output_item.added", {{"output_index", index_}, {"item", call_item(fid, call, false)}});
      s += event("response.function_call_arguments.delta",
                 {{"item_id", fid}, {"output_index", index_}, {"delta", call.arguments}});
      s += event("response.function_call_arguments.done",
                 {{"item_id", fid}, {"output_index", index_}, {"name", call.name}, {"arguments", call.arguments}});
      const json item = call_item(fid, call, true);
      s += event("response.output_item.done", {{"output_index", index_}, {"item", item}});
      obj_["output"].push_back(item);
      ++index_;
      ++calls_;
    }
    return s;
  }

  std::string end(const GenEvent& last, const OutputStream& os) override {
    if (forced_ && os.n_calls() == 0 && last.finish_reason != "length")
      return error(ApiError(500, "tool_choice requires a function call but the model's reply holds none that parses.",
                            "server_error", "tool_choice", "tool_call_failed"));
    std::string s = close();  // (each event() call in its own statement: sequence numbers in order)
    if (obj_["output"].empty()) {  // an empty reply is still one message
      const std::string mid = hex_id("msg_");
      s += event("response.output_item.added", {{"output_index", 0}, {"item", message_item(mid, "", false)}});
      const json item = message_item(mid, "", true);
      s += event("response.output_item.done", {{"output_index", 0}, {"item", item}});
      obj_["output"].push_back(item);
    }
    finish_object(obj_, last.finish_reason, last.usage);
    return s += event(obj_["status"] == "completed" ? "response.completed" : "response.incomplete", {{"response", obj_}});
  }

  std::string error(const ApiError& e) override {
    return event("error", {{"code", e.code.empty() ? json(nullptr) : json(e.code)},
                           {"message", e.message},
                           {"param", e.param.empty() ? json(nullptr) : json(e.param)}});
  }

 private:
  enum class Open { none, reasoning, message };

  std::string event(const std::string& type, json body) {
    json j = {{"type", type}, {"sequence_number", seq_++}};
    for (auto& [k, v] : body.items()) j[k] = std::move(v);
    return sse_event(type, j);
  }

  std::string close() {
    std::string s;
    if (open_ == Open::reasoning) {
      s += event("response.reasoning_text.done",
                 {{"item_id", item_id_}, {"output_index", index_}, {"content_index", 0}, {"text", text_}});
      const json item = reasoning_item(item_id_, text_, "completed");
      s += event("response.output_item.done", {{"output_index", index_}, {"item", item}});
      obj_["output"].push_back(item);
      ++index_;
    } else if (open_ == Open::message) {
      s += event("response.output_text.done", {{"item_id", item_id_},
                                               {"output_index", index_},
                                               {"content_index", 0},
                                               {"text", text_},
                                               {"logprobs", json::array()}});
      s += event("response.content_part.done",
                 {{"item_id", item_id_}, {"output_index", index_}, {"content_index", 0}, {"part", text_part(text_)}});
      const json item = message_item(item_id_, text_, true);
      s += event("response.output_item.done", {{"output_index", index_}, {"item", item}});
      obj_["output"].push_back(item);
      ++index_;
    }
    open_ = Open::none;
    return s;
  }

  json obj_;
  bool forced_;
  Open open_ = Open::none;
  std::string item_id_, text_;
  int index_ = 0, calls_ = 0;
  int64_t seq_ = 0;
};

}  // namespace

std::unique_ptr<StreamEmitter> responses_emitter(const std::string& id, int64_t created_at, const std::string& model,
                                                 const ResponsesEcho& echo, bool forced) {
  return std::make_unique<ResponsesEmitter>(id, created_at, model, echo, forced);
}

}  // namespace kvad::server
