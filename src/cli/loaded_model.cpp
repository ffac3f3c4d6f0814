#include "cli/loaded_model.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "cli/model_store.h"
#include "base/error.h"
#include "io/gguf.h"
#include "model/registry.h"
#include "tokenizer/tokenizer.h"
#ifdef KVAD_WITH_CUDA
#include "kernels/cuda/cpu_offload.h"
#endif

namespace kvad::cli {

namespace {

// KVAD_GPU_OFFLOAD=1 with --device cpu: large matmuls go to the GPU when the
// gate admits them (kernels/cuda/cpu_offload.h). Without a GPU it says so
// once and the CPU keeps every op.
void maybe_enable_offload() {
  const char* v = std::getenv("KVAD_GPU_OFFLOAD");
  if (!v || std::string(v) != "1") return;
#ifdef KVAD_WITH_CUDA
  std::string why;
  if (cuda::install_cpu_offload(cuda::OffloadGate::from_env(), &why))
    std::fprintf(stderr, "kvad: eager GPU offload on (KVAD_GPU_OFFLOAD=1)\n");
  else
    std::fprintf(stderr, "kvad: KVAD_GPU_OFFLOAD=1 ignored: %s\n", why.c_str());
#else
  std::fprintf(stderr, "kvad: KVAD_GPU_OFFLOAD=1 ignored: kvad was built without CUDA\n");
#endif
}

}  // namespace

LoadedModel load_for_cli(const std::string& model_arg, const DeviceOptions& dev) {
  const auto t0 = std::chrono::steady_clock::now();
  LoadedModel m;
  // Refuse an unusable device before mapping anything.
  if (const std::string why = backend_unavailable(dev.device); !why.empty()) throw Error(why);
  m.path = resolve_model(model_arg);
  m.file = gguf::File::open(m.path);
  m.model = load_model(m.file, dev);
  if (dev.device == "cpu") maybe_enable_offload();
  m.tokenizer = Tokenizer::from_gguf(*m.file);
  m.load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return m;
}

}  // namespace kvad::cli
