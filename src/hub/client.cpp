#include "hub/client.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "hub/cache.h"

namespace kvad::hub {

namespace {

constexpr int kMaxRedirects = 10;
constexpr const char* kUserAgent = "User-Agent: kvad/0.1 (huggingface_hub-compatible)";

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

// huggingface_hub _clean_token: no CR/LF, no surrounding blanks.
std::string clean_token(std::string t) {
  std::string out;
  for (char c : t)
    if (c != '\r' && c != '\n') out += c;
  const size_t b = out.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return out.substr(b, out.find_last_not_of(" \t") - b + 1);
}

double env_seconds(const char* name, double dflt) {
  const std::string v = env(name);
  if (v.empty()) return dflt;
  char* end = nullptr;
  const long n = std::strtol(v.c_str(), &end, 10);
  if (!end || *end != '\0' || n <= 0 || n > 86400)
    throw Error(std::string(name) + "='" + v + "': want a whole number of seconds (1..86400)");
  return static_cast<double>(n);
}

bool is_redirect(long status) { return status == 301 || status == 302 || status == 303 || status == 307 || status == 308; }

// The path of a repo file in a URL: each segment percent-encoded, '/' kept
// (huggingface_hub hf_hub_url quotes the filename with safe='/').
std::string escape_path(const std::string& file) {
  std::string out;
  size_t start = 0;
  while (true) {
    const size_t slash = file.find('/', start);
    out += url_escape(file.substr(start, slash == std::string::npos ? std::string::npos : slash - start));
    if (slash == std::string::npos) break;
    out += '/';
    start = slash + 1;
  }
  return out;
}

std::string hub_message(const HttpResponse& r) {
  std::string msg = r.header("x-error-message");
  if (msg.empty() && !r.body.empty()) {
    try {
      const nlohmann::json j = nlohmann::json::parse(r.body);
      if (j.is_object() && j.contains("error") && j["error"].is_string()) msg = j["error"].get<std::string>();
    } catch (const nlohmann::json::exception&) {
    }
  }
  if (msg.size() > 300) msg = msg.substr(0, 300) + "...";
  return msg;
}

}  // namespace

RepoInfo parse_repo_info(const std::string& body, const std::string& url, const std::string& what) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(body);
  } catch (const nlohmann::json::exception& e) {
    throw Error(url + ": the answer is not JSON (" + e.what() + "): is HF_ENDPOINT a Hub?");
  }
  RepoInfo info;
  if (!j.is_object() || !j.contains("sha") || !j["sha"].is_string())
    throw Error(url + ": the answer has no \"sha\" string: is HF_ENDPOINT a Hub?");
  info.commit = j["sha"].get<std::string>();
  if (!is_commit_hash(info.commit)) throw Error(url + ": \"sha\" '" + info.commit + "' is not a commit hash");
  if (j.contains("siblings")) {
    if (!j["siblings"].is_array()) throw Error(url + ": \"siblings\" is not an array");
    for (const auto& s : j["siblings"]) {
      if (!s.is_object() || !s.contains("rfilename") || !s["rfilename"].is_string())
        throw Error(url + ": a sibling without an \"rfilename\" string");
      std::string name = s["rfilename"].get<std::string>();
      validate_repo_filename(name, what);
      info.files.push_back(std::move(name));
    }
  }
  return info;
}

FileMetadata parse_file_metadata(const HttpResponse& r, const std::string& url) {
  const bool redirected = is_redirect(r.status) && r.has_header("location");
  FileMetadata m;
  m.commit = r.header("x-repo-commit");
  if (m.commit.empty())
    throw Error(url + ": no X-Repo-Commit header, so this is not a Hub endpoint (check HF_ENDPOINT and proxies)");
  if (!is_commit_hash(m.commit)) throw Error(url + ": X-Repo-Commit '" + m.commit + "' is not a commit hash");
  std::string etag = r.header("x-linked-etag");
  if (etag.empty()) etag = r.header("etag");
  if (etag.empty()) throw Error(url + ": no ETag header; the file cannot be cached reliably");
  m.etag = normalize_etag(etag);
  std::string size = r.header("x-linked-size");
  if (size.empty() && !redirected) size = r.header("content-length");
  if (!size.empty()) {
    bool digits = size.size() <= 19;
    for (char c : size) digits = digits && c >= '0' && c <= '9';
    if (!digits) throw Error(url + ": bad size header '" + size + "'");
    m.size = std::stoull(size);
  }
  m.location = redirected ? url_join(url, r.header("location")) : url;
  return m;
}

HubOptions HubOptions::from_env() {
  HubOptions o;
  if (std::string e = env("HF_ENDPOINT"); !e.empty()) {
    while (!e.empty() && e.back() == '/') e.pop_back();
    o.endpoint = e;
  }
  o.token = clean_token(env("HF_TOKEN"));
  if (o.token.empty()) o.token = clean_token(env("HUGGING_FACE_HUB_TOKEN"));
  if (o.token.empty()) {
    std::string path = env("HF_TOKEN_PATH");
    if (path.empty()) path = hf_home() + "/token";
    std::ifstream in(path, std::ios::binary);
    if (in) {
      std::ostringstream ss;
      ss << in.rdbuf();
      o.token = clean_token(ss.str().substr(0, 4096));
    }
  }
  o.cache_dir = hf_hub_cache_dir();
  o.offline = env_true("HF_HUB_OFFLINE") || env_true("TRANSFORMERS_OFFLINE");
  o.etag_timeout_s = env_seconds("HF_HUB_ETAG_TIMEOUT", o.etag_timeout_s);
  o.download_timeout_s = env_seconds("HF_HUB_DOWNLOAD_TIMEOUT", o.download_timeout_s);
  return o;
}

