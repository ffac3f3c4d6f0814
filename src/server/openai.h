// OpenAI API requests and responses as JSON: validation of
// /v1/chat/completions and /v1/completions bodies, the response,
// streaming-chunk, usage and model objects, and the error object. No HTTP here.
//
// Reference: the OpenAI API reference (platform.openai.com/docs/api-reference,
// "Chat" and "Completions (legacy)"), and the official `openai` Python
// package's types, which tests/server drive the server with.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "engine/grammar/json_schema.h"
#include "engine/scheduler.h"
#include "server/tool_calls.h"

namespace kvad::server {

/// An error to answer with: HTTP status plus OpenAI's error object
/// {"error": {"message", "type", "param", "code"}}. Empty param/code are null.
/// `message` is the whole text (what() stops at a NUL byte a client's
/// string may carry); answers are written from it.
class ApiError : public Error {
 public:
  ApiError(int status, const std::string& message, std::string type = "invalid_request_error",
           std::string param = "", std::string code = "")
      : Error(message), status(status), type(std::move(type)), param(std::move(param)), code(std::move(code)),
        message(message) {}
  int status;
  std::string type, param, code;
  std::string message;
};

/// {"error": {"message", "type", "param", "code"}}.
nlohmann::ordered_json error_body(const ApiError& e);

/// One chat message, as the chat template receives it.
struct ChatMessage {
  std::string role;     ///< "system", "user", "assistant", "tool" ("developer" becomes "system")
  std::string content;  ///< text parts joined
  bool content_null = false;         ///< an assistant turn with tool calls and no content
  std::vector<ToolCall> tool_calls;  ///< assistant: the calls it made (arguments: JSON text)
  std::string tool_call_id;          ///< tool: the call this result answers
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
  int n = 1;                          ///< choices (OpenAI's n), 1..kMaxChoices
  // gen.logprobs: -1 none; else the alternatives per token (chat:
  // logprobs true + top_logprobs; completions: logprobs N).
  std::vector<ToolSpec> tools;        ///< tools[i].function
  ToolChoice tool_choice;             ///< default: auto with tools, none without
  bool parallel_tool_calls = true;
  bool reasoning = true;              ///< reasoning_format != "none": <think> goes to reasoning_content
};

/// Arrays and objects nested deeper than this in a request body: 400 invalid_json.
inline constexpr int kMaxJsonDepth = 64;
/// The most tools one request may offer (OpenAI's limit).
inline constexpr size_t kMaxTools = 128;
/// The longest stop sequence accepted, in bytes (400 invalid_value, param stop).
inline constexpr size_t kMaxStopBytes = 1024;
/// The most choices one request may ask for (`n`): each holds a slot or a
/// queue place while it runs (more than the queue takes: 429).
inline constexpr int64_t kMaxChoices = 16;
/// The most alternatives per token `top_logprobs` / `logprobs` may ask for.
inline constexpr int64_t kMaxTopLogprobs = 20;
/// The most logit_bias entries accepted (400 invalid_value, param logit_bias).
inline constexpr size_t kMaxLogitBias = 1024;

/// OpenAI's defaults for what a request leaves out: temperature 1, top_p 1;
/// top_k, min_p and repeat_penalty (llama.cpp's extensions) off.
inline SamplerParams openai_sampling_defaults() {
  SamplerParams p;
  p.temp = 1.0f;
  p.top_p = 1.0f;
  p.top_k = 0;
  p.min_p = 0.0f;
  p.repeat_penalty = 1.0f;
  return p;
}

/// Parses and validates a request body. Fields follow the OpenAI API:
/// model (required), messages | prompt (required), max_tokens /
/// max_completion_tokens (>= 0; default: until the model stops or the
/// context is full), temperature [0, 2] (default 1), top_p [0, 1] (default 1),
/// presence_penalty / frequency_penalty [-2, 2], seed (integer), stop (string
/// or up to 16 strings), n (1..16), stream, stream_options.include_usage.
/// Also llama.cpp's extensions top_k, min_p and repeat_penalty, and
/// logit_bias ({"id": bias in [-100, 100]}, at most kMaxLogitBias entries;
/// the caller checks the ids against the vocabulary). `defaults` gives the
/// sampling fields a request leaves out (openai_sampling_defaults(), or a
/// model's generation_config.json over them). A null field
/// is as if absent; unknown fields are ignored.
/// Constrained output (gen.grammar, engine/grammar/grammar.h): response_format
/// {type: text | json_object | json_schema {name, schema, strict}}, or
/// llama.cpp's `grammar` (GBNF text) or `json_schema` (a schema); at most one.
/// Chat also takes tools (at most kMaxTools functions: name
/// [a-zA-Z0-9_-]{1,64}, description, parameters as a JSON Schema object),
/// tool_choice ("none", "auto", "required" or {"type": "function",
/// "function": {"name"}} naming one of the tools), parallel_tool_calls,
/// assistant messages with tool_calls ({id, type: "function", function:
/// {name, arguments: JSON text}}) and null content, tool messages with
/// tool_call_id, and reasoning_format ("none" keeps <think> in content).
/// Throws ApiError 400: invalid_json, invalid_type, invalid_value,
/// missing_required_parameter, invalid_schema (a keyword the schema compiler
/// cannot enforce, named in the message), invalid_grammar, unsupported_value
/// (echo, best_of > 1, suffix, non-text content parts, other response
/// formats).
/// logprobs: chat `logprobs` (boolean) with `top_logprobs` 0..20 (400 when
/// given without logprobs: true); completions `logprobs` 0..20.
CompletionRequest parse_completion_request(const std::string& body, bool chat,
                                           const SamplerParams& defaults = openai_sampling_defaults());

/// Parses `tools` ([{type: "function", function: {name, description,
/// parameters}}], or with `flat` the Responses API's [{type: "function",
/// name, description, parameters}]) and `tool_choice` of an OpenAI body into
/// r.tools / r.tool_choice / r.parallel_tool_calls. Throws ApiError 400.
void parse_tools(const nlohmann::ordered_json& body, CompletionRequest& r, bool flat = false);

/// One tool definition's checks, shared by the OpenAI, Responses and
/// Anthropic parsers: name [a-zA-Z0-9_-]{1,64}, parameters an object.
/// Throws ApiError 400 naming `param`.
ToolSpec tool_spec(const nlohmann::ordered_json* name, const nlohmann::ordered_json* description,
                   const nlohmann::ordered_json* parameters, const std::string& param);

/// Member `key` of JSON object `o`, or nullptr when it is absent or null (a
/// null field counts as absent in every request parser). J: nlohmann's
/// json or ordered_json.
template <class J>
const J* field(const J& o, const char* key) {
  auto it = o.find(key);
  return it == o.end() || it->is_null() ? nullptr : &*it;
}

/// The grammar of any JSON object (response_format / text.format
/// {"type": "json_object"}) under opt's whitespace and string bounds (the
/// request defaults built once).
std::shared_ptr<const Grammar> json_object_grammar(const JsonSchemaOptions& opt = {});

/// Characters of strings whose schema gives no maxLength, by default.
inline constexpr int64_t kDefaultJsonMaxString = 512;

/// The schema compiler's options a request sets in its kvad extension:
/// {"kvad": {"json_whitespace": "compact" (default) | "pretty",
///           "json_max_string_length": characters of strings whose schema
///           gives no maxLength, 0..10000, 0: unbounded (default 512)}}.
/// Throws ApiError 400 for a bad value; other kvad fields are left to
/// their readers.
JsonSchemaOptions json_schema_options(const nlohmann::ordered_json& body);

/// The nesting depth of arrays and objects in JSON `text` (outside
/// strings) once it exceeds `limit`, else 0; linear, allocates nothing.
/// Checked before parsing: nlohmann's parser recurses per level and builds
/// every level (8 MB of '[' cost 600 MB before this check).
inline int json_depth_over(std::string_view text, int limit) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '[' || c == '{') {
      if (++depth > limit) return depth;
    } else if (c == ']' || c == '}') --depth;
  }
  return 0;
}

