#include "model/registry.h"

#include "base/error.h"
#include "io/gguf.h"
#include "model/decoder_desc.h"
#ifdef KVAD_WITH_CUDA
#include "kernels/cuda/context.h"
#endif

namespace kvad {

// One loader per architecture file.
std::unique_ptr<Model> load_llama(std::shared_ptr<const gguf::File> f);
std::unique_ptr<Model> load_gemma3(std::shared_ptr<const gguf::File> f);

const std::vector<ArchEntry>& architectures() {
  static const std::vector<ArchEntry> archs = {
      {"llama", {"cpu", "cuda"}, &load_llama, &describe_llama},
      {"gemma3", {"cpu", "cuda"}, &load_gemma3, &describe_gemma3},
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

std::string backend_unavailable(const std::string& backend) {
  if (backend == "cpu") return "";
  if (backend != "cuda") return "unknown device '" + backend + "' (devices: cpu, cuda)";
#ifdef KVAD_WITH_CUDA
  std::string why;
  return cuda::available(&why) ? "" : why;
#else
  return "kvad was built without CUDA (reconfigure with nvcc in PATH, or -DKVAD_CUDA=ON)";
#endif
}

std::unique_ptr<Model> load_model(std::shared_ptr<const gguf::File> f, const std::string& backend) {
  DeviceOptions o;
  o.device = backend;
  return load_model(std::move(f), o);
}

std::unique_ptr<Model> load_model(std::shared_ptr<const gguf::File> f, const DeviceOptions& o) {
  const std::string& backend = o.device;
  const std::string arch = f->get_string("general.architecture", "");
  if (arch.empty()) throw Error(f->path() + ": no general.architecture key; is this a model file?");
  for (const auto& a : architectures()) {
    if (a.name != arch) continue;
    for (const auto& b : a.backends) {
      if (b != backend) continue;
      if (backend == "cpu") return a.load(std::move(f));
      if (const std::string why = backend_unavailable(backend); !why.empty()) throw Error(why);
#ifdef KVAD_WITH_CUDA
      return load_cuda_decoder(a.describe(std::move(f)), o);
#endif
    }
  }
  if (const std::string why = backend_unavailable(backend); !why.empty()) throw Error(why);
  throw Error(f->path() + ": architecture '" + arch + "' is not supported on " + backend +
              " (supported: " + supported_architectures(backend) + ")");
}

}  // namespace kvad
