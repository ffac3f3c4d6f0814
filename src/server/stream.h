// What a streamed answer sends, per API: the server's stream loop
// (generation.cpp) feeds generated text through an OutputStream and hands each
// part to the API's emitter, which returns the server-sent-event text for it.
#pragma once
#include <utility>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "engine/scheduler.h"
#include "server/openai.h"
#include "server/tool_calls.h"

namespace kvad::server {

/// "data: JSON\n\n".
std::string sse_data(const nlohmann::ordered_json& j);
/// The OpenAI streams' last event.
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";
/// "event: NAME\ndata: JSON\n\n" (Anthropic's and the Responses API's framing).
std::string sse_event(const std::string& name, const nlohmann::ordered_json& j);

class StreamEmitter {
 public:
  virtual ~StreamEmitter() = default;
  /// Sent before any token.
  virtual std::string begin() = 0;
  /// Sent for each part of the reply as it comes.
  virtual std::string delta(const OutputDelta& d) = 0;
  /// Sent once generation ended: `last` is the final event (finish_reason
  /// "stop" or "length", stop_sequence, usage); `os` has the whole parse
  /// (calls sent, malformed). May be an error event (a tool_choice the
  /// reply did not meet).
  virtual std::string end(const GenEvent& last, const OutputStream& os) = 0;
  /// Sent when generation failed after the stream began.
  virtual std::string error(const ApiError& e) = 0;
  /// A `logprobs` object (logprobs_json) for the next delta() to carry in
  /// its first chunk.
  void set_logprobs(nlohmann::ordered_json lp) { logprobs_ = std::move(lp); }

 protected:
  /// The pending logprobs, null once taken.
  nlohmann::ordered_json take_logprobs() { return std::exchange(logprobs_, nullptr); }

 private:
  nlohmann::ordered_json logprobs_;
};

/// /v1/chat/completions chunks (OpenAI), ending with data: [DONE].
/// `forced`: tool_choice required or named (no call at the end: an error event).
std::unique_ptr<StreamEmitter> chat_emitter(const ResponseMeta& m, bool include_usage, bool forced);
/// /v1/completions chunks, ending with data: [DONE].
std::unique_ptr<StreamEmitter> text_emitter(const ResponseMeta& m, bool include_usage);

}  // namespace kvad::server
