#include "cli/download_progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "cli/clock_text.h"

namespace kvad::cli {

namespace {

int terminal_width(FILE* out) {
  struct winsize ws {};
  if (::ioctl(::fileno(out), TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 40) return ws.ws_col;
  return 80;
}

}  // namespace

DownloadProgress::DownloadProgress(FILE* out) : out_(out) {
  const char* term = std::getenv("TERM");
  tty_ = ::isatty(::fileno(out)) && !(term && std::strcmp(term, "dumb") == 0);
}

void DownloadProgress::clear_line() {
  if (bar_open_) {
    std::fputs("\r\033[K", out_);
    bar_open_ = false;
  }
}

void DownloadProgress::on_plan(const std::string& repo, const std::string& commit,
                               const std::vector<std::string>& files) {
  std::fprintf(out_, "kvad: %s at commit %.12s: %zu file%s\n", repo.c_str(), commit.c_str(), files.size(),
               files.size() == 1 ? "" : "s");
}

void DownloadProgress::on_cached(const std::string& file, uint64_t size) {
  clear_line();
  std::fprintf(out_, "kvad:   %s: in the cache (%s)\n", file.c_str(), human_bytes(size).c_str());
}

void DownloadProgress::on_start(const std::string& file, uint64_t offset, uint64_t total) {
  file_ = file;
  offset_ = done_ = offset;
  total_ = total;
  quarter_ = total ? static_cast<int>(4 * offset / total) : 0;
  start_ = last_draw_ = Clock::now();
  if (tty_) {
    draw(false);
  } else {
    std::fprintf(out_, "kvad:   %s: downloading %s%s\n", file.c_str(), total ? human_bytes(total).c_str() : "",
                 offset ? (" from " + human_bytes(offset)).c_str() : "");
  }
  std::fflush(out_);
}

void DownloadProgress::on_progress(const std::string& file, uint64_t done, uint64_t total) {
  done_ = done;
  total_ = total;
  const Clock::time_point now = Clock::now();
  if (tty_) {
    if (now - last_draw_ >= std::chrono::milliseconds(100)) {
      last_draw_ = now;
      draw(false);
    }
    return;
  }
  if (total && done < total) {
    const int q = static_cast<int>(4 * done / total);
    if (q > quarter_) {
      quarter_ = q;
      std::fprintf(out_, "kvad:   %s: %d%% (%s of %s)\n", file.c_str(), 25 * q, human_bytes(done).c_str(),
                   human_bytes(total).c_str());
      std::fflush(out_);
    }
  }
}

void DownloadProgress::on_done(const std::string& file, uint64_t downloaded, uint64_t total) {
  done_ = total;
  total_ = total;
  const double s = std::chrono::duration<double>(Clock::now() - start_).count();
  if (tty_) {
    draw(true);
    std::fputc('\n', out_);
    bar_open_ = false;
  } else {
    std::fprintf(out_, "kvad:   %s: done, %s in %.1f s (%s/s)\n", file.c_str(), human_bytes(downloaded).c_str(), s,
                 human_bytes(static_cast<uint64_t>(s > 0 ? downloaded / s : 0)).c_str());
  }
  std::fflush(out_);
}

void DownloadProgress::on_note(const std::string& message) {
  clear_line();
  std::fprintf(out_, "kvad:   %s\n", message.c_str());
  std::fflush(out_);
  if (tty_ && !file_.empty() && done_ < total_) draw(false);
}

void DownloadProgress::draw(bool final) {
  const double s = std::chrono::duration<double>(Clock::now() - start_).count();
  const double rate = s > 0.05 ? (done_ - offset_) / s : 0;
  std::string right;
  if (total_) {
    char pct[16];
    std::snprintf(pct, sizeof pct, "%3d%%", static_cast<int>(100.0 * done_ / total_));
    right = std::string(pct) + "  " + human_bytes(done_) + " / " + human_bytes(total_);
  } else {
    right = human_bytes(done_);
  }
  right += "  " + human_bytes(static_cast<uint64_t>(rate)) + "/s";
  if (!final && total_) right += "  ETA " + clock_str(rate > 0 ? (total_ - done_) / rate : -1);
  else if (final) right += "  " + clock_str(s);
  const int width = terminal_width(out_);
  std::string name = file_;
  const int name_w = std::min<int>(static_cast<int>(name.size()), std::max(12, width / 3));
  if (static_cast<int>(name.size()) > name_w) name = "..." + name.substr(name.size() - (name_w - 3));
  const int bar_w = width - 2 - name_w - 4 - static_cast<int>(right.size()) - 2;
  std::string bar;
  if (bar_w >= 10 && total_) {
    const int fill = static_cast<int>(static_cast<double>(bar_w) * done_ / total_);
    bar = " [" + std::string(fill, '#') + std::string(bar_w - fill, ' ') + "] ";
  } else {
    bar = "  ";
  }
  std::fprintf(out_, "\r\033[K  %-*s%s%s", name_w, name.c_str(), bar.c_str(), right.c_str());
  std::fflush(out_);
  bar_open_ = true;
}

}  // namespace kvad::cli
