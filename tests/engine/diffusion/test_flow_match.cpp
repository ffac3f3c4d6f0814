// FlowMatchEulerDiscreteScheduler (engine/diffusion/flow_match.h) against diffusers'
// (tests/fixtures/flux/scheduler.json, tools/make_flux_fixtures.py): FLUX.1-schnell's config
// (shift 1: 4 steps give timesteps 1000, 750, 500, 250) and FLUX.1-dev's (dynamic shifting,
// mu from the image sequence length at 512², 768² and 1024²), sigmas and timesteps bit for bit;
// two Euler steps equal diffusers' step(); configs kvad cannot run are refused.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "engine/diffusion/flow_match.h"

using namespace kvad;
using namespace kvad::diffusion;
using json = nlohmann::json;

namespace {

json fixture() {
  std::ifstream in(std::filesystem::path(KVAD_SOURCE_DIR) / "tests" / "fixtures" / "flux" / "scheduler.json");
  return json::parse(in);
}

FlowMatchParams params(const json& f, const std::string& name) {
  return flow_match_params(SchedulerConfig::parse(f["configs"][name].dump(), name));
}

TEST(FlowMatch, SigmasAndTimestepsEqualDiffusers) {
  const json f = fixture();
  ASSERT_GE(f["cases"].size(), 4u);
  for (const json& c : f["cases"]) {
    const std::string cfg = c["config"];
    SCOPED_TRACE(cfg + " " + std::to_string(c["steps"].get<int>()) + " steps, image_seq_len " +
                 std::to_string(c["image_seq_len"].get<int>()));
    const FlowMatchParams p = params(f, cfg);
    const double mu = flux_mu(p, c["image_seq_len"].get<int64_t>());
    EXPECT_NEAR(mu, c["mu"].get<double>(), 1e-12);
    const auto s = make_flow_match(p, c["steps"].get<int64_t>(), mu);
    const std::vector<float> want_t = c["timesteps"].get<std::vector<float>>();
    const std::vector<float> want_s = c["sigmas"].get<std::vector<float>>();
    EXPECT_EQ(s->timesteps(), want_t);
    EXPECT_EQ(s->sigmas(), want_s);
    EXPECT_EQ(s->init_noise_sigma(), 1.0f);
  }
  const FlowMatchParams schnell = params(f, "schnell");
  EXPECT_EQ(make_flow_match(schnell, 4, flux_mu(schnell, 4096))->timesteps(),
            (std::vector<float>{1000, 750, 500, 250}));
}

TEST(FlowMatch, EulerStepsEqualDiffusers) {
  const json f = fixture();
  const json& st = f["step"];
  const FlowMatchParams p = params(f, st["config"]);
  const auto s = make_flow_match(p, st["steps"].get<int64_t>(), flux_mu(p, st["image_seq_len"].get<int64_t>()));
  std::vector<float> x = st["sample"].get<std::vector<float>>();
  const std::vector<float> v = st["model_output"].get<std::vector<float>>();
  s->step(0, v, x);
  s->step(1, v, x);
  EXPECT_EQ(x, st["after_two_steps"].get<std::vector<float>>());
  EXPECT_THROW(s->step(3, v, x), Error);  // out of order
}

TEST(FlowMatch, RefusesWhatItDoesNotRun) {
  auto parse = [](const char* j) { return flow_match_params(SchedulerConfig::parse(j, "scheduler_config.json")); };
  EXPECT_NO_THROW(parse("{}"));
  EXPECT_THROW(parse(R"({"shift": 0})"), Error);
  EXPECT_THROW(parse(R"({"shift": "3"})"), Error);
  EXPECT_THROW(parse(R"({"use_dynamic_shifting": 1})"), Error);
  EXPECT_THROW(parse(R"({"invert_sigmas": true})"), Error);
  EXPECT_THROW(parse(R"({"shift_terminal": 0.02})"), Error);
  EXPECT_THROW(parse(R"({"use_karras_sigmas": true})"), Error);
  EXPECT_THROW(parse(R"({"time_shift_type": "linear"})"), Error);
  EXPECT_THROW(parse(R"({"base_image_seq_len": 4096, "max_image_seq_len": 256})"), Error);
  EXPECT_THROW(make_flow_match(parse("{}"), 0, 0.5), Error);
}

}  // namespace
