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
#include "engine/grammar.h"
#include "engine/json_schema.h"
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
  c->add_option("--grammar", gbnf, "Decode the reply under this GBNF grammar (llama.cpp's format; rule root)");
  c->add_option("--grammar-file", file, "Decode the reply under the GBNF grammar in this file");
  c->add_option("-j,--json-schema", json_schema, "Decode the reply as JSON valid under this JSON Schema");
}

std::unique_ptr<TokenGrammar> GrammarOptions::make(const Tokenizer& tok) const {
  const int given = !gbnf.empty() + !file.empty() + !json_schema.empty();
  if (given == 0) return nullptr;
  if (given > 1) throw Error("--grammar, --grammar-file and --json-schema: give one");
  std::string text, flag;
  if (!gbnf.empty()) {
    text = gbnf, flag = "--grammar";
  } else if (!file.empty()) {
    flag = "--grammar-file " + file;
    std::ifstream in(file, std::ios::binary);
    if (!in) throw Error(flag + ": cannot read the file");
    std::ostringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  } else {
    flag = "--json-schema";
    nlohmann::ordered_json schema;
    try {
      schema = nlohmann::ordered_json::parse(json_schema);
    } catch (const nlohmann::json::exception& e) {
      throw Error(flag + ": not JSON: " + e.what());
    }
    try {
      text = json_schema_to_gbnf(schema);
    } catch (const Error& e) {
      throw Error(flag + ": " + e.what());
    }
  }
  try {
    return std::make_unique<TokenGrammar>(Grammar::parse(text), std::make_shared<TokenTrie>(tok));
  } catch (const Error& e) {
    throw Error(flag + ": " + e.what());
  }
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
