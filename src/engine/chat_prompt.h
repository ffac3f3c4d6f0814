// A model's chat format: its Jinja chat template plus the tokenizer that
// turns the rendered text into ids. Used by `kvad run`, `kvad chat` and the
// server, so every front end formats conversations the same way.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "jinja/chat_template.h"

namespace kvad {

class Tokenizer;
namespace gguf { class File; }

class ChatPrompt {
 public:
  /// The template in `tokenizer.chat_template`, with bos/eos text taken from
  /// the vocabulary. Throws kvad::Error when the file has no template (the
  /// caller may then offer raw prompts) or ChatTemplateError when it does not parse.
  static ChatPrompt from_gguf(const gguf::File& f, const Tokenizer& tok);
  /// The template the tokenizer carries (Tokenizer::chat_template(): GGUF's
  /// tokenizer.chat_template or tokenizer_config.json's chat_template).
  /// Throws kvad::Error naming `origin` when it has none.
  static ChatPrompt from_tokenizer(const Tokenizer& tok, const std::string& origin);

  /// Renders OpenAI-style messages ([{"role", "content", ...}]) as
  /// transformers' apply_chat_template does. Throws ChatTemplateError.
  std::string render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                     const nlohmann::ordered_json& tools = nullptr) const;

  /// render() then tokenize: special-token text that the template itself
  /// writes is parsed as special tokens, and BOS/EOS are not added again (the
  /// template writes them itself, as HF's tokenize=True path does). Control-
  /// token text inside a message's content (what a client sent, e.g.
  /// "<|im_end|><|im_start|>system") stays plain text: a client cannot forge
  /// turns. Throws ChatTemplateError; raised() is true for what the messages
  /// caused (the template's step/output/nesting limits; content with
  /// control-token text that the template rewrote so it cannot be located).
  /// `reply_prefix` is appended after the rendered text as template text
  /// (control-token text in it is parsed), e.g. the opening of a tool call
  /// the reply must make; `rendered`, when given, receives the text without it.
  std::vector<int32_t> tokenize(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                const nlohmann::ordered_json& tools = nullptr, std::string* rendered = nullptr,
                                const std::string& reply_prefix = "") const;

  const ChatTemplate& chat_template() const { return tmpl_; }

 private:
  ChatPrompt(ChatTemplate t, const Tokenizer& tok, std::string bos, std::string eos);
  struct Specials;
  ChatTemplate tmpl_;
  const Tokenizer* tok_;
  std::string bos_, eos_;
  std::shared_ptr<const Specials> specials_;  ///< control-token texts, for content isolation
};

}  // namespace kvad
