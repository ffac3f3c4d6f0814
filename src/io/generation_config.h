// HF generation_config.json: the end-of-generation ids and the sampling
// defaults a checkpoint recommends.
//
// Reference: transformers' GenerationConfig (fields eos_token_id,
// do_sample, temperature, top_k, top_p, min_p, repetition_penalty). As in
// vLLM (`--generation-config auto`, its default), the sampling fields become
// the defaults of requests and flags that do not set them.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvad {

struct GenerationConfig {
  std::vector<int32_t> eos_token_id;  ///< an id or a list (Gemma 3: <eos> and <end_of_turn>)
  /// do_sample: false means greedy decoding whatever the other fields say.
  std::optional<bool> do_sample;
  std::optional<float> temperature;         ///< >= 0
  std::optional<int32_t> top_k;             ///< >= 0 (0: off)
  std::optional<float> top_p;               ///< [0, 1]
  std::optional<float> min_p;               ///< [0, 1]
  std::optional<float> repetition_penalty;  ///< > 0 (1: off)

  /// Whether any sampling field is set.
  bool has_sampling() const {
    return do_sample || temperature || top_k || top_p || min_p || repetition_penalty;
  }
  /// "temperature 0.7, top_k 20, ..." for the fields that are set (for logs).
  std::string sampling_summary() const;
};

/// Parses the file's text; `name` is used in errors. Absent and null
/// fields stay unset. Throws kvad::Error naming the file and the field for
/// invalid JSON, text over 1 MiB, a field of the wrong type or out of range.
GenerationConfig parse_generation_config(std::string_view text, const std::string& name);
/// Reads `dir`/generation_config.json; an empty config when the file is
/// absent. Throws as parse_generation_config.
GenerationConfig read_generation_config(const std::string& dir);

}  // namespace kvad
