// `kvad template`: render a chat template for a conversation, as HuggingFace
// transformers' apply_chat_template(..., tokenize=False) does, and print the
// prompt exactly (nothing added after it).
//
// The template comes from a GGUF's `tokenizer.chat_template` (--model) or a
// file (--template); BOS/EOS text from the GGUF's tokenizer.ggml.bos_token_id /
// eos_token_id and tokenizer.ggml.tokens, unless --bos/--eos say otherwise.
// The conversation is JSON from --messages FILE or standard input: an OpenAI
// `messages` array, or an object {"messages": [...], "tools": [...], ...}
// whose other keys become template variables too (date_string, ...).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "base/error.h"
#include "cli/commands.h"
#include "cli/model_store.h"
#include "io/gguf.h"
#include "jinja/chat_template.h"

namespace kvad::cli {

namespace {

struct TemplateOptions {
  std::string model;
  std::string template_file;
  std::string messages_file;
  std::string bos, eos;
  bool have_bos = false, have_eos = false;
  bool add_generation_prompt = false;
};

std::string read_all(std::FILE* f, const std::string& what) {
  std::string s;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
  if (std::ferror(f)) throw Error("cannot read " + what);
  return s;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw Error(path + ": cannot read");
  return ss.str();
}

// Text of the token a `tokenizer.ggml.*_token_id` key names; "" when absent.
std::string token_text(const gguf::File& f, const char* key) {
  const gguf::Value* id = f.find(key);
  const gguf::Value* tokens = f.find("tokenizer.ggml.tokens");
  if (!id || !tokens) return "";
  const int64_t i = id->as_int();
  const auto& texts = tokens->as_string_array();
  if (i < 0 || static_cast<uint64_t>(i) >= texts.size())
    throw Error(f.path() + ": " + key + " = " + std::to_string(i) + " is outside tokenizer.ggml.tokens (" +
                std::to_string(texts.size()) + " tokens)");
  return texts[static_cast<size_t>(i)];
}

void render_template(const TemplateOptions& o) {
  std::string source, bos, eos;
  if (o.template_file.empty() || !o.model.empty()) {
    const std::string path = resolve_model(o.model);
    std::unique_ptr<gguf::File> file = gguf::File::open(path);
    if (o.template_file.empty()) {
      const gguf::Value* t = file->find("tokenizer.chat_template");
      if (!t) throw Error(path + ": no tokenizer.chat_template (give one with --template FILE)");
      source = t->as_string();
    }
    bos = token_text(*file, "tokenizer.ggml.bos_token_id");
    eos = token_text(*file, "tokenizer.ggml.eos_token_id");
  }
  if (!o.template_file.empty()) source = read_file(o.template_file);
  if (o.have_bos) bos = o.bos;
  if (o.have_eos) eos = o.eos;

  const std::string what = o.messages_file.empty() ? "standard input" : o.messages_file;
  const std::string text = o.messages_file.empty() ? read_all(stdin, what) : read_file(o.messages_file);
  nlohmann::ordered_json conv;
  try {
    conv = nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw Error(what + ": invalid JSON: " + e.what());
  }
  nlohmann::ordered_json messages, tools = nullptr, extra = nlohmann::ordered_json::object();
  if (conv.is_array()) {
    messages = std::move(conv);
  } else if (conv.is_object() && conv.contains("messages")) {
    for (auto it = conv.begin(); it != conv.end(); ++it) {
      if (it.key() == "messages") messages = it.value();
      else if (it.key() == "tools") tools = it.value();
      else extra[it.key()] = it.value();
    }
  } else {
    throw Error(what + ": expected a JSON array of messages or an object with \"messages\"");
  }
  if (!messages.is_array()) throw Error(what + ": \"messages\" must be an array");
  if (!tools.is_null() && !tools.is_array()) throw Error(what + ": \"tools\" must be an array");

  const ChatTemplate tmpl = ChatTemplate::parse(source);
  const std::string out = tmpl.render(chat_context(messages, o.add_generation_prompt, bos, eos, tools, extra));
  if (std::fwrite(out.data(), 1, out.size(), stdout) != out.size() || std::fflush(stdout) != 0)
    throw Error("cannot write standard output");
}

}  // namespace

void add_template(CLI::App& app) {
  auto o = std::make_shared<TemplateOptions>();
  CLI::App* c = app.add_subcommand(
      "template",
      "Render a chat template for a conversation (JSON from --messages or stdin) as HuggingFace "
      "apply_chat_template does; print the prompt exactly");
  c->add_option("-m,--model", o->model,
                "GGUF file or model-store name: its tokenizer.chat_template and BOS/EOS text (default: " +
                    std::string(kDefaultModel) + " unless --template is given)");
  c->add_option("-t,--template", o->template_file, "Jinja2 template file (instead of the model's)");
  c->add_option("--messages", o->messages_file,
                "JSON file: an OpenAI messages array, or {\"messages\": [...], \"tools\": [...], ...} whose "
                "other keys become template variables (default: standard input)");
  c->add_flag("--add-generation-prompt", o->add_generation_prompt, "End with the assistant turn's header");
  CLI::Option* bos = c->add_option("--bos", o->bos, "BOS text (bos_token; default: the model's)");
  CLI::Option* eos = c->add_option("--eos", o->eos, "EOS text (eos_token; default: the model's)");
  c->callback([o, bos, eos] {
    o->have_bos = bos->count() > 0;
    o->have_eos = eos->count() > 0;
    render_template(*o);
  });
}

}  // namespace kvad::cli
