// Flow-matching Euler (diffusers' FlowMatchEulerDiscreteScheduler, 0.42
// schedulers/scheduling_flow_match_euler_discrete.py, as FluxPipeline.__call__
// sets it up), the scheduler of FLUX.1 (Esser et al. 2024, "Scaling
// Rectified Flow Transformers for High-Resolution Image Synthesis": the
// model predicts the velocity v = noise − x0 along x_σ = (1 − σ)·x0 + σ·noise).
//
//   sigmas   = linspace(1, 1/n, n)                       (FluxPipeline; float64, then float32)
//   mu       = image_seq_len · m + b, m = (max_shift − base_shift) / (max_image_seq_len − base_image_seq_len),
//              b = base_shift − m · base_image_seq_len    (FluxPipeline's calculate_shift)
//   use_dynamic_shifting: σ ← e^mu / (e^mu + (1/σ − 1))  (time_shift "exponential", sigma 1)
//   else:                 σ ← shift·σ / (1 + (shift − 1)·σ)
//   timesteps = σ · num_train_timesteps; sigmas gets a final 0
//   step i:   x ← x + (σ_{i+1} − σ_i) · v
// Arithmetic in float32 as numpy and torch do it (python scalars weak).
#pragma once
#include <cstdint>
#include <span>

#include "engine/diffusion/scheduler.h"
#include "engine/diffusion/scheduler_config.h"

namespace kvad::diffusion {

/// The keys of scheduler_config.json FlowMatchEulerDiscreteScheduler reads,
/// with its __init__ defaults.
struct FlowMatchParams {
  int64_t num_train_timesteps = 1000;
  double shift = 1.0;
  bool use_dynamic_shifting = false;
  double base_shift = 0.5, max_shift = 1.15;
  int64_t base_image_seq_len = 256, max_image_seq_len = 4096;
};

/// Reads the file's keys. Throws kvad::Error naming the file and key for a
/// value of the wrong type or out of range (shift > 0; num_train_timesteps
/// 1..10000; base_image_seq_len < max_image_seq_len), and for options kvad
/// does not implement (invert_sigmas, shift_terminal, karras / exponential /
/// beta sigmas, time_shift_type other than "exponential", stochastic_sampling).
FlowMatchParams flow_match_params(const SchedulerConfig& cfg);

/// FluxPipeline's calculate_shift(image_seq_len, base_image_seq_len,
/// max_image_seq_len, base_shift, max_shift), in double.
double flux_mu(const FlowMatchParams& p, int64_t image_seq_len);

/// The scheduler for `num_inference_steps` (>= 1) with FluxPipeline's sigmas
/// and `mu` (used only with use_dynamic_shifting). timesteps() are the
/// values diffusers passes to the pipeline loop (the transformer gets them
/// / 1000); sigmas() has steps + 1 values. init_noise_sigma is 1 and
/// scale_model_input the identity. Throws kvad::Error for a step count < 1.
std::unique_ptr<Scheduler> make_flow_match(const FlowMatchParams& p, int64_t num_inference_steps, double mu);

}  // namespace kvad::diffusion
