#include "server/tool_prompt.h"

#include "engine/grammar/json_schema.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "jinja/chat_template.h"
#include "server/json_parse.h"

namespace kvad::server {

using json = nlohmann::ordered_json;

namespace {

json tools_json(const std::vector<ToolSpec>& tools) {
  json out = json::array();
  for (const ToolSpec& t : tools) {
    json fn = {{"name", t.name}};
    if (!t.description.empty()) fn["description"] = t.description;
    fn["parameters"] = t.parameters;
    out.push_back(json{{"type", "function"}, {"function", fn}});
  }
  return out;
}

/// A call's arguments as the template takes them: an object when it can
/// (and the template wants one), else the JSON text as given.
json arguments_for(const std::string& text, bool as_object) {
  if (!as_object) return text;
  json v = parse_json_ordered_or_discarded(text);
  if (v.is_object()) return v;
  return text;
}

bool renders(const ChatTemplate& chat, const json& msgs, const json& tools, std::string* out) {
  try {
    *out = chat.render(chat_context(msgs, false, "<s>", "</s>", tools));
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

/// "{"city": string, "unit": "celsius" | "fahrenheit"}": a function's
/// arguments as a small model reads them best (the JSON Schema is long).
std::string arguments_sketch(const json& params) {
  auto props = params.find("properties");
  if (props == params.end() || !props->is_object() || props->empty()) return "{}";
  std::string s = "{";
  bool first = true;
  for (const auto& [k, v] : props->items()) {
    if (!first) s += ", ";
    first = false;
    s += json(k).dump() + ": ";
    std::string ty = "value";
    if (v.is_object()) {
      if (auto e = v.find("enum"); e != v.end() && e->is_array() && !e->empty()) {
        ty.clear();
        for (size_t i = 0; i < e->size() && i < 16; ++i) ty += (i ? " | " : "") + (*e)[i].dump();
      } else if (auto t = v.find("type"); t != v.end() && t->is_string()) {
        ty = t->get<std::string>();
      }
    }
    s += ty;
  }
  return s + "}";
}

/// The system text that describes tools to a template that does not read them.
/// `json_format`: also how to write a call (the generic format); a template
/// with a call format of its own has shown the model that one.
std::string generic_tools_prompt(const CompletionRequest& r, bool json_format) {
  std::string s = "You have these tools:\n";
  for (const ToolSpec& t : r.tools) {
    s += "- " + t.name + (t.description.empty() ? "" : ": " + t.description) + ". Arguments: " +
         arguments_sketch(t.parameters) + "\n";

  }
  const ToolSpec& ex = r.tools.front();
  if (json_format) s += "\nTo call a tool, reply with only a JSON object and nothing else, for example:\n"
       "{\"name\": \"" + ex.name + "\", \"arguments\": " + arguments_sketch(ex.parameters) + "}\n"
       "with real values in place of the types.\n";
  if (json_format && r.parallel_tool_calls) s += "To call several tools, reply with a JSON list of such objects.\n";
  switch (r.tool_choice.kind) {
    case ToolChoice::required: s += "You must call one of the tools.\n"; break;
    case ToolChoice::named: s += "You must call the tool \"" + r.tool_choice.name + "\".\n"; break;
    default: s += "When no tool is needed, answer in plain text.\n"; break;
  }
  return s;
}

/// Mistral's templates take only call ids of 9 letters and digits
/// (raise_exception otherwise); other ids map to 9 of the id's own
/// alphanumerics, padded from a hash of it, the same for a call and its result.
std::string nine_char_id(const std::string& id) {
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); };
  if (id.size() == 9 && std::all_of(id.begin(), id.end(), alnum)) return id;
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : id) h = (h ^ c) * 1099511628211ull;
  std::string out;
  for (auto it = id.rbegin(); it != id.rend() && out.size() < 5; ++it)
    if (alnum(*it)) out.insert(out.begin(), *it);
  static const char* digits = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
  while (out.size() < 9) {
    out += digits[h % 62];
    h /= 62;
  }
  return out;
}

}  // namespace

