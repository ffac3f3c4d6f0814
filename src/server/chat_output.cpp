// Chat completion responses and stream chunks for replies split into
// reasoning, content and tool calls (openai.h). Shapes: the OpenAI API
// reference, "The chat completion object" and "The chat completion chunk
// object"; reasoning_content as DeepSeek's API and llama.cpp's server send it.
#include "server/openai.h"

namespace kvad::server {

using json = nlohmann::ordered_json;

json chat_response(const ResponseMeta& m, const ParsedOutput& out, const std::string& finish_reason,
                   const GenUsage& usage, const json& logprobs) {
  json msg = {{"role", "assistant"}};
  msg["content"] = out.content.empty() && !out.calls.empty() ? json(nullptr) : json(out.content);
  if (!out.reasoning.empty()) msg["reasoning_content"] = out.reasoning;
  if (!out.calls.empty()) {
    json calls = json::array();
    for (const ToolCall& c : out.calls)
      calls.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    msg["tool_calls"] = calls;
  }
  msg["refusal"] = nullptr;
  json r = response_base(m, false);
  r["choices"] = json::array({{{"index", 0}, {"message", msg}, {"logprobs", logprobs}, {"finish_reason", finish_reason}}});
  r["usage"] = usage_json(usage);
  return r;
}

std::vector<json> chat_delta_chunks(const ResponseMeta& m, const OutputDelta& d, bool include_usage,
                                    const json& logprobs) {
  std::vector<json> out;
  auto chunk = [&](json delta) {
    json c = response_base(m, true);
    c["choices"] = json::array({{{"index", 0}, {"delta", std::move(delta)},
                                 {"logprobs", out.empty() ? logprobs : json(nullptr)}, {"finish_reason", nullptr}}});
    if (include_usage) c["usage"] = nullptr;
    out.push_back(std::move(c));
  };
  if (!d.reasoning.empty()) chunk({{"reasoning_content", d.reasoning}});
  if (!d.content.empty()) chunk({{"content", d.content}});
  for (const auto& [index, call] : d.calls) {
    chunk({{"tool_calls", json::array({{{"index", index},
                                         {"id", call.id},
                                         {"type", "function"},
                                         {"function", {{"name", call.name}, {"arguments", ""}}}}})}});
    chunk({{"tool_calls", json::array({{{"index", index}, {"function", {{"arguments", call.arguments}}}}})}});
  }
  return out;
}

}  // namespace kvad::server

#include "server/stream.h"

namespace kvad::server {

std::string sse_data(const json& j) { return "data: " + dump(j) + "\n\n"; }

std::string sse_event(const std::string& name, const json& j) {
  return "event: " + name + "\ndata: " + dump(j) + "\n\n";
}

namespace {

class ChatEmitter : public StreamEmitter {
 public:
  ChatEmitter(ResponseMeta m, bool include_usage, bool forced) : m_(std::move(m)), usage_(include_usage), forced_(forced) {}
  std::string begin() override { return sse_data(chat_role_chunk(m_, usage_)); }
  std::string delta(const OutputDelta& d) override {
    std::string s;
    for (const json& c : chat_delta_chunks(m_, d, usage_, take_logprobs())) s += sse_data(c);
    return s;
  }
  std::string end(const GenEvent& last, const OutputStream& os) override {
    const std::string& finish_reason = last.finish_reason;
    const GenUsage& usage = last.usage;
    if (forced_ && os.n_calls() == 0 && last.finish_reason != "length")
      return error(ApiError(500, "tool_choice requires a tool call but the model's reply holds none that parses.",
                            "server_error", "tool_choice", "tool_call_failed"));
    std::string s = sse_data(completion_chunk(m_, "", os.n_calls() > 0 ? "tool_calls" : finish_reason, usage_));
    if (usage_) s += sse_data(usage_chunk(m_, usage));
    return s + std::string(kSseDone);
  }
  std::string error(const ApiError& e) override { return sse_data(error_body(e)); }

 private:
  ResponseMeta m_;
  bool usage_, forced_;
};

class TextEmitter : public StreamEmitter {
 public:
  TextEmitter(ResponseMeta m, bool include_usage) : m_(std::move(m)), usage_(include_usage) {}
  std::string begin() override { return ""; }
  std::string delta(const OutputDelta& d) override {
    return d.content.empty() ? "" : sse_data(completion_chunk(m_, d.content, nullptr, usage_, take_logprobs()));
  }
  std::string end(const GenEvent& last, const OutputStream&) override {
    const std::string& finish_reason = last.finish_reason;
    const GenUsage& usage = last.usage;
    std::string s = sse_data(completion_chunk(m_, "", finish_reason, usage_));
    if (usage_) s += sse_data(usage_chunk(m_, usage));
    return s + std::string(kSseDone);
  }
  std::string error(const ApiError& e) override { return sse_data(error_body(e)); }

 private:
  ResponseMeta m_;
  bool usage_;
};

}  // namespace

std::unique_ptr<StreamEmitter> chat_emitter(const ResponseMeta& m, bool include_usage, bool forced) {
  return std::make_unique<ChatEmitter>(m, include_usage, forced);
}

std::unique_ptr<StreamEmitter> text_emitter(const ResponseMeta& m, bool include_usage) {
  return std::make_unique<TextEmitter>(m, include_usage);
}

}  // namespace kvad::server
