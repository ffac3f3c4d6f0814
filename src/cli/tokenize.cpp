// `kvad tokenize`: text -> token ids (or, with --detokenize, ids -> text)
// with the vocabulary of any GGUF that has one (vocabulary-only files too).
#include <CLI/CLI.hpp>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "cli/commands.h"
#include "cli/model_store.h"
#include "io/gguf.h"
#include "tokenizer/tokenizer.h"

namespace kvad::cli {

namespace {

struct TokenizeOptions {
  std::string model;
  std::string text;
  bool have_text = false;
  bool add_special = false;
  bool parse_special = false;
  bool detokenize = false;
};

// All of stdin, byte for byte.
std::string read_stdin() {
  std::string s;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, stdin)) > 0) s.append(buf, n);
  if (std::ferror(stdin)) throw Error("cannot read standard input");
  return s;
}

void write_stdout(const std::string& s) {
  if (std::fwrite(s.data(), 1, s.size(), stdout) != s.size() || std::fflush(stdout) != 0)
    throw Error("cannot write standard output");
}

std::vector<int32_t> parse_ids(const std::string& s, int32_t n_vocab) {
  std::vector<int32_t> ids;
  size_t i = 0;
  auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; };
  while (i < s.size()) {
    while (i < s.size() && is_space(s[i])) ++i;
    if (i == s.size()) break;
    size_t j = i;
    while (j < s.size() && !is_space(s[j])) ++j;
    const std::string word = s.substr(i, j - i);
    errno = 0;
    char* end = nullptr;
    long long v = std::strtoll(word.c_str(), &end, 10);
    if (end != word.c_str() + word.size() || errno != 0)
      throw Error("invalid token id '" + word + "' (ids are whitespace-separated integers)");
    if (v < 0 || v >= n_vocab)
      throw Error("invalid token id " + word + ": the vocabulary has ids 0.." + std::to_string(n_vocab - 1));
    ids.push_back(static_cast<int32_t>(v));
    i = j;
  }
  return ids;
}

void tokenize(const TokenizeOptions& o) {
  const std::string path = resolve_model(o.model);
  std::unique_ptr<gguf::File> file = gguf::File::open(path);
  std::unique_ptr<Tokenizer> tok = Tokenizer::from_gguf(*file);
  const std::string input = o.have_text ? o.text : read_stdin();
  if (o.detokenize) {
    write_stdout(tok->decode(parse_ids(input, tok->n_vocab()), /*special=*/o.parse_special));
    return;
  }
  const std::vector<int32_t> ids = tok->encode(input, o.add_special, o.parse_special);
  std::string line;
  line.reserve(ids.size() * 6 + 1);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) line += ' ';
    line += std::to_string(ids[i]);
  }
  line += '\n';
  write_stdout(line);
}

}  // namespace

void add_tokenize(CLI::App& app) {
  auto o = std::make_shared<TokenizeOptions>();
  CLI::App* c = app.add_subcommand(
      "tokenize", "Print the token ids of a text (from --text or stdin, byte for byte), space-separated on one line");
  c->add_option("-m,--model", o->model,
                "GGUF file (a vocabulary-only one will do) or model-store name (default: " +
                    std::string(kDefaultModel) + ")");
  CLI::Option* text = c->add_option("--text", o->text, "The text (default: read standard input to its end)");
  c->add_flag("--add-special", o->add_special,
              "Add BOS/EOS as the file says (tokenizer.ggml.add_bos_token / add_eos_token)");
  c->add_flag("--parse-special", o->parse_special,
              "Text of control tokens (e.g. <|im_start|>) becomes those tokens; with --detokenize, "
              "control tokens print as their text");
  c->add_flag("--detokenize", o->detokenize,
              "Read whitespace-separated ids instead and print their text (nothing added after it)");
  c->callback([o, text] {
    o->have_text = text->count() > 0;
    tokenize(*o);
  });
}

}  // namespace kvad::cli
