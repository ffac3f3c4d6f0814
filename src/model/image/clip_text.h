// CLIP's text encoder (Radford et al. 2021, "Learning Transferable Visual
// Models From Natural Language Supervision"; transformers' CLIPTextModel and
// CLIPTextModelWithProjection, models/clip/modeling_clip.py), the prompt
// encoder of SD 1.5 (openai's CLIP ViT-L/14) and SDXL (that one and
// OpenCLIP's ViT-bigG/14), and the way diffusers' pipelines read it
// (StableDiffusionPipeline / StableDiffusionXLPipeline.encode_prompt).
//
//   x = E_tok[ids] + E_pos[0..n)                                  [n, E]
//   per layer (pre-norm, causal):
//     x += W_o · attn(LN1(x)) + b_o      heads of E / num_attention_heads, scale 1/√head_dim
//     x += W_2 · act(W_1 · LN2(x) + b_1) + b_2   act: quick_gelu x·σ(1.702x) or exact gelu (hidden_act)
//   last_hidden_state = final_layer_norm(x)
//   pooled = last_hidden_state[eos]   eos: argmax(ids) when eos_token_id is 2 (the
//            configs written before transformers' PR #24773), else the first
//            position holding eos_token_id
//   text_embeds = W_proj · pooled     (CLIPTextModelWithProjection, no bias)
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/image/configs.h"
#include "model/weights.h"
#include "tensor/tensor.h"
#include "tokenizer/clip.h"

namespace kvad::image {

struct Pipeline;

/// The activation of config `hidden_act`, element-wise: "quick_gelu"
/// x·σ(1.702·x) (transformers' QuickGELUActivation), "gelu" the exact erf
/// GELU. Throws kvad::Error for another name.
Tensor clip_activation(const Tensor& x, const std::string& hidden_act);

class ClipTextEncoder {
 public:
  /// Which hidden state `hidden` holds.
  enum class Layer {
    Last,         ///< last_hidden_state: after the last layer and final_layer_norm (SD 1.5)
    Penultimate,  ///< hidden_states[-2]: after the next-to-last layer, no norm (SDXL)
  };
  struct Output {
    Tensor hidden;  ///< [n_tok, hidden_size] f32, on the weights' device
    /// With `pooled`: text_embeds [projection_dim] (with a projection) or
    /// pooler_output [hidden_size]; else empty.
    Tensor pooled;
  };

  /// Takes the encoder's weights under `scope` (its transformers names:
  /// "text_model.embeddings.token_embedding.weight", ...; "text_projection.weight").
  /// Throws kvad::Error as WeightLoader::get does for a missing tensor or a
  /// shape other than the config's.
  ClipTextEncoder(const WeightScope& scope, const ClipTextConfig& c);

  /// Encodes one sequence of token ids (1..max_position_embeddings of them,
  /// each in [0, vocab_size)). Throws kvad::Error naming the bad id or length.
  Output encode(std::span<const int32_t> ids, Layer layer, bool pooled) const;

  const ClipTextConfig& config() const { return c_; }
  Device device() const { return dev_; }

 private:
  struct Block {
    Tensor ln1_w, ln1_b, wq, bq, wk, bk, wv, bv, wo, bo, ln2_w, ln2_b, fc1, fc1_b, fc2, fc2_b;
  };
  ClipTextConfig c_;
  Device dev_;
  Tensor tok_, pos_, final_w_, final_b_, proj_;
  std::vector<Block> blocks_;
};

/// A prompt's conditioning as the pipeline's UNet reads it.
struct PromptEmbeds {
  Tensor hidden;  ///< encoder_hidden_states [77, cross_attention_dim] f32
  Tensor pooled;  ///< SDXL's text_embeds [projection_dim] (the add-embedding's input); empty for SD 1.5
};

/// The text side of a Stable Diffusion pipeline: its tokenizers and text
/// encoders, encoding prompts as diffusers' encode_prompt does (no clip_skip,
/// no prompt weighting). SD 1.5: text_encoder's last_hidden_state. SDXL: each
/// encoder's hidden_states[-2] concatenated along the features (text_encoder
/// then text_encoder_2), and the pooled text_embeds of text_encoder_2.
class PromptEncoder {
 public:
  /// Reads the pipeline's tokenizer folders (CLIP's vocabulary built into
  /// kvad, ClipTokenizer::builtin, where the checkpoint has none, as a single
  /// file read with kvad's base configs) and takes the encoders' weights from
  /// `wl` (a loader over pl.weights). Throws kvad::Error as ClipTokenizer and
  /// ClipTextEncoder do.
  PromptEncoder(const Pipeline& pl, WeightLoader& wl);

  /// The embeddings of `prompt`.
  PromptEmbeds encode(std::string_view prompt) const;
  /// The negative embeddings for classifier-free guidance: of the negative
  /// prompt, or, when none is given (nullopt), of "" -- but zeros under SDXL's
  /// force_zeros_for_empty_prompt, as diffusers' pipeline does.
  PromptEmbeds negative(const std::optional<std::string>& negative_prompt) const;

  const ClipTokenizer& tokenizer(int i) const { return i == 0 ? tok_ : *tok_2_; }

 private:
  bool xl_ = false, force_zeros_ = false;
  ClipTokenizer tok_;
  std::optional<ClipTokenizer> tok_2_;
  ClipTextEncoder enc_;
  std::optional<ClipTextEncoder> enc_2_;
};

}  // namespace kvad::image
