// A pipeline's `scheduler/scheduler_config.json`, read as diffusers reads it
// when a user swaps the scheduler in
// (`EulerDiscreteScheduler.from_config(pipe.scheduler.config)`): a key the
// file holds is used, a key it does not hold takes the chosen scheduler
// class's own default (diffusers' `_use_default_values`), whatever class the
// file names in `_class_name`.
//
// Source: diffusers 0.42 schedulers/scheduling_euler_discrete.py,
// scheduling_euler_ancestral_discrete.py, scheduling_ddim.py,
// scheduling_dpmsolver_multistep.py (__init__ defaults), and
// configuration_utils.py (extract_init_dict).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvad::diffusion {

/// The schedulers kvad runs, by diffusers class.
enum class SchedulerKind {
  Euler,             ///< EulerDiscreteScheduler (A1111 "Euler")
  EulerAncestral,    ///< EulerAncestralDiscreteScheduler ("Euler a")
  DDIM,              ///< DDIMScheduler ("DDIM")
  DPMSolverMultistep ///< DPMSolverMultistepScheduler, dpmsolver++ ("DPM++ 2M")
};

/// A scheduler as a user names it: a kind, and Karras sigmas forced on
/// (`use_karras_sigmas=True` passed to from_config) or left to the file.
struct SchedulerChoice {
  SchedulerKind kind = SchedulerKind::Euler;
  bool karras = false;
};

/// Parses kvad's scheduler names: "euler", "euler_a", "ddim", "dpm++2m",
/// "dpm++2m_karras" (also "dpmpp_2m", "dpmpp_2m_karras", "euler-ancestral",
/// and A1111's "Euler", "Euler a", "DDIM", "DPM++ 2M", "DPM++ 2M Karras").
/// Throws kvad::Error listing the names for anything else.
SchedulerChoice parse_scheduler_name(std::string_view name);
/// kvad's name of a choice ("dpm++2m_karras").
std::string scheduler_name(const SchedulerChoice& c);
/// AUTOMATIC1111's sampler name ("DPM++ 2M"; Karras goes to its "Schedule type").
std::string a1111_sampler_name(SchedulerKind k);
/// kvad's names, in order, for help texts and /sdapi/v1/samplers.
const std::vector<std::string>& scheduler_names();

enum class BetaSchedule { Linear, ScaledLinear, SquaredCosCapV2, Trained };
enum class Prediction { Epsilon, VPrediction, Sample };
enum class TimestepSpacing { Linspace, Leading, Trailing };
enum class Interpolation { Linear, LogLinear };
enum class SolverType { Midpoint, Heun };

/// Every setting one scheduler reads, resolved for its class.
struct SchedulerParams {
  SchedulerChoice choice;
  int64_t num_train_timesteps = 1000;
  double beta_start = 0.0001, beta_end = 0.02;
  BetaSchedule beta_schedule = BetaSchedule::Linear;
  std::vector<float> trained_betas;  ///< BetaSchedule::Trained: num_train_timesteps values
  Prediction prediction_type = Prediction::Epsilon;
  TimestepSpacing timestep_spacing = TimestepSpacing::Linspace;
  int64_t steps_offset = 0;
  bool rescale_betas_zero_snr = false;
  // Euler, DPM-Solver
  Interpolation interpolation_type = Interpolation::Linear;  ///< Euler only
  bool use_karras_sigmas = false;
  std::optional<double> sigma_min, sigma_max;  ///< Karras range override (Euler, DPM-Solver)
  bool final_sigma_min = false;                ///< final_sigmas_type "sigma_min" (else "zero")
  // DDIM
  bool clip_sample = true;
  double clip_sample_range = 1.0;
  bool set_alpha_to_one = true;
  // DPM-Solver
  int solver_order = 2;
  SolverType solver_type = SolverType::Midpoint;
  bool lower_order_final = true;
  bool euler_at_final = false;
};

/// scheduler_config.json as read, with its name for error messages.
class SchedulerConfig {
 public:
  /// Parses the file's text. Throws kvad::Error naming `name` for bad JSON,
  /// a top level that is not an object, or more than 1 MiB.
  static SchedulerConfig parse(std::string_view json_text, const std::string& name);
  /// Reads and parses the file at `path`; kvad::Error naming it.
  static SchedulerConfig from_file(const std::string& path);
  /// An empty config: every setting the chosen class's default.
  SchedulerConfig() = default;

  /// The settings `choice` runs with. Throws kvad::Error naming the file and
  /// the key for a value of the wrong type or out of range (num_train_timesteps
  /// 2..10000, betas in [0, 1], steps_offset up to num_train_timesteps), an unknown
  /// beta_schedule / prediction_type / timestep_spacing / interpolation_type /
  /// solver_type / final_sigmas_type, and for options kvad does not implement
  /// (thresholding, continuous timesteps, exponential, beta, lu or flow
  /// sigmas, algorithm types other than dpmsolver++, learned variance, a
  /// finite lambda_min_clipped, solver_order 3).
  SchedulerParams resolve(const SchedulerChoice& choice) const;

  const std::string& class_name() const { return class_name_; }  ///< "_class_name" ("" when absent)
  const std::string& name() const { return name_; }
  /// The parsed file (an object), for schedulers that read keys of their own (flow_match.h).
  const nlohmann::json& raw() const { return json_; }

 private:
  nlohmann::json json_ = nlohmann::json::object();
  std::string name_ = "scheduler_config.json";
  std::string class_name_;
};

}  // namespace kvad::diffusion
