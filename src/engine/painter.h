// The Painter: a Stable Diffusion text-to-image pipeline, the peer of
// Session for pictures (DESIGN.md seam 10). It holds a pipeline's text
// encoders, UNet and VAE, loaded once through one WeightLoader (every tensor
// of the checkpoint taken, or the load fails naming the rest), and paints
// requests with the weightless schedulers of engine/diffusion.
//
// paint() is diffusers' StableDiffusionPipeline.__call__ /
// StableDiffusionXLPipeline.__call__ (0.42) for a text prompt, step for
// step:
//   embeds = encode_prompt(prompt), negative (CFG)          [77, cross_attention_dim]
//   latents = randn((n, 4, h/8, w/8), torch.Generator("cpu").manual_seed(seed)) · init_noise_sigma
//   per timestep t: x = scale_model_input(latents, t)
//     eps = unet(cat([x] * 2), t, cat([negative] * n + [embeds] * n), added)  (batch n when cfg <= 1)
//     eps = eps_uncond + cfg · (eps_text - eps_uncond)
//     latents = scheduler.step(eps, t, latents, generator)   (ancestral noise from the same generator)
//   image = vae.decode(latents / scaling_factor); bytes = round(clamp(image / 2 + 0.5, 0, 1) · 255)
// SDXL's added conditions: text_embeds the pooled embedding of text_encoder_2
// (the negative's zeros under force_zeros_for_empty_prompt), time_ids
// (h, w, 0, 0, h, w) (original size, crop top-left, target size).
// The same seed, scheduler and settings give diffusers' picture (to float
// rounding of the models; tests/engine/test_painter.cpp).
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/diffusion/scheduler_config.h"
#include "io/png.h"
#include "model/image/lora.h"
#include "model/image/pipeline.h"
#include "model/registry.h"

namespace kvad {

class ThreadPool;
class WeightLoader;
namespace image {
class PromptEncoder;
class UNet2DCondition;
class AutoencoderKL;
}  // namespace image

/// Bounds of a request (check_paint_request).
inline constexpr int64_t kPaintMinSide = 64, kPaintMaxSide = 2048;  ///< pixels, multiples of 8
inline constexpr int64_t kPaintMaxSteps = 1000;
inline constexpr int64_t kPaintMaxImages = 16;
inline constexpr size_t kPaintMaxPromptBytes = 64 * 1024;
inline constexpr double kPaintMaxCfg = 100;

/// One text-to-image request. A field left at its "default" value takes the
/// pipeline's default in Painter::settle().
struct PaintRequest {
  std::string prompt;  ///< UTF-8, at most kPaintMaxPromptBytes (the tokenizer keeps 77 tokens)
  /// nullopt: no negative prompt ("" encoded, or zeros under SDXL's
  /// force_zeros_for_empty_prompt, as diffusers does for negative_prompt=None).
  std::optional<std::string> negative_prompt;
  int64_t width = 0, height = 0;  ///< pixels; 0: unet sample_size × the VAE's downscale (diffusers' default)
  int64_t steps = 20;             ///< num_inference_steps, 1..kPaintMaxSteps
  /// guidance_scale; nullopt: diffusers' __call__ default (7.5 for
  /// StableDiffusionPipeline, 5.0 for StableDiffusionXLPipeline). <= 1: no
  /// classifier-free guidance (the UNet runs on the prompt alone).
  std::optional<double> cfg;
  uint64_t seed = 0;           ///< torch.Generator("cpu").manual_seed(seed)
  std::string scheduler;       ///< kvad's or A1111's name (parse_scheduler_name); "": the pipeline's own
  int64_t n = 1;               ///< num_images_per_prompt, 1..kPaintMaxImages
  std::string rng = "torch";   ///< the noise generator; "torch" (torch's CPU generator) is the only one
  /// LoRAs this request paints with, each at its strength (at most
  /// kPaintMaxLoras; loaded with Painter::load_lora). Their deltas are merged
  /// into a copy of the weights they change (model/image/lora.h), built when
  /// a request brings another set than the last one and kept for the next.
  std::vector<image::ImageLoraUse> loras;
};

inline constexpr size_t kPaintMaxLoras = 32;

/// Throws kvad::Error, one line naming the field, the value and the bound,
/// for: width or height not a multiple of 8 or outside [kPaintMinSide,
/// kPaintMaxSide] (0 is allowed: the default), steps outside 1..kPaintMaxSteps,
/// n outside 1..kPaintMaxImages, a prompt or negative prompt over
/// kPaintMaxPromptBytes, a cfg that is not finite or outside [0, kPaintMaxCfg],
/// an rng other than "torch", a scheduler name parse_scheduler_name refuses,
/// more than kPaintMaxLoras LoRAs, a null one, or a strength that is not
/// finite or over 1e6 in size.
void check_paint_request(const PaintRequest& r);

/// One finished picture.
struct PaintedImage {
  int64_t width = 0, height = 0;
  std::vector<uint8_t> rgb;    ///< [height][width][3], rows top to bottom
  png::Parameters parameters;  ///< the request as AUTOMATIC1111 writes it (io/png.h a1111_parameters)
};

/// Where paint() is, after each denoising step.
struct PaintProgress {
  int64_t step = 0, total = 0;  ///< steps done (1..total) and in all
  double step_s = 0;            ///< seconds this step took
  double elapsed_s = 0;         ///< seconds since the first step began
  /// The latents after this step, torch's order [n, C, h/8, w/8] (NCHW),
  /// valid during the call (for previews, model/image/latent_preview.h).
  std::span<const float> latents;
  int64_t n = 0, channels = 0, latent_h = 0, latent_w = 0;
};
using PaintCallback = std::function<void(const PaintProgress&)>;

/// Seconds spent in each stage of one paint() call.
struct PaintStats {
  double encode_s = 0, denoise_s = 0, decode_s = 0;
};

struct PaintResult {
  std::vector<PaintedImage> images;  ///< request.n pictures, in diffusers' batch order
  PaintStats stats;
};

/// Thrown by paint() when its cancel flag is set (checked before each step
/// and before decoding).
class PaintCancelled : public Error {
 public:
  explicit PaintCancelled(const std::string& what) : Error(what) {}
};

struct PainterOptions {
  DeviceOptions device;   ///< where the weights go and the ops run ("cpu", "sim", "cuda")
  int threads = 0;        ///< CPU threads; 0: all cores
  std::string model_name; ///< the metadata's "Model"; "": the pipeline path's last part (without .safetensors)
};

class Painter {
 public:
  /// Loads the pipeline's text encoders, UNet and VAE from `pl.weights`
  /// onto o.device and reads its scheduler config. Throws kvad::Error as
  /// WeightLoader, PromptEncoder, UNet2DCondition and AutoencoderKL do, for
  /// a checkpoint tensor none of them read (naming it), and for a scheduler
  /// config SchedulerConfig::parse refuses.
  Painter(image::Pipeline pl, const PainterOptions& o = {});
  ~Painter();
  Painter(const Painter&) = delete;
  Painter& operator=(const Painter&) = delete;

