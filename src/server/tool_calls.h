// Tool calls and reasoning in generated text: which format a chat template
// asks its model to write calls in, and the parser that splits a model's
// output into reasoning, content and tool calls, whole or as a stream.
//
// Formats (chosen from the tokens the template text mentions, never from a
// model list; detect_tool_format):
//   hermes       <tool_call>{"name": N, "arguments": {...}}</tool_call>  (Hermes, Qwen2.5, Qwen3)
//   qwen3_coder  <tool_call><function=N><parameter=P>V</parameter>...</function></tool_call>
//   llama3       {"name": N, "parameters": {...}} as the whole reply, or after <|python_tag|>
//   mistral      [TOOL_CALLS][{"name": N, "arguments": {...}}, ...]
//   deepseek     <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>N\n```json\n{...}\n```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
//                (and V3.1's <｜tool▁call▁begin｜>N<｜tool▁sep｜>{...}<｜tool▁call▁end｜>)
//   generic      a reply that is JSON: {"name", "arguments"}, a list of them,
//                or {"tool_calls": [...]}, optionally in a ```json fence
//   harmony      gpt-oss's Harmony messages (OpenAI's "OpenAI Harmony Response
//                Format" guide; the model's chat template): after the prompt's
//                <|start|>assistant, messages [<|start|>assistant]<|channel|>C
//                [ to=R][ <|constrain|>json]<|message|>BODY, each ended by
//                <|end|>, <|call|> or <|return|> (or the end of the reply, as
//                <|call|> and <|return|> end generation). Channel analysis is
//                the reasoning, final (and commentary without a recipient) the
//                content, and a message to=functions.NAME a call whose
//                arguments are its JSON body (the recipient may also stand in
//                the header before <|channel|>).
// Reasoning: <think>...</think> at the start of the reply, or everything up
// to </think> when the prompt itself opened <think> (DeepSeek-R1, Qwen3);
// Harmony's analysis channel.
//
// References: the templates themselves (shared/peer-data/templates, which
// tests render and parse back), the models' cards (Hermes function calling,
// Llama 3.1 "JSON based tool calling", Mistral's [TOOL_CALLS]), and the
// OpenAI chat-completions tool_calls shape.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvad::server {

enum class ToolFormat { generic, hermes, qwen3_coder, llama3, mistral, deepseek, harmony };

/// "generic", "hermes", ... (for logs and errors).
const char* tool_format_name(ToolFormat f);

/// The format a chat template's source asks for, from the markers it
/// mentions: <|channel|> with <|message|> (harmony), <function= (qwen3_coder), <tool_call> (hermes), [TOOL_CALLS]
/// (mistral), tool▁call▁begin (deepseek), <|python_tag|> or a
/// "parameters" JSON call (llama3); otherwise generic.
ToolFormat detect_tool_format(std::string_view template_source);

/// The texts that open or close calls in format `f` (empty for generic):
/// where these are control tokens of the vocabulary, the reply must be
/// decoded with their text (GenParams::special_text).
std::vector<std::string_view> tool_format_markers(ToolFormat f);

/// A function the client offers (OpenAI `tools[i].function`).
struct ToolSpec {
  std::string name;
  std::string description;
  nlohmann::ordered_json parameters = nlohmann::ordered_json::object();  ///< JSON Schema of the arguments
};

/// OpenAI `tool_choice`.
struct ToolChoice {
  enum Kind { none, automatic, required, named } kind = automatic;
  std::string name;  ///< the function, when named
};

/// One parsed call. `arguments` is JSON text of an object.
struct ToolCall {
  std::string id;  ///< "call_" + 24 hex digits, unique
  std::string name;
  std::string arguments;
};

/// What the parser needs to know about a request.
struct OutputFormat {
  ToolFormat format = ToolFormat::generic;
  bool tools = false;          ///< parse tool calls (tools given, tool_choice not none)
  bool reasoning = true;       ///< split <think> (request reasoning_format != "none")
  bool think_open = false;     ///< the prompt ends inside an open <think>
  bool parallel = true;        ///< parallel_tool_calls (false: the first call only)
  std::string prefix;          ///< text the prompt already wrote for the reply (a forced call's opening)
  /// The reply ends with its first call (or list of calls): what follows is
  /// dropped (tool_choice required or named; the server then stops
  /// generating).
  bool stop_after_call = false;
  std::vector<ToolSpec> specs; ///< for qwen3_coder's parameter types
};

/// A reply split in parts.
struct ParsedOutput {
  std::string reasoning;
  std::string content;
  std::vector<ToolCall> calls;
  bool malformed = false;  ///< a call marker whose call did not parse: its text is in content
};

/// Parses a whole reply (prefix + text). Never throws on any text: a call
/// that does not parse leaves the text as content with malformed = true.
/// Ids are fresh.
ParsedOutput parse_output(std::string_view text, const OutputFormat& f);

/// What a streamed reply adds since the last push.
struct OutputDelta {
  std::string reasoning;
  std::string content;
  /// Calls that completed: each is sent as its first delta (index, id, type,
  /// name, arguments "") and a second with the arguments.
  std::vector<std::pair<int, ToolCall>> calls;  ///< (index, call)
  bool empty() const { return reasoning.empty() && content.empty() && calls.empty(); }
};

/// Incremental parser for streaming. Text that may be the start of a call
/// marker or of </think> is held back until it is known not to be one; a
/// call is sent once it has parsed whole (its arguments in one fragment, so
/// a call once sent is never taken back). Without tools, once the reasoning
/// has closed (or there is none) the rest passes through as content; with
/// tools each push re-scans the reply (cost O(reply bytes) per push, so
/// O(n^2) in the reply, bounded by max_tokens and the context).
class OutputStream {
 public:
  explicit OutputStream(OutputFormat f);
  /// Adds generated text; returns what can be sent now.
  OutputDelta push(std::string_view text);
  /// The end of generation: what is left (held-back text as content; an
  /// unfinished call as content with malformed()).
  OutputDelta finish();
  /// Calls sent so far.
  int n_calls() const { return static_cast<int>(sent_calls_); }
  bool malformed() const { return malformed_; }

 private:
  OutputDelta step(bool final);
  OutputFormat f_;
  std::string text_;
  size_t sent_reasoning_ = 0, sent_content_ = 0, sent_calls_ = 0;
  bool malformed_ = false;
  bool passthrough_ = false;  ///< no tools, reasoning settled: text goes straight to content
};

/// The JSON Schema every allowed reply under `choice` must match: one call
/// object {"name": const, "arguments": parameters} (anyOf over the allowed
/// functions), or an array of them when `parallel`. This is the seam for
/// grammar-constrained decoding (engine/): `required` and named choices are
/// meant to be decoded under this schema; until then they are prompted
/// (OutputFormat::prefix) and parsed strictly.
nlohmann::ordered_json allowed_calls_schema(const std::vector<ToolSpec>& tools, const ToolChoice& choice,
                                            bool parallel);

/// The end of the JSON value starting at text[pos] (after whitespace), one
/// past its last byte; std::string::npos while it is incomplete; pos itself
/// when the text there cannot start a value. Strings, escapes and nesting
/// are followed; nothing is allocated.
size_t json_value_end(std::string_view text, size_t pos);

}  // namespace kvad::server
