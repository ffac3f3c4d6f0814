// `kvad embed`: sentence embeddings of texts (engine/embed.h), printed as
// JSON: {"model", "pooling", "normalize", "dim", "data": [{"text",
// "tokens", "embedding": [...]}]}, one object per -p (or per stdin line
// with --lines).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/error.h"
#include "cli/commands.h"
#include "cli/generation_options.h"
#include "cli/loaded_model.h"
#include "engine/embed.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace kvad::cli {

namespace {

struct EmbedOptions {
  std::string model;
  DeviceOptions device;
  std::vector<std::string> prompts;
  bool lines = false;
  std::string pooling;
  int threads = 0;
};

void embed(const EmbedOptions& o) {
  std::vector<std::string> texts = o.prompts;
  if (o.lines) {
    std::string line;
    for (int c; (c = std::fgetc(stdin)) != EOF;) {
      if (c == '\n') texts.push_back(line), line.clear();
      else line += static_cast<char>(c);
    }
    if (!line.empty()) texts.push_back(line);
  }
  if (texts.empty()) throw Error("nothing to embed: give -p TEXT (repeatable) or --lines with text on stdin");
  LoadedModel m = load_for_cli(o.model, o.device, /*any_kind=*/true);
  EmbeddingConfig cfg = embedding_config(*m.model, m.file ? "" : m.path);
  if (!o.pooling.empty()) cfg.pooling = parse_pooling(o.pooling);
  Embedder e(m.model, m.tokenizer, cfg, o.threads);
  std::vector<std::vector<int32_t>> ids;
  for (const std::string& t : texts) ids.push_back(e.tokenize(t));
  const std::vector<float> v = e.embed(ids);
  nlohmann::ordered_json out = {{"model", m.path},
                                {"pooling", pooling_name(cfg.pooling)},
                                {"normalize", cfg.normalize},
                                {"dim", e.dim()},
                                {"data", nlohmann::ordered_json::array()}};
  const size_t dim = static_cast<size_t>(e.dim());
  for (size_t i = 0; i < texts.size(); ++i)
    out["data"].push_back({{"text", texts[i]},
                           {"tokens", ids[i].size()},
                           {"embedding", std::vector<float>(v.begin() + i * dim, v.begin() + (i + 1) * dim)}});
  const std::string s = out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  if (std::fwrite(s.data(), 1, s.size(), stdout) != s.size() || std::fflush(stdout) != 0)
    throw Error("cannot write standard output");
}

}  // namespace

void add_embed(CLI::App& app) {
  auto o = std::make_shared<EmbedOptions>();
  CLI::App* c = app.add_subcommand("embed", "Print sentence embeddings of texts as JSON");
  c->add_option("-m,--model", o->model, "Embedding model (e.g. sentence-transformers/all-MiniLM-L6-v2) or a text model")
      ->required();
  c->add_option("-p,--prompt", o->prompts, "Text to embed (repeatable)");
  c->add_flag("--lines", o->lines, "Also embed each line of standard input");
  c->add_option("--pooling", o->pooling, "Pooling instead of the model's: mean, cls or last")
      ->check(CLI::IsMember({"mean", "cls", "last"}));
  add_threads_option(c, o->threads);
  add_device_options(c, o->device);
  c->callback([o] { embed(*o); });
}

}  // namespace kvad::cli
