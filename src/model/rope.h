// RoPE scaling, shared by every architecture (Su et al. 2021 "RoFormer" for
// the rotation). Each scaling rule is a per-pair divisor of the rotary
// frequencies plus a factor on cos and sin (tensor/backend.h RopeParams), so
// one op serves them all:
//  - linear (Chen et al. 2023, position interpolation): positions · 1/factor
//    ({arch}.rope.scaling.type "linear", as before).
//  - Llama 3 ("llama3", Meta's Llama 3.1 reference): high frequencies kept,
//    low ones divided by `factor`, the band between smoothed. GGUF files carry
//    the divisors as rope_freqs.weight [n_rot/2] (llama.cpp's converter);
//    an HF config's rope_parameters become that same tensor here, so both
//    paths give the same frequencies.
//  - YaRN (Peng et al. 2023; transformers' _compute_yarn_parameters, ggml's
//    rope_yarn): pairs ramp from extrapolated (kept) to interpolated
//    (÷ factor) between the correction dims of beta_fast and beta_slow, and
//    cos/sin are scaled by 0.1·ln(factor) + 1 (times
//    rope.scaling.yarn_attn_factor). GGUF keys as llama.cpp's:
//    rope.scaling.{type, factor, original_context_length, yarn_beta_fast,
//    yarn_beta_slow, yarn_attn_factor}; kvad.rope.scaling.yarn_truncate 0
//    leaves the correction dims unrounded (HF rope_parameters.truncate false,
//    gpt-oss; llama.cpp always rounds).
//  - LongRoPE / "su" (Ding et al. 2024; Phi-3): per-pair factors, short ones
//    for contexts up to original_context_length and long ones beyond (chosen
//    by the cache's context size, as llama.cpp does), and a factor
//    rope.scaling.attn_factor on cos/sin. GGUF tensors
//    rope_factors_short.weight / rope_factors_long.weight [n_rot/2].
#pragma once
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "model/model.h"
#include "tensor/backend.h"

namespace kvad {

class TensorSource;
class WeightLoader;
struct HfConfig;

/// An architecture's RoPE settings for every context size.
struct RopeScaling {
  RopeParams params;       ///< contexts up to n_ctx_orig (every context when !has_long)
  RopeParams long_params;  ///< LongRoPE: contexts longer than n_ctx_orig
  int64_t n_ctx_orig = 0;
  bool has_long = false;
  /// The parameters for a cache of n_ctx positions per sequence.
  const RopeParams& at(int32_t n_ctx) const { return has_long && n_ctx > n_ctx_orig ? long_params : params; }
};

/// Reads the rope scaling of `src` (keys `{hp.arch}.rope.*`, tensors
/// rope_freqs / rope_factors_short / rope_factors_long, taken from `wl`) on
/// top of hp's n_rot, base and linear scale, with the pairing `neox`. The
/// factors live on wl's device. Throws kvad::Error naming the key or tensor
/// for an unknown scaling type, a factor <= 0, factors of the wrong size or
/// format, two rules at once, or LongRoPE factors when `long_factors` is
/// false (an architecture whose layers take one RopeParams: Gemma, gpt-oss).
RopeScaling load_rope_scaling(const TensorSource& src, WeightLoader& wl, const HParams& hp, bool neox,
                              bool long_factors = true);

/// The HF side: `rope` is the config's rope_parameters (transformers 5) or
/// rope_scaling (4.x) object with rope_theta folded in, `cfg` the whole
/// config, n_rot the rotary dims. Writes llama.cpp's keys (and tensors) for
/// the rope type into out: linear, llama3, yarn, longrope/su; default and
/// absent write nothing. Throws kvad::Error "config.json: ..." for another
/// type or a missing or invalid field.
void hf_rope_scaling(const std::string& arch, const nlohmann::json& rope, const nlohmann::json& cfg, int64_t n_rot,
                     HfConfig& out);

}  // namespace kvad
