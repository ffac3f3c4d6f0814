// `kvad pull org/name[@revision][:file-or-quant]`: a model's files from the
// Hugging Face Hub into the HF cache (hub/pull.h), where huggingface_hub,
// transformers and `kvad run --model org/name` find them. Prints the path to
// load (the GGUF, or the snapshot folder of a checkpoint) on stdout.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <string>

#include "base/error.h"
#include "cli/commands.h"
#include "cli/download_progress.h"
#include "hub/pull.h"

namespace kvad::cli {

namespace {

struct PullOptions {
  std::string spec;
  bool offline = false;
  bool quiet = false;
};

void pull_command(const PullOptions& o) {
  const hub::RepoSpec spec = hub::parse_repo_spec(o.spec);
  hub::HubOptions opt = hub::HubOptions::from_env();
  opt.offline = opt.offline || o.offline;
  DownloadProgress progress(stderr);
  hub::PullObserver quiet;
  if (!o.quiet)
    std::fprintf(stderr, "kvad: pulling %s from %s into %s%s\n", spec.str().c_str(), opt.endpoint.c_str(),
                 opt.cache_dir.c_str(), opt.offline ? " (offline: the cache alone)" : "");
  const hub::PullResult r = hub::pull(spec, opt, o.quiet ? &quiet : static_cast<hub::PullObserver*>(&progress));
  if (!o.quiet) {
    uint64_t total = 0;
    for (const hub::PulledFile& f : r.files) total += f.size;
    std::fprintf(stderr, "kvad: %s: %zu file%s, %s, %s downloaded\n", spec.str().c_str(), r.files.size(),
                 r.files.size() == 1 ? "" : "s", human_bytes(total).c_str(), human_bytes(r.bytes_downloaded).c_str());
  }
  std::printf("%s\n", r.resolved.path.c_str());
}

}  // namespace

void add_pull(CLI::App& app) {
  auto o = std::make_shared<PullOptions>();
  CLI::App* c = app.add_subcommand(
      "pull",
      "Download a model from the Hugging Face Hub into the HF cache and print its path. ORG/NAME alone takes a "
      "safetensors checkpoint (config, tokenizer, weights) or a GGUF repo's Q4_K_M; ORG/NAME:Q8_0 picks a GGUF by "
      "its quant tag (all parts of a split one); ORG/NAME:FILE one file. Reads HF_ENDPOINT, HF_TOKEN (or the token "
      "file of `hf auth login`), HF_HUB_CACHE / HF_HOME, HF_HUB_OFFLINE");
  c->add_option("model", o->spec, "ORG/NAME[@REVISION][:QUANT-or-FILE]")->required();
  c->add_flag("--offline", o->offline, "Use only the cache, as HF_HUB_OFFLINE=1 does");
  c->add_flag("-q,--quiet", o->quiet, "No progress, only errors and the path");
  c->callback([o] { pull_command(*o); });
}

}  // namespace kvad::cli
