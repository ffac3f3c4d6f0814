// LoRAs for the image pipelines (SD 1.5, SDXL: the UNet and the CLIP text
// encoders), in the spellings people publish, merged into a copy of the
// weights they change.
//
// Spellings (each key a module name + a part):
//   PEFT / diffusers  unet.<module>.lora_A.weight / .lora_B.weight (also
//                     text_encoder., text_encoder_2., base_model.model.),
//                     the older .lora.down/.lora.up, .lora_linear_layer.down/.up
//                     and attn processor <attn>.processor.to_q_lora.down
//                     (to_out_lora: to_out.0); text encoder modules with or
//                     without transformers 4's text_model. level; alpha from the file's
//                     lora_adapter_metadata ("unet.lora_alpha", "unet.r",
//                     rank_pattern, alpha_pattern, use_rslora) or a .alpha key,
//                     else alpha = rank
//   kohya / LyCORIS   lora_unet_<module with _ for .> under diffusers names
//                     (SD 1.5 sd-scripts) or ldm names (input_blocks_4_1_...,
//                     middle_block_, output_blocks_: SDXL), lora_te_ / lora_te1_
//                     (text_encoder), lora_te2_ (text_encoder_2); parts
//                     .lora_down.weight, .lora_up.weight, .alpha, .hada_w1_a ...
//                     .lokr_w2_b, .diff
// The kinds (W the base weight, torch [out, in(, kh, kw)], the factors as
// LyCORIS and ComfyUI's lora.py compute them):
//   LoRA / LoCon  ΔW = up · down        up [out, r(,1,1)], down [r, in(, kh, kw)]
//                                         (a convolution pair: a k×k down, a 1×1 up)
//   LoHa          ΔW = (w1a · w1b) ⊙ (w2a · w2b)   (Hyeon-Woo et al. 2022, FedPara)
//   LoKr          ΔW = kron(w1, w2), w1 = lokr_w1 or lokr_w1_a · lokr_w1_b,
//                 w2 likewise (a 4-d w2 for a convolution: kron over [out, in])
//   full          ΔW = diff
//   W' = W + Σ_adapters strength · scale · ΔW,
//   scale = alpha / r (r: down's rows, w1b's rows, lokr's factored rank;
//   1 without alpha, and for LoKr with neither factor split), alpha / √r
//   under rsLoRA.
// Merging: the merged tensors are f32 buffers of their own, laid over the
// pipeline's (mapped, read-only) weights by merged_source; the checkpoint
// file is never written.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "model/image/pipeline.h"

namespace kvad {
class TensorSource;
}

namespace kvad::image {

enum class LoraKind { LoRA, LoHa, LoKr, Full };

/// One adapted weight of a LoRA file: its factors as host f32, torch shapes
/// (outermost first).
struct LoraFactor {
  std::vector<int64_t> shape;
  std::vector<float> v;
};

struct LoraModule {
  std::string target;      ///< the pipeline weight it changes: "unet.down_blocks.0....to_q.weight"
  LoraKind kind = LoraKind::LoRA;
  /// LoRA: {up, down}; LoHa: {w1a, w1b, w2a, w2b}; LoKr: {w1, w2} (the
  /// products made at load when split); Full: {diff}.
  std::vector<LoraFactor> f;
  float scale = 1.0f;      ///< alpha / r as above
};

/// A loaded image LoRA: placed on one pipeline, immutable once loaded, shared by requests.
struct ImageLora {
  std::string path;              ///< where it came from, for messages
  std::string spelling;          ///< "PEFT", "kohya", "kohya (ldm names)", ... as found
  std::vector<LoraModule> modules;
  size_t bytes = 0;              ///< host bytes of the factors
  bool touches_unet = false, touches_text = false;
};

/// An adapter in use and its strength (A1111's multiplier, diffusers'
/// set_adapters weight).
struct ImageLoraUse {
  std::shared_ptr<const ImageLora> lora;
  float strength = 1.0f;
};

struct LoraLoadOptions {
  /// false: a key that cannot be placed on the pipeline is an error naming
  /// the first ones; true: such keys are skipped, with one warning line on
  /// stderr counting them (A1111's and ComfyUI's behaviour).
  bool allow_partial = false;
};

/// The weights of `pl` a LoRA may change (every matrix and convolution of
/// the UNet and the text encoders), with the names every spelling gives
/// them. Built once per pipeline.
class LoraTargets {
 public:
  explicit LoraTargets(const Pipeline& pl);
  /// The pipeline weight (".weight" name) a key's module part names, and
  /// the spelling, or "" when none.
  std::string place(std::string_view module, std::string* spelling) const;
  /// torch shape of target `name`, nullptr when it is none.
  const std::vector<int64_t>* shape(std::string_view name) const;

