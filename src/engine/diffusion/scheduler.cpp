// The four schedulers. Per-element updates are written as torch evaluates
// the diffusers expressions: each Python operator one float32 operation,
// 0-d tensors (sigma, alpha) as float scalars computed the same way, left to
// right. Built with -ffp-contract=off so no multiply-add is fused that torch
// rounds twice.
#include "engine/diffusion/scheduler.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "base/error.h"
#include "engine/diffusion/schedule_math.h"
#include "engine/diffusion/torch_rng.h"

namespace kvad::diffusion {

namespace {

constexpr double kPi = 3.14159265358979323846;

float sqrt_f(float x) { return std::sqrt(x); }

// betas_for_alpha_bar(T) with the cosine alpha_bar (Nichol & Dhariwal 2021), in double, then float32.
std::vector<float> squaredcos_cap_v2(int64_t T) {
  auto alpha_bar = [](double t) {
    const double c = std::cos((t + 0.008) / 1.008 * kPi / 2);
    return c * c;
  };
  std::vector<float> b(static_cast<size_t>(T));
  for (int64_t i = 0; i < T; ++i) {
    const double t1 = static_cast<double>(i) / static_cast<double>(T);
    const double t2 = static_cast<double>(i + 1) / static_cast<double>(T);
    b[static_cast<size_t>(i)] = static_cast<float>(std::min(1 - alpha_bar(t2) / alpha_bar(t1), 0.999));
  }
  return b;
}

// torch.cumprod on a float32 CPU tensor: accumulated in double, stored as float.
std::vector<float> cumprod(const std::vector<float>& a) {
  std::vector<float> out(a.size());
  double acc = 1;
  for (size_t i = 0; i < a.size(); ++i) {
    acc *= static_cast<double>(a[i]);
    out[i] = static_cast<float>(acc);
  }
  return out;
}

// rescale_zero_terminal_snr (Lin et al. 2023, algorithm 1), float32 as torch does it.
std::vector<float> rescale_zero_terminal_snr(const std::vector<float>& betas) {
  std::vector<float> alphas(betas.size());
  for (size_t i = 0; i < betas.size(); ++i) alphas[i] = 1.0f - betas[i];
  std::vector<float> s = cumprod(alphas);
  for (float& v : s) v = sqrt_f(v);
  const float s0 = s.front(), sT = s.back();
  const float scale = s0 / (s0 - sT);
  for (float& v : s) v = (v - sT) * scale;
  std::vector<float> bar(s.size());
  for (size_t i = 0; i < s.size(); ++i) bar[i] = s[i] * s[i];
  std::vector<float> out(s.size());
  out[0] = 1.0f - bar[0];
  for (size_t i = 1; i < s.size(); ++i) out[i] = 1.0f - bar[i] / bar[i - 1];
  return out;
}

// v_prediction's x0 in the sigma (Euler) parameterization:
// model_output * (-sigma / (sigma**2 + 1) ** 0.5) + sample / (sigma**2 + 1).
struct VPredScalars {
  float a, b;
  explicit VPredScalars(float sigma) {
    const float s2p1 = sigma * sigma + 1.0f;
    a = -sigma / sqrt_f(s2p1);
    b = s2p1;
  }
};

std::vector<float> reversed_f32(const std::vector<double>& v) {
  std::vector<float> out;
  for (size_t i = v.size(); i-- > 0;) out.push_back(static_cast<float>(v[i]));
  return out;
}

// Euler and Euler ancestral timesteps (float32), diffusers' set_timesteps.
std::vector<float> euler_timesteps(const SchedulerParams& p, int64_t n) {
  const int64_t T = p.num_train_timesteps;
  std::vector<float> ts;
  switch (p.timestep_spacing) {
    case TimestepSpacing::Linspace:
      ts = reversed_f32(math::np_linspace(0, static_cast<double>(T - 1), n));
      break;
    case TimestepSpacing::Leading: {
      const int64_t ratio = T / n;
      for (int64_t i = n - 1; i >= 0; --i) ts.push_back(static_cast<float>(i * ratio) + static_cast<float>(p.steps_offset));
      break;
    }
    case TimestepSpacing::Trailing:
      for (double v : math::np_arange(static_cast<double>(T), 0, -static_cast<double>(T) / static_cast<double>(n)))
        ts.push_back(static_cast<float>(std::nearbyint(v)) - 1.0f);
      break;
  }
  return ts;
}

// DDIM and DPM-Solver timesteps (int64 in diffusers).
std::vector<float> integer_timesteps(const SchedulerParams& p, int64_t n, bool dpm) {
  const int64_t T = p.num_train_timesteps;
  std::vector<float> ts;
  switch (p.timestep_spacing) {
    case TimestepSpacing::Linspace: {
      const std::vector<double> v = math::np_linspace(0, static_cast<double>(T - 1), dpm ? n + 1 : n);
      for (size_t i = v.size(); i-- > (dpm ? 1 : 0);) ts.push_back(static_cast<float>(std::nearbyint(v[i])));
      break;
    }
    case TimestepSpacing::Leading: {
      const int64_t ratio = dpm ? T / (n + 1) : T / n;
      for (int64_t i = dpm ? n : n - 1; i >= (dpm ? 1 : 0); --i) ts.push_back(static_cast<float>(i * ratio + p.steps_offset));
      break;
    }
    case TimestepSpacing::Trailing:
      for (double v : math::np_arange(static_cast<double>(T), 0, -static_cast<double>(T) / static_cast<double>(n)))
        ts.push_back(static_cast<float>(static_cast<int64_t>(std::nearbyint(v)) - 1));
      break;
  }
  return ts;
}

std::vector<float> log_table(const std::vector<float>& sigmas) {
  std::vector<float> l(sigmas.size());
  for (size_t i = 0; i < sigmas.size(); ++i) l[i] = static_cast<float>(std::log(static_cast<double>(sigmas[i])));
  return l;
}

float final_sigma(const SchedulerParams& p, const TrainSchedule& tr) {
  if (!p.final_sigma_min) return 0.0f;
  const float a0 = tr.alphas_cumprod[0];
  return sqrt_f((1.0f - a0) / a0);
}

float max_of(const std::vector<float>& v) { return *std::max_element(v.begin(), v.end()); }

class EulerBase : public Scheduler {
 protected:
  void set_init_noise_sigma() {
    const float m = max_of(sigmas_);
    init_noise_sigma_ = p_.timestep_spacing == TimestepSpacing::Leading ? sqrt_f(m * m + 1.0f) : m;
  }
  // pred_original_sample for prediction_type at sigma.
  float x0(float sample, float out, float sigma) const {
    switch (p_.prediction_type) {
      case Prediction::Epsilon: return sample - sigma * out;
      case Prediction::VPrediction: {
        const VPredScalars v(sigma);
        return out * v.a + sample / v.b;
      }
      case Prediction::Sample: return out;
    }
    return out;
  }
};

class Euler final : public EulerBase {
 public:
  Euler(const SchedulerParams& p, int64_t n) {
    p_ = p;
    train_ = train_schedule(p, true);
    std::vector<float> ts = euler_timesteps(p, n);
    const std::vector<float> log_sigmas = log_table(train_.sigmas);
    std::vector<double> sig;
    if (p.interpolation_type == Interpolation::Linear) {
      for (float t : ts) sig.push_back(math::np_interp_index(t, train_.sigmas));
    } else {
      const std::vector<float> l = math::torch_linspace_f32(log_sigmas.back(), log_sigmas.front(), n + 1);
      for (float v : l) sig.push_back(std::exp(v));
    }
    if (p.use_karras_sigmas) {
      sig = math::karras_sigmas(p.sigma_min.value_or(sig.back()), p.sigma_max.value_or(sig.front()), n);
      ts.clear();
      for (double s : sig) ts.push_back(static_cast<float>(math::sigma_to_t(s, log_sigmas)));
    }
    for (double s : sig) sigmas_.push_back(static_cast<float>(s));
    sigmas_.push_back(final_sigma(p, train_));
    timesteps_ = std::move(ts);
    set_init_noise_sigma();
  }