/// parse_completion_request's body checks (depth, JSON, an object); throws
/// ApiError 400. `openai_hint`: a body that is not JSON gets OpenAI's
/// wording ("HINT: ... The OpenAI API expects a JSON payload."); false (the
/// ollama and Anthropic routes): the parser's message alone.
nlohmann::ordered_json parse_body(const std::string& body_text, bool openai_hint = true);

/// The sampling fields common to all endpoints (temperature, top_p, top_k,
/// min_p, penalties, logit_bias, seed) into g.sampling; `defaults` for what
/// the body leaves out. Throws ApiError 400.
void parse_sampling(const nlohmann::ordered_json& body, GenParams& g,
                    const SamplerParams& defaults = openai_sampling_defaults());

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

/// A choice's `logprobs` object for `tokens` (GenEvent::logprobs), as
/// OpenAI shapes it: chat {"content": [{"token", "logprob", "bytes",
/// "top_logprobs": [{"token", "logprob", "bytes"}]}], "refusal": null};
/// completions {"tokens", "token_logprobs", "top_logprobs": [{text:
/// logprob}], "text_offset"}. `piece` gives a token id's text;
/// `text_offset` (completions) is the byte offset of the first token's text
/// and is advanced past the tokens.
nlohmann::ordered_json logprobs_json(bool chat, const std::vector<GenTokenLogprobs>& tokens,
                                     const std::function<std::string(int32_t)>& piece, size_t* text_offset);

