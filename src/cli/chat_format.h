// Interim chat formatting: the ChatML format (<|im_start|>role\n...<|im_end|>)
// that SmolLM2's `tokenizer.chat_template` renders. A general Jinja engine
// replaces this in a later issue.
#pragma once
#include <string>

namespace kvad::cli {

/// Renders one user turn plus the assistant generation prompt as the model's
/// template would, when that template is ChatML. Includes the default system
/// turn a template inserts when the conversation has none (SmolLM2 does).
/// Throws kvad::Error when the template is absent or not ChatML, suggesting --raw.
std::string format_chat_prompt(const std::string& chat_template, const std::string& user);

}  // namespace kvad::cli