  void step(size_t i, std::span<const float> out, std::span<float> sample, std::span<const float> noise) override {
    check_step(i, out.size(), sample.size(), noise.size());
    const float sigma = sigmas_[i];
    const float sigma_hat = sigma * 1.0f;  // gamma = 0: s_churn is 0 in the pipelines
    const float dt = sigmas_[i + 1] - sigma_hat;
    for (size_t k = 0; k < sample.size(); ++k) {
      const float x = sample[k];
      const float pred = p_.prediction_type == Prediction::Epsilon ? x - sigma_hat * out[k] : x0(x, out[k], sigma);
      const float derivative = (x - pred) / sigma_hat;
      sample[k] = x + derivative * dt;
    }
  }
};

class EulerAncestral final : public EulerBase {
 public:
  EulerAncestral(const SchedulerParams& p, int64_t n) {
    p_ = p;
    train_ = train_schedule(p, true);
    timesteps_ = euler_timesteps(p, n);
    for (float t : timesteps_) sigmas_.push_back(static_cast<float>(math::np_interp_index(t, train_.sigmas)));
    sigmas_.push_back(0.0f);
    set_init_noise_sigma();
  }
  bool needs_noise(size_t) const override { return true; }

  void step(size_t i, std::span<const float> out, std::span<float> sample, std::span<const float> noise) override {
    check_step(i, out.size(), sample.size(), noise.size());
    const float sigma = sigmas_[i], sigma_to = sigmas_[i + 1];
    const float to2 = sigma_to * sigma_to, from2 = sigma * sigma;
    const float sigma_up = sqrt_f(to2 * (from2 - to2) / from2);
    const float sigma_down = sqrt_f(to2 - sigma_up * sigma_up);
    const float dt = sigma_down - sigma;
    for (size_t k = 0; k < sample.size(); ++k) {
      const float x = sample[k];
      const float pred = x0(x, out[k], sigma);
      const float derivative = (x - pred) / sigma;
      const float prev = x + derivative * dt;
      sample[k] = prev + noise[k] * sigma_up;
    }
  }
};

class DDIM final : public Scheduler {
 public:
  DDIM(const SchedulerParams& p, int64_t n) {
    p_ = p;
    train_ = train_schedule(p, false);
    timesteps_ = integer_timesteps(p, n, false);
    final_alpha_ = p.set_alpha_to_one ? 1.0f : train_.alphas_cumprod[0];
    ratio_ = p.num_train_timesteps / n;
    for (float t : timesteps_)
      if (t < 0 || t >= static_cast<float>(p.num_train_timesteps))
        throw Error("DDIM: timestep " + std::to_string(static_cast<int64_t>(t)) + " is outside the " +
                    std::to_string(p.num_train_timesteps) + " train timesteps (steps_offset too large?)");
  }
  void scale_model_input(std::span<const float> sample, size_t, std::span<float> out) const override {
    std::copy(sample.begin(), sample.end(), out.begin());
  }

