#include "model/rope.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <vector>

#include "base/error.h"
#include "io/tensor_source.h"
#include "model/blocks.h"
#include "model/hf.h"
#include "model/weights.h"
#include "tensor/ops.h"

namespace kvad {

using json = nlohmann::json;

namespace {

constexpr double kPi = 3.14159265358979323846;

// YaRN's per-pair divisors (transformers' _compute_yarn_parameters; ggml's
// ggml_rope_yarn_corr_dims and rope_yarn_ramp with ext_factor 1): pair i's
// frequency is base^(-2i/n) · (ext_i + (1 - ext_i) / factor), ext_i falling
// linearly from 1 to 0 between the correction dims of beta_fast and beta_slow.
// truncate false (gpt-oss's rope_parameters.truncate): the correction dims
// are not rounded to whole dims (transformers' find_correction_range);
// llama.cpp always rounds them.
std::vector<float> yarn_divisors(int64_t n_rot, double base, double factor, double n_ctx_orig, double beta_fast,
                                 double beta_slow, bool truncate) {
  auto corr_dim = [&](double n_rotations) {
    return n_rot * std::log(n_ctx_orig / (n_rotations * 2 * kPi)) / (2 * std::log(base));
  };
  const double lo = corr_dim(beta_fast), hi = corr_dim(beta_slow);
  const double low = std::max(0.0, truncate ? std::floor(lo) : lo);
  double high = std::min(static_cast<double>(n_rot - 1), truncate ? std::ceil(hi) : hi);
  if (high == low) high += 0.001;  // as transformers' linear_ramp_factor
  std::vector<float> d(n_rot / 2);
  for (int64_t i = 0; i < n_rot / 2; ++i) {
    const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
    const double ext = 1.0 - ramp;
    d[i] = static_cast<float>(1.0 / (ext + (1.0 - ext) / factor));
  }
  return d;
}

double yarn_mscale(double factor) { return factor <= 1 ? 1.0 : 0.1 * std::log(factor) + 1.0; }

}  // namespace

RopeScaling load_rope_scaling(const TensorSource& src, WeightLoader& wl, const HParams& hp, bool neox,
                              bool long_factors) {
  RopeScaling r;
  RopeParams& p = r.params;
  p.n_rot = hp.n_rot;
  p.freq_base = hp.rope_freq_base;
  p.freq_scale = hp.rope_freq_scale;
  p.neox = neox;
  const std::string a = hp.arch + ".";
  const int64_t half = hp.n_rot / 2;
  const std::string type = src.get_string(a + "rope.scaling.type", "none");
  const Tensor freqs = wl.get_optional("rope_freqs.weight", {half});
  const Tensor fshort = wl.get_optional("rope_factors_short.weight", {half});
  const Tensor flong = wl.get_optional("rope_factors_long.weight", {half});
  require_f32(src.path(), {&freqs, &fshort, &flong});
  if (freqs && (fshort || flong))
    throw Error(src.path() + ": rope_freqs.weight and rope_factors_short/long.weight together; kvad reads one rule");
  if (static_cast<bool>(fshort) != static_cast<bool>(flong))
    throw Error(src.path() + ": " + (fshort ? "rope_factors_long.weight" : "rope_factors_short.weight") +
                " is missing (LongRoPE needs both)");
  r.n_ctx_orig = src.get_int(a + "rope.scaling.original_context_length", hp.n_ctx_train);
  if (freqs) p.freq_factors = freqs;  // Llama 3 (or any file's per-pair divisors)
  if (fshort && !long_factors)
    throw Error(src.path() + ": " + src.tensor_name("rope_factors_short.weight") + ": LongRoPE factors are not supported for " +
                hp.arch);
  if (fshort) {
    p.freq_factors = fshort;
    p.attn_factor = static_cast<float>(src.get_float(a + "rope.scaling.attn_factor", 1.0));
    r.long_params = p;
    r.long_params.freq_factors = flong;
    r.has_long = true;
  }
  if (type == "yarn") {
    if (p.freq_factors) throw Error(src.path() + ": YaRN and rope factor tensors together; kvad reads one rule");
    const double factor = src.get_float(a + "rope.scaling.factor", 1.0);
    if (!(factor > 0)) throw Error(src.path() + ": " + a + "rope.scaling.factor must be positive");
    if (r.n_ctx_orig <= 0) throw Error(src.path() + ": " + a + "rope.scaling.original_context_length must be positive");
    const std::vector<float> d =
        yarn_divisors(hp.n_rot, hp.rope_freq_base, factor, static_cast<double>(r.n_ctx_orig),
                      src.get_float(a + "rope.scaling.yarn_beta_fast", 32.0),
                      src.get_float(a + "rope.scaling.yarn_beta_slow", 1.0),
                      src.get_int("kvad.rope.scaling.yarn_truncate", 1) != 0);
    p.freq_scale = 1.0f;  // the interpolation is in the divisors
    p.freq_factors = ops::from_host(d.data(), DType::F32, {half, 1, 1, 1}, wl.device());
    p.attn_factor = static_cast<float>(yarn_mscale(factor) * src.get_float(a + "rope.scaling.yarn_attn_factor", 1.0));
  } else if (type != "none" && type != "linear" && !type.empty()) {
    throw Error(src.path() + ": " + a + "rope.scaling.type '" + type +
                "' is not supported (kvad reads none, linear, yarn; llama3 and LongRoPE as factor tensors)");
  }
  return r;
}

void hf_rope_scaling(const std::string& a, const json& rope, const json& cfg, int64_t n_rot, HfConfig& out) {
  Metadata& md = out.md;
  const std::string type = rope.value("rope_type", rope.value("type", std::string()));
  const double base = config_float(rope, "rope_theta", 10000.0);
  const int64_t max_pos = config_int(cfg, "max_position_embeddings", 2048);
  // transformers' standardize_rope_params: a top-level
  // original_max_position_embeddings (Phi-3) wins over the rope object's.
  const int64_t orig = config_int(cfg, "original_max_position_embeddings",
                                  config_int(rope, "original_max_position_embeddings", max_pos));
  const int64_t half = n_rot / 2;
  auto factors_tensor = [&](const char* name, std::vector<float> v) {
    SyntheticTensor t;
    t.name = name;
    t.ne = {half, 1, 1, 1};
    t.data = std::move(v);
    out.tensors.push_back(std::move(t));
  };
  if (type.empty() || type == "default") return;
  if (type == "linear") {
    md[a + ".rope.scaling.type"] = std::string("linear");
    md[a + ".rope.scaling.factor"] = config_float(rope, "factor");
  } else if (type == "llama3") {
    // The divisors llama.cpp's converter (LlamaModel.generate_extra_tensors)
    // writes as rope_freqs.weight; the same rule as transformers'
    // _compute_llama3_parameters.
    const double factor = config_float(rope, "factor"), lo = config_float(rope, "low_freq_factor"),
                 hi = config_float(rope, "high_freq_factor");
    const double old_ctx = static_cast<double>(config_int(rope, "original_max_position_embeddings", orig));
    if (!(factor > 0) || !(hi > lo)) throw Error("config.json: llama3 rope factors are invalid");
    const double lo_wl = old_ctx / lo, hi_wl = old_ctx / hi;
    std::vector<float> d(half);
    for (int64_t i = 0; i < half; ++i) {
      const double freq = 1.0 / std::pow(base, 2.0 * i / n_rot), wl = 2 * kPi / freq;
      if (wl < hi_wl) d[i] = 1.0f;
      else if (wl > lo_wl) d[i] = static_cast<float>(factor);
      else {
        const double s = (old_ctx / wl - lo) / (hi - lo);
        d[i] = static_cast<float>(1.0 / ((1 - s) / factor + s));
      }
    }
    factors_tensor("rope_freqs.weight", std::move(d));
  } else if (type == "yarn") {
    // gpt-oss: correction dims not rounded (a kvad key; llama.cpp has none).
    if (!config_bool(rope, "truncate", true)) md["kvad.rope.scaling.yarn_truncate"] = int64_t{0};
    const double factor = config_float(rope, "factor", static_cast<double>(max_pos) / orig);
    md[a + ".rope.scaling.type"] = std::string("yarn");
    md[a + ".rope.scaling.factor"] = factor;
    md[a + ".rope.scaling.original_context_length"] = orig;
    md[a + ".rope.scaling.yarn_beta_fast"] = config_float(rope, "beta_fast", 32.0);
    md[a + ".rope.scaling.yarn_beta_slow"] = config_float(rope, "beta_slow", 1.0);
    // transformers' attention_factor (explicit, or DeepSeek's mscale ratio)
    // as llama.cpp's yarn_attn_factor, which multiplies 0.1·ln(factor) + 1.
    double attn = yarn_mscale(factor);
    const double ms = config_float(rope, "mscale", 0.0), ms_all = config_float(rope, "mscale_all_dim", 0.0);
    if (ms != 0 && ms_all != 0) {
      auto m = [&](double s) { return factor <= 1 ? 1.0 : 0.1 * s * std::log(factor) + 1.0; };
      attn = m(ms) / m(ms_all);
    }
    attn = config_float(rope, "attention_factor", attn);
    if (std::fabs(attn - yarn_mscale(factor)) > 1e-12)
      md[a + ".rope.scaling.yarn_attn_factor"] = attn / yarn_mscale(factor);
  } else if (type == "longrope" || type == "su") {
    auto list = [&](const char* key) {
      if (!rope.contains(key) || !rope[key].is_array() || static_cast<int64_t>(rope[key].size()) != half)
        throw Error(std::string("config.json: rope ") + key + " is not a list of " + std::to_string(half) + " numbers");
      std::vector<float> v;
      for (const json& x : rope[key]) {
        if (!x.is_number() || !(x.get<double>() > 0))
          throw Error(std::string("config.json: rope ") + key + " holds a value that is not a positive number");
        v.push_back(x.get<float>());
      }
      return v;
    };
    const double factor = config_float(rope, "factor", static_cast<double>(max_pos) / orig);
    double attn = factor <= 1 ? 1.0 : std::sqrt(1 + std::log(factor) / std::log(static_cast<double>(orig)));
    attn = config_float(rope, "attention_factor", attn);
    md[a + ".rope.scaling.attn_factor"] = attn;
    md[a + ".rope.scaling.original_context_length"] = orig;
    factors_tensor("rope_factors_long.weight", list("long_factor"));
    factors_tensor("rope_factors_short.weight", list("short_factor"));
  } else {
    throw Error("config.json: rope type '" + type + "' is not supported yet (kvad reads default, linear, llama3, yarn, longrope)");
  }
}

}  // namespace kvad