ToolFormat effective_format(const TemplateTools& tt) {
  // Harmony is the whole reply's format (channels), with or without tools.
  if (tt.format == ToolFormat::harmony) return tt.format;
  return tt.renders_tools || tt.renders_tool_calls ? tt.format : ToolFormat::generic;
}

TemplateTools probe_template(const ChatTemplate& chat) {
  TemplateTools tt;
  const std::string& src = chat.source();
  tt.format = detect_tool_format(src);
  tt.renders_tools = src.find("tools") != std::string::npos;
  if (src.find("tool_calls") == std::string::npos) return tt;
  const json tools = json::array({{{"type", "function"},
                                   {"function", {{"name", "kvad_probe"},
                                                 {"description", "probe"},
                                                 {"parameters", {{"type", "object"}}}}}}});
  auto convo = [&](const json& args) {
    json c = json::array({{{"role", "user"}, {"content", "x"}},
                          {{"role", "assistant"},
                           {"content", nullptr},
                           {"tool_calls", json::array({{{"id", "kvadprobe"},
                                                         {"type", "function"},
                                                         {"function", {{"name", "kvad_probe"}, {"arguments", args}}}}})}},
                          {{"role", "tool"}, {"tool_call_id", "kvadprobe"}, {"name", "kvad_probe"}, {"content", "r"}}});
    if (tt.format == ToolFormat::harmony) c[1].erase("content");  // as build_chat_input sends it
    return c;
  };
  std::string out;
  // Rendered as data: both names appear, and not as Python's repr of a
  // dict (a template that concatenates or prints the value as it is).
  auto as_json = [&](const std::string& o) {
    return o.find("kvad_probe") != std::string::npos && o.find("kvad_arg") != std::string::npos &&
           o.find("kvad_val") != std::string::npos && o.find("'kvad_arg'") == std::string::npos;
  };
  if (renders(chat, convo(json{{"kvad_arg", "kvad_val"}}), tools, &out) && as_json(out)) {
    tt.renders_tool_calls = true;
    tt.object_arguments = true;
  } else if (renders(chat, convo(json("{\"kvad_arg\": \"kvad_val\"}")), tools, &out) && as_json(out)) {
    tt.renders_tool_calls = true;
    tt.object_arguments = false;
  }
  return tt;
}

std::string forced_call_prefix(ToolFormat f, const std::string& name) {
  const bool named = !name.empty();
  switch (f) {
    case ToolFormat::hermes:
      return named ? "<tool_call>\n{\"name\": \"" + name + "\", \"arguments\": " : "<tool_call>\n{\"name\": \"";
    case ToolFormat::qwen3_coder:
      return named ? "<tool_call>\n<function=" + name + ">\n" : "<tool_call>\n<function=";
    case ToolFormat::mistral:
      return named ? "[TOOL_CALLS][{\"name\": \"" + name + "\", \"arguments\": " : "[TOOL_CALLS][{\"name\": \"";
    case ToolFormat::deepseek:
      return std::string("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>") +
             (named ? name + "\n```json\n" : "");
    case ToolFormat::llama3:
      return named ? "{\"name\": \"" + name + "\", \"parameters\": " : "{\"name\": \"";
    case ToolFormat::generic:
      return named ? "{\"name\": \"" + name + "\", \"arguments\": " : "{\"name\": \"";
    case ToolFormat::harmony:  // after the prompt's <|start|>assistant
      return named ? "<|channel|>commentary to=functions." + name + " <|constrain|>json<|message|>"
                   : "<|channel|>commentary to=functions.";
  }
  return "";
}

