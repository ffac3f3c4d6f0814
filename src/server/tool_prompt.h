// The request side of tool calls: how a conversation with tools, tool calls
// and tool results is handed to the model's chat template, as transformers'
// apply_chat_template(messages, tools=...) does, and what the template
// expects of it (found by rendering probes once, not from a model list).
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "engine/grammar/grammar.h"
#include "server/openai.h"
#include "server/tool_calls.h"

namespace kvad {
class ChatTemplate;
}

namespace kvad::server {

/// What a chat template does with tools.
struct TemplateTools {
  ToolFormat format = ToolFormat::generic;  ///< detect_tool_format(source)
  bool renders_tools = false;       ///< it reads `tools` (else kvad describes them in a system message)
  bool renders_tool_calls = false;  ///< it renders assistant tool_calls and tool results
  bool object_arguments = true;     ///< tool_calls' arguments go in as objects (else as JSON text)
};

/// Probes a chat template: renders a conversation with one tool call whose
/// arguments are an object, then a JSON string, and keeps what renders
/// them as JSON. Never throws.
TemplateTools probe_template(const ChatTemplate& chat);

/// The format replies are parsed in: the template's own when it shows the
/// model tools or past calls, else generic (kvad's prompt asks for JSON).
ToolFormat effective_format(const TemplateTools& tt);

/// The template's inputs for a request.
struct ChatInput {
  nlohmann::ordered_json messages;  ///< OpenAI-style, tool_calls' arguments per TemplateTools
  nlohmann::ordered_json tools;     ///< [{type: function, function: {...}}] or null
  /// The opening of the call that tool_choice required/named forces, which
  /// the prompt writes for the model (OutputFormat::prefix); "" otherwise.
  std::string reply_prefix;
};

/// Builds the template's inputs. With tools and a template that does not
/// read them, a system message describes the tools and the JSON reply
/// (generic format); with a template that renders no tool calls, past calls
/// become assistant text in that JSON and tool results user turns.
ChatInput build_chat_input(const CompletionRequest& r, const TemplateTools& tt);

/// The text that opens one call of `name` ("" : the name is the model's to
/// write) in format `f`, up to where the arguments begin.
std::string forced_call_prefix(ToolFormat f, const std::string& name);

/// The OutputFormat for parsing the reply to `r`; `rendered` is the prompt
/// as the template wrote it (an open <think> at its end starts the reply in
/// reasoning).
OutputFormat output_format(const CompletionRequest& r, const TemplateTools& tt, const ChatInput& in,
                           const std::string& rendered);

/// The grammar that makes the reply to a forced call (tool_choice required
/// or named, after OutputFormat::prefix) one call of an allowed function
/// whose arguments are valid under its `parameters` schema
/// (engine/grammar/json_schema.h), closed as format `f.format` closes it:
///   hermes  <name>", "arguments": ARGS}\n</tool_call>
///   mistral <name>", "arguments": ARGS}]
///   llama3  <name>", "parameters": ARGS}      generic: "arguments"
/// (named: ARGS and the closing only, the prefix holds the name). Null when
/// no call is forced, when the reply starts in <think>, or for the formats
/// that are not JSON (qwen3_coder, deepseek: prompted and parsed strictly).
/// Throws ApiError 400 invalid_schema naming the tool whose parameters the
/// schema compiler cannot enforce.
std::shared_ptr<const Grammar> forced_call_grammar(const CompletionRequest& r, const OutputFormat& f);

/// Checks a finished reply against tool_choice: under required or named
/// without a call (of that name), ApiError 500 code tool_call_failed, with
/// the start of the model's text. Does nothing otherwise.
/// A reply cut off by max_tokens or the context (`finish_reason` "length")
/// before its forced call closed is no error: its partial call is dropped
/// from `out` (content empty, no calls) and the reply ends "length", as
/// OpenAI answers a truncated reply.
void check_tool_choice(const CompletionRequest& r, ParsedOutput& out, const std::string& raw_text,
                       const std::string& finish_reason);

}  // namespace kvad::server
