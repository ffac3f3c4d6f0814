#include "server/anthropic.h"
#include "server/json_parse.h"

namespace kvad::server {

using json = nlohmann::ordered_json;

namespace {

// Anthropic's errors carry no param or code; the param is kept for logs and
// tests (ApiError), and the message names the field.
[[noreturn]] void bad(const std::string& param, const std::string& message, const std::string& code = "invalid_value") {
  throw ApiError(400, param + ": " + message, "invalid_request_error", param, code);
}

const json& required(const json& o, const char* name, const std::string& param) {
  const json* v = field(o, name);
  if (!v) bad(param, "Field required", "missing_required_parameter");
  return *v;
}

std::string string_of(const json& v, const std::string& param) {
  if (!v.is_string()) bad(param, "Input should be a valid string", "invalid_type");
  return v.get<std::string>();
}

/// Text of a string or of an array of text blocks (a system prompt, a
/// tool_result's content).
std::string text_of(const json& v, const std::string& param) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) bad(param, "Input should be a valid string or a list of text blocks", "invalid_type");
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string p = param + "." + std::to_string(i);
    const json& b = v[i];
    if (!b.is_object()) bad(p, "Input should be an object", "invalid_type");
    const std::string type = string_of(required(b, "type", p + ".type"), p + ".type");
    if (type != "text") bad(p + ".type", "blocks of type '" + type.substr(0, 40) + "' are not supported here; text only",
                            "unsupported_value");
    if (!out.empty()) out += "\n";
    out += string_of(required(b, "text", p + ".text"), p + ".text");
  }
  return out;
}

void parse_message(const json& m, const std::string& p, CompletionRequest& r) {
  if (!m.is_object()) bad(p, "Input should be an object", "invalid_type");
  const std::string role = string_of(required(m, "role", p + ".role"), p + ".role");
  if (role != "user" && role != "assistant") bad(p + ".role", "Input should be 'user' or 'assistant'");
  const json& content = required(m, "content", p + ".content");
  ChatMessage text_msg;
  text_msg.role = role;
  if (content.is_string()) {
    text_msg.content = content.get<std::string>();
    r.messages.push_back(std::move(text_msg));
    return;
  }
  if (!content.is_array()) bad(p + ".content", "Input should be a valid string or a list of blocks", "invalid_type");
  std::vector<ChatMessage> results;
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string bp = p + ".content." + std::to_string(i);
    const json& b = content[i];
    if (!b.is_object()) bad(bp, "Input should be an object", "invalid_type");
    const std::string type = string_of(required(b, "type", bp + ".type"), bp + ".type");
    if (type == "text") {
      if (!text_msg.content.empty()) text_msg.content += "\n";
      text_msg.content += string_of(required(b, "text", bp + ".text"), bp + ".text");
    } else if (type == "tool_use" && role == "assistant") {
      ToolCall c;
      c.id = string_of(required(b, "id", bp + ".id"), bp + ".id");
      c.name = string_of(required(b, "name", bp + ".name"), bp + ".name");
      const json* input = field(b, "input");
      if (input && !input->is_object()) bad(bp + ".input", "Input should be an object", "invalid_type");
      c.arguments = input ? input->dump() : "{}";
      text_msg.tool_calls.push_back(std::move(c));
    } else if (type == "tool_result" && role == "user") {
      ChatMessage t;
      t.role = "tool";
      t.tool_call_id = string_of(required(b, "tool_use_id", bp + ".tool_use_id"), bp + ".tool_use_id");
      if (const json* c = field(b, "content")) t.content = text_of(*c, bp + ".content");
      if (const json* e = field(b, "is_error"); e && e->is_boolean() && e->get<bool>()) t.content = "Error: " + t.content;
      results.push_back(std::move(t));
    } else if (type == "thinking" || type == "redacted_thinking") {
      // Earlier reasoning: templates drop it from past turns; so does kvad.
    } else {
      bad(bp + ".type", "content blocks of type '" + type.substr(0, 40) + "' are not supported by this server" +
                            (type == "tool_use" || type == "tool_result" ? " in a " + role + " turn" : ""),
          "unsupported_value");
    }
  }
  for (ChatMessage& t : results) r.messages.push_back(std::move(t));
  if (!text_msg.content.empty() || !text_msg.tool_calls.empty() || results.empty()) {
    text_msg.content_null = text_msg.content.empty() && !text_msg.tool_calls.empty();
    r.messages.push_back(std::move(text_msg));
  }
}