ChatInput build_chat_input(const CompletionRequest& r, const TemplateTools& tt) {
  ChatInput in;
  const bool use_tools = !r.tools.empty() && r.tool_choice.kind != ToolChoice::none;
  const bool generic = use_tools && !tt.renders_tools;
  in.messages = json::array();
  // Call ids to names, for tool results (some templates print the name).
  std::vector<std::pair<std::string, std::string>> names;
  for (const ChatMessage& m : r.messages)
    for (const ToolCall& c : m.tool_calls) names.emplace_back(c.id, c.name);
  auto name_of = [&](const std::string& id) -> std::string {
    for (const auto& [i, n] : names)
      if (i == id) return n;
    return "";
  };
  auto call_id = [&](const std::string& id) { return tt.format == ToolFormat::mistral ? nine_char_id(id) : id; };
  for (const ChatMessage& m : r.messages) {
    json msg = {{"role", m.role}};
    if (!m.tool_calls.empty() && !tt.renders_tool_calls) {
      // The calls as the JSON the generic prompt asks for.
      json calls = json::array();
      for (const ToolCall& c : m.tool_calls) calls.push_back({{"name", c.name}, {"arguments", arguments_for(c.arguments, true)}});
      std::string text = m.content;
      if (!text.empty()) text += "\n";
      text += (calls.size() == 1 ? calls[0] : calls).dump();
      msg["content"] = text;
    } else if (m.role == "tool" && !tt.renders_tool_calls) {
      const std::string n = name_of(m.tool_call_id);
      msg["role"] = "user";
      msg["content"] = "Result of the tool call" + (n.empty() ? std::string() : " " + n) + " (" + m.tool_call_id +
                       "):\n" + m.content;
    } else {
      // gpt-oss's template tests `"..." in message.content`, which fails on
      // null (in jinja2 too): a Harmony call turn without text has no content.
      if (!(m.content_null && tt.format == ToolFormat::harmony)) msg["content"] = m.content_null ? json(nullptr) : json(m.content);
      if (!m.tool_calls.empty()) {
        json calls = json::array();
        for (const ToolCall& c : m.tool_calls)
          calls.push_back({{"id", call_id(c.id)},
                           {"type", "function"},
                           {"function", {{"name", c.name}, {"arguments", arguments_for(c.arguments, tt.object_arguments)}}}});
        msg["tool_calls"] = calls;
      }
      if (m.role == "tool") {
        msg["tool_call_id"] = call_id(m.tool_call_id);
        if (const std::string n = name_of(m.tool_call_id); !n.empty()) msg["name"] = n;
      }
    }
    in.messages.push_back(std::move(msg));
  }
  if (generic) {
    const std::string sys = generic_tools_prompt(r, effective_format(tt) == ToolFormat::generic);
    if (!in.messages.empty() && in.messages[0]["role"] == "system" && in.messages[0]["content"].is_string())
      in.messages[0]["content"] = in.messages[0]["content"].get<std::string>() + "\n\n" + sys;
    else
      in.messages.insert(in.messages.begin(), json{{"role", "system"}, {"content", sys}});
  }
  in.tools = use_tools && !generic ? tools_json(r.tools) : json(nullptr);
  if (use_tools && (r.tool_choice.kind == ToolChoice::required || r.tool_choice.kind == ToolChoice::named)) {
    const std::string name = r.tool_choice.kind == ToolChoice::named ? r.tool_choice.name
                             : r.tools.size() == 1                   ? r.tools[0].name
                                                                     : "";
    in.reply_prefix = forced_call_prefix(effective_format(tt), name);
  }
  return in;
}

OutputFormat output_format(const CompletionRequest& r, const TemplateTools& tt, const ChatInput& in,
                           const std::string& rendered) {
  OutputFormat f;
  f.tools = !r.tools.empty() && r.tool_choice.kind != ToolChoice::none;
  f.format = effective_format(tt);
  f.reasoning = r.reasoning;
  size_t end = rendered.size();
  while (end > 0 && (rendered[end - 1] == '\n' || rendered[end - 1] == ' ')) --end;
  f.think_open = r.reasoning && end >= 7 && rendered.compare(end - 7, 7, "<think>") == 0;
  f.parallel = r.parallel_tool_calls;
  f.prefix = f.think_open ? "" : in.reply_prefix;
  f.stop_after_call = f.tools && (r.tool_choice.kind == ToolChoice::required || r.tool_choice.kind == ToolChoice::named);
  f.specs = r.tools;
  if (r.tool_choice.kind == ToolChoice::named) {
    f.specs.erase(std::remove_if(f.specs.begin(), f.specs.end(),
                                 [&](const ToolSpec& t) { return t.name != r.tool_choice.name; }),
                  f.specs.end());
  }
  return f;
}

