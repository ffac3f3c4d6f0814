#include "model_path.h"

#include <cstdlib>
#include <filesystem>

namespace kvad::test {
std::string find_model(const std::string& name) {
  std::error_code ec;
  for (const char* var : {"KVAD_HOME", "HOME"}) {
    const char* v = std::getenv(var);
    if (!v || !*v) continue;
    std::string p = std::string(v) + (std::string(var) == "HOME" ? "/.cache/kvad" : "") + "/models/" + name + ".gguf";
    if (std::filesystem::is_regular_file(p, ec)) return p;
  }
  return "";
}
std::string kvad_home() {
  const char* h = std::getenv("KVAD_HOME");
  if (h && *h) return h;
  return std::string(std::getenv("HOME") ? std::getenv("HOME") : ".") + "/.cache/kvad";
}
}  // namespace kvad::test