/// Anthropic's tools and tool_choice, checked as OpenAI's are.
void parse_anthropic_tools(const json& body, CompletionRequest& r) {
  if (const json* t = field(body, "tools")) {
    if (!t->is_array()) bad("tools", "Input should be a valid list", "invalid_type");
    if (t->size() > kMaxTools) bad("tools", "at most " + std::to_string(kMaxTools) + " tools");
    for (size_t i = 0; i < t->size(); ++i) {
      const json& tool = (*t)[i];
      const std::string p = "tools." + std::to_string(i);
      if (!tool.is_object()) bad(p, "Input should be an object", "invalid_type");
      if (const json* ty = field(tool, "type"); ty && !(ty->is_string() && (*ty == "custom" || *ty == "function")))
        bad(p + ".type", "server tools are not supported; only custom tools", "unsupported_value");
      ToolSpec spec = tool_spec(field(tool, "name"), field(tool, "description"), &required(tool, "input_schema", p + ".input_schema"), p);
      for (const ToolSpec& o : r.tools)
        if (o.name == spec.name) bad(p + ".name", "tool names must be unique");
      r.tools.push_back(std::move(spec));
    }
  }
  r.tool_choice.kind = r.tools.empty() ? ToolChoice::none : ToolChoice::automatic;
  if (const json* tc = field(body, "tool_choice")) {
    if (!tc->is_object()) bad("tool_choice", "Input should be an object", "invalid_type");
    const std::string type = string_of(required(*tc, "type", "tool_choice.type"), "tool_choice.type");
    if (type == "auto") {
    } else if (type == "none") {
      r.tool_choice.kind = ToolChoice::none;
    } else if (type == "any") {
      r.tool_choice.kind = ToolChoice::required;
    } else if (type == "tool") {
      r.tool_choice.kind = ToolChoice::named;
      r.tool_choice.name = string_of(required(*tc, "name", "tool_choice.name"), "tool_choice.name");
      bool found = false;
      for (const ToolSpec& t : r.tools) found = found || t.name == r.tool_choice.name;
      if (!found) bad("tool_choice.name", "the tool '" + r.tool_choice.name.substr(0, 80) + "' is not one of the tools");
    } else {
      bad("tool_choice.type", "Input should be 'auto', 'any', 'tool' or 'none'");
    }
    if ((type == "any" || type == "tool") && r.tools.empty()) bad("tool_choice", "needs at least one tool in 'tools'");
    if (type != "none" && r.tools.empty()) r.tool_choice.kind = ToolChoice::none;
    if (const json* d = field(*tc, "disable_parallel_tool_use")) {
      if (!d->is_boolean()) bad("tool_choice.disable_parallel_tool_use", "Input should be a valid boolean", "invalid_type");
      r.parallel_tool_calls = !d->get<bool>();
    }
  }
}

double number(const json& body, const char* name, double lo, double hi, double dflt) {
  const json* v = field(body, name);
  if (!v) return dflt;
  if (!v->is_number()) bad(name, "Input should be a valid number", "invalid_type");
  const double x = v->get<double>();
  if (!(x >= lo && x <= hi)) bad(name, "Input should be in [" + json(lo).dump() + ", " + json(hi).dump() + "]");
  return x;
}

std::string tool_use_id(const std::string& call_id) {
  return "toolu_" + (call_id.rfind("call_", 0) == 0 ? call_id.substr(5) : call_id);
}

std::string stop_reason(const std::string& finish_reason, const std::string& stop_sequence, bool calls) {
  if (calls) return "tool_use";
  if (finish_reason == "length") return "max_tokens";
  if (!stop_sequence.empty()) return "stop_sequence";
  return "end_turn";
}

json usage_of(const GenUsage& u) {
  return json{{"input_tokens", u.prompt_tokens},
              {"output_tokens", u.completion_tokens},
              {"cache_read_input_tokens", u.cached_tokens}};
}

}  // namespace

