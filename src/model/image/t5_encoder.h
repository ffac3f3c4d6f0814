// T5's encoder (Raffel et al. 2020, "Exploring the Limits of Transfer
// Learning with a Unified Text-to-Text Transformer"; T5 v1.1's gated-GELU
// FFN, Shazeer 2020): transformers' T5EncoderModel
// (models/t5/modeling_t5.py), the second prompt encoder of FLUX
// (text_encoder_2/ of black-forest-labs/FLUX.1-*: google/t5-v1_1-xxl), as
// diffusers' FluxPipeline._get_t5_prompt_embeds calls it (no attention mask).
//
// Interface (what the FLUX pipeline calls):
//
//   // standalone, from a component folder (config.json + safetensors,
//   // sharded with model.safetensors.index.json included):
//   std::unique_ptr<T5Encoder> t5 = T5Encoder::load("…/text_encoder_2", DeviceOptions{});
//   // or inside a pipeline's shared loader (its finish() accounts for every tensor):
//   T5Encoder t5(wl.root().sub("text_encoder_2"), parse_t5_config(cfg_json, "text_encoder_2/config.json"));
//   // tokenizer (tokenizer/t5.h): tokenizer.json, else spiece.model, of the folder
//   std::unique_ptr<Tokenizer> tok = t5_tokenizer("…/tokenizer_2");
//   std::vector<int32_t> ids = t5_prompt_ids(*tok, prompt, 512);  // 512 ids: truncated, </s>, <pad>s
//   Tensor h = t5->encode(ids);  // [n_tokens, d_model] f32 on the weights' device
//
// Equations (x: [n, d_model] f32, the residual stream):
//   x = E[ids]                                        shared.weight, no scaling
//   bias[h, i, j] = R[bucket(j - i), h]               layer 0's relative_attention_bias,
//                                                     shared by every layer (bidirectional buckets)
//   per layer:
//     y = RMS(x) ⊙ w1                                 T5LayerNorm: x / √(mean(x²) + eps), no mean, no bias
//     x += W_o · softmax(Q·Kᵀ + bias) · V             no 1/√d_kv on the scores (folded into init)
//     y = RMS(x) ⊙ w2
//     x += W_o' · (gelu_tanh(W_i0 · y) ⊙ (W_i1 · y))  feed_forward_proj "gated-gelu" (gelu_new)
//      or x += W_o' · relu(W_i · y)                    feed_forward_proj "relu" (T5 v1.0)
//   last_hidden_state = RMS(x) ⊙ w_final
//
// f16 overflow: transformers, running in f16, clamps the hidden states to
// ±(65504 - 1000 when any is inf) after each sub-layer and keeps every
// FFN `wo` in f32 (_keep_in_fp32_modules), since T5 v1.1's FFN outputs pass
// f16's range. kvad keeps the residual stream and every activation in f32
// (so no clamp is needed: f32 does not overflow there); the one place
// activations would be rounded to f16 is a dot product with an f16 weight
// (the CPU row converts activations to the weight's vec_dot_type), so an
// f16 FFN `wo` is converted to f32 at load, as transformers keeps it.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <span>
#include <string>
#include <vector>

#include "model/registry.h"
#include "model/weights.h"
#include "tensor/tensor.h"

