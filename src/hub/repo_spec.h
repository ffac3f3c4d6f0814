// Names on the Hugging Face Hub: repo ids, revisions, file names inside a
// repo, ETags. The rules are huggingface_hub's (utils/_validators.py
// validate_repo_id, _local_folder.py _validate_relative_filename,
// file_download.py _normalize_etag), so a name kvad accepts is one the
// official client accepts, and nothing a server sends can name a path
// outside the cache.
#pragma once
#include <string>

namespace kvad::hub {

/// `org/name[@revision][:selector]`, the way a user names a model.
struct RepoSpec {
  std::string repo;                ///< "org/name" (or "name"), validated
  std::string revision = "main";   ///< branch, tag or 40-hex commit
  std::string selector;            ///< "" (the model's files), a file name, or a quant tag ("Q4_K_M")
  /// "org/name[@revision][:selector]" again; "@main" is left out.
  std::string str() const;
};

/// Parses `org/name[@revision][:selector]`. Throws kvad::Error naming the
/// argument when the repo id or revision is not valid (see validate_*).
RepoSpec parse_repo_spec(const std::string& arg);

/// True when `arg` reads as a Hub repo spec and not as a path: exactly one
/// '/' in the repo part, no leading '.', '/' or '~', and the repo part does
/// not end in ".gguf" or ".safetensors". Does not validate fully.
bool looks_like_repo_spec(const std::string& arg);

/// Throws kvad::Error unless `repo_id` is `[namespace/]name` with 1..96
/// characters of [A-Za-z0-9_.-] per part, neither starting nor ending with
/// '-' or '.', without "--" or "..", not ending in ".git".
void validate_repo_id(const std::string& repo_id);

/// Throws kvad::Error unless `rev` is a branch/tag/commit name that is safe
/// as a relative path under refs/: non-empty, at most 255 bytes, no "..",
/// no leading '/', no empty or "." segment, no control characters or '\\'.
void validate_revision(const std::string& rev);

/// Throws kvad::Error (naming `what`, e.g. "file name from the server")
/// unless `name` is a '/'-separated path relative to the repo root that
/// stays inside it: non-empty, not absolute, no "..", "." or empty segment,
/// no '\\', no drive letter, no control characters, at most 4096 bytes.
void validate_repo_filename(const std::string& name, const std::string& what);

/// True for a full commit hash: exactly 40 lowercase hex digits.
bool is_commit_hash(const std::string& s);

/// True for a sha256 in hex: exactly 64 lowercase hex digits (the ETag of an
/// LFS file is its sha256).
bool is_sha256_hex(const std::string& s);

/// An ETag header value to the name of its blob: `W/"abc"` and `"abc"` both
/// give `abc` (huggingface_hub _normalize_etag). Throws kvad::Error unless
/// the result is 1..128 characters of [A-Za-z0-9_-] (a blob file name).
std::string normalize_etag(const std::string& header);

/// "models--org--name": the folder of a model repo in the HF cache
/// (huggingface_hub file_download.repo_folder_name).
std::string repo_folder_name(const std::string& repo_id);

}  // namespace kvad::hub
