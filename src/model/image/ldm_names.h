// Single-file Stable Diffusion checkpoints in Stability's original layout
// (the `ldm` / `sgm` code the models were trained with, which A1111, ComfyUI
// and most fine-tunes ship): which layout a file is, and the name table from
// its tensor names to the diffusers names kvad's image models read.
//
//   SD 1.5: model.diffusion_model.*      (ldm openaimodel.UNetModel)
//           first_stage_model.*          (ldm AutoencoderKL)
//           cond_stage_model.transformer.* (transformers' CLIPTextModel)
//   SDXL:   model.diffusion_model.*, first_stage_model.*,
//           conditioner.embedders.0.transformer.* (CLIPTextModel)
//           conditioner.embedders.1.model.*        (OpenCLIP's text tower)
//
// Source: diffusers' scripts/convert_diffusers_to_original_stable_diffusion.py
// and convert_diffusers_to_original_sdxl.py (the table below is their
// inverse, computed from the component configs rather than for one block
// count), and diffusers' loaders/single_file_utils.py.
#pragma once
#include <string>
#include <vector>

#include "io/mapped_source.h"
#include "model/image/configs.h"

namespace kvad::image {

enum class LdmLayout { SD15, SDXL };

/// "SD 1.5" / "SDXL".
const char* layout_name(LdmLayout l);

/// The layout of single file `file`. Throws kvad::Error naming its path for
/// anything else: no `model.diffusion_model.` UNet (with
/// the file's first names), SD 2.x (cond_stage_model.model.*), the SDXL
/// refiner (conditioner.embedders.0.model.*), or no text encoder.
LdmLayout detect_ldm_layout(const TensorSource& file);

/// What the table makes of one file.
struct LdmNames {
  /// ldm name → diffusers name under the component's prefix ("unet.",
  /// "vae.", "text_encoder.", "text_encoder_2."), with the reshapes the
  /// layouts differ by (the VAE's 1×1-conv attention as linears; OpenCLIP's
  /// fused in_proj split into q/k/v; its text_projection transposed).
  std::vector<TensorRename> rules;
  /// Tensors the file carries that no component reads: the DDPM schedule
  /// buffers (betas, alphas_cumprod, ...), the EMA copy (model_ema.*),
  /// position_ids and OpenCLIP's logit_scale.
  std::vector<std::string> ignored;
  bool has_vae = false;  ///< the file carries first_stage_model.*
};

/// The table for `file` of `layout` whose components are described by
/// `unet` and `vae` (the UNet's attention projections are viewed as the
/// config's use_linear_projection has them, as diffusers' loader does).
/// Throws kvad::Error naming the file and the tensor for a name no
/// component of that layout has (the unread-tensor guard).
LdmNames ldm_names(LdmLayout layout, const TensorSource& file, const UNet2DConditionConfig& unet,
                   const AutoencoderKLConfig& vae);

/// The renames of a diffusers VAE saved before diffusers 0.14 (its mid-block
/// attention as query/key/value/proj_attn, which diffusers converts when it
/// loads one): old name → current, for `names` (a VAE's tensor names without
/// prefix); names that need none are not listed.
std::vector<TensorRename> deprecated_vae_names(const std::vector<std::string>& names);

/// The ldm name (under model.diffusion_model.) of the UNet weight or module
/// `diffusers` (a diffusers name without "unet.": "down_blocks.0.resnets.0.conv1.weight"
/// -> "input_blocks.1.0.in_layers.2.weight"), for a UNet of config `c`: the
/// inverse of the table above, as kohya's SDXL LoRAs name their modules.
/// "" when no ldm block holds it.
std::string unet_ldm_name(const std::string& diffusers, const UNet2DConditionConfig& c);

}  // namespace kvad::image