  /// The request with every default filled in (width, height, cfg,
  /// scheduler as kvad's name of the pipeline's own scheduler, or Euler
  /// when its class is none kvad runs, e.g. PNDMScheduler) after
  /// check_paint_request. Throws as check_paint_request does, and for a
  /// scheduler the config cannot set up (SchedulerConfig::resolve,
  /// make_scheduler: steps above num_train_timesteps).
  PaintRequest settle(const PaintRequest& r) const;

  /// Paints `r` (settled first). `progress` (may be empty) is called after
  /// each step; `cancel` (may be null) is read before each step. Throws
  /// kvad::Error as settle() does or a model op does, PaintCancelled when
  /// cancelled. Thread-compatible: one paint() at a time per Painter.
  PaintResult paint(const PaintRequest& r, const PaintCallback& progress = {},
                    const std::atomic<bool>* cancel = nullptr) const;

  /// The scheduler a request without one gets (kvad's name), and why when
  /// it is not the config's own class ("" when it is).
  const std::string& default_scheduler() const { return default_scheduler_; }
  const std::string& default_scheduler_note() const { return default_scheduler_note_; }
  const image::Pipeline& pipeline() const { return pl_; }
  const std::string& model_name() const { return model_name_; }
  /// VAE downscale factor (8 for SD 1.5 and SDXL).
  int64_t downscale() const { return downscale_; }
  size_t weight_bytes() const;
  Device device() const;

  /// The LoRA file `path` placed on this pipeline (image::load_image_lora);
  /// throws as that does.
  std::shared_ptr<const image::ImageLora> load_lora(const std::string& path,
                                                    const image::LoraLoadOptions& o = {}) const;
  /// As load_lora, but a file loaded before (same path, options, size and
  /// modification time) is not read again: for servers, which name the
  /// same LoRAs request after request. Thread-safe.
  std::shared_ptr<const image::ImageLora> cached_lora(const std::string& path,
                                                      const image::LoraLoadOptions& o = {}) const;
  const image::LoraTargets& lora_targets() const { return *targets_; }

 private:
  image::Pipeline pl_;
  std::string model_name_;
  diffusion::SchedulerConfig sched_cfg_;
  std::string default_scheduler_, default_scheduler_note_;
  int64_t downscale_ = 8;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<WeightLoader> wl_;
  std::unique_ptr<image::PromptEncoder> text_;
  std::unique_ptr<image::UNet2DCondition> unet_;
  std::unique_ptr<image::AutoencoderKL> vae_;
  DeviceOptions device_opts_;
  std::unique_ptr<image::LoraTargets> targets_;
  /// The models of the last LoRA set painted with (paint() is const: one
  /// at a time per Painter; the mutex keeps two callers from racing anyway).
  struct Adapted;
  mutable std::unique_ptr<Adapted> adapted_;
  mutable std::mutex adapted_mu_;
  mutable std::mutex loras_mu_;
  mutable std::map<std::string, std::shared_ptr<const image::ImageLora>> loras_;  // by path, options, size, mtime
  const Adapted& adapted(const std::vector<image::ImageLoraUse>& uses) const;
};

/// The pipeline's default guidance scale (diffusers' __call__): 7.5 for
/// StableDiffusion, 5.0 for StableDiffusionXL.
double default_cfg(image::PipelineClass c);

/// kvad's scheduler name for a scheduler_config.json `_class_name`
/// ("EulerDiscreteScheduler" -> "euler", "DPMSolverMultistepScheduler" ->
/// "dpm++2m"; "dpm++2m_karras" when the config sets use_karras_sigmas), or ""
/// for a class kvad does not run.
std::string scheduler_for_class(const diffusion::SchedulerConfig& cfg);

}  // namespace kvad
