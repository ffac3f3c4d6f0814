// Hyper-parameter readers shared by the architectures (DESIGN.md seam 4):
// one per concept, each reading GGUF keys as llama.cpp names them
// (`{general.architecture}.*`) into a named struct, and throwing kvad::Error
// that names the key (and, for an HF checkpoint, the config.json field it
// came from: TensorSource::key_name). The HF side, config.json → these
// keys, is in model/hf.h (decoder_config, hf_sliding_window, hf_moe).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/blocks.h"
#include "model/model.h"

namespace kvad {

class TensorSource;

/// Reads the hyper-parameters common to decoder-only transformers from the
/// `{general.architecture}.*` GGUF keys (names as in the GGUF spec), for an
/// architecture to start its own hyper-parameter struct from. n_vocab
/// is left for the architecture (read_vocab). Throws kvad::Error naming the
/// key when a required one is missing or invalid.
HParams read_hparams(const TensorSource& f);

/// The vocabulary: the rows of token_embd.weight, checked against
/// `{arch}.vocab_size` when the source states it (an HF config's
/// vocab_size; llama.cpp's converter writes it for some architectures).
/// Throws kvad::Error naming the key and the tensor when they differ, and
/// when token_embd.weight is missing or not a matrix.
int64_t read_vocab(const TensorSource& f, const HParams& hp);

/// A decoder's attention from its hyper-parameters (heads, head_dim,
/// norm_eps), with `rope`, softmax scale 1/√head_dim and no window.
/// Throws kvad::Error naming the key when `{arch}.attention.value_length`
/// is stated and differs from the head_dim (kvad's caches and attention op
/// take one width for keys and values; MLA reads its own keys instead).
AttentionParams read_attention(const TensorSource& f, const HParams& hp, const RopeParams& rope = {});

/// Which layers attend through a sliding window (HF sliding_window,
/// layer_types), and how far.
struct SlidingWindow {
  int32_t window = 0;        ///< {arch}.attention.sliding_window: positions (p - W, p]; 0: none
  std::vector<bool> layers;  ///< per layer: windowed (all false when window is 0)
  /// The window of layer il: 0 for a full-attention layer.
  int32_t at(int64_t il) const { return layers[static_cast<size_t>(il)] ? window : 0; }
};

/// What an architecture assumes when its file does not say.
struct SlidingWindowDefaults {
  int64_t window = 0;     ///< the window when the key is absent
  bool required = false;  ///< a window must be given (> 0): gpt-oss's sliding layers
  /// llama.cpp's n_pattern when the file gives no per-layer form: layer il
  /// is windowed when pattern == 0 or il % pattern < pattern - 1 (Gemma 3:
  /// 6, five local layers then one global; Gemma 2 and gpt-oss: 2; 0: all).
  int64_t pattern = 0;
};

/// Reads `{arch}.attention.sliding_window` and
/// `{arch}.attention.sliding_window_pattern`, which is either an array of one
/// bool per layer (gpt-oss and Qwen2's per-layer form, gguf-py
/// add_sliding_window_pattern) or llama.cpp's integer n_pattern. Throws
/// kvad::Error naming the key for a window < 0 or beyond int32 (or 0 when
/// required), a negative pattern, or an array of another length than
/// block_count.
SlidingWindow read_sliding_window(const TensorSource& f, const HParams& hp, const SlidingWindowDefaults& d = {});

/// A mixture-of-experts feed-forward's sizes and routing, GGUF keys as
/// llama.cpp's. The MoeParams part (what moe_ffn reads): expert_used_count;
/// norm_topk from {arch}.expert_weights_norm (a GGUF bool, DeepSeek) or
/// kvad.moe.norm_topk_prob, else the architecture's default;
/// expert_gating_func (1 softmax, 2 sigmoid), expert_group_count,
/// expert_group_used_count, expert_weights_scale; norm_eps from hp.
struct MoeHParams : MoeParams {
  int64_t n_expert = 0;    ///< {arch}.expert_count (0: no experts)
  int64_t n_ff_exp = 0;    ///< {arch}.expert_feed_forward_length
  int64_t n_ff_shexp = 0;  ///< {arch}.expert_shared_feed_forward_length (0: not stated)
  int64_t n_shared = 0;    ///< {arch}.expert_shared_count (DeepSeek: shared experts of n_ff_exp each)
};

/// Reads the keys above (absent ones are 0 / the defaults). Throws
/// kvad::Error naming the key for a negative size or count, or a gating
/// function other than 1 or 2.
MoeHParams read_moe(const TensorSource& f, const HParams& hp, bool norm_topk_default = true);

/// Throws kvad::Error "<path>: <what> needs {arch}.expert_count,
/// expert_used_count (1..expert_count) and expert_feed_forward_length" when
/// the experts cannot run: no experts, no width, k outside 1..n_expert, or
/// groups (expert_group_count not dividing expert_count, expert_group_used_count
/// outside 1..groups, or fewer experts in the used groups than k).
void require_experts(const TensorSource& f, const HParams& hp, const MoeHParams& m, const std::string& what);

class WeightLoader;
/// WeightLoader::name_dim for m's sizes (expert_count,
/// expert_feed_forward_length, expert_shared_feed_forward_length), by the
/// source's key names, so that an expert tensor of another shape names them.
void name_dims(WeightLoader& wl, const HParams& hp, const MoeHParams& m);

}  // namespace kvad
