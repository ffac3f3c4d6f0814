#include "model/registry.h"

#include "base/error.h"
#include "io/gguf.h"

namespace kvad {

// One loader per architecture file.
std::unique_ptr<Model> load_llama(std::shared_ptr<const gguf::File> f);
std::unique_ptr<Model> load_gemma3(std::shared_ptr<const gguf::File> f);

const std::vector<ArchEntry>& architectures() {
  static const std::vector<ArchEntry> archs = {
      {"llama", {"cpu"}, &load_llama},
      {"gemma3", {"cpu"}, &load_gemma3},
  };
  return archs;
}

std::string supported_architectures(const std::string& backend) {
  std::string s;
  for (const auto& a : architectures())
    for (const auto& b : a.backends)
      if (b == backend) s += (s.empty() ? "" : ", ") + a.name;
  return s;
}

std::unique_ptr<Model> load_model(std::shared_ptr<const gguf::File> f, const std::string& backend) {
  const std::string arch = f->get_string("general.architecture", "");
  if (arch.empty()) throw Error(f->path() + ": no general.architecture key; is this a model file?");
  for (const auto& a : architectures()) {
    if (a.name != arch) continue;
    for (const auto& b : a.backends)
      if (b == backend) return a.load(std::move(f));
  }
  throw Error(f->path() + ": architecture '" + arch + "' is not supported on " + backend +
              " (supported: " + supported_architectures(backend) + ")");
}

}  // namespace kvad