/// A whole (not streamed) response: one choice with the assistant message
/// (chat) or the text, its finish_reason, its logprobs (null when not asked
/// for), and the usage.
nlohmann::ordered_json completion_response(const ResponseMeta& m, const std::string& text,
                                           const std::string& finish_reason, const GenUsage& usage,
                                           const nlohmann::ordered_json& logprobs = nullptr);

/// A whole chat completion whose reply was split by parse_output: the
/// message has content (null when empty and there are calls),
/// reasoning_content (when any) and tool_calls (when any: [{id, type:
/// "function", function: {name, arguments}}]); `logprobs` the choice's
/// (logprobs_json, or null). (chat_output.cpp)
nlohmann::ordered_json chat_response(const ResponseMeta& m, const ParsedOutput& out,
                                     const std::string& finish_reason, const GenUsage& usage,
                                     const nlohmann::ordered_json& logprobs = nullptr);

/// The chunks that send `d` in a chat stream: a reasoning_content delta, a
/// content delta, and for each call a delta with tool_calls [{index, id,
/// type, function: {name, arguments: ""}}] then one with its arguments;
/// the first chunk carries `logprobs` (null: none). (chat_output.cpp)
std::vector<nlohmann::ordered_json> chat_delta_chunks(const ResponseMeta& m, const OutputDelta& d,
                                                      bool include_usage,
                                                      const nlohmann::ordered_json& logprobs = nullptr);

/// A streamed chunk with one choice: a text delta while `finish_reason` is
/// null, then an empty delta with it. "usage": null when include_usage.
nlohmann::ordered_json completion_chunk(const ResponseMeta& m, const std::string& text,
                                        const nlohmann::ordered_json& finish_reason, bool include_usage,
                                        const nlohmann::ordered_json& logprobs = nullptr);

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
/// ("grammar: ...", at admission too: "admission failed: grammar: ..."), 503 server_shutting_down when the scheduler was
/// shutting down, else 500 internal_error.
ApiError generation_error(const std::string& error);

/// A fresh response id: prefix + 24 random hex digits ("chatcmpl-...", "cmpl-...").
std::string new_response_id(const std::string& prefix);

/// Serializes JSON for the wire: UTF-8 kept as is, invalid bytes replaced
/// with U+FFFD (generated text can contain them).
std::string dump(const nlohmann::ordered_json& j);

}  // namespace kvad::server
