#include "cli/model_store.h"

#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>

#include "base/error.h"
#include "cli/download_progress.h"
#include "hub/cache.h"
#include "hub/pull.h"
#include "hub/repo_spec.h"
#include "model/image/pipeline.h"

namespace fs = std::filesystem;

namespace kvad::cli {

std::string kvad_home() {
  const char* home = std::getenv("KVAD_HOME");
  if (home && *home) return home;
  const char* h = std::getenv("HOME");
  return std::string(h && *h ? h : ".") + "/.cache/kvad";
}

std::string model_store_dir() { return kvad_home() + "/models"; }

namespace {

// ORG/NAME[@REV][:SEL] through the HF cache, pulling when it is missing.
hub::Resolved resolve_hf_model(const std::string& arg) {
  const hub::RepoSpec spec = hub::parse_repo_spec(arg);
  const hub::HubOptions opt = hub::HubOptions::from_env();
  std::string why;
  std::optional<hub::Resolved> r = hub::resolve_hf(spec, opt.cache_dir, &why);
  if (r) {
    std::fprintf(stderr, "kvad: %s from the HF cache: %s\n", spec.str().c_str(), r->path.c_str());
  } else {
    if (opt.offline) throw Error("model '" + arg + "' is not in the HF cache and HF_HUB_OFFLINE is set: " + why);
    std::fprintf(stderr, "kvad: %s is not in the HF cache %s; pulling it from %s\n", spec.str().c_str(),
                 opt.cache_dir.c_str(), opt.endpoint.c_str());
    DownloadProgress progress(stderr);
    r = hub::pull(spec, opt, &progress).resolved;
    std::fprintf(stderr, "kvad: %s: %s\n", spec.str().c_str(), r->path.c_str());
  }
  return *r;
}

}  // namespace

std::string resolve_model(const std::string& arg) { return resolve_model_full(arg).path; }

ResolvedModel resolve_model_full(const std::string& arg) {
  const std::string name = arg.empty() ? kDefaultModel : arg;
  std::error_code ec;
  if (fs::is_regular_file(name, ec)) return {name, false, name, "local"};
  if (fs::is_directory(name, ec) && fs::is_regular_file(fs::path(name) / "config.json", ec))
    return {name, true, fs::absolute(name, ec).string(), "local"};
  // An HF checkpoint setup placed in the store under its repo name
  // (scripts/models.tsv rows whose path is a directory) comes first.
  if (!fs::exists(name, ec) && hub::looks_like_repo_spec(name) && name.find_first_of("@:") == std::string::npos) {
    const fs::path stored = fs::path(model_store_dir()) / name;
    if (fs::is_regular_file(stored / "config.json", ec)) return {stored.string(), true, name, "store"};
  }
  if (!fs::exists(name, ec) && hub::looks_like_repo_spec(name)) {
    const hub::Resolved r = resolve_hf_model(name);
    const bool ckpt = r.selection.kind == hub::Selection::Kind::Checkpoint;
    return {r.path, ckpt, hub::parse_repo_spec(name).repo, r.commit};
  }
  if (fs::is_directory(name, ec)) {
    // A folder that is neither a checkpoint nor in the store's layout.
    std::string ggufs;
    for (const auto& e : fs::directory_iterator(name, ec))
      if (e.path().extension() == ".gguf") ggufs += (ggufs.empty() ? "" : ", ") + e.path().filename().string();
    if (!ggufs.empty())
      throw Error("model '" + name + "' is a directory; give one of its GGUF files: " + ggufs);
    throw Error("model '" + name + "' is a directory with no model files (no *.gguf, no config.json of an HF "
                "checkpoint)");
  }
  const std::string dir = model_store_dir();
  const std::string in_store = dir + "/" + name + ".gguf";
  if (name.find('/') == std::string::npos && fs::is_regular_file(in_store, ec)) return {in_store, false, in_store, "local"};
  std::string have;
  if (fs::is_directory(dir, ec))
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().extension() == ".gguf") have += (have.empty() ? "" : ", ") + e.path().stem().string();
  throw Error("model '" + name + "' not found: no such file, and not in the model store " + dir +
              (have.empty() ? " (empty; run scripts/setup to fetch the default model)" : " (has: " + have + ")"));
}

size_t peak_rss_bytes() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<size_t>(ru.ru_maxrss) * 1024;
}

PipelinePath resolve_pipeline(const std::string& arg) {
  std::error_code ec;
  if (fs::is_regular_file(arg, ec)) return {arg, ""};
  if (image::is_diffusers_folder(arg)) return {arg, ""};
  if (fs::is_directory(arg, ec))
    throw Error("model '" + arg + "' is a folder without model_index.json (not a diffusers pipeline)");
  if (hub::looks_like_repo_spec(arg)) {
    // A pipeline repo setup placed in the store under its name, else the HF cache (pulled when missing).
    const fs::path stored = fs::path(model_store_dir()) / arg;
    if (arg.find_first_of("@:") == std::string::npos && image::is_diffusers_folder(stored.string()))
      return {stored.string(), arg};
    const ResolvedModel r = resolve_model_full(arg);
    if (!image::is_diffusers_folder(r.path) && !fs::is_regular_file(r.path, ec))
      throw Error("model '" + arg + "' resolves to " + r.path + ", which is not a diffusers pipeline (no "
                  "model_index.json) nor a single .safetensors file");
    return {r.path, hub::parse_repo_spec(arg).repo};
  }
  throw Error("model '" + arg + "' not found: not a file, not a diffusers folder, and not ORG/NAME of a pipeline "
              "repo");
}

}  // namespace kvad::cli