HubClient::HubClient(HubOptions opt) : opt_(std::move(opt)) {
  while (!opt_.endpoint.empty() && opt_.endpoint.back() == '/') opt_.endpoint.pop_back();
  try {
    origin_ = url_origin(opt_.endpoint);
  } catch (const Error&) {
    throw Error("HF_ENDPOINT '" + opt_.endpoint + "' is not a URL");
  }
  if (origin_.rfind("http://", 0) != 0 && origin_.rfind("https://", 0) != 0)
    throw Error("HF_ENDPOINT '" + opt_.endpoint + "': want an http:// or https:// URL");
}

std::vector<std::string> HubClient::headers_for(const std::string& url) const {
  std::vector<std::string> h = {kUserAgent, "Accept-Encoding: identity"};
  if (!opt_.token.empty() && url_origin(url) == origin_) h.push_back("Authorization: Bearer " + opt_.token);
  return h;
}

std::string HubClient::describe_failure(const HttpResponse& r, const std::string& repo,
                                        const std::string& what) const {
  const std::string code = r.header("x-error-code");
  const std::string msg = hub_message(r);
  const std::string tail = msg.empty() ? "" : " (" + msg + ")";
  const std::string status = "HTTP " + std::to_string(r.status);
  const bool token = !opt_.token.empty();
  if (code == "GatedRepo" || ((r.status == 401 || r.status == 403) && msg.find("gated") != std::string::npos)) {
    if (!token)
      return repo + " is a gated repo and no token was sent (" + status + "): accept its terms at " + opt_.endpoint +
             "/" + repo + ", then set HF_TOKEN or run `hf auth login`";
    return "your token has no access to the gated repo " + repo + " (" + status + "): accept its terms at " +
           opt_.endpoint + "/" + repo;
  }
  if (code == "RevisionNotFound") return what + ": revision not found in " + repo + " (" + status + ")" + tail;
  if (code == "EntryNotFound") return what + ": no such file in " + repo + " (" + status + ")" + tail;
  if (r.status == 401 || code == "RepoNotFound") {
    if (!token)
      return repo + " not found on " + opt_.endpoint + ", or it is private or gated and no token was sent (" +
             status + "): check the name, or set HF_TOKEN";
    return repo + " not found on " + opt_.endpoint + ", or your token cannot read it (" + status + ")" + tail;
  }
  if (r.status == 404) return what + ": not found on " + opt_.endpoint + " (" + status + ")" + tail;
  if (r.status == 403) return what + ": access denied (" + status + ")" + tail;
  return what + ": " + opt_.endpoint + " answered " + status + tail;
}

HttpResponse HubClient::get(const std::string& url, const std::vector<std::string>& extra, HttpRequest base) {
  std::string at = url;
  for (int hop = 0; hop <= kMaxRedirects; ++hop) {
    HttpRequest req = base;
    req.method = "GET";
    req.url = at;
    req.headers = headers_for(at);
    req.headers.insert(req.headers.end(), extra.begin(), extra.end());
    HttpResponse r = http_.send(req);
    if (!is_redirect(r.status) || !r.has_header("location")) return r;
    at = url_join(at, r.header("location"));
  }
  throw Error("more than " + std::to_string(kMaxRedirects) + " redirects from " + url);
}

RepoInfo HubClient::repo_info(const std::string& repo, const std::string& revision) {
  const std::string url = opt_.endpoint + "/api/models/" + repo + "/revision/" + url_escape(revision);
  HttpRequest base;
  base.connect_timeout_s = opt_.etag_timeout_s;
  base.total_timeout_s = opt_.etag_timeout_s * 3;  // a large repo's listing is a few MB
  HttpResponse r;
  try {
    r = get(url, {}, base);
  } catch (const TransportError& e) {
    throw Error("cannot reach " + opt_.endpoint + " for " + repo + ": " + e.what() +
                " (HF_HUB_OFFLINE=1 uses the cache alone)");
  }
  if (r.status != 200) throw Error(describe_failure(r, repo, repo + "@" + revision));
  return parse_repo_info(r.body, url, "file name from " + opt_.endpoint + " in " + repo);
}

FileMetadata HubClient::file_metadata(const std::string& repo, const std::string& commit, const std::string& file) {
  const std::string url = opt_.endpoint + "/" + repo + "/resolve/" + url_escape(commit) + "/" + escape_path(file);
  std::string at = url;
  HttpResponse r;
  for (int hop = 0;; ++hop) {
    if (hop > kMaxRedirects) throw Error("more than " + std::to_string(kMaxRedirects) + " redirects from " + url);
    HttpRequest req;
    req.method = "HEAD";
    req.url = at;
    req.headers = headers_for(at);
    req.connect_timeout_s = opt_.etag_timeout_s;
    req.total_timeout_s = opt_.etag_timeout_s;
    try {
      r = http_.send(req);
    } catch (const TransportError& e) {
      throw Error("cannot reach " + opt_.endpoint + " for " + repo + "/" + file + ": " + e.what());
    }
    if (!is_redirect(r.status) || !r.has_header("location")) break;
    const std::string next = url_join(at, r.header("location"));
    if (url_origin(next) != origin_) break;  // a storage host: this response carries the metadata
    at = next;
  }
  if (!(r.status >= 200 && r.status < 300) && !(is_redirect(r.status) && r.has_header("location")))
    throw Error(describe_failure(r, repo, repo + "/" + file));
  return parse_file_metadata(r, at);
}

}  // namespace kvad::hub
