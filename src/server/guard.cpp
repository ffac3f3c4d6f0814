#include "server/guard.h"

#include <dirent.h>
#include <malloc.h>
#include <netdb.h>
#include <linux/sockios.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstddef>
#include <cstdlib>
#include <set>

namespace kvad::server {

std::string sanitize_for_log(std::string_view s, size_t max_len) {
  std::string out;
  const size_t n = std::min(s.size(), max_len);
  out.reserve(n + 8);
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x21 && c <= 0x7e && c != '\\') {
      out += static_cast<char>(c);
    } else {
      char buf[5];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  if (s.size() > max_len) out += "...";
  return out;
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  // Compare over the longer length so a short guess takes as long as a long
  // one; the length difference is folded into the result.
  const size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  // volatile: keep the compiler from turning the loop into an early exit.
  volatile unsigned char result = diff;
  return result == 0;
}

std::string host_name_of(std::string_view h) {
  std::string name;
  if (!h.empty() && h.front() == '[') {
    const size_t close = h.find(']');
    name = std::string(h.substr(1, close == std::string_view::npos ? std::string_view::npos : close - 1));
  } else {
    const size_t colon = h.find(':');
    // More than one colon without brackets: a bare IPv6 address (no port).
    if (colon != std::string_view::npos && h.find(':', colon + 1) == std::string_view::npos)
      name = std::string(h.substr(0, colon));
    else
      name = std::string(h);
  }
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (!name.empty() && name.back() == '.') name.pop_back();  // "localhost." is localhost
  return name;
}

bool host_allowed(std::string_view host_header, const std::vector<std::string>& allowed) {
  if (allowed.empty()) return true;
  const std::string name = host_name_of(host_header);
  for (const auto& a : allowed)
    if (name == a) return true;
  return false;
}

// ------------------------------------------------------------ watchdog

namespace {

bool numeric(const sockaddr_storage& a, socklen_t len, std::string* host, int* port) {
  char h[NI_MAXHOST], s[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&a), len, h, sizeof h, s, sizeof s,
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return false;
  *host = h;
  *port = std::atoi(s);
  return true;
}

// "addr port" of the peer when fd is a connected socket on local_port, else "".
std::string connection_key(int fd, int local_port) {
  sockaddr_storage local{}, peer{};
  socklen_t ll = sizeof local, pl = sizeof peer;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &ll) != 0) return "";
  std::string lhost, phost;
  int lport = -1, pport = -1;
  if (!numeric(local, ll, &lhost, &lport) || lport != local_port) return "";
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl) != 0) return "";
  if (!numeric(peer, pl, &phost, &pport)) return "";
  return phost + " " + std::to_string(pport);
}

// Bytes of the connection the process has read (received less still queued).
uint64_t bytes_read(int fd) {
  tcp_info ti{};
  socklen_t len = sizeof ti;
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 ||
      len < offsetof(tcp_info, tcpi_bytes_received) + sizeof ti.tcpi_bytes_received)
    return 0;
  int queued = 0;
  if (ioctl(fd, SIOCINQ, &queued) != 0) queued = 0;
  const uint64_t got = ti.tcpi_bytes_received;
  return got > static_cast<uint64_t>(queued) ? got - static_cast<uint64_t>(queued) : 0;
}

}  // namespace

void ConnectionWatchdog::start(int local_port) {
  port_ = local_port;
  thread_ = std::thread([this] { loop(); });
}

void ConnectionWatchdog::stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ConnectionWatchdog::busy(const std::string& addr, int port) {
  std::lock_guard<std::mutex> l(mu_);
  Conn& c = conns_[addr + " " + std::to_string(port)];
  c.busy = true;
  c.since = std::chrono::steady_clock::now();
}

void ConnectionWatchdog::body(const std::string& addr, int port) {
  std::lock_guard<std::mutex> l(mu_);
  // Created here when the scan has not seen the connection yet (it is new).
  Conn& c = conns_.try_emplace(addr + " " + std::to_string(port), Conn{std::chrono::steady_clock::now()}).first->second;
  c.in_body = true;
}

