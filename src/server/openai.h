// OpenAI API requests and responses as JSON: validation of
// /v1/chat/completions and /v1/completions bodies, the response,
// streaming-chunk, usage and model objects, and the error object. No HTTP here.
//
// Reference: the OpenAI API reference (platform.openai.com/docs/api-reference,
// "Chat" and "Completions (legacy)"), and the official `openai` Python
// package's types, which tests/server drive the server with.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "engine/scheduler.h"

namespace kvad::server {

/// An error to answer with: HTTP status plus OpenAI's error object
/// {"error": {"message", "type", "param", "code"}}. Empty param/code are null.
class ApiError : public Error {
 public:
  ApiError(int status, const std::string& message, std::string type = "invalid_request_error",
           std::string param = "", std::string code = "")
      : Error(message), status(status), type(std::move(type)), param(std::move(param)), code(std::move(code)) {}
  int status;
  std::string type, param, code;
};

/// {"error": {"message", "type", "param", "code"}}.
nlohmann::ordered_json error_body(const ApiError& e);

/// One chat message, as the chat template receives it.
struct ChatMessage {
  std::string role;     ///< "system", "user", "assistant", "tool" ("developer" becomes "system")
  std::string content;  ///< text parts joined
};

/// A validated /v1/chat/completions or /v1/completions request.
struct CompletionRequest {
  bool chat = false;
  std::string model;
  std::vector<ChatMessage> messages;  ///< chat
  std::string prompt;                 ///< completions, when given as text
  std::vector<int32_t> prompt_ids;    ///< completions, when given as token ids
  bool prompt_is_ids = false;
  GenParams gen;                      ///< sampling (seed drawn at random when absent), max_tokens, stop
  bool stream = false;
  bool include_usage = false;         ///< stream_options.include_usage
};

/// Arrays and objects nested deeper than this in a request body: 400 invalid_json.
inline constexpr int kMaxJsonDepth = 64;
/// The longest stop sequence accepted, in bytes (400 invalid_value, param stop).
inline constexpr size_t kMaxStopBytes = 1024;

/// Parses and validates a request body. Fields follow the OpenAI API:
/// model (required), messages | prompt (required), max_tokens /
/// max_completion_tokens (>= 0; default: until the model stops or the
/// context is full), temperature [0, 2] (default 1), top_p [0, 1] (default 1),
/// presence_penalty / frequency_penalty [-2, 2], seed (integer), stop (string
/// or up to 16 strings), n (1 only), stream, stream_options.include_usage.
/// Also llama.cpp's extensions top_k, min_p and repeat_penalty. A null field
/// is as if absent; unknown fields are ignored.
/// Constrained output (gen.grammar, engine/grammar.h): response_format
/// {type: text | json_object | json_schema {name, schema, strict}}, or
/// llama.cpp's `grammar` (GBNF text) or `json_schema` (a schema); at most one.
/// Throws ApiError 400: invalid_json, invalid_type, invalid_value,
/// missing_required_parameter, invalid_schema (a keyword the schema compiler
/// cannot enforce, named in the message), invalid_grammar, unsupported_value
/// (n > 1, logprobs, echo, best_of > 1, suffix, tools, non-text content
/// parts, other response formats).
CompletionRequest parse_completion_request(const std::string& body, bool chat);

/// Token counts for `usage`.
nlohmann::ordered_json usage_json(const GenUsage& u);

/// What every response object of one completion carries.
struct ResponseMeta {
  std::string id;       ///< new_response_id()
  int64_t created = 0;  ///< Unix time, seconds
  std::string model;
  bool chat = false;    ///< /v1/chat/completions (else /v1/completions)
};

/// {"id", "object", "created", "model"}; object is "chat.completion",
/// "chat.completion.chunk" (chunk) or "text_completion".
nlohmann::ordered_json response_base(const ResponseMeta& m, bool chunk);

/// A whole (not streamed) response: one choice with the assistant message
/// (chat) or the text, its finish_reason, and the usage.
nlohmann::ordered_json completion_response(const ResponseMeta& m, const std::string& text,
                                           const std::string& finish_reason, const GenUsage& usage);

/// A streamed chunk with one choice: a text delta while `finish_reason` is
/// null, then an empty delta with it. "usage": null when include_usage.
nlohmann::ordered_json completion_chunk(const ResponseMeta& m, const std::string& text,
                                        const nlohmann::ordered_json& finish_reason, bool include_usage);

/// The first chunk of a streamed chat completion: the assistant role with
/// empty content. "usage": null when include_usage.
nlohmann::ordered_json chat_role_chunk(const ResponseMeta& m, bool include_usage);

/// The last chunk of a stream with stream_options.include_usage: no choices,
/// the usage.
nlohmann::ordered_json usage_chunk(const ResponseMeta& m, const GenUsage& usage);

/// A model of /v1/models: {"id", "object": "model", "created", "owned_by": "kvad"}.
nlohmann::ordered_json model_object(const std::string& id, int64_t created);
/// GET /v1/models: {"object": "list", "data": [model_object(id, created)]}.
nlohmann::ordered_json model_list(const std::string& id, int64_t created);

/// The error for a generation that failed with `error` (GenEvent::error):
/// 400 invalid_grammar when the request's grammar could not be followed
/// ("grammar: ..."), 503 server_shutting_down when the scheduler was
/// shutting down, else 500 internal_error.
ApiError generation_error(const std::string& error);

/// A fresh response id: prefix + 24 random hex digits ("chatcmpl-...", "cmpl-...").
std::string new_response_id(const std::string& prefix);

/// Serializes JSON for the wire: UTF-8 kept as is, invalid bytes replaced
/// with U+FFFD (generated text can contain them).
std::string dump(const nlohmann::ordered_json& j);

}  // namespace kvad::server