CompletionRequest parse_anthropic_request(const std::string& body_text) {
  const json body = parse_body(body_text, /*openai_hint=*/false);
  CompletionRequest r;
  r.chat = true;
  r.model = string_of(required(body, "model", "model"), "model");
  const json& mt = required(body, "max_tokens", "max_tokens");
  if (!(mt.is_number_integer() || mt.is_number_unsigned())) bad("max_tokens", "Input should be a valid integer", "invalid_type");
  // Non-negative values parse as unsigned: 2^63 and above must not be read as int64 (negative).
  if (mt.is_number_unsigned() ? mt.get<uint64_t>() < 1 : mt.get<int64_t>() < 1)
    bad("max_tokens", "Input should be greater than or equal to 1");
  r.gen.max_tokens = static_cast<int32_t>(std::min<uint64_t>(mt.is_number_unsigned() ? mt.get<uint64_t>() : mt.get<int64_t>(), INT32_MAX));

  if (const json* sys = field(body, "system")) {
    ChatMessage m;
    m.role = "system";
    m.content = text_of(*sys, "system");
    r.messages.push_back(std::move(m));
  }
  const json& msgs = required(body, "messages", "messages");
  if (!msgs.is_array()) bad("messages", "Input should be a valid list", "invalid_type");
  if (msgs.empty()) bad("messages", "at least one message is required");
  for (size_t i = 0; i < msgs.size(); ++i) parse_message(msgs[i], "messages." + std::to_string(i), r);
  parse_anthropic_tools(body, r);

  // Anthropic's temperature is [0, 1]; the rest as the OpenAI parser checks them.
  number(body, "temperature", 0, 1, 1);
  json sampling = json::object();
  for (const char* k : {"temperature", "top_p", "top_k"})
    if (const json* v = field(body, k)) sampling[k] = *v;
  try {
    parse_sampling(sampling, r.gen);
  } catch (const ApiError& e) {
    bad(e.param, e.message, e.code);
  }
  if (const json* stop = field(body, "stop_sequences")) {
    if (!stop->is_array()) bad("stop_sequences", "Input should be a valid list", "invalid_type");
    if (stop->size() > 16) bad("stop_sequences", "at most 16 stop sequences");
    for (const json& s : *stop) {
      r.gen.stop.push_back(string_of(s, "stop_sequences"));
      if (r.gen.stop.back().size() > kMaxStopBytes)
        bad("stop_sequences", "a stop sequence is at most " + std::to_string(kMaxStopBytes) + " bytes");
      if (r.gen.stop.back().empty()) bad("stop_sequences", "a stop sequence cannot be empty");
    }
  }
  if (const json* s = field(body, "stream")) {
    if (!s->is_boolean()) bad("stream", "Input should be a valid boolean", "invalid_type");
    r.stream = s->get<bool>();
  }
  return r;
}

json anthropic_error_body(const ApiError& e) {
  const char* type = "api_error";
  switch (e.status) {
    case 400: case 405: case 411: case 415: case 501: type = "invalid_request_error"; break;
    case 401: type = "authentication_error"; break;
    case 403: type = "permission_error"; break;
    case 404: type = "not_found_error"; break;
    case 413: type = "request_too_large"; break;
    case 429: type = "rate_limit_error"; break;
    case 503: type = "overloaded_error"; break;
    default: break;
  }
  return json{{"type", "error"}, {"error", {{"type", type}, {"message", e.message}}}};
}

json anthropic_message(const std::string& id, const std::string& model, const ParsedOutput& out,
                       const std::string& finish_reason, const std::string& stop_sequence, const GenUsage& usage) {
  json content = json::array();
  if (!out.reasoning.empty()) content.push_back({{"type", "thinking"}, {"thinking", out.reasoning}, {"signature", ""}});
  if (!out.content.empty()) content.push_back({{"type", "text"}, {"text", out.content}});
  for (const ToolCall& c : out.calls)
    content.push_back({{"type", "tool_use"}, {"id", tool_use_id(c.id)}, {"name", c.name}, {"input", parse_json_ordered(c.arguments)}});
  const std::string reason = stop_reason(finish_reason, stop_sequence, !out.calls.empty());
  return json{{"id", id},
              {"type", "message"},
              {"role", "assistant"},
              {"model", model},
              {"content", content},
              {"stop_reason", reason},
              {"stop_sequence", reason == "stop_sequence" ? json(stop_sequence) : json(nullptr)},
              {"usage", usage_of(usage)}};
}

