// Options shared by the subcommands that generate text (run, chat): the
// model, sampling, threads and context size, with the same flags and defaults.
#pragma once
#include <cstdint>
#include <string>

#include "engine/sampler.h"
#include "model/model.h"
#include "model/registry.h"

namespace CLI { class App; class Option; class Validator; }

namespace kvad {
struct GenerationConfig;
struct HParams;
}

namespace kvad::cli {

/// Adds -t/--threads (0: all cores; an integer in [0, 4096]) to `c`.
void add_threads_option(CLI::App* c, int& threads);

/// A CLI11 check that a flag's value is an integer ("expects an integer, got
/// 'abc'"); put it before CLI::Range, whose message for a non-number reads as
/// if it were a number out of range.
const CLI::Validator& integer_check();
/// The same for a number ("expects a number, got 'abc'"): a decimal or
/// exponent form strtod reads whole, finite; before CLI::Range.
const CLI::Validator& number_check();

/// Adds --device cpu|cuda, --dtype bf16|f16|f32 and --quant
/// none|q8_0|q4_0|q4_k|q6_k (registry.h DeviceOptions) to `c`.
void add_device_options(CLI::App* c, DeviceOptions& d);

/// --cache-type-k/-ctk and --cache-type-v/-ctv (llama.cpp's flags and
/// names): the formats of the KV cache's keys and values, f16 (default) or
/// f32 (transformers' float32 attention, at twice the bytes per token).
struct CacheTypeOptions {
  std::string k = "f16", v = "f16";
  void add_to(CLI::App* c);
  /// The formats; throws kvad::Error naming the flag, the value and the
  /// accepted ones for anything else (model/cache.h kv_cache_type).
  KVTypes types() const;
};

/// llama.cpp's single-dash spellings of several letters (-ctk, -ctv) as
/// kvad's long flags (CLI11 reads "-ctk" as -c tk): `arg` itself otherwise.
std::string llama_flag_alias(const std::string& arg);

struct GenerationOptions {
  std::string model;
  int32_t max_tokens = 256;
  SamplerParams sp;
  int64_t seed = -1;   ///< -1: random
  int threads = 0;     ///< 0: all cores
  int32_t ctx_size = 0;  ///< 0: min(4096, the model's context_length)
  DeviceOptions device;  ///< --device, --dtype, --quant
  CacheTypeOptions cache_type;  ///< --cache-type-k, --cache-type-v

 private:
  CLI::Option *temp_ = nullptr, *top_k_ = nullptr, *top_p_ = nullptr, *min_p_ = nullptr, *repeat_penalty_ = nullptr;

 public:

  /// Adds -m/--model, -n/--max-tokens, --temp, --top-k, --top-p, --min-p,
  /// --repeat-penalty, --seed, -t/--threads, -c/--ctx-size, the device
  /// options (add_device_options) and the KV cache types to `c`.
  void add_to(CLI::App* c, const std::string& max_tokens_help);
  /// Sampler parameters with the seed resolved (a random one for -1). For
  /// every sampling flag the command line did not give, the field of an HF
  /// checkpoint's generation_config.json `gc` (as vLLM does); `taken`, when
  /// given, receives what came from `gc` ("" when nothing), e.g.
  /// "top_k 20, top_p 0.8".
  SamplerParams sampler_params(const GenerationConfig& gc, std::string* taken = nullptr) const;
  SamplerParams sampler_params() const;
  /// The context size to use for a model.
  int32_t context_size(const HParams& hp) const;
};

}  // namespace kvad::cli
