// `pull`: the files of a model from the Hub into the HF cache, the way
// huggingface_hub's hf_hub_download writes them (file_download.py
// _hf_hub_download_to_cache_dir), with a resume of cut downloads and a
// sha256 check of LFS files.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "hub/cache.h"
#include "hub/client.h"
#include "hub/repo_spec.h"

namespace kvad::hub {

/// What a pull reports while it works; every method has a no-op default.
/// Sizes are bytes; `total` is 0 when the server did not say.
class PullObserver {
 public:
  virtual ~PullObserver() = default;
  /// Once the file list is known: the commit and the files to be had.
  virtual void on_plan(const std::string& repo, const std::string& commit, const std::vector<std::string>& files) {}
  /// A file found complete in the cache (its snapshot link or its blob).
  virtual void on_cached(const std::string& file, uint64_t size) {}
  /// A download starts (`offset` > 0: resuming a partial blob).
  virtual void on_start(const std::string& file, uint64_t offset, uint64_t total) {}
  /// Bytes of `file` now on disk, called as data arrives.
  virtual void on_progress(const std::string& file, uint64_t done, uint64_t total) {}
  /// A download finished and was verified; `downloaded` bytes came over the network.
  virtual void on_done(const std::string& file, uint64_t downloaded, uint64_t total) {}
  /// Anything else worth a line: a retry after a cut, a wait for a lock.
  virtual void on_note(const std::string& message) {}
};

/// One file of a pull.
struct PulledFile {
  std::string name;         ///< repo-relative
  std::string etag;         ///< the blob's name
  uint64_t size = 0;        ///< bytes of the blob
  uint64_t downloaded = 0;  ///< bytes fetched by this pull (0 when cached)
};

struct PullResult {
  Resolved resolved;               ///< as resolve_hf would give it now
  std::vector<PulledFile> files;   ///< in Selection order
  uint64_t bytes_downloaded = 0;
};

/// Fetches the model `spec` names (select_model_files over the repo's file
/// list) into `opt.cache_dir`:
///  - GET the revision's commit and file list; HEAD each file not yet in
///    snapshots/<commit>/ for its ETag, size and location;
///  - download each missing blob to blobs/<etag>.incomplete (resuming one
///    left by a cut transfer with `Range`, retrying up to opt.max_attempts
///    times), check its size and, for an LFS file (64-hex ETag), its sha256,
///    then rename it to blobs/<etag>; a file lock in .locks/ keeps two
///    processes (kvad or huggingface_hub) from writing the same blob;
///  - only when every blob is verified: the snapshot's relative symlinks
///    (../../blobs/<etag>), then refs/<revision> and CACHEDIR.TAG.
/// A failed pull leaves the snapshot as it was (and a partial blob to
/// resume). With opt.offline it only resolves in the cache. Throws
/// kvad::Error with a one-line message: gated or private repo without a
/// token (401), not found (404), network failure, sha256 or size mismatch
/// (the partial blob removed), an unsafe file name or ETag from the server,
/// not enough disk space, offline and not cached.
PullResult pull(const RepoSpec& spec, const HubOptions& opt, PullObserver* observer = nullptr);

/// n bytes for people: "512 B", "3.5 KiB", "269.1 MiB", "1.25 GiB".
std::string human_bytes(uint64_t n);

}  // namespace kvad::hub