 private:
  std::map<std::string, std::vector<int64_t>, std::less<>> shapes_;
  std::map<std::string, std::string, std::less<>> kohya_;  // kohya module name -> target
  std::map<std::string, std::string, std::less<>> ldm_kohya_;
  std::map<std::string, std::string, std::less<>> aliases_;  // PEFT name without text_model. -> target
};

/// Reads the LoRA file `path` (.safetensors) for the pipeline `targets` describes.
/// Throws kvad::Error, one line naming the file and the key: a file that is
/// not safetensors; keys it cannot place (unless allow_partial); a part with
/// its other half missing (lora_up without lora_down, hada_w1_a without
/// hada_w1_b, ...); factors whose ranks disagree; a product whose shape is not
/// the base weight's (both shapes); an alpha that is not one finite number;
/// non-finite factor values; a format other than f32/f16/bf16; parts kvad
/// does not compute (lora_mid and hada_t1/t2: Tucker; dora_scale: DoRA;
/// diff_b: bias deltas); a file with no adapter at all.
std::shared_ptr<const ImageLora> load_image_lora(const std::string& path, const LoraTargets& targets,
                                                 const LoraLoadOptions& o = {});
/// The same from a file's bytes (`size` bytes at `data`, valid during the call), `name` for messages.
std::shared_ptr<const ImageLora> parse_image_lora(const uint8_t* data, size_t size, const std::string& name,
                                                  const LoraTargets& targets, const LoraLoadOptions& o = {});

/// ΔW of `m` (torch order, the target's shape; its element count is the
/// target's), unscaled by m.scale.
std::vector<float> lora_delta(const LoraModule& m);

/// `base` with every weight the adapters change replaced by f32 W + Σ
/// strength · scale · ΔW in buffers of the view's own (the base's bytes are
/// read, never written). Throws kvad::Error when a target is missing from
/// `base` or has another element count, or a strength is not finite.
std::shared_ptr<const TensorSource> merged_source(std::shared_ptr<const TensorSource> base,
                                                  const std::vector<ImageLoraUse>& uses);

/// A1111's extra-network syntax: `<lora:NAME>` / `<lora:NAME:MULTIPLIER>`
/// tags taken out of a prompt.
struct LoraTag {
  std::string name;
  float strength = 1.0f;
};
/// The prompt without its <lora:...> tags, and the tags in order. Other
/// <...> text stays. Throws kvad::Error for a tag with an empty name, a
/// multiplier that is not a finite number, or more than 32 tags.
std::pair<std::string, std::vector<LoraTag>> extract_lora_tags(const std::string& prompt);

/// The file tag `name` names in folder `dir`: DIR/NAME.safetensors, or
/// DIR/NAME when it ends in .safetensors. Throws kvad::Error naming both
/// when there is none, or for a name that leaves the folder ("..", "/").
std::string resolve_lora_name(const std::string& dir, const std::string& name);

/// The LoRAs of folder `dir` (A1111's /sdapi/v1/loras): each
/// NAME.safetensors's NAME, sorted; empty when the folder does not exist.
std::vector<std::string> list_lora_names(const std::string& dir);

/// "FILE[:SCALE]" or "FILE[@SCALE]" (kvad images make --lora): the file and
/// the strength (1 when absent). Throws kvad::Error for a strength that is
/// not a finite number.
std::pair<std::string, float> parse_image_lora_arg(const std::string& arg);

}  // namespace kvad::image
