#include "hub/http.h"

#include <curl/curl.h>

#include <cctype>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>

namespace kvad::hub {

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t' || s[e - 1] == '\r' || s[e - 1] == '\n')) --e;
  return s.substr(b, e - b);
}

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) throw Error("libcurl: curl_global_init failed");
  });
}

// State the callbacks share during one transfer.
struct Transfer {
  const HttpRequest* req = nullptr;
  HttpResponse* resp = nullptr;
  size_t body_bytes = 0;      // 2xx bytes handed to on_body or kept
  bool over_limit = false;
  bool aborted = false;       // on_body returned false
  std::exception_ptr error;   // thrown by on_body; rethrown after curl returns
};

size_t on_header(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const std::string line(data, size * n);
  if (line.rfind("HTTP/", 0) == 0) {
    // A new response (after a 100 Continue, say) starts over.
    t->resp->headers.clear();
    const size_t sp = line.find(' ');
    t->resp->status = sp == std::string::npos ? 0 : std::strtol(line.c_str() + sp + 1, nullptr, 10);
    return size * n;
  }
  const size_t colon = line.find(':');
  if (colon != std::string::npos)
    t->resp->headers.emplace_back(lower(trim(line.substr(0, colon))), trim(line.substr(colon + 1)));
  return size * n;
}

size_t on_write(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t len = size * n;
  const bool ok_status = t->resp->status >= 200 && t->resp->status < 300;
  if (ok_status && t->req->on_body) {
    try {
      if (!t->req->on_body(*t->resp, data, len)) {
        t->aborted = true;
        return 0;
      }
    } catch (...) {
      t->error = std::current_exception();
      return 0;
    }
    t->body_bytes += len;
    return len;
  }
  if (t->resp->body.size() + len > t->req->body_limit) {
    t->over_limit = true;
    return 0;
  }
  t->resp->body.append(data, len);
  if (ok_status) t->body_bytes += len;
  return len;
}

struct CurlUrl {
  CURLU* h = curl_url();
  ~CurlUrl() { curl_url_cleanup(h); }
  std::string get(CURLUPart part, unsigned flags = 0) const {
    char* s = nullptr;
    if (curl_url_get(h, part, &s, flags) != CURLUE_OK || !s) return "";
    std::string out(s);
    curl_free(s);
    return out;
  }
};

}  // namespace

std::string HttpResponse::header(const std::string& lower_name) const {
  for (auto it = headers.rbegin(); it != headers.rend(); ++it)
    if (it->first == lower_name) return it->second;
  return "";
}

bool HttpResponse::has_header(const std::string& lower_name) const {
  for (const auto& [k, v] : headers)
    if (k == lower_name) return true;
  return false;
}

HttpClient::HttpClient() {
  global_init();
  curl_ = curl_easy_init();
  if (!curl_) throw Error("libcurl: curl_easy_init failed");
}

HttpClient::~HttpClient() { curl_easy_cleanup(static_cast<CURL*>(curl_)); }

HttpResponse HttpClient::send(const HttpRequest& req) {
  CURL* h = static_cast<CURL*>(curl_);
  curl_easy_reset(h);  // keeps the connection cache: keep-alive across requests
  HttpResponse resp;
  Transfer t;
  t.req = &req;
  t.resp = &resp;

  std::unique_ptr<curl_slist, void (*)(curl_slist*)> hdrs(nullptr, &curl_slist_free_all);
  for (const std::string& line : req.headers) {
    curl_slist* next = curl_slist_append(hdrs.get(), line.c_str());
    if (!next) throw Error("libcurl: out of memory");
    hdrs.release();
    hdrs.reset(next);
  }
  char errbuf[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(h, CURLOPT_URL, req.url.c_str());
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs.get());
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, &on_header);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, &t);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, &on_write);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &t);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(req.connect_timeout_s * 1000));
  if (req.total_timeout_s > 0) curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(req.total_timeout_s * 1000));
  if (req.stall_timeout_s > 0) {
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, static_cast<long>(req.stall_timeout_s + 0.999));
  }
  if (req.method == "HEAD") curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
  else if (req.method != "GET") throw Error("http: unsupported method " + req.method);

  const CURLcode rc = curl_easy_perform(h);
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, nullptr);
  if (t.error) std::rethrow_exception(t.error);
  if (t.aborted) throw Error("transfer from " + req.url + " aborted");
  if (t.over_limit)
    throw Error("response from " + req.url + " is larger than " + std::to_string(req.body_limit) + " bytes");
  if (rc != CURLE_OK) {
    std::string why = errbuf[0] ? errbuf : curl_easy_strerror(rc);
    while (!why.empty() && why.back() == '\n') why.pop_back();
    throw TransportError(why, resp.status, t.body_bytes);
  }
  long code = 0;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
  if (code) resp.status = code;
  return resp;
}

std::string url_origin(const std::string& url) {
  CurlUrl u;
  if (!u.h || curl_url_set(u.h, CURLUPART_URL, url.c_str(), 0) != CURLUE_OK) throw Error("bad URL '" + url + "'");
  const std::string scheme = lower(u.get(CURLUPART_SCHEME));
  const std::string host = lower(u.get(CURLUPART_HOST));
  const std::string port = u.get(CURLUPART_PORT, CURLU_DEFAULT_PORT);
  return scheme + "://" + host + ":" + port;
}

std::string url_join(const std::string& base, const std::string& location) {
  CurlUrl u;
  if (!u.h || curl_url_set(u.h, CURLUPART_URL, base.c_str(), 0) != CURLUE_OK) throw Error("bad URL '" + base + "'");
  // With a base set, CURLUPART_URL takes a relative reference as RFC 3986
  // resolves it against the base.
  if (curl_url_set(u.h, CURLUPART_URL, location.c_str(), 0) != CURLUE_OK)
    throw Error("bad redirect Location '" + location + "' from " + base);
  const std::string scheme = lower(u.get(CURLUPART_SCHEME));
  if (scheme != "http" && scheme != "https")
    throw Error("redirect from " + base + " to a " + scheme + ": URL refused");
  return u.get(CURLUPART_URL);
}

std::string url_escape(const std::string& segment) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : segment) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

}  // namespace kvad::hub
