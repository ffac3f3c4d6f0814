#include "engine/chat_prompt.h"

#include "base/error.h"
#include "io/gguf.h"
#include "tokenizer/tokenizer.h"

namespace kvad {

ChatPrompt ChatPrompt::from_gguf(const gguf::File& f, const Tokenizer& tok) {
  const std::string src = f.get_string("tokenizer.chat_template", "");
  if (src.empty()) throw Error(f.path() + ": the model has no chat template (tokenizer.chat_template)");
  const std::string bos = tok.bos() >= 0 ? tok.token_text(tok.bos()) : "";
  const std::string eos = tok.eos() >= 0 ? tok.token_text(tok.eos()) : "";
  return ChatPrompt(ChatTemplate::parse(src), tok, bos, eos);
}

ChatPrompt ChatPrompt::from_tokenizer(const Tokenizer& tok, const std::string& origin) {
  const std::string& src = tok.chat_template();
  if (src.empty()) throw Error(origin + ": the model has no chat template");
  const std::string bos = tok.bos() >= 0 ? tok.token_text(tok.bos()) : "";
  const std::string eos = tok.eos() >= 0 ? tok.token_text(tok.eos()) : "";
  return ChatPrompt(ChatTemplate::parse(src), tok, bos, eos);
}

std::string ChatPrompt::render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                               const nlohmann::ordered_json& tools) const {
  return tmpl_.render(chat_context(messages, add_generation_prompt, bos_, eos_, tools));
}

std::vector<int32_t> ChatPrompt::tokenize(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                          const nlohmann::ordered_json& tools) const {
  return tok_->encode(render(messages, add_generation_prompt, tools), /*add_special=*/false,
                      /*parse_special=*/true);
}

}  // namespace kvad
