// Chat messages to prompt text with the model's chat template
// (`tokenizer.chat_template`), rendered by the Jinja engine
// (tokenizer/chat_template.h) as HuggingFace transformers renders it. When
// kvad is built without that engine, ChatML templates (SmolLM2, Qwen) are
// rendered by a fixed ChatML writer instead.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "server/openai.h"

namespace kvad::server {

class ChatPrompt {
 public:
  /// source: the template text ("" when the model has none); bos/eos: the
  /// text of the model's BOS/EOS tokens ("" when none). Never throws: a
  /// template that does not parse makes render() fail instead (the server
  /// still serves /v1/completions).
  ChatPrompt(std::string source, std::string bos, std::string eos);
  ~ChatPrompt();

  /// The conversation plus the assistant's generation prompt. Throws
  /// ApiError: 400 when the template rejects the conversation
  /// (raise_exception, e.g. roles that do not alternate), 500 when the model
  /// has no usable template.
  std::string render(const std::vector<ChatMessage>& messages) const;

  /// One line for the server's start-up log: which renderer, or why none.
  std::string describe() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvad::server
