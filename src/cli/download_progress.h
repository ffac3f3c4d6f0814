// How a pull shows itself: on a terminal, one progress bar per file (bytes,
// rate, ETA) redrawn in place; otherwise plain lines (start, each quarter,
// done), so a log stays short and readable.
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

#include "hub/pull.h"

namespace kvad::cli {

class DownloadProgress : public hub::PullObserver {
 public:
  /// Writes to `out`; the bar is used when `out` is a terminal (isatty) and
  /// TERM is not "dumb".
  explicit DownloadProgress(FILE* out = stderr);

  void on_plan(const std::string& repo, const std::string& commit, const std::vector<std::string>& files) override;
  void on_cached(const std::string& file, uint64_t size) override;
  void on_start(const std::string& file, uint64_t offset, uint64_t total) override;
  void on_progress(const std::string& file, uint64_t done, uint64_t total) override;
  void on_done(const std::string& file, uint64_t downloaded, uint64_t total) override;
  void on_note(const std::string& message) override;

 private:
  using Clock = std::chrono::steady_clock;
  void draw(bool final);
  void clear_line();

  FILE* out_;
  bool tty_;
  std::string file_;
  uint64_t offset_ = 0, done_ = 0, total_ = 0;
  int quarter_ = 0;       // plain mode: quarters already reported
  bool bar_open_ = false;  // tty mode: a bar line without its newline yet
  Clock::time_point start_, last_draw_;
};

using hub::human_bytes;  // hub/pull.h

}  // namespace kvad::cli
