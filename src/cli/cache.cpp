// kvad cache: the quantize-once cache ($KVAD_HOME/cache, model/quantize_once.h):
// list its entries, forget a model's.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "cli/commands.h"
#include "cli/model_store.h"
#include "io/gguf.h"
#include "model/quantize_once.h"

namespace kvad::cli {
namespace {

namespace fs = std::filesystem;

struct Entry {
  fs::path path;
  std::string repo, commit, quant;
  uintmax_t bytes = 0;
  std::time_t used = 0;
};

// Every readable cache file; a file that is not one of ours is left out.
std::vector<Entry> entries(const std::string& dir) {
  std::vector<Entry> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (const auto& de : fs::directory_iterator(dir, ec)) {
    if (de.path().extension() != ".gguf" || !de.is_regular_file(ec)) continue;
    try {
      std::unique_ptr<gguf::File> f = gguf::File::open(de.path().string());
      if (!f->find(quantize_once_keys::kVersion)) continue;
      Entry e;
      e.path = de.path();
      e.repo = f->get_string(quantize_once_keys::kRepo, "?");
      e.commit = f->get_string(quantize_once_keys::kCommit, "?");
      e.quant = f->get_string(quantize_once_keys::kQuant, "?");
      e.bytes = de.file_size(ec);
      const auto t = de.last_write_time(ec);
      e.used = std::chrono::system_clock::to_time_t(
          std::chrono::time_point_cast<std::chrono::system_clock::duration>(
              t - fs::file_time_type::clock::now() + std::chrono::system_clock::now()));
      out.push_back(std::move(e));
    } catch (const Error&) {
      continue;
    }
  }
  std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) { return a.repo < b.repo || (a.repo == b.repo && a.quant < b.quant); });
  return out;
}

void list(const std::string& dir) {
  const std::vector<Entry> es = entries(dir);
  if (es.empty()) {
    std::printf("the quantize-once cache %s is empty\n", dir.c_str());
    return;
  }
  std::printf("%-44s %-8s %10s  %-12s %-16s\n", "model", "quant", "size MiB", "commit", "last used");
  uintmax_t total = 0;
  for (const Entry& e : es) {
    char when[32];
    std::strftime(when, sizeof when, "%Y-%m-%d %H:%M", std::localtime(&e.used));
    std::printf("%-44s %-8s %10.1f  %-12s %-16s\n", e.repo.c_str(), e.quant.c_str(), e.bytes / 1048576.0,
                e.commit.substr(0, 12).c_str(), when);
    total += e.bytes;
  }
  std::printf("%zu %s, %.1f MiB in %s\n", es.size(), es.size() == 1 ? "entry" : "entries", total / 1048576.0,
              dir.c_str());
}

void forget(const std::string& dir, const std::string& repo) {
  int n = 0;
  for (const Entry& e : entries(dir)) {
    if (e.repo != repo) continue;
    std::error_code ec;
    fs::remove(e.path, ec);
    if (ec) throw Error("cannot remove " + e.path.string() + ": " + ec.message());
    std::printf("removed %s (%s, %.1f MiB)\n", e.path.filename().c_str(), e.quant.c_str(), e.bytes / 1048576.0);
    ++n;
  }
  if (n == 0) throw Error("no entry for '" + repo + "' in the quantize-once cache " + dir + " (see kvad cache)");
}

}  // namespace

void add_cache(CLI::App& app) {
  CLI::App* c = app.add_subcommand(
      "cache", "The quantize-once cache ($KVAD_HOME/cache): what --quant wrote for HF checkpoints. "
               "`kvad cache` lists entries; `kvad cache forget ORG/NAME` removes a model's");
  auto args = std::make_shared<std::vector<std::string>>();
  c->add_option("action", *args, "forget ORG/NAME (nothing: list)")->expected(0, 2);
  c->callback([args] {
    const std::string dir = kvad_home() + "/cache";
    if (args->empty()) return list(dir);
    if ((*args)[0] != "forget" || args->size() != 2) throw Error("usage: kvad cache [forget ORG/NAME]");
    forget(dir, (*args)[1]);
  });
}

}  // namespace kvad::cli
