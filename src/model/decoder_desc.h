// A decoder-only transformer as data: the weights an architecture file read
// (names, shapes and format checks done there, DESIGN.md seams 4 and 7) and
// how its forward pass composes the shared blocks. Backends other than the
// CPU (the CUDA model, model/cuda_decoder.cpp) run from this description, so
// the hyper-parameter and weight-naming rules live only in llama.cpp and
// gemma3.cpp.
#pragma once
#include <cstddef>
#include <memory>
#include <vector>

#include "model/blocks.h"
#include "model/model.h"

namespace kvad {

namespace gguf { class File; }

/// One pre-norm decoder layer:
///   x = x + post_attention_norm(Attention(x))   (post norm only when the tensor is set)
///   x = x + post_ffw_norm(GatedMlp(x))
struct DecoderLayerDesc {
  AttentionWeights attn;
  MlpWeights ffn;
  Tensor post_attention_norm, post_ffw_norm;  ///< [n_embd] f32, or empty (llama)
  AttentionParams attn_params;
};

/// The whole model: x = get_rows(tok_embd) · embd_scale, the layers, then
/// logits = output · (RMSNorm(x) ⊙ output_norm). Tensors point into the
/// mapped file, which `file` keeps alive.
struct DecoderDesc {
  HParams hp;
  std::shared_ptr<const gguf::File> file;
  Tensor tok_embd, output_norm, output;  ///< output is tok_embd when the head is tied
  float embd_scale = 1.0f;
  Activation act = Activation::SiLU;
  std::vector<DecoderLayerDesc> layers;
};

/// Reads a llama-family / Gemma 3 GGUF exactly as the CPU model does (the
/// same checks and errors: kvad::Error naming the file and tensor).
DecoderDesc describe_llama(std::shared_ptr<const gguf::File> f);
DecoderDesc describe_gemma3(std::shared_ptr<const gguf::File> f);

}  // namespace kvad
