#include "cli/loaded_model.h"

#include <chrono>

#include "cli/model_store.h"
#include "base/error.h"
#include "io/gguf.h"
#include "model/registry.h"
#include "tokenizer/tokenizer.h"

namespace kvad::cli {

LoadedModel load_for_cli(const std::string& model_arg, const DeviceOptions& dev) {
  const auto t0 = std::chrono::steady_clock::now();
  LoadedModel m;
  // Refuse an unusable device before mapping anything.
  if (const std::string why = backend_unavailable(dev.device); !why.empty()) throw Error(why);
  m.path = resolve_model(model_arg);
  m.file = gguf::File::open(m.path);
  m.model = load_model(m.file, dev);
  m.tokenizer = Tokenizer::from_gguf(*m.file);
  m.load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return m;
}

}  // namespace kvad::cli
