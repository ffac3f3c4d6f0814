// ChatTemplate: parse once, render many (chat_template.h).
#include "jinja/chat_template.h"

#include "jinja/eval.h"
#include "jinja/parse.h"

namespace kvad {

namespace {

std::string where(int line, int column) {
  std::string s = "chat template";
  if (line > 0) {
    s += " line ";
    s += std::to_string(line);
    if (column > 0) {
      s += ':';
      s += std::to_string(column);
    }
  }
  return s;
}

[[noreturn]] void rethrow(const jinja::TemplateFailure& f) {
  throw ChatTemplateError(f.message, f.line, f.column, f.raised);
}

}  // namespace

ChatTemplateError::ChatTemplateError(std::string message, int line, int column, bool raised)
    : Error(where(line, column) + ": " + message),
      message_(std::move(message)),
      line_(line),
      column_(column),
      raised_(raised) {}

ChatTemplate ChatTemplate::parse(std::string source) { return parse(std::move(source), Limits{}); }

ChatTemplate ChatTemplate::parse(std::string source, const Limits& limits) {
  ChatTemplate t;
  t.limits_ = limits;
  jinja::ParseLimits pl;
  pl.max_source_bytes = limits.max_source_bytes;
  pl.max_nesting = limits.max_nesting;
  try {
    t.program_ = jinja::parse(source, pl);
  } catch (const jinja::TemplateFailure& f) {
    rethrow(f);
  } catch (const std::bad_alloc&) {
    throw ChatTemplateError("out of memory while parsing", 0, 0, false);
  }
  t.source_ = std::move(source);
  return t;
}

std::string ChatTemplate::render(const nlohmann::ordered_json& context) const {
  if (!context.is_object()) throw ChatTemplateError("the context must be a JSON object", 0, 0, false);
  jinja::EvalLimits el;
  el.max_output_bytes = limits_.max_output_bytes;
  el.max_steps = limits_.max_steps;
  el.max_depth = limits_.max_depth;
  el.max_call_depth = limits_.max_call_depth;
  el.max_range = limits_.max_range;
  try {
    jinja::PrintLimit print_limit(el.max_output_bytes);
    auto globals = std::make_shared<jinja::Frame>();
    globals->vars.reserve(context.size());
    for (auto it = context.begin(); it != context.end(); ++it) globals->set(it.key(), jinja::from_json(it.value()));
    jinja::Interp interp(el);
    return interp.render(*program_, globals);
  } catch (const jinja::TemplateFailure& f) {
    rethrow(f);
  } catch (const std::bad_alloc&) {
    throw ChatTemplateError("out of memory while rendering", 0, 0, false);
  }
}

std::string ChatTemplate::render(const nlohmann::json& context) const {
  return render(nlohmann::ordered_json(context));
}

nlohmann::ordered_json chat_context(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                    const std::string& bos_token, const std::string& eos_token,
                                    const nlohmann::ordered_json& tools, const nlohmann::ordered_json& extra) {
  nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
  ctx["messages"] = messages;
  ctx["tools"] = tools;
  ctx["documents"] = nullptr;
  ctx["add_generation_prompt"] = add_generation_prompt;
  if (!bos_token.empty()) ctx["bos_token"] = bos_token;
  if (!eos_token.empty()) ctx["eos_token"] = eos_token;
  if (extra.is_object())
    for (auto it = extra.begin(); it != extra.end(); ++it) ctx[it.key()] = it.value();
  return ctx;
}

std::string apply_chat_template(const std::string& source, const nlohmann::ordered_json& messages,
                                bool add_generation_prompt, const std::string& bos_token,
                                const std::string& eos_token, const nlohmann::ordered_json& tools,
                                const nlohmann::ordered_json& extra) {
  return ChatTemplate::parse(source).render(
      chat_context(messages, add_generation_prompt, bos_token, eos_token, tools, extra));
}

}  // namespace kvad
