// Built with -ffp-contract=off: every fused multiply-add here is an explicit
// std::fma where torch's compiled code has one, every other operation rounds
// on its own, as numpy's and torch's separate array operations do.
#include "engine/diffusion/schedule_math.h"

#include <algorithm>
#include <cmath>

namespace kvad::diffusion::math {

std::vector<float> torch_linspace_f32(double start_d, double end_d, int64_t steps) {
  const auto start = static_cast<float>(start_d), end = static_cast<float>(end_d);
  const float step = (end - start) / static_cast<float>(steps - 1);
  const int64_t halfway = steps / 2;
  std::vector<float> v(static_cast<size_t>(steps));
  for (int64_t i = 0; i < steps; ++i)
    v[static_cast<size_t>(i)] = i < halfway ? std::fma(step, static_cast<float>(i), start)
                                            : std::fma(-step, static_cast<float>(steps - i - 1), end);
  return v;
}

std::vector<double> np_linspace(double start, double stop, int64_t num) {
  std::vector<double> y(static_cast<size_t>(num));
  if (num == 1) {
    y[0] = start;
    return y;
  }
  const double step = (stop - start) / static_cast<double>(num - 1);
  for (int64_t i = 0; i < num; ++i) y[static_cast<size_t>(i)] = static_cast<double>(i) * step + start;
  y.back() = stop;
  return y;
}

std::vector<double> np_arange(double start, double stop, double step) {
  const double len = std::ceil((stop - start) / step);
  if (!(len > 0)) return {};
  const auto n = static_cast<size_t>(len);
  std::vector<double> v(n);
  v[0] = start;
  if (n > 1) v[1] = start + step;
  const double delta = n > 1 ? v[1] - start : step;
  for (size_t i = 2; i < n; ++i) v[i] = start + static_cast<double>(i) * delta;
  return v;
}

double np_interp_index(double x, const std::vector<float>& fp) {
  const auto last = static_cast<double>(fp.size() - 1);
  if (x >= last) return fp.back();
  if (x <= 0) return fp.front();
  const double j = std::floor(x);
  const auto k = static_cast<size_t>(j);
  if (j == x) return fp[k];
  const double slope = (static_cast<double>(fp[k + 1]) - static_cast<double>(fp[k])) / 1.0;
  return slope * (x - j) + static_cast<double>(fp[k]);
}

double sigma_to_t(double sigma, const std::vector<float>& log_sigmas) {
  const double log_sigma = std::log(std::max(sigma, 1e-10));
  // The last index whose log sigma is <= log_sigma (0 when none), at most n - 2.
  size_t low = 0;
  for (size_t j = 0; j < log_sigmas.size(); ++j)
    if (log_sigma - static_cast<double>(log_sigmas[j]) >= 0) low = j;
  low = std::min(low, log_sigmas.size() - 2);
  const double lo = log_sigmas[low], hi = log_sigmas[low + 1];
  double w = (lo - log_sigma) / (lo - hi);
  w = std::clamp(w, 0.0, 1.0);
  return (1 - w) * static_cast<double>(low) + w * static_cast<double>(low + 1);
}

std::vector<double> karras_sigmas(double sigma_min, double sigma_max, int64_t n) {
  constexpr double rho = 7.0;
  const std::vector<double> ramp = np_linspace(0, 1, n);
  const double min_inv_rho = std::pow(sigma_min, 1 / rho), max_inv_rho = std::pow(sigma_max, 1 / rho);
  std::vector<double> s(ramp.size());
  for (size_t i = 0; i < ramp.size(); ++i) s[i] = std::pow(max_inv_rho + ramp[i] * (min_inv_rho - max_inv_rho), rho);
  return s;
}

}  // namespace kvad::diffusion::math