  void step(size_t i, std::span<const float> out, std::span<float> sample, std::span<const float> noise) override {
    check_step(i, out.size(), sample.size(), noise.size());
    const auto t = static_cast<int64_t>(timesteps_[i]);
    const int64_t prev_t = t - ratio_;
    const float a_t = train_.alphas_cumprod[static_cast<size_t>(t)];
    const float a_prev = prev_t >= 0 ? train_.alphas_cumprod[static_cast<size_t>(prev_t)] : final_alpha_;
    const float b_t = 1.0f - a_t;
    const float sa = sqrt_f(a_t), sb = sqrt_f(b_t);
    const float variance = (1.0f - a_prev) / b_t * (1.0f - a_t / a_prev);
    const float std_dev = 0.0f * sqrt_f(variance);  // eta = 0, as the pipelines call it
    const float dir_scale = sqrt_f(1.0f - a_prev - std_dev * std_dev);
    const float sa_prev = sqrt_f(a_prev);
    const float r = static_cast<float>(p_.clip_sample_range);
    for (size_t k = 0; k < sample.size(); ++k) {
      const float x = sample[k], m = out[k];
      float x0, eps;
      switch (p_.prediction_type) {
        case Prediction::Epsilon:
          x0 = (x - sb * m) / sa;
          eps = m;
          break;
        case Prediction::Sample:
          x0 = m;
          eps = (x - sa * x0) / sb;
          break;
        case Prediction::VPrediction:
        default:
          x0 = sa * x - sb * m;
          eps = sa * m + sb * x;
          break;
      }
      if (p_.clip_sample) x0 = std::clamp(x0, -r, r);
      sample[k] = sa_prev * x0 + dir_scale * eps;
    }
  }

