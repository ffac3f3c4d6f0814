#include "cli/image_output.h"

#include <fcntl.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "base/error.h"
#include "cli/clock_text.h"

namespace kvad::cli {

std::string image_stem(const std::string& prompt, uint64_t seed) {
  std::string stem, word;
  int words = 0;
  auto flush = [&] {
    if (word.empty() || words >= 6) return word.clear();
    const std::string next = stem.empty() ? word : stem + "-" + word;
    if (next.size() <= 60) {
      stem = next;
      ++words;
    } else {
      words = 6;  // a word that does not fit ends the stem
    }
    word.clear();
  };
  for (unsigned char c : prompt) {
    if (c < 128 && std::isalnum(c)) word += static_cast<char>(std::tolower(c));
    else flush();
  }
  flush();
  if (stem.empty()) stem = "image";
  return stem + "-" + std::to_string(seed);
}

std::string reserve_image_path(const std::string& wanted) {
  namespace fs = std::filesystem;
  const fs::path p(wanted);
  const std::string ext = p.has_extension() ? p.extension().string() : ".png";
  const fs::path base = p.has_extension() ? fs::path(p).replace_extension() : p;
  for (int i = 0; i < 10000; ++i) {
    const std::string cand = i == 0 ? base.string() + ext : base.string() + "-" + std::to_string(i) + ext;
    const int fd = ::open(cand.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0) {
      ::close(fd);
      return cand;
    }
    if (errno != EEXIST) throw Error("cannot create " + cand + ": " + std::strerror(errno));
  }
  throw Error("cannot find a free name for " + wanted + " (" + base.string() + "-1" + ext + " to -9999" + ext +
              " are taken)");
}

StepProgress::StepProgress(FILE* out) : out_(out) {
  const char* term = std::getenv("TERM");
  tty_ = ::isatty(::fileno(out)) && !(term && std::strcmp(term, "dumb") == 0);
}

void StepProgress::on_step(int64_t step, int64_t total, double step_s, double elapsed_s) {
  const double eta = step > 0 ? elapsed_s / static_cast<double>(step) * static_cast<double>(total - step) : -1;
  if (tty_) {
    constexpr int kBar = 24;
    const int fill = total > 0 ? static_cast<int>(kBar * step / total) : 0;
    std::fprintf(out_, "\r\033[K  step %lld/%lld [%s%s] %.2f s/step  %s %s", static_cast<long long>(step),
                 static_cast<long long>(total), std::string(fill, '#').c_str(), std::string(kBar - fill, ' ').c_str(),
                 step_s, step < total ? "ETA" : "in", clock_str(step < total ? eta : elapsed_s).c_str());
    open_ = true;
  } else {
    const int q = total > 0 ? static_cast<int>(4 * step / total) : 4;
    if (q <= quarter_ && step < total) return;
    quarter_ = q;
    std::fprintf(out_, "kvad: step %lld/%lld, %.2f s/step, %s %s\n", static_cast<long long>(step),
                 static_cast<long long>(total), step_s, step < total ? "ETA" : "done in",
                 clock_str(step < total ? eta : elapsed_s).c_str());
  }
  std::fflush(out_);
}

void StepProgress::finish() {
  if (open_) std::fputc('\n', out_);
  open_ = false;
  std::fflush(out_);
}

}  // namespace kvad::cli
