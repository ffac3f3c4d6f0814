// A Stable Diffusion checkpoint as kvad's image models read it: which
// pipeline it is, each component's config, and all of its weights as one
// TensorSource under diffusers' names, whatever the layout on disk.
//
// Two layouts are read:
//  - a diffusers folder: model_index.json (its _class_name decides the
//    pipeline: StableDiffusionPipeline, StableDiffusionXLPipeline or
//    FluxPipeline) and one folder per component (unet/ or transformer/, vae/,
//    text_encoder/, text_encoder_2/ with
//    config.json and their safetensors, whatever the file is called, `.fp16`
//    and other variants included; tokenizer/, tokenizer_2/, scheduler/);
//  - a single .safetensors file in Stability's original layout
//    (model/image/ldm_names.h), whose configs are SD 1.5's or SDXL base's as
//    kvad ships them (model/image/base/*.json), or another diffusers folder's
//    when given (as diffusers' from_single_file(config=...)); the file's own
//    VAE is used when it has one.
//
// The weights are named "unet." / "vae." / "text_encoder." /
// "text_encoder_2." + the component's diffusers name
// ("unet.conv_in.weight", "text_encoder.text_model.encoder.layers.0.mlp.fc1.weight"),
// so one WeightLoader takes them all and its finish() names any tensor no
// component read (DESIGN.md seam 7).
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/image/configs.h"
#include "model/image/ldm_names.h"

namespace kvad {
class TensorSource;
}

namespace kvad::image {

enum class PipelineClass { StableDiffusion, StableDiffusionXL, Flux };

/// diffusers' class name: "StableDiffusionPipeline", "StableDiffusionXLPipeline", "FluxPipeline".
const char* pipeline_class_name(PipelineClass c);

struct PipelineOptions {
  /// A diffusers folder: prefer each component's `NAME.<variant>.safetensors`
  /// ("fp16"), else its plain file. "": the plain file, else the only variant.
  std::string variant;
  /// For a single file: a diffusers folder whose model_index.json and
  /// component configs describe it (tokenizers and scheduler from there too);
  /// "": kvad's base configs of the detected layout.
  std::string config;
  /// A VAE (a diffusers vae folder) used instead of the checkpoint's own,
  /// or for a single file without one.
  std::string vae;
};

struct Pipeline {
  PipelineClass pipeline_class = PipelineClass::StableDiffusion;
  std::string path;                 ///< what was opened
  bool single_file = false;         ///< an ldm-layout .safetensors
  std::optional<LdmLayout> layout;  ///< the single file's layout
  UNet2DConditionConfig unet;  ///< SD 1.5, SDXL
  /// FluxPipeline: transformer/config.json (FluxTransformer2DModel).
  std::optional<FluxTransformerConfig> transformer;
  /// FluxPipeline: text_encoder_2/config.json's text (T5EncoderModel) and its
  /// path; the T5 encoder parses it.
  std::string t5_config, t5_config_name;
  AutoencoderKLConfig vae;
  ClipTextConfig text_encoder;
  std::optional<ClipTextConfig> text_encoder_2;  ///< SDXL (FLUX's text_encoder_2 is T5: t5_config)
  /// Tokenizer folders (vocab.json + merges.txt); "" when the checkpoint
  /// carries none (a single file read with kvad's base configs): then
  /// PromptEncoder uses CLIP's vocabulary built into kvad.
  std::string tokenizer, tokenizer_2;
  /// scheduler/scheduler_config.json's text (kvad's base one for a single
  /// file), and its name for errors; engine/diffusion parses it.
  std::string scheduler_config, scheduler_config_name;
  /// model_index.json's force_zeros_for_empty_prompt (StableDiffusionXLPipeline's
  /// default true): an empty negative prompt is zeros, not its encoding.
  bool force_zeros_for_empty_prompt = false;
  /// Every weight, under the names above.
  std::shared_ptr<const TensorSource> weights;
  /// The files `weights` reads (each component's safetensors, or the single
  /// file and a --vae folder's), for the quantize-once cache's stamp.
  std::vector<std::string> weight_files;
};

/// Opens `path`: a diffusers folder (holding model_index.json) or a
/// single-file .safetensors checkpoint. Checks the shapes the configs fix
/// (each component's input and output convolutions or embeddings, widths,
/// layer counts) against the tensors.
/// Throws kvad::Error, one line, naming the file: model_index.json
/// unreadable, not JSON, not an object, or a _class_name kvad does not run;
/// a component it needs that model_index.json or the folder lacks; a
/// component folder with no safetensors or several without an index; a
/// config as configs.h throws; a single file of an unknown layout
/// (ldm_names.h); a tensor that is no component's; a shape that contradicts
/// the config (naming the tensor, both shapes and the config fields).
Pipeline open_pipeline(const std::string& path, const PipelineOptions& options = {});

/// The weights of one component folder (unet/, text_encoder_2/, ...) for
/// `variant` (PipelineOptions), by the rule `kvad pull` fetches them with
/// (hub::pick_component_weights): the variant's index (its shards) or single
/// file, else the plain one. Throws kvad::Error naming the folder when it
/// has no .safetensors, none for the variant, or several without an index.
/// `files`, when given, gets the path of the file read appended (the
/// quantize-once cache keys on it).
std::shared_ptr<const TensorSource> component_weights(const std::string& dir, const std::string& variant,
                                                      std::vector<std::string>* files = nullptr);

/// True when `path` is a folder with model_index.json.
bool is_diffusers_folder(const std::string& path);

/// The base configs kvad ships for a single file of `layout`: a JSON object
/// {"model_index", "unet", "vae", "text_encoder", ["text_encoder_2"],
/// "scheduler"}, each the base model's file (SD 1.5:
/// stable-diffusion-v1-5/stable-diffusion-v1-5; SDXL:
/// stabilityai/stable-diffusion-xl-base-1.0).
const std::string& base_configs(LdmLayout layout);

}  // namespace kvad::image