 private:
  float final_alpha_ = 1.0f;
  int64_t ratio_ = 1;
};

class DPMSolverMultistep final : public Scheduler {
 public:
  DPMSolverMultistep(const SchedulerParams& p, int64_t n) {
    p_ = p;
    train_ = train_schedule(p, true);
    timesteps_ = integer_timesteps(p, n, true);
    const std::vector<float> log_sigmas = log_table(train_.sigmas);
    std::vector<double> sig;
    if (p.use_karras_sigmas) {
      sig = math::karras_sigmas(p.sigma_min.value_or(train_.sigmas.front()),
                                p.sigma_max.value_or(train_.sigmas.back()), n);
      timesteps_.clear();
      for (double s : sig) {
        const double t = math::sigma_to_t(s, log_sigmas);
        timesteps_.push_back(static_cast<float>(static_cast<int64_t>(
            p.beta_schedule == BetaSchedule::SquaredCosCapV2 ? t : std::nearbyint(t))));
      }
    } else {
      for (float t : timesteps_) sig.push_back(math::np_interp_index(t, train_.sigmas));
    }
    for (double s : sig) sigmas_.push_back(static_cast<float>(s));
    sigmas_.push_back(final_sigma(p, train_));
    init_noise_sigma_ = 1.0f;
  }
  void scale_model_input(std::span<const float> sample, size_t, std::span<float> out) const override {
    std::copy(sample.begin(), sample.end(), out.begin());
  }

  void step(size_t i, std::span<const float> out, std::span<float> sample, std::span<const float> noise) override {
    check_step(i, out.size(), sample.size(), noise.size());
    const size_t n = timesteps_.size();
    const bool lower_order_final =
        i == n - 1 && (p_.euler_at_final || (p_.lower_order_final && n < 15) || !p_.final_sigma_min);
    // convert_model_output: the data prediction x0 (dpmsolver++).
    const Sig s0 = sig(sigmas_[i]);
    std::vector<float> x0(sample.size());
    for (size_t k = 0; k < sample.size(); ++k) {
      switch (p_.prediction_type) {
        case Prediction::Epsilon: x0[k] = (sample[k] - s0.sigma * out[k]) / s0.alpha; break;
        case Prediction::Sample: x0[k] = out[k]; break;
        case Prediction::VPrediction: x0[k] = s0.alpha * sample[k] - s0.sigma * out[k]; break;
      }
    }
    prev_x0_.swap(last_x0_);
    last_x0_ = std::move(x0);
    const Sig st = sig(sigmas_[i + 1]);
    const float lambda_t = st.lambda(), lambda_s0 = s0.lambda();
    const float h = lambda_t - lambda_s0;
    const float em1 = std::exp(-h) - 1.0f;
    const float c_sample = st.sigma / s0.sigma;
    const float c0 = st.alpha * em1;
    if (p_.solver_order == 1 || lower_order_nums_ < 1 || lower_order_final) {
      for (size_t k = 0; k < sample.size(); ++k) sample[k] = c_sample * sample[k] - c0 * last_x0_[k];
    } else {
      const Sig s1 = sig(sigmas_[i - 1]);
      const float h0 = lambda_s0 - s1.lambda();
      const float r0 = h0 / h;
      const float inv_r0 = 1.0f / r0;
      const float c1 = p_.solver_type == SolverType::Midpoint ? 0.5f * (st.alpha * em1) : st.alpha * (em1 / h + 1.0f);
      for (size_t k = 0; k < sample.size(); ++k) {
        const float d1 = inv_r0 * (last_x0_[k] - prev_x0_[k]);
        const float a = c_sample * sample[k] - c0 * last_x0_[k];
        sample[k] = p_.solver_type == SolverType::Midpoint ? a - c1 * d1 : a + c1 * d1;
      }
    }
    if (lower_order_nums_ < p_.solver_order) ++lower_order_nums_;
  }

