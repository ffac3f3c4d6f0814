// engine/diffusion/scheduler.h against diffusers
// (tests/fixtures/diffusion/schedulers.json, tools/make_diffusion_fixtures.py):
// timesteps, sigmas and init_noise_sigma of every scheduler for pipeline
// configs at 1-50 steps, and whole denoising runs with a fake model whose
// latents must follow diffusers' step() to float rounding.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/error.h"
#include "engine/diffusion/scheduler.h"
#include "engine/diffusion/torch_rng.h"

namespace {

using namespace kvad::diffusion;
using json = nlohmann::json;

const json& fixture() {
  static const json j = [] {
    std::ifstream f(std::string(KVAD_SOURCE_DIR) + "/tests/fixtures/diffusion/schedulers.json");
    EXPECT_TRUE(f) << "missing tests/fixtures/diffusion/schedulers.json";
    std::stringstream ss;
    ss << f.rdbuf();
    return json::parse(ss.str());
  }();
  return j;
}

std::unique_ptr<Scheduler> build(const std::string& config, const std::string& kind, int64_t steps) {
  const SchedulerConfig c = SchedulerConfig::parse(fixture().at("configs").at(config).dump(), config + ".json");
  return make_scheduler(c.resolve(parse_scheduler_name(kind)), steps);
}

// Largest |a - b| / max(|b|, floor) over the values.
double max_rel(const std::vector<float>& a, const std::vector<double>& b, double floor = 1e-3) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]) / std::max(std::fabs(b[i]), floor));
  return m;
}

TEST(DiffusionSchedulers, TimestepsAndSigmasEqualDiffusers) {
  int n = 0;
  double worst_sigma = 0, worst_t = 0;
  for (const json& c : fixture().at("schedules")) {
    const std::string config = c.at("config"), kind = c.at("kind");
    const int64_t steps = c.at("steps");
    SCOPED_TRACE(config + " " + kind + " " + std::to_string(steps) + " steps");
    const auto s = build(config, kind, steps);
    const auto want_t = c.at("timesteps").get<std::vector<double>>();
    const double et = max_rel(s->timesteps(), want_t, 1.0);
    // Integer timesteps (DDIM, DPM-Solver, leading/trailing spacings) are equal; Euler's
    // linspace and Karras timesteps are float32 and may differ in the last place.
    EXPECT_LE(et, 1e-6);
    worst_t = std::max(worst_t, et);
    if (c.at("sigmas").is_null()) {
      EXPECT_TRUE(s->sigmas().empty());
    } else {
      const double es = max_rel(s->sigmas(), c.at("sigmas").get<std::vector<double>>());
      EXPECT_LE(es, 1e-6);
      worst_sigma = std::max(worst_sigma, es);
    }
    EXPECT_FLOAT_EQ(s->init_noise_sigma(), c.at("init_noise_sigma").get<float>());
    ++n;
  }
  EXPECT_GE(n, 200);
  std::printf("%d schedules; largest relative difference: timesteps %.3g, sigmas %.3g\n", n, worst_t, worst_sigma);
}

TEST(DiffusionSchedulers, SdxlEulerVisitsDiffusersTimesteps) {
  const auto s = build("sdxl", "euler", 30);
  ASSERT_EQ(s->steps(), 30u);
  EXPECT_EQ(s->timesteps()[0], 958.0f);
  EXPECT_EQ(s->timesteps()[1], 925.0f);
  EXPECT_EQ(s->timesteps()[28], 34.0f);
  EXPECT_EQ(s->timesteps()[29], 1.0f);
  // SD 1.5's file names no spacing: Euler takes its own default (linspace), as from_config does.
  EXPECT_EQ(build("sd15", "euler", 30)->timesteps()[0], 999.0f);
  EXPECT_EQ(build("sd15", "ddim", 50)->timesteps()[0], 981.0f);  // leading + steps_offset 1
}

// The fake model of the fixture: 0.3 * x_in + randn(seed 100 + step).
TEST(DiffusionSchedulers, DenoisingRunsFollowDiffusersStep) {
  int n = 0;
  double worst = 0;
  for (const json& r : fixture().at("runs")) {
    const std::string config = r.at("config"), kind = r.at("kind");
    const int64_t steps = r.at("steps");
    SCOPED_TRACE(config + " " + kind + " " + std::to_string(steps) + " steps");
    auto s = build(config, kind, steps);
    std::vector<float> x = torch_randn(1, 64);
    for (float& v : x) v = v * s->init_noise_sigma();
    TorchGenerator gen(7);
    std::map<size_t, std::vector<float>> kept;
    uint64_t calls = 0;
    run_denoising(
        *s, x,
        [&](std::span<const float> xin, float, std::span<float> out) {
          const std::vector<float> e = torch_randn(100 + calls++, out.size());
          for (size_t k = 0; k < out.size(); ++k) out[k] = 0.3f * xin[k] + e[k];
        },
        &gen, [&](size_t i) { kept[i] = x; });
    for (const auto& [step, want_bits] : r.at("after").items()) {
      std::vector<double> want;
      double scale = 0;
      for (uint32_t b : want_bits.get<std::vector<uint32_t>>()) {
        want.push_back(std::bit_cast<float>(b));
        scale = std::max(scale, std::fabs(want.back()));
      }
      const double e = max_rel(kept.at(std::stoul(step)), want, scale);
      EXPECT_LE(e, 1e-6) << "after step " << step;
      worst = std::max(worst, e);
    }
    ++n;
  }
  EXPECT_GE(n, 30);
  std::printf("%d runs; largest difference relative to the latent's scale: %.3g\n", n, worst);
}

