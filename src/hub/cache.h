// The HF cache, in huggingface_hub's layout (file_download.py, "cache
// system"):
//
//   $HF_HUB_CACHE/models--org--name/
//     blobs/<etag>                    the bytes (sha256 for LFS files, git sha1 otherwise)
//     refs/<revision>                 the commit a branch or tag points to (no newline)
//     snapshots/<commit>/<file>       relative symlink to ../../blobs/<etag>
//
// so a model that huggingface-cli, transformers or snapshot_download put
// there is found here, and one that `kvad pull` puts there is found by them.
// Nothing in this file touches the network.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "hub/repo_spec.h"
#include "hub/select.h"

namespace kvad::hub {

/// True for an environment variable huggingface_hub reads as true:
/// "1", "ON", "YES", "TRUE" (any case) (constants._is_true).
bool env_true(const char* name);

/// $HF_HOME, else $XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface.
std::string hf_home();

/// The cache folder: $HF_HUB_CACHE, else $HUGGINGFACE_HUB_CACHE, else
/// hf_home()/hub (huggingface_hub constants.HF_HUB_CACHE).
std::string hf_hub_cache_dir();

/// `<cache_dir>/models--org--name`.
std::string repo_cache_dir(const std::string& cache_dir, const std::string& repo_id);

/// The commit `revision` names in a repo's cache folder: the revision itself
/// when it is a 40-hex commit, else the contents of refs/<revision>; "" when
/// there is no such ref. Throws kvad::Error when the ref file does not hold
/// a commit hash.
std::string cached_commit(const std::string& repo_dir, const std::string& revision);

/// Every file in a snapshot folder, '/'-separated paths relative to it,
/// sorted; symlinks whose blob is missing are left out (they are not there).
std::vector<std::string> snapshot_files(const std::string& snapshot_dir);

/// A repo spec resolved in the cache.
struct Resolved {
  std::string commit;        ///< 40-hex
  std::string snapshot_dir;  ///< <repo>/snapshots/<commit>
  /// What to load: the snapshot folder for a safetensors checkpoint, else
  /// the GGUF (its first split part) or the named file, an absolute path.
  std::string path;
  Selection selection;       ///< the files the model is made of
};

/// Resolves `spec` in `cache_dir` without the network: the revision to its
/// commit (cached_commit), then the model's files in that snapshot
/// (select_model_files over snapshot_files). nullopt when the repo, the
/// revision, its snapshot or one of the model's files is not cached (the
/// selector matching nothing there included); for a checkpoint, also when
/// config.json or a shard named in model.safetensors.index.json is missing.
/// Then `*why_not`, when given, says which, in a phrase ("no refs/main in
/// DIR"). Throws kvad::Error for an invalid ref file or index JSON.
std::optional<Resolved> resolve_hf(const RepoSpec& spec, const std::string& cache_dir = hf_hub_cache_dir(),
                                   std::string* why_not = nullptr);

}  // namespace kvad::hub
