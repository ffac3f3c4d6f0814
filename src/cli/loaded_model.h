// What every model-running subcommand loads: the file, the model, its tokenizer.
#pragma once
#include <memory>
#include <string>

#include "engine/sampler.h"
#include "io/generation_config.h"
#include "model/registry.h"

namespace kvad {
class ChatPrompt;
class Model;
class Tokenizer;
namespace gguf { class File; }
}

namespace kvad::cli {

struct GenerationOptions;
struct ResolvedModel;

struct LoadedModel {
  std::string path;
  /// The GGUF file (nullptr for an HF checkpoint: its weights come through
  /// model->source(), its tokenizer from tokenizer.json).
  std::shared_ptr<const gguf::File> file;
  std::shared_ptr<Model> model;
  std::shared_ptr<Tokenizer> tokenizer;
  double load_s = 0;  ///< seconds to map, parse and set up
  /// An HF checkpoint's generation_config.json (empty for a GGUF).
  GenerationConfig generation_config;
  /// The sampler for the command's flags, the unset ones taken from
  /// generation_config (a line on stderr says which).
  SamplerParams sampler_params(const GenerationOptions& o) const;
};

/// The model's chat format (its chat template), or an error when it has none.
ChatPrompt chat_prompt(const LoadedModel& m);

/// Resolves --model (model_store.h), maps the GGUF or opens the HF checkpoint
/// (safetensors through the architecture's name table; with --quant other
/// than none, through the quantize-once cache in $KVAD_HOME/cache), loads the
/// architecture from the registry on the device `dev` asks for (--device,
/// --dtype, --quant) and the tokenizer (GGUF keys, or tokenizer.json +
/// tokenizer_config.json). Throws kvad::Error, e.g. "kvad was built
/// without CUDA" or "no CUDA device: ..." for --device cuda, and, unless
/// `any_kind`, for a model whose registry kind is not text (an embedding
/// model, naming its kind and the commands that take it).
LoadedModel load_for_cli(const std::string& model_arg, const DeviceOptions& dev = {}, bool any_kind = false);
/// As above, for a --model the caller has resolved already (resolve_model_full).
LoadedModel load_for_cli(const ResolvedModel& r, const DeviceOptions& dev = {}, bool any_kind = false);

}  // namespace kvad::cli