TEST(DiffusionSchedulers, BadInputIsAClearError) {
  const SchedulerConfig sdxl = SchedulerConfig::parse(fixture().at("configs").at("sdxl").dump(), "sdxl.json");
  const SchedulerParams euler = sdxl.resolve(parse_scheduler_name("euler"));
  EXPECT_THROW(make_scheduler(euler, 0), kvad::Error);
  EXPECT_THROW(make_scheduler(euler, 1000000), kvad::Error);
  EXPECT_NO_THROW(make_scheduler(euler, 1000));
  EXPECT_THROW(parse_scheduler_name("plms"), kvad::Error);
  EXPECT_THROW(SchedulerConfig::parse("{", "x.json"), kvad::Error);
  EXPECT_THROW(SchedulerConfig::parse("[1]", "x.json"), kvad::Error);
  EXPECT_THROW(SchedulerConfig::parse(std::string(2 << 20, ' '), "x.json"), kvad::Error);
  auto resolve = [](const std::string& text, const char* kind) {
    return SchedulerConfig::parse(text, "x.json").resolve(parse_scheduler_name(kind));
  };
  EXPECT_THROW(resolve(R"({"beta_schedule": "sigmoid"})", "euler"), kvad::Error);
  EXPECT_THROW(resolve(R"({"beta_start": "0.1"})", "euler"), kvad::Error);
  EXPECT_THROW(resolve(R"({"num_train_timesteps": 1e12})", "euler"), kvad::Error);
  EXPECT_THROW(resolve(R"({"num_train_timesteps": 1})", "euler"), kvad::Error);
  EXPECT_THROW(resolve(R"({"timestep_spacing": "cosine"})", "ddim"), kvad::Error);
  EXPECT_THROW(resolve(R"({"prediction_type": "flow_prediction"})", "dpm++2m"), kvad::Error);
  EXPECT_THROW(resolve(R"({"prediction_type": "sample"})", "euler_a"), kvad::Error);
  EXPECT_THROW(resolve(R"({"thresholding": true})", "ddim"), kvad::Error);
  EXPECT_THROW(resolve(R"({"algorithm_type": "sde-dpmsolver++"})", "dpm++2m"), kvad::Error);
  EXPECT_THROW(resolve(R"({"solver_order": 3})", "dpm++2m"), kvad::Error);
  EXPECT_THROW(resolve(R"({"use_exponential_sigmas": true})", "euler"), kvad::Error);
  EXPECT_THROW(resolve(R"({"trained_betas": [0.1, 0.2]})", "euler"), kvad::Error);
  EXPECT_THROW(resolve(R"({"lambda_min_clipped": -5.1})", "dpm++2m"), kvad::Error);
  // Python's json.dumps spelling of -inf, as diffusers saves DPM-Solver configs.
  EXPECT_NO_THROW(resolve(R"({"lambda_min_clipped": -Infinity, "_class_name": "DPMSolverMultistepScheduler"})",
                          "dpm++2m"));
  EXPECT_EQ(SchedulerConfig::parse(R"({"_class_name": "PNDMScheduler"})", "x.json").class_name(), "PNDMScheduler");
  // A step past the train range (DDIM indexes alphas_cumprod by it).
  EXPECT_THROW(make_scheduler(resolve(R"({"steps_offset": 1000})", "ddim"), 1), kvad::Error);
  try {
    resolve(R"({"beta_schedule": 3})", "euler");
    ADD_FAILURE();
  } catch (const kvad::Error& e) {
    EXPECT_NE(std::string(e.what()).find("x.json: \"beta_schedule\""), std::string::npos) << e.what();
  }
  // Steps in order, sizes equal, noise where the scheduler draws it.
  auto s = make_scheduler(euler, 4);
  std::vector<float> x(8, 1.0f), out(8, 0.5f), short_out(7, 0.5f);
  EXPECT_THROW(s->step(1, out, x), kvad::Error);
  EXPECT_THROW(s->step(0, short_out, x), kvad::Error);
  auto a = make_scheduler(sdxl.resolve(parse_scheduler_name("euler_a")), 4);
  EXPECT_THROW(a->step(0, out, x), kvad::Error);
  EXPECT_THROW(run_denoising(*a, x, [](std::span<const float>, float, std::span<float> o) {
    std::fill(o.begin(), o.end(), 0.0f);
  }, nullptr), kvad::Error);
}

}  // namespace
