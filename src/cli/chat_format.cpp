#include "cli/chat_format.h"

#include "base/error.h"

namespace kvad::cli {

// Decodes the body of a Jinja single-quoted string literal ('...'), handling
// the escapes templates use (\n, \', \\).
static std::string unquote(const std::string& s) {
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

std::string format_chat_prompt(const std::string& tmpl, const std::string& user) {
  if (tmpl.empty())
    throw Error("this model has no chat template (tokenizer.chat_template); use --raw to send the prompt as is");
  if (tmpl.find("<|im_start|>") == std::string::npos || tmpl.find("<|im_end|>") == std::string::npos)
    throw Error("this model's chat template is not supported yet (kvad run supports ChatML templates only "
                "until the Jinja engine lands); use --raw to send the prompt as is");
  std::string out;
  // A default system turn: the literal '<|im_start|>system...' the template
  // emits when messages[0] is not a system message.
  const std::string marker = "'<|im_start|>system";
  const size_t at = tmpl.find(marker);
  if (at != std::string::npos && tmpl.rfind("!= 'system'", at) != std::string::npos) {
    size_t end = at + 1;
    while (end < tmpl.size() && !(tmpl[end] == '\'' && tmpl[end - 1] != '\\')) ++end;
    if (end < tmpl.size()) out += unquote(tmpl.substr(at + 1, end - at - 1));
  }
  out += "<|im_start|>user\n" + user + "<|im_end|>\n<|im_start|>assistant\n";
  return out;
}

}  // namespace kvad::cli
