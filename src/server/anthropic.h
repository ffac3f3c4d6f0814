// Anthropic's Messages API (POST /v1/messages) over the same generation as
// the OpenAI endpoints: the request is turned into a CompletionRequest (chat
// messages, tools, tool_choice), the reply split by server/tool_calls.h into
// thinking, text and tool_use content blocks.
//
// Reference: Anthropic's API reference, "Messages" and "Streaming Messages"
// (docs.anthropic.com/en/api/messages, .../messages-streaming), and the
// official `anthropic` Python package's types, which tests/server drive the
// server with.
#pragma once
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "server/openai.h"
#include "server/stream.h"

namespace kvad::server {

/// Parses and validates a /v1/messages body: model, max_tokens (>= 1) and
/// messages (user/assistant turns; content a string or blocks of type text,
/// tool_use {id, name, input}, tool_result {tool_use_id, content, is_error})
/// are required; system (a string or text blocks), stop_sequences (up to 16,
/// each at most kMaxStopBytes), temperature [0, 1], top_p, top_k, tools
/// [{name, description, input_schema}], tool_choice {type: auto | any | tool
/// (+ name) | none, disable_parallel_tool_use}, stream; metadata and
/// service_tier are ignored. A tool_result's blocks become a tool message
/// (answering its tool_use_id) before the turn's text. Throws ApiError 400
/// (images, documents and other block types: unsupported_value).
CompletionRequest parse_anthropic_request(const std::string& body);

/// {"type": "error", "error": {"type", "message"}}: the error type from the
/// status (400 invalid_request_error, 401 authentication_error, 403
/// permission_error, 404 not_found_error, 413 request_too_large, 429
/// rate_limit_error, 503 overloaded_error, else api_error).
nlohmann::ordered_json anthropic_error_body(const ApiError& e);

/// The message object of a whole reply: content blocks (thinking, text,
/// tool_use with ids "toolu_..."), stop_reason (end_turn, max_tokens,
/// stop_sequence, tool_use), stop_sequence, usage {input_tokens,
/// output_tokens, cache_read_input_tokens}.
nlohmann::ordered_json anthropic_message(const std::string& id, const std::string& model, const ParsedOutput& out,
                                         const std::string& finish_reason, const std::string& stop_sequence,
                                         const GenUsage& usage);

/// The event stream: message_start, then per block content_block_start,
/// content_block_delta (thinking_delta, text_delta, input_json_delta),
/// content_block_stop, then message_delta (stop_reason, usage) and
/// message_stop; `event: error` on failure. `input_tokens`: the prompt's.
/// `forced`: tool_choice any or tool (no call at the end: an error event).
std::unique_ptr<StreamEmitter> anthropic_emitter(const std::string& id, const std::string& model,
                                                 int32_t input_tokens, bool forced);

}  // namespace kvad::server