 private:
  // _sigma_to_alpha_sigma_t: alpha_t = 1 / (sigma**2 + 1) ** 0.5, sigma_t = sigma * alpha_t.
  struct Sig {
    float alpha, sigma;
    float lambda() const { return std::log(alpha) - std::log(sigma); }
  };
  static Sig sig(float sigma) {
    const float alpha = 1.0f / sqrt_f(sigma * sigma + 1.0f);
    return {alpha, sigma * alpha};
  }
  std::vector<float> last_x0_, prev_x0_;
  int lower_order_nums_ = 0;
};

}  // namespace

TrainSchedule train_schedule(const SchedulerParams& p, bool last_alpha_tiny) {
  const int64_t T = p.num_train_timesteps;
  TrainSchedule tr;
  switch (p.beta_schedule) {
    case BetaSchedule::Linear: tr.betas = math::torch_linspace_f32(p.beta_start, p.beta_end, T); break;
    case BetaSchedule::ScaledLinear:
      tr.betas = math::torch_linspace_f32(std::sqrt(p.beta_start), std::sqrt(p.beta_end), T);
      for (float& b : tr.betas) b = b * b;
      break;
    case BetaSchedule::SquaredCosCapV2: tr.betas = squaredcos_cap_v2(T); break;
    case BetaSchedule::Trained: tr.betas = p.trained_betas; break;
  }
  if (p.rescale_betas_zero_snr) tr.betas = rescale_zero_terminal_snr(tr.betas);
  std::vector<float> alphas(tr.betas.size());
  for (size_t i = 0; i < alphas.size(); ++i) alphas[i] = 1.0f - tr.betas[i];
  tr.alphas_cumprod = cumprod(alphas);
  if (p.rescale_betas_zero_snr && last_alpha_tiny) tr.alphas_cumprod.back() = 1.0f / 16777216.0f;
  tr.sigmas.resize(alphas.size());
  for (size_t i = 0; i < alphas.size(); ++i) {
    const float a = tr.alphas_cumprod[i];
    tr.sigmas[i] = sqrt_f((1.0f - a) / a);
  }
  return tr;
}

void Scheduler::scale_model_input(std::span<const float> sample, size_t i, std::span<float> out) const {
  const float c = sqrt_f(sigmas_.at(i) * sigmas_.at(i) + 1.0f);
  for (size_t k = 0; k < sample.size(); ++k) out[k] = sample[k] / c;
}

void Scheduler::check_step(size_t i, size_t n_out, size_t n_sample, size_t n_noise) {
  if (i != next_step_)
    throw Error("scheduler: step " + std::to_string(i) + " out of order (next is " + std::to_string(next_step_) + ")");
  if (i >= timesteps_.size())
    throw Error("scheduler: step " + std::to_string(i) + " past the last of " + std::to_string(timesteps_.size()));
  if (n_out != n_sample)
    throw Error("scheduler: model output of " + std::to_string(n_out) + " values for a latent of " +
                std::to_string(n_sample));
  if (needs_noise(i) && n_noise != n_sample)
    throw Error("scheduler: step " + std::to_string(i) + " needs " + std::to_string(n_sample) +
                " noise values, got " + std::to_string(n_noise));
  ++next_step_;
}

std::unique_ptr<Scheduler> make_scheduler(const SchedulerParams& p, int64_t n) {
  if (n < 1 || n > p.num_train_timesteps)
    throw Error("scheduler: " + std::to_string(n) + " steps is out of range (1 to " +
                std::to_string(p.num_train_timesteps) + ")");
  if (p.beta_schedule == BetaSchedule::Trained && static_cast<int64_t>(p.trained_betas.size()) != p.num_train_timesteps)
    throw Error("scheduler: trained_betas holds " + std::to_string(p.trained_betas.size()) + " values for " +
                std::to_string(p.num_train_timesteps) + " train timesteps");
  std::unique_ptr<Scheduler> s;
  switch (p.choice.kind) {
    case SchedulerKind::Euler: s = std::make_unique<Euler>(p, n); break;
    case SchedulerKind::EulerAncestral: s = std::make_unique<EulerAncestral>(p, n); break;
    case SchedulerKind::DDIM: s = std::make_unique<DDIM>(p, n); break;
    case SchedulerKind::DPMSolverMultistep: s = std::make_unique<DPMSolverMultistep>(p, n); break;
  }
  if (s->steps() == 0) throw Error("scheduler: the schedule has no steps");
  if (!s->sigmas().empty() && s->sigmas().size() < s->steps() + 1)
    throw Error("scheduler: " + std::to_string(s->steps()) + " timesteps but " + std::to_string(s->sigmas().size()) +
                " sigmas");
  return s;
}

void run_denoising(Scheduler& s, std::span<float> latent, const DenoiseFn& denoise, TorchGenerator* gen,
                   const std::function<void(size_t)>& on_step) {
  std::vector<float> x_in(latent.size()), out(latent.size()), noise;
  for (size_t i = 0; i < s.steps(); ++i) {
    s.scale_model_input(latent, i, x_in);
    denoise(x_in, s.timesteps()[i], out);
    if (s.needs_noise(i)) {
      if (!gen) throw Error("scheduler: step " + std::to_string(i) + " needs noise and no generator was given");
      noise.resize(latent.size());
      gen->randn(noise);
    }
    s.step(i, out, latent, noise);
    if (on_step) on_step(i);
  }
}

}  // namespace kvad::diffusion
