#include "cli/reply_output.h"

#include <CLI/CLI.hpp>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "engine/chat_prompt.h"
#include "engine/grammar/grammar.h"
#include "engine/grammar/json_schema.h"
#include "server/tool_calls.h"
#include "tokenizer/tokenizer.h"

namespace kvad::cli {

void ReasoningOptions::add_to(CLI::App* c) {
  c->add_option("--reasoning-format", format,
                "auto: a reasoning model's thinking (<think>...</think>, gpt-oss's analysis channel) goes to "
                "stderr, dimmed, and its answer to stdout; none: the reply as written, all to stdout")
      ->check(CLI::IsMember({"auto", "none"}))
      ->capture_default_str();
}

void GrammarOptions::add_to(CLI::App* c) {
  gbnf_ = c->add_option("--grammar", gbnf, "Decode the reply under this GBNF grammar (llama.cpp's format; rule root)");
  file_ = c->add_option("--grammar-file", file, "Decode the reply under the GBNF grammar in this file");
  json_schema_ = c->add_option("-j,--json-schema", json_schema, "Decode the reply as JSON valid under this JSON Schema");
  json_schema_file_ = c->add_option("--json-schema-file", json_schema_file,
                                    "Decode the reply as JSON valid under the JSON Schema in this file");
}

namespace {
std::string read_file(const std::string& flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(flag + " " + path + ": cannot read the file");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
}  // namespace

std::shared_ptr<const Grammar> GrammarOptions::parse() const {
  auto given = [](const CLI::Option* o) { return o && o->count() > 0; };
  const int n = given(gbnf_) + given(file_) + given(json_schema_) + given(json_schema_file_);
  if (n == 0) return nullptr;
  if (n > 1) throw Error("--grammar, --grammar-file, --json-schema and --json-schema-file: give one");
  std::string text, flag;
  if (given(gbnf_) || given(file_)) {
    flag = given(gbnf_) ? "--grammar" : "--grammar-file " + file;
    text = given(gbnf_) ? gbnf : read_file("--grammar-file", file);
  } else {
    flag = given(json_schema_) ? "--json-schema" : "--json-schema-file " + json_schema_file;
    const std::string src = given(json_schema_) ? json_schema : read_file("--json-schema-file", json_schema_file);
    nlohmann::ordered_json schema;
    try {
      schema = nlohmann::ordered_json::parse(src);
    } catch (const nlohmann::json::exception& e) {
      throw Error(flag + ": not JSON: " + e.what());
    }
    try {
      text = json_schema_to_gbnf(schema);
    } catch (const Error& e) {
      throw Error(flag + ": " + e.what());
    }
  }
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) throw Error(flag + ": the grammar is empty");
  try {
    return Grammar::parse(text);
  } catch (const Error& e) {
    throw Error(flag + ": " + e.what());
  }
}

std::unique_ptr<TokenGrammar> GrammarOptions::bind(const std::shared_ptr<const Grammar>& g, const Tokenizer& tok) {
  if (!g) return nullptr;
  return std::make_unique<TokenGrammar>(g, std::make_shared<TokenTrie>(tok));
}

ReplyPrinter::ReplyPrinter(const ChatPrompt* chat, const Tokenizer& tok, const std::string& rendered,
                           const ReasoningOptions& o) {
  if (!chat || o.format == "none") return;
  server::OutputFormat f;
  f.format = server::detect_tool_format(chat->chat_template().source());
  f.reasoning = true;
  size_t end = rendered.size();
  while (end > 0 && (rendered[end - 1] == '\n' || rendered[end - 1] == ' ')) --end;
  f.think_open = end >= 7 && rendered.compare(end - 7, 7, "<think>") == 0;
  // Harmony's channel markers are control tokens: the parser needs their text.
  if (f.format == server::ToolFormat::harmony) {
    const std::vector<int32_t> ids = tok.encode("<|channel|>", /*add_special=*/false, /*parse_special=*/true);
    special_text_ = ids.size() == 1 && tok.token_type(ids[0]) == TokenType::CONTROL;
  }
  parser_ = std::make_unique<server::OutputStream>(f);
  const char* term = std::getenv("TERM");
  dim_ = isatty(STDERR_FILENO) && !(term && std::strcmp(term, "dumb") == 0);
}

ReplyPrinter::~ReplyPrinter() = default;

void ReplyPrinter::print(const std::string& reasoning, const std::string& content) {
  if (!reasoning.empty()) {
    if (!in_reasoning_ && dim_) std::fputs("\033[2m", stderr);
    in_reasoning_ = any_reasoning_ = true;
    std::fwrite(reasoning.data(), 1, reasoning.size(), stderr);
    std::fflush(stderr);
  }
  if (!content.empty()) {
    if (in_reasoning_) {
      std::fputs(dim_ ? "\033[0m\n" : "\n", stderr);  // the thinking ends on its own line
      std::fflush(stderr);
      in_reasoning_ = false;
    }
    content_ += content;
    std::fwrite(content.data(), 1, content.size(), stdout);
    std::fflush(stdout);
  }
}

void ReplyPrinter::push(const std::string& piece) {
  if (!parser_) return print("", piece);
  const server::OutputDelta d = parser_->push(piece);
  print(d.reasoning, d.content);
}

std::string ReplyPrinter::finish() {
  if (parser_) {
    const server::OutputDelta d = parser_->finish();
    print(d.reasoning, d.content);
  }
  if (in_reasoning_) {
    std::fputs(dim_ ? "\033[0m\n" : "\n", stderr);
    in_reasoning_ = false;
  }
  std::fputc('\n', stdout);
  std::fflush(stdout);
  return content_;
}

}  // namespace kvad::cli
