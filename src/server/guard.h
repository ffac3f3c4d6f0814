// The HTTP front door's checks, made before a request body is read or parsed
// (server.cpp calls them from cpp-httplib's pre-routing handler, which runs
// after the request line and headers and before the body):
//   - body framing: a POST must carry Content-Length (411) within the body
//     limit (413); Transfer-Encoding (chunked or any other) is refused (501)
//     and so is any Content-Encoding (415), because cpp-httplib 0.11.4 reads
//     chunked and gzip bodies without a bound;
//   - Host allow-list against DNS rebinding (421 Misdirected Request);
//   - the API key, compared in constant time;
// and the connection watchdog that gives every request a deadline for its
// headers and body (slowloris), which cpp-httplib lacks: it only has a
// timeout per read.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <condition_variable>
#include <vector>

namespace kvad::server {

/// Bytes of a request path or method as they may be logged: printable ASCII
/// kept, everything else (newlines, ESC, non-ASCII) as \xHH, cut at
/// `max_len` bytes of input with "..." appended.
std::string sanitize_for_log(std::string_view s, size_t max_len = 256);

/// True when `a` and `b` are equal; the time taken depends only on their
/// lengths, not on where they differ.
bool constant_time_equal(std::string_view a, std::string_view b);

/// The host name of a Host header value ("localhost:8080" -> "localhost",
/// "[::1]:80" -> "::1"), lower-cased.
std::string host_name_of(std::string_view host_header);

/// True when the Host header names one of `allowed` (names without port,
/// lower case). An empty `allowed` list allows any host.
bool host_allowed(std::string_view host_header, const std::vector<std::string>& allowed);

/// Gives each connection on the server's port a deadline for the part of a
/// request that cpp-httplib reads before kvad's handler runs (request line,
/// headers, body) and for keep-alive idleness: a connection that is not in
/// a handler and has not made progress (entered a handler, finished a
/// response) for `deadline` is shut down (shutdown(2); the library's read
/// then fails and its thread is free). A connection whose request line and
// headers have made the server read more than kMaxHeaderBytes (cpp-httplib
// 0.11.4 has no header count limit and buffers a header line whole before
// checking its length: 117 MB of headers cost 1.6 GB) is shut down too; the
// bytes read are TCP_INFO's bytes received less those still queued
// (FIONREAD). It finds connections by scanning
/// /proc/self/fd every `interval` for TCP sockets whose local port is the
/// server's. Thread-safe.
class ConnectionWatchdog {
 public:
  static constexpr uint64_t kMaxHeaderBytes = 64 << 10;
  /// Beyond `max_open` connections at once, the oldest still sending their
  /// request line or headers are answered 503 (written directly: nothing
  /// else has written to them) and shut down, so new ones find a thread.
  ConnectionWatchdog(std::chrono::milliseconds deadline, std::chrono::milliseconds interval, size_t max_open)
      : deadline_(deadline), interval_(interval), max_open_(max_open) {}
  ~ConnectionWatchdog() { stop(); }
  void start(int local_port);
  void stop();
  /// The handler for the connection from remote_port began (exempt from the
  /// deadline until done()).
  void busy(const std::string& remote_addr, int remote_port);
  /// The front door accepted the request's headers: the library now reads
  /// its body (Content-Length, already checked against the body limit).
  void body(const std::string& remote_addr, int remote_port);
  /// A response on that connection was written: its clock starts again
  /// (keep-alive idle, the next request's headers).
  void done(const std::string& remote_addr, int remote_port);
  /// Asks the watchdog thread to give freed heap memory back to the system
  /// (malloc_trim) at its next tick: a large request body, once freed, stays
  /// in the glibc arena of the thread that read it otherwise (measured: 30 x
  /// 4 MB refused prompts grew RSS by 200 MB).
  void request_trim() { trim_.store(true); }
  /// Connections shut down for missing their deadline so far.
  uint64_t shut_down() const { return shut_down_; }

 private:
  void loop();
  struct Conn {
    std::chrono::steady_clock::time_point since;
    bool busy = false;
    bool in_body = false;
    bool rebase = false;   ///< take `base` afresh at the next scan
    uint64_t base = 0;     ///< bytes the server had read when the current request began
  };
  std::chrono::milliseconds deadline_, interval_;
  size_t max_open_;
  int port_ = -1;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::map<std::string, Conn> conns_;  ///< by "remote_addr port" (all are to one local port)
  std::thread thread_;
  uint64_t shut_down_ = 0;
  std::atomic<bool> trim_{false};
};

}  // namespace kvad::server
