// What every model-running subcommand loads: the file, the model, its tokenizer.
#pragma once
#include <memory>
#include <string>

#include "model/registry.h"

namespace kvad {
class Model;
class Tokenizer;
namespace gguf { class File; }
}

namespace kvad::cli {

struct LoadedModel {
  std::string path;
  std::shared_ptr<const gguf::File> file;
  std::shared_ptr<Model> model;
  std::shared_ptr<Tokenizer> tokenizer;
  double load_s = 0;  ///< seconds to map, parse and set up
};

/// Resolves --model (model_store.h), maps the GGUF, loads the architecture
/// from the registry on the device `dev` asks for (--device, --dtype,
/// --quant) and the tokenizer. Throws kvad::Error, e.g. "kvad was built
/// without CUDA" or "no CUDA device: ..." for --device cuda.
LoadedModel load_for_cli(const std::string& model_arg, const DeviceOptions& dev = {});

}  // namespace kvad::cli
