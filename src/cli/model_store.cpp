#include "cli/model_store.h"

#include <sys/resource.h>

#include <cstdlib>
#include <filesystem>

#include "base/error.h"

namespace fs = std::filesystem;

namespace kvad::cli {

std::string model_store_dir() {
  const char* home = std::getenv("KVAD_HOME");
  if (home && *home) return std::string(home) + "/models";
  const char* h = std::getenv("HOME");
  return std::string(h && *h ? h : ".") + "/.cache/kvad/models";
}

std::string resolve_model(const std::string& arg) {
  const std::string name = arg.empty() ? kDefaultModel : arg;
  std::error_code ec;
  if (fs::is_regular_file(name, ec)) return name;
  const std::string dir = model_store_dir();
  const std::string in_store = dir + "/" + name + ".gguf";
  if (name.find('/') == std::string::npos && fs::is_regular_file(in_store, ec)) return in_store;
  std::string have;
  if (fs::is_directory(dir, ec))
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().extension() == ".gguf") have += (have.empty() ? "" : ", ") + e.path().stem().string();
  throw Error("model '" + name + "' not found: no such file, and not in the model store " + dir +
              (have.empty() ? " (empty; run scripts/setup to fetch the default model)" : " (has: " + have + ")"));
}

size_t peak_rss_bytes() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<size_t>(ru.ru_maxrss) * 1024;
}

}  // namespace kvad::cli
