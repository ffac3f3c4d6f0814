// ollama's API (POST /api/chat, /api/generate, /api/embed, /api/embeddings,
// /api/pull, /api/show; GET /api/tags, /api/ps, /api/version) over the same
// generation as the OpenAI endpoints: a request is turned into a
// CompletionRequest, the reply split by server/tool_calls.h into thinking,
// content and tool calls, and answered in ollama's shapes, streamed as
// newline-delimited JSON (application/x-ndjson) unless `stream` is false.
// No HTTP here (ollama_routes.cpp has the handlers).
//
// Reference: ollama's docs/api.md ("Generate a completion", "Generate a chat
// completion", "List Local Models", "Show Model Information", "Pull a
// Model", "Generate Embeddings", "List Running Models") and the official
// `ollama` Python package's types (_types.py), which tests/server drive the
// server with.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/openai.h"
#include "server/stream.h"

namespace kvad::server {

/// The ollama API version whose request and response shapes kvad follows
/// (GET /api/version), as the `ollama` Python client 0.6 expects them.
inline constexpr const char* kOllamaApiVersion = "0.12.0";

/// ollama's error object: {"error": message}.
nlohmann::ordered_json ollama_error_body(const ApiError& e);

/// True when `name`, as an ollama user types it, names the served model
/// `model_id`: case aside, an optional ":latest" tag, and ':' / '-' spelled
/// either way ("smollm2:135m" and "SmolLM2-135M:latest" name
/// "smollm2-135m"; "hf.co/ORG/NAME" names "ORG/NAME").
bool ollama_name_matches(std::string_view name, std::string_view model_id);

/// The name /api/tags and /api/ps list the model under: its id with the
/// ":latest" tag when it has none.
std::string ollama_model_name(const std::string& model_id);

/// A validated /api/chat or /api/generate request.
struct OllamaRequest {
  CompletionRequest r;     ///< model is the name as sent; chat false: raw /api/generate
  bool show_thinking = true;  ///< `think` is not false: reasoning goes to `thinking`
  bool load_only = false;  ///< no messages / no prompt: ollama's "load the model" request
  std::string suffix;      ///< /api/generate `suffix` (fill in the middle)
  std::string prompt;      ///< /api/generate `prompt`, for a suffix request
  int32_t repeat_last_n = -2;  ///< options.repeat_last_n (-1: the context; -2: not given)
};

/// Parses an /api/chat (`chat`) or /api/generate body: model (required),
/// messages ({role: system | user | assistant | tool, content, tool_calls
/// [{function: {name, arguments: object}}], tool_name, thinking}) or prompt
/// / system / raw / suffix, tools (OpenAI's function tools), format ("json"
/// or a JSON schema, compiled by the structured-output compiler), think
/// (true, false or "low" | "medium" | "high"), stream (default true),
/// keep_alive (a number or a duration string: accepted, kvad keeps its one
/// model loaded), logprobs / top_logprobs, and options mapped onto kvad's
/// sampling: temperature, top_p, top_k, min_p, seed, num_predict (-1, -2:
/// until the model stops or the context is full), stop, repeat_penalty,
/// repeat_last_n, presence_penalty, frequency_penalty; other options
/// (num_ctx, num_thread, mirostat, ...) are ignored as ollama ignores
/// options it does not know. `defaults`: the server's sampling defaults.
/// Throws ApiError 400 naming the field (images, template and context are
/// refused: text models and the model's own template only).
OllamaRequest parse_ollama_request(const std::string& body, bool chat, const SamplerParams& defaults);

/// RFC 3339 time with nanoseconds, UTC ("2024-07-22T20:33:28.123648123Z"),
/// of now or of `unix_ns`.
std::string ollama_time(int64_t unix_ns = -1);

/// What every reply object of one request carries.
struct OllamaMeta {
  std::string model;       ///< the name the client sent
  bool chat = true;        ///< /api/chat (message) or /api/generate (response)
  bool show_thinking = true;
};

/// A whole (not streamed) reply: message {role: assistant, content,
/// thinking?, tool_calls?} or response / thinking, done: true, done_reason
/// ("stop", "length"), the counts and durations (nanoseconds) of `usage`,
/// and `logprobs` when not null.
nlohmann::ordered_json ollama_response(const OllamaMeta& m, const ParsedOutput& out, const std::string& finish_reason,
                                       const GenUsage& usage, const nlohmann::ordered_json& logprobs = nullptr);

/// The reply to a request without messages or prompt: done, done_reason "load".
nlohmann::ordered_json ollama_load_response(const OllamaMeta& m);

/// ollama's logprobs: [{token, logprob, top_logprobs: [{token, logprob}]}].
nlohmann::ordered_json ollama_logprobs(const std::vector<GenTokenLogprobs>& tokens,
                                       const std::function<std::string(int32_t)>& piece);

/// The NDJSON stream: one object per delta (done: false), then the final
/// object (done: true with the counts); {"error": ...} on failure.
std::unique_ptr<StreamEmitter> ollama_emitter(const OllamaMeta& m);

}  // namespace kvad::server
