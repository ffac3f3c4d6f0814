// OpenAI's Responses API, POST /v1/responses, stateless (as llama.cpp's and
// vLLM's servers serve it: nothing is stored, previous_response_id is
// refused): the request becomes a CompletionRequest, the reply is split by
// server/tool_calls.h into reasoning, message and function_call output items.
//
// Reference: the OpenAI API reference, "Responses" (create, the response
// object, streaming events), and the official `openai` Python package's
// types (openai.types.responses), which tests/server drive the server with.
#pragma once
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "server/openai.h"
#include "server/stream.h"

namespace kvad::server {

/// What a response object repeats from its request.
struct ResponsesEcho {
  nlohmann::ordered_json fields = nlohmann::ordered_json::object();  ///< instructions, max_output_tokens, tools, ...
};

/// Parses and validates a /v1/responses body: model and input (a string,
/// or items: messages {role, content: string or input_text/output_text
/// parts}, function_call {call_id, name, arguments}, function_call_output
/// {call_id, output}; reasoning items are skipped) are required;
/// instructions, tools [{type: "function", name, description, parameters}],
/// tool_choice, parallel_tool_calls, max_output_tokens (>= 1), temperature,
/// top_p, stream, text.format ({type: "text"}, {type: "json_object"} or
/// {type: "json_schema", name, schema}: the output is constrained to it, as
/// response_format is on /v1/chat/completions); store and metadata are
/// ignored. Throws ApiError 400 (previous_response_id, images, files:
/// unsupported_value; a schema the compiler cannot enforce: invalid_schema).
CompletionRequest parse_responses_request(const std::string& body, ResponsesEcho* echo);

/// The response object of a whole reply: output items (reasoning with
/// reasoning_text content, message with output_text, function_call with
/// call_id "call_..."), status completed (incomplete with
/// incomplete_details.reason max_output_tokens when cut), usage
/// {input_tokens, input_tokens_details.cached_tokens, output_tokens,
/// output_tokens_details.reasoning_tokens, total_tokens}.
nlohmann::ordered_json responses_object(const std::string& id, int64_t created_at, const std::string& model,
                                        const ParsedOutput& out, const std::string& finish_reason,
                                        const GenUsage& usage, const ResponsesEcho& echo);

/// The event stream (event: TYPE / data: JSON, each with sequence_number):
/// response.created, response.in_progress; per item
/// response.output_item.added, for a message response.content_part.added,
/// response.output_text.delta..., response.output_text.done,
/// response.content_part.done, for a call
/// response.function_call_arguments.delta and .done, for reasoning
/// response.reasoning_text.delta and .done; response.output_item.done; then
/// response.completed (or response.incomplete) with the whole response;
/// `error` on failure. `forced`: tool_choice required or a function (no
/// call at the end: an error event).
std::unique_ptr<StreamEmitter> responses_emitter(const std::string& id, int64_t created_at, const std::string& model,
                                                 const ResponsesEcho& echo, bool forced);

}  // namespace kvad::server
