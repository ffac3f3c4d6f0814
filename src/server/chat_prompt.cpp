#include "server/chat_prompt.h"

#include <optional>

#ifdef KVAD_SERVER_HAVE_JINJA
#include "tokenizer/chat_template.h"
#endif

namespace kvad::server {

namespace {

#ifndef KVAD_SERVER_HAVE_JINJA
// Decodes the body of a Jinja single-quoted string literal ('...'), handling
// the escapes templates use (\n, \', \\).
std::string unquote(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      const char c = s[++i];
      out += c == 'n' ? '\n' : c == 't' ? '\t' : c;
    } else {
      out += s[i];
    }
  }
  return out;
}

bool is_chatml(const std::string& tmpl) {
  return tmpl.find("<|im_start|>") != std::string::npos && tmpl.find("<|im_end|>") != std::string::npos;
}

// ChatML as SmolLM2's template writes it: a default system turn when the
// conversation has none (the literal the template emits), each message as
// <|im_start|>role\ncontent<|im_end|>\n, then <|im_start|>assistant\n.
std::string render_chatml(const std::string& tmpl, const std::vector<ChatMessage>& messages) {
  std::string out;
  const std::string marker = "'<|im_start|>system";
  const size_t at = tmpl.find(marker);
  if (messages.front().role != "system" && at != std::string::npos && tmpl.rfind("!= 'system'", at) != std::string::npos) {
    size_t end = at + 1;
    while (end < tmpl.size() && !(tmpl[end] == '\'' && tmpl[end - 1] != '\\')) ++end;
    if (end < tmpl.size()) out += unquote(tmpl.substr(at + 1, end - at - 1));
  }
  for (const auto& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  out += "<|im_start|>assistant\n";
  return out;
}
#endif

}  // namespace

struct ChatPrompt::Impl {
  std::string source, bos, eos;
#ifdef KVAD_SERVER_HAVE_JINJA
  std::optional<ChatTemplate> tmpl;
#endif
  std::string parse_error;
};

ChatPrompt::ChatPrompt(std::string source, std::string bos, std::string eos) : impl_(std::make_unique<Impl>()) {
  impl_->source = std::move(source);
  impl_->bos = std::move(bos);
  impl_->eos = std::move(eos);
#ifdef KVAD_SERVER_HAVE_JINJA
  if (!impl_->source.empty()) {
    try {
      impl_->tmpl.emplace(ChatTemplate::parse(impl_->source));
    } catch (const std::exception& e) {
      impl_->parse_error = e.what();
    }
  }
#endif
}

ChatPrompt::~ChatPrompt() = default;

std::string ChatPrompt::describe() const {
  if (impl_->source.empty()) return "the model has no chat template: /v1/chat/completions answers 500";
#ifdef KVAD_SERVER_HAVE_JINJA
  if (impl_->tmpl) return "chat template: the model's (Jinja)";
  return "the model's chat template does not parse (" + impl_->parse_error + "): /v1/chat/completions answers 500";
#else
  if (is_chatml(impl_->source)) return "chat template: ChatML (built without the Jinja engine)";
  return "the model's chat template is not ChatML and kvad was built without the Jinja engine: "
         "/v1/chat/completions answers 500";
#endif
}

std::string ChatPrompt::render(const std::vector<ChatMessage>& messages) const {
  if (impl_->source.empty())
    throw ApiError(500, "This model has no chat template (tokenizer.chat_template); use /v1/completions.",
                   "server_error", "", "no_chat_template");
#ifdef KVAD_SERVER_HAVE_JINJA
  if (!impl_->tmpl)
    throw ApiError(500, "This model's chat template cannot be used: " + impl_->parse_error, "server_error", "",
                   "chat_template_error");
  nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
  for (const auto& m : messages) msgs.push_back({{"role", m.role}, {"content", m.content}});
  try {
    return impl_->tmpl->render(chat_context(msgs, /*add_generation_prompt=*/true, impl_->bos, impl_->eos));
  } catch (const ChatTemplateError& e) {
    if (e.raised()) throw ApiError(400, e.message(), "invalid_request_error", "messages", "invalid_value");
    throw ApiError(500, std::string("The chat template failed: ") + e.what(), "server_error", "", "chat_template_error");
  }
#else
  if (!is_chatml(impl_->source))
    throw ApiError(500, "This model's chat template is not supported (ChatML only in this build); use /v1/completions.",
                   "server_error", "", "chat_template_error");
  return render_chatml(impl_->source, messages);
#endif
}

}  // namespace kvad::server
