// Chat templates: a sandboxed Jinja2 engine that renders the templates models
// ship (`tokenizer.chat_template` in GGUF, `chat_template` in
// tokenizer_config.json) exactly as HuggingFace transformers does.
//
// Reference: transformers' `apply_chat_template` renders with jinja2's
// ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) plus
// the loopcontrols extension, its own `tojson` filter (json.dumps with
// ensure_ascii=False; indent, separators, sort_keys accepted),
// `raise_exception(msg)` and `strftime_now(fmt)`, and the variables
// `messages`, `tools`, `documents`, `add_generation_prompt` and the special
// tokens (`bos_token`, `eos_token`, ...). kvad's output matches it byte for
// byte on the templates under tests/fixtures/templates (tools/make_template_fixtures.py).
//
// Values print as Python prints them (True, None, ['a', 'b'], 1.0). Lists
// and dicts are immutable, as in the HF sandbox: list.append, dict.update
// and other mutators fail; `namespace()` is the one mutable object.
//
// Not supported (a ChatTemplateError naming the construct and line):
// extends/include/import/block (no loaders), recursive for loops, and the
// jinja2 filters filesizeformat, groupby, pprint, random, slice, striptags,
// urlencode, urlize, wordwrap, xmlattr.
//
// Sandbox: no I/O; each render is bounded by Limits (output size, evaluation
// steps, nesting, macro recursion, range() size). Exceeding one is a
// ChatTemplateError, never a hang or a crash.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "base/error.h"

namespace kvad {

namespace jinja { struct Program; }

/// A template failed to parse or to render. what() is
/// "chat template line L[:C]: message".
class ChatTemplateError : public Error {
 public:
  ChatTemplateError(std::string message, int line, int column, bool raised);
  /// The message alone: for raise_exception(), the template's own text
  /// (e.g. "Conversation roles must alternate user/assistant/user/assistant/...").
  const std::string& message() const { return message_; }
  int line() const { return line_; }      ///< 1-based; 0 when unknown
  int column() const { return column_; }  ///< 1-based; 0 when unknown
  /// True when the template called raise_exception(): the conversation, not
  /// the template, is at fault (a server answers 400).
  bool raised() const { return raised_; }

 private:
  std::string message_;
  int line_, column_;
  bool raised_;
};

class ChatTemplate {
 public:
  struct Limits {
    size_t max_source_bytes = 4u << 20;   ///< template source
    int max_nesting = 128;                ///< blocks / parentheses inside each other, at parse time
    size_t max_output_bytes = 16u << 20;  ///< rendered text, and any one string built while rendering
    uint64_t max_steps = 5'000'000;       ///< statements + expressions evaluated per render
    int max_depth = 1000;                 ///< nested evaluation at render time
    int max_call_depth = 100;             ///< nested (recursive) macro calls
    int64_t max_range = 100000;           ///< largest range(), as jinja2's sandbox
  };

  /// Parses a template. Throws ChatTemplateError (with line and column) on a
  /// syntax error or an unsupported tag.
  static ChatTemplate parse(std::string source);
  static ChatTemplate parse(std::string source, const Limits& limits);

  /// Renders with `context`'s keys as the template's variables (a JSON
  /// object; key order is kept, so pass ordered_json to keep the order of
  /// tool schemas and messages' fields as given). Throws ChatTemplateError;
  /// raised() tells raise_exception() from other failures. Thread-safe: a
  /// parsed template may be rendered from many threads at once.
  std::string render(const nlohmann::ordered_json& context) const;
  std::string render(const nlohmann::json& context) const;

  const std::string& source() const { return source_; }
  const Limits& limits() const { return limits_; }

 private:
  ChatTemplate() = default;
  std::string source_;
  Limits limits_;
  std::shared_ptr<const jinja::Program> program_;
};

/// The context transformers' apply_chat_template passes: messages, tools
/// (None when null), documents (None), add_generation_prompt, bos_token and
/// eos_token (omitted when empty, as HF omits unset special tokens), plus
/// every key of `extra` (e.g. date_string, or a model-specific flag such as
/// enable_thinking).
/// `messages`: OpenAI-style [{"role", "content", "tool_calls"?, "name"?, "tool_call_id"?}, ...].
/// `tools`: null or a list of {"type": "function", "function": {name, description, parameters}}.
nlohmann::ordered_json chat_context(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                    const std::string& bos_token, const std::string& eos_token,
                                    const nlohmann::ordered_json& tools = nullptr,
                                    const nlohmann::ordered_json& extra = nlohmann::ordered_json::object());

/// Parses `source` and renders it with chat_context(...). For repeated use,
/// parse once with ChatTemplate::parse and call render().
std::string apply_chat_template(const std::string& source, const nlohmann::ordered_json& messages,
                                bool add_generation_prompt, const std::string& bos_token,
                                const std::string& eos_token, const nlohmann::ordered_json& tools = nullptr,
                                const nlohmann::ordered_json& extra = nlohmann::ordered_json::object());

}  // namespace kvad