namespace kvad::image {

/// transformers' T5Config, the fields the encoder reads (defaults: T5Config's).
struct T5Config {
  int64_t vocab_size = 32128;
  int64_t d_model = 512;
  int64_t d_kv = 64;  ///< width of one head (q/k/v are num_heads · d_kv wide)
  int64_t d_ff = 2048;
  int64_t num_layers = 6;  ///< encoder blocks
  int64_t num_heads = 8;
  int64_t relative_attention_num_buckets = 32;
  int64_t relative_attention_max_distance = 128;
  double layer_norm_epsilon = 1e-6;
  /// "relu", "gated-gelu", "gated-relu", "gelu", "gated-silu"...: ACT or gated-ACT.
  std::string feed_forward_proj = "relu";
  /// ACT of feed_forward_proj, as transformers' ACT2FN names it ("gelu" the
  /// exact GELU); "gated-gelu" gives "gelu_new" (the tanh GELU), as T5Config maps it.
  std::string dense_act_fn = "relu";
  bool is_gated_act = false;
  int64_t pad_token_id = 0, eos_token_id = 1;
};

/// Reads a parsed config.json (`name`, its path, prefixes errors). Throws
/// kvad::Error "NAME: FIELD ..." for a field of the wrong type, a count or
/// width outside 1..2^20, a feed_forward_proj that is not ACT or gated-ACT
/// (T5Config's rule), or an activation kvad does not run (relu, gelu_new,
/// gelu_pytorch_tanh, silu).
T5Config parse_t5_config(const nlohmann::json& cfg, const std::string& name);

/// transformers' T5Attention._relative_position_bucket with
/// bidirectional=True: the bucket of `relative_position` (key position minus
/// query position) among `num_buckets` (half for keys before, half after:
/// exact up to num_buckets/4, logarithmic up to max_distance, clipped past
/// it). The log is taken in f32 as torch takes it.
int32_t t5_relative_position_bucket(int64_t relative_position, int64_t num_buckets, int64_t max_distance);

class T5Encoder {
 public:
  /// Takes the encoder's weights under `scope` (transformers' T5EncoderModel
  /// names: "shared.weight" (or "encoder.embed_tokens.weight"; both may be
  /// present), "encoder.block.N.layer.0.SelfAttention.{q,k,v,o}.weight",
  /// "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
  /// "encoder.block.N.layer.{0,1}.layer_norm.weight",
  /// "encoder.block.N.layer.1.DenseReluDense.{wi_0,wi_1|wi,wo}.weight",
  /// "encoder.final_layer_norm.weight"). Throws kvad::Error as
  /// WeightLoader::get does for a missing tensor or a shape other than the config's.
  T5Encoder(const WeightScope& scope, const T5Config& c);

  /// A T5EncoderModel component folder (diffusers' text_encoder_2/, or a
  /// transformers checkpoint folder): config.json and its safetensors (one
  /// file, an index with its shards, or the one NAME.<variant>.safetensors
  /// `variant` picks as diffusers does). The weights are used in place from
  /// the mapped files on the CPU, as WeightLoader places them elsewhere.
  /// Throws kvad::Error naming the file: no config.json or an invalid one
  /// (parse_t5_config), no or ambiguous weights, a tensor missing, of another
  /// shape, or left unread (a T5ForConditionalGeneration's decoder: read
  /// only "encoder.*" and "shared.weight" of it).
  static std::unique_ptr<T5Encoder> load(const std::string& dir, const DeviceOptions& o = {},
                                         const std::string& variant = "");

  /// last_hidden_state of one sequence: [n_tokens, d_model] f32 on the
  /// weights' device (as ClipTextEncoder::Output::hidden), every token
  /// attending to every other (no mask: FLUX pads to its max_sequence_length
  /// and attends over the padding too). 1 <= n_tokens <= 4096 (the position
  /// bias and each layer's scores take n_tokens² · num_heads · 4 bytes: 64 MiB
  /// at FLUX's 512 tokens and T5-XXL's 64 heads), each id in [0, vocab_size);
  /// throws kvad::Error naming the bad id or the length.
  Tensor encode(std::span<const int32_t> ids) const;

  const T5Config& config() const { return c_; }
  Device device() const { return dev_; }

 private:
  struct Block {
    Tensor ln1, wq, wk, wv, wo, ln2, wi0, wi1, wff_o;  ///< wi1 empty unless gated
  };
  T5Config c_;
  Device dev_;
  Tensor embed_, rel_bias_, final_ln_;
  std::vector<Block> blocks_;
};

}  // namespace kvad::image
