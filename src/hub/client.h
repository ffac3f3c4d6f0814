// The Hub's HTTP protocol as huggingface_hub speaks it (hf_api.py
// repo_info, file_download.py get_hf_file_metadata and http_get):
//
//   GET  {endpoint}/api/models/{repo}/revision/{rev}   -> {"sha": commit, "siblings": [{"rfilename": ...}]}
//   HEAD {endpoint}/{repo}/resolve/{commit}/{file}     -> X-Repo-Commit, X-Linked-Etag or ETag,
//                                                         X-Linked-Size or Content-Length, maybe a
//                                                         302 Location to a storage host
//   GET  {location}                                    -> the bytes (Range for a resume)
//
// The Authorization header goes only to the endpoint's origin (scheme, host,
// port); a redirect to any other origin never receives it.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "hub/http.h"
#include "hub/repo_spec.h"

namespace kvad::hub {

/// Where and how to reach the Hub, and where the cache is.
struct HubOptions {
  std::string endpoint = "https://huggingface.co";  ///< no trailing '/'
  std::string token;                                 ///< "" sends no Authorization
  std::string cache_dir;                             ///< the HF cache (hf_hub_cache_dir())
  bool offline = false;                              ///< never touch the network
  double etag_timeout_s = 10;     ///< API and HEAD requests, whole request
  double download_timeout_s = 10; ///< downloads: connecting, and the longest stall
  int max_attempts = 5;           ///< tries per file when a download is cut (each resumes)

  /// From the environment as huggingface_hub reads it: HF_ENDPOINT;
  /// HF_TOKEN, else HUGGING_FACE_HUB_TOKEN, else the file $HF_TOKEN_PATH
  /// (default $HF_HOME/token, which `hf auth login` writes); HF_HUB_CACHE
  /// (cache.h); HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE; HF_HUB_ETAG_TIMEOUT
  /// and HF_HUB_DOWNLOAD_TIMEOUT (seconds). Throws kvad::Error for a
  /// timeout that is not a positive integer.
  static HubOptions from_env();
};

/// What the revision endpoint says about a repo.
struct RepoInfo {
  std::string commit;              ///< "sha", 40-hex
  std::vector<std::string> files;  ///< "siblings[].rfilename", each validated
};

/// What a HEAD on /resolve says about one file.
struct FileMetadata {
  std::string commit;               ///< X-Repo-Commit
  std::string etag;                 ///< normalized: the blob's name
  std::optional<uint64_t> size;     ///< X-Linked-Size, or Content-Length when not redirected
  std::string location;             ///< where to GET the bytes
};

/// The body of GET /api/models/{repo}/revision/{rev} (from `url`) to a
/// RepoInfo. Throws kvad::Error naming `url` when it is not JSON, has no
/// 40-hex "sha", or "siblings" is not an array of {"rfilename": string};
/// and, naming `what`, for a file name that is absolute or has ".."
/// (validate_repo_filename).
RepoInfo parse_repo_info(const std::string& body, const std::string& url, const std::string& what);

/// The metadata in the headers of a HEAD /resolve answer for `url` (2xx, or
/// the redirect that leaves the endpoint's origin). Throws kvad::Error
/// naming `url` without a 40-hex X-Repo-Commit, without an ETag usable as a
/// blob name, with a size that is not a decimal number, or with a Location
/// that is not http(s).
FileMetadata parse_file_metadata(const HttpResponse& r, const std::string& url);

/// One connection to the Hub (not thread-safe).
class HubClient {
 public:
  explicit HubClient(HubOptions opt);

  const HubOptions& options() const { return opt_; }

  /// GET /api/models/{repo}/revision/{revision}. Throws kvad::Error with a
  /// message for the user: gated (401/403 GatedRepo), not found or private
  /// (401/404), revision not found, other statuses, network failures, a
  /// body that is not the expected JSON, a sha that is not a commit hash, and
  /// any sibling name that is absolute or contains ".." (refused).
  RepoInfo repo_info(const std::string& repo, const std::string& revision);

  /// HEAD /{repo}/resolve/{commit}/{file}, following redirects that stay on
  /// the endpoint's origin and stopping at the first that leaves it (its
  /// headers carry the metadata, as on the Hub). Throws kvad::Error as
  /// repo_info does, and when X-Repo-Commit or the ETag is missing.
  FileMetadata file_metadata(const std::string& repo, const std::string& commit, const std::string& file);

  /// Sends a GET for `url`, following up to 10 redirects; each hop carries
  /// the Authorization header only when its origin is the endpoint's.
  /// `extra` headers (a Range) go to every hop. Returns the final response
  /// (whatever its status); throws TransportError as HttpClient::send.
  HttpResponse get(const std::string& url, const std::vector<std::string>& extra, HttpRequest base);

  /// The "kvad: error" text for a response that is not a success: the
  /// status, the Hub's X-Error-Code/X-Error-Message or JSON "error", and what
  /// to do about it (set HF_TOKEN, accept a gated repo's terms).
  std::string describe_failure(const HttpResponse& r, const std::string& repo, const std::string& what) const;

  /// The headers every request to `url` carries: User-Agent, Accept-Encoding
  /// identity, and Authorization: Bearer when `url`'s origin is the
  /// endpoint's and a token is set.
  std::vector<std::string> headers_for(const std::string& url) const;

 private:
  HubOptions opt_;
  std::string origin_;  // url_origin(endpoint)
  HttpClient http_;
};

}  // namespace kvad::hub
