// Built with -ffp-contract=off (engine/CMakeLists.txt): each operation rounds
// to float32 as numpy's and torch's do.
#include "engine/diffusion/flow_match.h"

#include <cmath>
#include <string>
#include <vector>

#include "base/error.h"

namespace kvad::diffusion {

namespace {

class FlowMatchEuler : public Scheduler {
 public:
  FlowMatchEuler(const FlowMatchParams& fp, int64_t n, double mu) {
    // np.linspace(1.0, 1 / n, n) in float64 (start + i·step, the last value exactly stop), then float32
    const double stop = 1.0 / static_cast<double>(n);
    const double step = n > 1 ? (stop - 1.0) / static_cast<double>(n - 1) : 0.0;
    std::vector<float> s(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      s[static_cast<size_t>(i)] = static_cast<float>(i == n - 1 ? stop : static_cast<double>(i) * step + 1.0);
    if (fp.use_dynamic_shifting) {
      const float e = static_cast<float>(std::exp(mu));  // math.exp(mu), a weak scalar beside a float32 array
      for (float& v : s) v = e / (e + (1.0f / v - 1.0f));
    } else {
      const float shift = static_cast<float>(fp.shift), shift_1 = static_cast<float>(fp.shift - 1.0);
      for (float& v : s) v = shift * v / (1.0f + shift_1 * v);
    }
    const float T = static_cast<float>(fp.num_train_timesteps);
    for (float v : s) timesteps_.push_back(v * T);
    sigmas_ = s;
    sigmas_.push_back(0.0f);
  }
  void scale_model_input(std::span<const float> sample, size_t, std::span<float> out) const override {
    std::copy(sample.begin(), sample.end(), out.begin());
  }
  void step(size_t i, std::span<const float> out, std::span<float> sample, std::span<const float> noise) override {
    check_step(i, out.size(), sample.size(), noise.size());
    const float dt = sigmas_[i + 1] - sigmas_[i];
    for (size_t k = 0; k < sample.size(); ++k) sample[k] = sample[k] + dt * out[k];
  }
};

}  // namespace

FlowMatchParams flow_match_params(const SchedulerConfig& cfg) {
  const nlohmann::json& j = cfg.raw();
  const std::string& name = cfg.name();
  auto find = [&](const char* key) -> const nlohmann::json* {
    auto it = j.find(key);
    return it == j.end() || it->is_null() ? nullptr : &*it;
  };
  auto fail = [&](const char* key, const std::string& what) { throw Error(name + ": \"" + key + "\": " + what); };
  auto number = [&](const char* key, double def, double lo, double hi) {
    const nlohmann::json* v = find(key);
    if (!v) return def;
    if (!v->is_number()) fail(key, "expected a number, got " + v->dump());
    const double x = v->get<double>();
    if (!(x >= lo && x <= hi)) fail(key, "value " + v->dump() + " out of range");
    return x;
  };
  auto integer = [&](const char* key, int64_t def, int64_t lo, int64_t hi) {
    const nlohmann::json* v = find(key);
    if (!v) return def;
    if (!v->is_number_integer()) fail(key, "expected an integer, got " + v->dump());
    const int64_t x = v->get<int64_t>();
    if (x < lo || x > hi) fail(key, "value " + v->dump() + " out of range");
    return x;
  };
  auto boolean = [&](const char* key, bool def) {
    const nlohmann::json* v = find(key);
    if (!v) return def;
    if (!v->is_boolean()) fail(key, "expected true or false, got " + v->dump());
    return v->get<bool>();
  };
  FlowMatchParams p;
  p.num_train_timesteps = integer("num_train_timesteps", 1000, 1, 10000);
  p.shift = number("shift", 1.0, 1e-6, 1e6);
  p.use_dynamic_shifting = boolean("use_dynamic_shifting", false);
  p.base_shift = number("base_shift", 0.5, -100, 100);
  p.max_shift = number("max_shift", 1.15, -100, 100);
  p.base_image_seq_len = integer("base_image_seq_len", 256, 1, int64_t{1} << 30);
  p.max_image_seq_len = integer("max_image_seq_len", 4096, 1, int64_t{1} << 30);
  if (p.base_image_seq_len >= p.max_image_seq_len)
    fail("max_image_seq_len", "is not above base_image_seq_len " + std::to_string(p.base_image_seq_len));
  for (const char* k : {"invert_sigmas", "use_karras_sigmas", "use_exponential_sigmas", "use_beta_sigmas",
                        "stochastic_sampling"})
    if (boolean(k, false)) fail(k, "true is not supported");
  if (find("shift_terminal")) fail("shift_terminal", "is not supported");
  if (const nlohmann::json* v = find("time_shift_type"); v && *v != "exponential")
    fail("time_shift_type", v->dump() + " is not supported (only \"exponential\")");
  return p;
}

double flux_mu(const FlowMatchParams& p, int64_t image_seq_len) {
  const double m = (p.max_shift - p.base_shift) / static_cast<double>(p.max_image_seq_len - p.base_image_seq_len);
  const double b = p.base_shift - m * static_cast<double>(p.base_image_seq_len);
  return static_cast<double>(image_seq_len) * m + b;
}

std::unique_ptr<Scheduler> make_flow_match(const FlowMatchParams& p, int64_t n, double mu) {
  if (n < 1) throw Error("steps " + std::to_string(n) + " is below 1");
  if (!std::isfinite(mu)) throw Error("flow matching: mu is not finite");
  return std::make_unique<FlowMatchEuler>(p, n, mu);
}

}  // namespace kvad::diffusion
