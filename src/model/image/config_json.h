// Typed reads of a diffusers/transformers config.json member, shared by the
// image components' config parsers (configs.cpp, t5_encoder.cpp, flux.cpp).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "base/error.h"

namespace kvad::image::config {

/// Widths and counts of any real pipeline are far below this; a larger
/// value is a broken config, refused before anything is sized by it.
inline constexpr int64_t kMaxDim = 1 << 20;

/// Whether `key` is in `cfg` and not null (diffusers writes null for unset).
inline bool present(const nlohmann::json& cfg, const char* key) { return cfg.contains(key) && !cfg[key].is_null(); }

/// cfg[key] as an integer in [lo, kMaxDim], `def` when absent.
/// Throws Error naming `name` (the file) and the key otherwise.
inline int64_t get_int(const nlohmann::json& cfg, const char* key, int64_t def, const std::string& name,
                       int64_t lo = 1) {
  if (!present(cfg, key)) return def;
  const nlohmann::json& v = cfg[key];
  if (!v.is_number_integer()) throw Error(name + ": " + key + " is not an integer");
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > kMaxDim)
    throw Error(name + ": " + key + " " + std::to_string(x) + " is not in [" + std::to_string(lo) + ", " +
                std::to_string(kMaxDim) + "]");
  return x;
}

/// cfg[key] as a number, `def` when absent; Error when not a number.
inline double get_float(const nlohmann::json& cfg, const char* key, double def, const std::string& name) {
  if (!present(cfg, key)) return def;
  if (!cfg[key].is_number()) throw Error(name + ": " + key + " is not a number");
  return cfg[key].get<double>();
}

/// cfg[key] as a boolean, `def` when absent; Error when not true/false.
inline bool get_bool(const nlohmann::json& cfg, const char* key, bool def, const std::string& name) {
  if (!present(cfg, key)) return def;
  if (!cfg[key].is_boolean()) throw Error(name + ": " + key + " is not true or false");
  return cfg[key].get<bool>();
}

/// cfg[key] as a string, `def` when absent; Error when not a string.
inline std::string get_string(const nlohmann::json& cfg, const char* key, const std::string& def,
                              const std::string& name) {
  if (!present(cfg, key)) return def;
  if (!cfg[key].is_string()) throw Error(name + ": " + key + " is not a string");
  return cfg[key].get<std::string>();
}

}  // namespace kvad::image::config