namespace {

class AnthropicEmitter : public StreamEmitter {
 public:
  AnthropicEmitter(std::string id, std::string model, int32_t input_tokens, bool forced)
      : id_(std::move(id)), model_(std::move(model)), input_tokens_(input_tokens), forced_(forced) {}

  std::string begin() override {
    return sse_event("message_start",
                     {{"type", "message_start"},
                      {"message", {{"id", id_},
                                   {"type", "message"},
                                   {"role", "assistant"},
                                   {"model", model_},
                                   {"content", json::array()},
                                   {"stop_reason", nullptr},
                                   {"stop_sequence", nullptr},
                                   {"usage", {{"input_tokens", input_tokens_}, {"output_tokens", 0}}}}}});
  }

  std::string delta(const OutputDelta& d) override {
    std::string s;
    if (!d.reasoning.empty()) {
      s += open("thinking", {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}});
      s += block_delta({{"type", "thinking_delta"}, {"thinking", d.reasoning}});
    }
    if (!d.content.empty()) {
      s += open("text", {{"type", "text"}, {"text", ""}});
      s += block_delta({{"type", "text_delta"}, {"text", d.content}});
    }
    for (const auto& [index, call] : d.calls) {
      (void)index;
      s += open("tool_use", {{"type", "tool_use"}, {"id", tool_use_id(call.id)}, {"name", call.name}, {"input", json::object()}});
      s += block_delta({{"type", "input_json_delta"}, {"partial_json", call.arguments}});
      s += close();
      ++calls_;
    }
    return s;
  }

  std::string end(const GenEvent& last, const OutputStream& os) override {
    if (forced_ && os.n_calls() == 0 && last.finish_reason != "length")
      return error(ApiError(500, "tool_choice requires a tool call but the model's reply holds none that parses.",
                            "server_error", "tool_choice", "tool_call_failed"));
    std::string s = close();
    const std::string reason = stop_reason(last.finish_reason, last.stop_sequence, calls_ > 0);
    s += sse_event("message_delta",
                   {{"type", "message_delta"},
                    {"delta", {{"stop_reason", reason},
                               {"stop_sequence", reason == "stop_sequence" ? json(last.stop_sequence) : json(nullptr)}}},
                    {"usage", {{"output_tokens", last.usage.completion_tokens}}}});
    return s + sse_event("message_stop", {{"type", "message_stop"}});
  }

  std::string error(const ApiError& e) override { return sse_event("error", anthropic_error_body(e)); }

 private:
  /// Opens a block of `type` unless one is open (closing another kind first).
  std::string open(const std::string& type, json block) {
    if (open_ == type && type != "tool_use") return "";
    std::string s = close();
    open_ = type;
    s += sse_event("content_block_start", {{"type", "content_block_start"}, {"index", index_}, {"content_block", std::move(block)}});
    return s;
  }
  std::string block_delta(json delta) {
    return sse_event("content_block_delta", {{"type", "content_block_delta"}, {"index", index_}, {"delta", std::move(delta)}});
  }
  std::string close() {
    if (open_.empty()) return "";
    open_.clear();
    return sse_event("content_block_stop", {{"type", "content_block_stop"}, {"index", index_++}});
  }

  std::string id_, model_;
  int32_t input_tokens_;
  bool forced_;
  std::string open_;  ///< the open block's type, "" for none
  int index_ = 0, calls_ = 0;
};

}  // namespace

std::unique_ptr<StreamEmitter> anthropic_emitter(const std::string& id, const std::string& model,
                                                 int32_t input_tokens, bool forced) {
  return std::make_unique<AnthropicEmitter>(id, model, input_tokens, forced);
}

}  // namespace kvad::server