void ConnectionWatchdog::done(const std::string& addr, int port) {
  std::lock_guard<std::mutex> l(mu_);
  Conn& c = conns_[addr + " " + std::to_string(port)];
  c.busy = false;
  c.in_body = false;
  c.rebase = true;
  c.since = std::chrono::steady_clock::now();
}

void ConnectionWatchdog::loop() {
  std::unique_lock<std::mutex> l(mu_);
  while (!stop_) {
    cv_.wait_for(l, interval_, [this] { return stop_; });
    if (stop_) break;
    l.unlock();
    if (trim_.exchange(false)) malloc_trim(0);
    struct Open {
      int fd;
      std::string key;
      uint64_t read;
    };
    std::vector<Open> open;
    if (DIR* d = opendir("/proc/self/fd")) {
      while (dirent* e = readdir(d)) {
        char* end = nullptr;
        const long fd = std::strtol(e->d_name, &end, 10);
        if (end == e->d_name || *end != '\0' || fd == dirfd(d)) continue;
        std::string key = connection_key(static_cast<int>(fd), port_);
        if (!key.empty()) open.push_back({static_cast<int>(fd), std::move(key), bytes_read(static_cast<int>(fd))});
      }
      closedir(d);
    }
    const auto now = std::chrono::steady_clock::now();
    std::vector<std::pair<int, std::string>> late;
    l.lock();
    std::set<std::string> seen;
    std::vector<std::pair<std::chrono::steady_clock::time_point, size_t>> waiting;  // header phase, by age
    for (size_t i = 0; i < open.size(); ++i) {
      const auto& [fd, key, read] = open[i];
      seen.insert(key);
      auto [it, added] = conns_.try_emplace(key, Conn{now});
      Conn& c = it->second;
      if (c.rebase) {
        c.rebase = false;
        c.base = read;
      }
      const bool headers_too_big = !c.busy && !c.in_body && read > c.base + kMaxHeaderBytes;
      if ((!c.busy && now - c.since > deadline_) || headers_too_big)
        late.emplace_back(fd, key);
      else if (!c.busy && !c.in_body)
        waiting.emplace_back(c.since, i);
    }
    std::vector<std::pair<int, std::string>> shed;
    if (open.size() - late.size() > max_open_) {
      std::sort(waiting.begin(), waiting.end());
      const size_t excess = std::min(waiting.size(), open.size() - late.size() - max_open_);
      for (size_t j = 0; j < excess; ++j) {
        shed.emplace_back(open[waiting[j].second].fd, open[waiting[j].second].key);
        conns_.erase(open[waiting[j].second].key);
      }
    }
    for (auto it = conns_.begin(); it != conns_.end();)
      it = seen.count(it->first) ? std::next(it) : conns_.erase(it);
    for (const auto& [fd, key] : late) conns_.erase(key);
    l.unlock();
    for (const auto& [fd, key] : shed) {
      if (connection_key(fd, port_) != key) continue;
      static const char k503[] =
          "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n"
          "Content-Length: 131\r\n\r\n"
          "{\"error\":{\"message\":\"Too many connections at once; retry later.\",\"type\":\"server_error\","
          "\"param\":null,\"code\":\"too_many_connections\"}}";
      (void)::send(fd, k503, sizeof k503 - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      ::shutdown(fd, SHUT_RDWR);
      l.lock();
      ++shut_down_;
      l.unlock();
    }
    for (const auto& [fd, key] : late) {
      // Check it is still the same connection (the fd may have been closed
      // and reused since the scan).
      if (connection_key(fd, port_) != key) continue;
      ::shutdown(fd, SHUT_RDWR);
      l.lock();
      ++shut_down_;
      l.unlock();
      trim_.store(true);  // what its headers held, at the next tick
    }
    l.lock();
  }
}

}  // namespace kvad::server
