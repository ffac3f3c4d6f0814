// The quantize-once cache for an image pipeline (model/quantize_once.h's
// cache, a Stable Diffusion checkpoint as its source): the UNet's and the
// text encoders' linears and convolutions written once in a block format as
// a GGUF in $KVAD_HOME/cache, which later loads map directly.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "model/image/pipeline.h"

namespace kvad {
class TensorSource;
}

namespace kvad::image {

/// The --quant types an image pipeline takes: "q8_0".
const std::vector<std::string>& pipeline_quant_types();
/// Throws kvad::Error, one line naming the value and pipeline_quant_types(),
/// when `quant` is not one of them.
void check_pipeline_quant(const std::string& quant);

/// Which tensors the cache quantizes (by kvad's pipeline names, pipeline.h),
/// the rule chosen here: every weight matrix (2-D) and convolution kernel
/// (4-D) of the UNet ("unet.") and the text encoders ("text_encoder.",
/// "text_encoder_2.") whose rows are whole blocks of 32 (a matrix's n_in, a
/// convolution's input channels), stored as f32, f16 or bf16. Kept as
/// stored: norms, biases and other vectors, CLIP's token and position
/// embeddings ("embeddings."; they are looked up, not multiplied), the
/// convolutions with fewer or odd input channels (conv_in's 4 latent
/// channels), and the whole VAE (its decoder's convolutions set the
/// picture's pixels directly; it stays f32 activations on f16/f32 weights).
bool quantized_in_pipeline(const std::string& name, const std::vector<int64_t>& ne);

/// The pipeline `pl` (open_pipeline) with the tensors of the rule above in
/// `quant` (check_pipeline_quant), as a TensorSource under the same names,
/// written once as a GGUF in `cache_dir` and mapped on later calls. Every
/// tensor of pl.weights is in the file (VAE included), copied byte for byte
/// unless quantized. A quantized convolution kernel is stored in
/// ops::conv2d's layout {C, KW, KH, OC} (torch's [OC, KH, KW, C]; its input
/// channels innermost, so its q8_0 blocks run along them), not torch's
/// [OC, C, KH, KW]: layers.h's Conv2d takes a block-format kernel as
/// already in that layout. The entry is quantize_pipeline_path(); it is
/// stamped with the path, size and modification time of each of
/// pl.weight_files (kvad.source.file) and with the tensor list (names and
/// formats, kvad.source.tensors): a change to either makes it stale, and it
/// is rewritten. *hit (when given) says whether the entry was there. Throws
/// kvad::Error for another quant, an unwritable cache, or a tensor holding
/// a non-finite value.
std::shared_ptr<const TensorSource> quantize_pipeline_once(const Pipeline& pl, const std::string& quant,
                                                           const std::string& cache_dir, bool* hit = nullptr);
/// The cache file quantize_pipeline_once uses for `pl` (its files as they are now).
std::string quantize_pipeline_path(const Pipeline& pl, const std::string& quant, const std::string& cache_dir);

}  // namespace kvad::image
