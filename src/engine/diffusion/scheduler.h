// Diffusion schedulers: the part of a picture pipeline that has no weights.
// A scheduler turns each prediction of the denoiser into the next latent; it
// sees the model only as a callback (stable-diffusion.cpp's
// sample_euler(denoise_cb) shape), so the same schedulers serve every UNet
// or transformer denoiser. Latents are plain float vectors of any size.
//
// Each scheduler reproduces its diffusers class (0.42): set_timesteps (the
// timesteps and sigmas, equal to diffusers' for the same config), its
// scale_model_input and its step(), with the same float32 arithmetic in the
// same order, so a run matches diffusers' to float rounding.
// Source: diffusers schedulers/scheduling_euler_discrete.py,
// scheduling_euler_ancestral_discrete.py, scheduling_ddim.py,
// scheduling_dpmsolver_multistep.py; Karras et al. 2022 (sigmas), Song et
// al. 2020 (DDIM), Lu et al. 2022 (DPM-Solver++).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "engine/diffusion/scheduler_config.h"

namespace kvad::diffusion {

class TorchGenerator;

/// The training noise schedule as diffusers' schedulers build it in float32
/// (torch.linspace, 1 - beta, torch.cumprod, ((1 - a) / a) ** 0.5), indexed by
/// train timestep 0..num_train_timesteps-1.
struct TrainSchedule {
  std::vector<float> betas;
  std::vector<float> alphas_cumprod;
  std::vector<float> sigmas;  ///< sqrt((1 - alphas_cumprod) / alphas_cumprod), ascending with t
};
/// `last_alpha_tiny`: rescale_betas_zero_snr sets the last alphas_cumprod to
/// 2^-24 (Euler, Euler ancestral, DPM-Solver do; DDIM does not).
TrainSchedule train_schedule(const SchedulerParams& p, bool last_alpha_tiny);

/// The model as a scheduler sees it: writes the model's raw output
/// (epsilon, v or the clean sample, as the config's prediction_type says)
/// for the already scaled input `x` at `timestep` into `out` (same size).
using DenoiseFn = std::function<void(std::span<const float> x, float timestep, std::span<float> out)>;

class Scheduler {
 public:
  virtual ~Scheduler() = default;
  /// The timesteps the denoiser is called at, in order (diffusers'
  /// scheduler.timesteps; integer-valued for DDIM and DPM-Solver).
  const std::vector<float>& timesteps() const { return timesteps_; }
  /// diffusers' scheduler.sigmas after set_timesteps (steps + 1 values, or
  /// steps + 2 for Euler's log_linear interpolation, as diffusers has it);
  /// empty for DDIM, which has none.
  const std::vector<float>& sigmas() const { return sigmas_; }
  size_t steps() const { return timesteps_.size(); }
  /// The factor the initial noise is multiplied by (init_noise_sigma).
  float init_noise_sigma() const { return init_noise_sigma_; }
  /// Whether step `i` consumes noise (ancestral steps; DDIM with eta > 0).
  virtual bool needs_noise(size_t i) const { (void)i; return false; }
  /// scale_model_input: `out` = the denoiser's input for `sample` at step `i`.
  virtual void scale_model_input(std::span<const float> sample, size_t i, std::span<float> out) const;
  /// step(): `sample` (in place) from step i's latent to step i + 1's, given
  /// the denoiser's `model_output` at timesteps()[i] and, when needs_noise(i),
  /// standard normal `noise` of the same size (diffusers draws it with
  /// randn_tensor from the pipeline's generator). Steps run in order from 0;
  /// DPM-Solver keeps its previous outputs between calls. Throws kvad::Error
  /// for a step out of order or sizes that differ.
  virtual void step(size_t i, std::span<const float> model_output, std::span<float> sample,
                    std::span<const float> noise = {}) = 0;

 protected:
  void check_step(size_t i, size_t n_out, size_t n_sample, size_t n_noise);
  SchedulerParams p_;
  TrainSchedule train_;
  std::vector<float> timesteps_, sigmas_;
  float init_noise_sigma_ = 1.0f;
  size_t next_step_ = 0;
};

/// The scheduler `p` describes, set to `num_inference_steps` steps (1 to
/// p.num_train_timesteps). Throws kvad::Error for a step count out of range
/// or a schedule diffusers would fail on (a timestep past the train range).
std::unique_ptr<Scheduler> make_scheduler(const SchedulerParams& p, int64_t num_inference_steps);

/// The denoising loop of a diffusers pipeline, without the model: for each
/// step, x_in = scale_model_input(latent), out = denoise(x_in, t), and
/// latent = step(out), drawing the step's noise (when needed) from `gen` as
/// diffusers draws it from the pipeline's generator. `latent` holds the
/// initial noise already multiplied by init_noise_sigma(). `on_step(i)` is
/// called after each step (progress, previews); may be empty. Throws
/// kvad::Error when a step needs noise and `gen` is null.
void run_denoising(Scheduler& s, std::span<float> latent, const DenoiseFn& denoise, TorchGenerator* gen,
                   const std::function<void(size_t)>& on_step = {});

}  // namespace kvad::diffusion