namespace {
// The 400 for a forced tool whose parameters schema the grammar compiler refuses.
[[noreturn]] void refuse_tool_schema(const CompletionRequest& r, const ToolSpec& t, const SchemaError& e) {
  size_t idx = 0;
  for (size_t k = 0; k < r.tools.size(); ++k)
    if (r.tools[k].name == t.name) idx = k;
  const std::string param = "tools[" + std::to_string(idx) + "].function.parameters";
  throw ApiError(400, "tool_choice forces a call of '" + t.name + "', but its parameters cannot be enforced: " +
                          e.what(), "invalid_request_error", param, "invalid_schema");
}
}  // namespace

std::shared_ptr<const Grammar> forced_call_grammar(const CompletionRequest& r, const OutputFormat& f) {
  if (!f.stop_after_call || f.prefix.empty() || f.specs.empty()) return nullptr;
  std::string args_key = "arguments", close;
  switch (f.format) {
    case ToolFormat::hermes: close = "}\\n</tool_call>"; break;
    case ToolFormat::mistral: close = "}]"; break;
    case ToolFormat::llama3: close = "}"; args_key = "parameters"; break;
    case ToolFormat::generic: close = "}"; break;
    case ToolFormat::qwen3_coder:
    case ToolFormat::deepseek:
    case ToolFormat::harmony: return nullptr;
  }
  // One allowed function (named, or required with one tool): the prefix
  // wrote its name (build_chat_input), the arguments come next.
  const bool named = f.specs.size() == 1;
  std::string root = "root ::= ", rules;
  for (size_t i = 0; i < f.specs.size(); ++i) {
    const ToolSpec& t = f.specs[i];
    const std::string pre = "t" + std::to_string(i) + "-";
    const json params = t.parameters.is_object() ? t.parameters : json{{"type", "object"}};
    try {
      JsonSchemaOptions opt;
      opt.prefix = pre;
      // Models write their calls' arguments with spaces ({"city": "Paris"}).
      opt.whitespace = JsonSchemaOptions::Whitespace::kPretty;
      rules += json_schema_to_gbnf(params, opt) + "\n";
    } catch (const SchemaError& e) {
      refuse_tool_schema(r, t, e);
    }
    // Names are [a-zA-Z0-9_-]: safe inside a GBNF string literal.
    root += (i ? " | " : "") + (named ? std::string() : "\"" + t.name + "\\\", \\\"" + args_key + "\\\": \" ") +
            pre + "root \"" + close + "\"";
  }
  try {
    return Grammar::parse(root + "\n" + rules);
  } catch (const GrammarError&) {
    // A schema whose grammar does not parse (a pattern or $ref that loops
    // without input): compiled alone, the tool's schema names the keyword
    // and the subschema's JSON pointer.
    for (size_t i = 0; i < f.specs.size(); ++i) {
      const json params = f.specs[i].parameters.is_object() ? f.specs[i].parameters : json{{"type", "object"}};
      try {
        (void)json_schema_grammar(params);
      } catch (const SchemaError& e) {
        refuse_tool_schema(r, f.specs[i], e);
      }
    }
    throw;
  }
}

void check_tool_choice(const CompletionRequest& r, ParsedOutput& out, const std::string& raw_text,
                       const std::string& finish_reason) {
  const bool forced = r.tool_choice.kind == ToolChoice::required || r.tool_choice.kind == ToolChoice::named;
  if (!forced || r.tools.empty() || !out.calls.empty()) return;
  if (finish_reason == "length") {
    out.content.clear();  // the opening of a call that never closed, not an answer
    out.malformed = false;
    return;
  }
  std::string head = raw_text.substr(0, 200);
  throw ApiError(500,
                 "tool_choice is '" +
                     std::string(r.tool_choice.kind == ToolChoice::named ? "function " + r.tool_choice.name : "required") +
                     "' but the model's reply holds no call that parses (for this call format kvad prompts for the "
                     "call and parses strictly). The reply began: " + json(head).dump(-1, ' ', false, json::error_handler_t::replace),
                 "server_error", "tool_choice", "tool_call_failed");
}

}  // namespace kvad::server
