// The FLUX.1 text-to-image pipeline the Painter dispatches to for a
// FluxPipeline checkpoint: diffusers' FluxPipeline.__call__ (0.42) for a text
// prompt, step for step:
//   pooled = CLIPTextModel(tokenizer(prompt, 77 padded)).pooler_output          [768]
//   hidden = T5EncoderModel(tokenizer_2(prompt, max_sequence_length 512 padded))  [512, 4096]
//   latents = randn((n, C, 2·(H // 16), 2·(W // 16)), torch.Generator("cpu").manual_seed(seed)),
//             packed into 2×2 patches [n, h/2 · w/2, 4C]; img_ids (0, row, col), txt_ids 0
//   sigmas = linspace(1, 1/steps, steps), mu = calculate_shift(h/2 · w/2)   (engine/diffusion/flow_match.h)
//   per timestep t: v = transformer(latents, t / 1000, guidance (dev), pooled, hidden)
//                   latents = latents + (σ_next − σ) · v
//   image = vae.decode(unpack(latents) / scaling_factor + shift_factor); bytes as SD's
// The request's cfg is FluxPipeline's guidance_scale (default 3.5), an input
// of the guidance-distilled transformer (guidance_embeds: FLUX.1-dev) and
// unused without it (FLUX.1-schnell); there is no classifier-free guidance
// (true_cfg_scale 1), so a negative prompt is not used.
#pragma once
#include <atomic>
#include <memory>
#include <string>

#include "engine/diffusion/flow_match.h"
#include "engine/painter.h"

namespace kvad {

class Tokenizer;
class ClipTokenizer;
namespace image {
class ClipTextEncoder;
class T5Encoder;
class FluxTransformer2D;
class AutoencoderKL;
}  // namespace image

/// FluxPipeline's defaults: guidance_scale 3.5, max_sequence_length 512,
/// default_sample_size 128 (× the VAE's 8: 1024 pixels).
inline constexpr double kFluxDefaultGuidance = 3.5;
inline constexpr int kFluxMaxSequenceLength = 512;

class FluxPainter {
 public:
  /// Takes the CLIP text encoder, T5 encoder, transformer and VAE from `wl`
  /// (the pipeline's loader; the caller calls finish()). Throws kvad::Error
  /// as their constructors and tokenizers do, for a T5 config that does not
  /// parse or whose d_model is not the transformer's joint_attention_dim,
  /// and for a scheduler config flow_match_params refuses.
  FluxPainter(const image::Pipeline& pl, WeightLoader& wl);
  ~FluxPainter();

  /// Painter::settle for FLUX: width and height default to 1024 and must be
  /// multiples of 16; cfg defaults to 3.5; the scheduler is "euler" (its
  /// flow-matching form) and no other. Throws kvad::Error naming the field.
  PaintRequest settle(const PaintRequest& r) const;
  /// Painter::paint for a settled request; `model_name` goes into the metadata.
  PaintResult paint(const PaintRequest& r, const PaintCallback& progress, const std::atomic<bool>* cancel,
                    const std::string& model_name) const;

 private:
  const image::Pipeline& pl_;
  diffusion::FlowMatchParams sched_;
  std::unique_ptr<ClipTokenizer> clip_tok_;
  std::unique_ptr<Tokenizer> t5_tok_;
  std::unique_ptr<image::ClipTextEncoder> clip_;
  std::unique_ptr<image::T5Encoder> t5_;
  std::unique_ptr<image::FluxTransformer2D> transformer_;
  std::unique_ptr<image::AutoencoderKL> vae_;
};

}  // namespace kvad
