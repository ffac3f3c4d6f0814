// A small HTTP client over libcurl for the Hub protocol: one request at a
// time on a reused handle (keep-alive), redirects never followed by curl
// (the caller decides where an Authorization header may go), http and
// https only.
#pragma once
#include <cstddef>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"

namespace kvad::hub {

/// A request that got no complete HTTP response: cannot connect, resolve,
/// time out, or the connection was cut mid-body. `status` is the HTTP status
/// if the headers had arrived (0 otherwise), `body_bytes` what arrived of
/// the body before the cut.
class TransportError : public Error {
 public:
  TransportError(const std::string& what, long status, size_t body_bytes)
      : Error(what), status(status), body_bytes(body_bytes) {}
  long status;
  size_t body_bytes;
};

struct HttpResponse;

/// One request. `on_body` receives a 2xx response's body as it arrives,
/// with the response's status and headers, and returns false (or throws) to
/// abort the transfer (send() then throws kvad::Error); without it the body
/// is collected in HttpResponse::body. Non-2xx bodies are always collected
/// (they carry the Hub's error message), at most `body_limit` bytes.
struct HttpRequest {
  std::string method = "GET";        ///< "GET" or "HEAD"
  std::string url;                   ///< http:// or https://
  std::vector<std::string> headers;  ///< "Name: value" lines
  double connect_timeout_s = 10;
  double total_timeout_s = 0;        ///< whole request; 0 = no limit
  double stall_timeout_s = 0;        ///< abort below 1 byte/s for this long; 0 = never
  size_t body_limit = 64u << 20;     ///< bytes kept in HttpResponse::body; more is an error
  std::function<bool(const HttpResponse& head, const char* data, size_t n)> on_body;
};

struct HttpResponse {
  long status = 0;
  std::vector<std::pair<std::string, std::string>> headers;  ///< names lower-cased, in order
  std::string body;
  /// The value of the last header named `lower_name`, "" when absent.
  std::string header(const std::string& lower_name) const;
  bool has_header(const std::string& lower_name) const;
};

/// A libcurl easy handle reused across requests. Not thread-safe.
class HttpClient {
 public:
  HttpClient();
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  /// Sends `req` and returns the response, whatever its status (3xx
  /// included: redirects are the caller's). Throws TransportError when no
  /// complete response came, kvad::Error when on_body threw one or a body
  /// exceeded body_limit.
  HttpResponse send(const HttpRequest& req);

 private:
  void* curl_;
};

/// "scheme://host:port" of an absolute URL, lower-cased, with the scheme's
/// default port made explicit: the origin that decides whether a request
/// may carry the Authorization header (huggingface_hub _url_origin). Throws
/// kvad::Error for a URL libcurl cannot parse.
std::string url_origin(const std::string& url);

/// `location` (absolute or relative, as in a Location header) resolved
/// against `base`. Throws kvad::Error unless the result is http(s).
std::string url_join(const std::string& base, const std::string& location);

/// Percent-encodes every byte outside [A-Za-z0-9-._~] (`/` too), for one
/// path segment.
std::string url_escape(const std::string& segment);

}  // namespace kvad::hub
