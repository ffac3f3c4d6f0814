// libFuzzer target for a pipeline's scheduler/scheduler_config.json (outside
// input): parsed, resolved for every scheduler kvad has, set to a step count
// and run over a 16-value latent with a stand-in model. A bad config must be
// a kvad::Error, never a crash, an out-of-bounds read, a hang or an
// unbounded allocation; a config that is accepted must run every step.
//
// The input: byte 0 picks the step count (1 + byte % 60), the rest is the
// file's text.
//
// Run (asan preset):
//   build-asan/fuzz/fuzz_scheduler_config -max_total_time=120 corpus/ tests/fixtures/scheduler_config_seeds
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "base/error.h"
#include "engine/diffusion/scheduler.h"
#include "engine/diffusion/torch_rng.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int steps = 1 + data[0] % 60;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  using namespace kvad::diffusion;
  SchedulerConfig config;
  try {
    config = SchedulerConfig::parse(text, "scheduler_config.json");
  } catch (const kvad::Error&) {
    return 0;
  }
  for (const std::string& name : scheduler_names()) {
    try {
      auto s = make_scheduler(config.resolve(parse_scheduler_name(name)), steps);
      std::vector<float> latent = torch_randn(1, 16);
      TorchGenerator gen(7);
      run_denoising(
          *s, latent,
          [](std::span<const float> x, float, std::span<float> out) {
            for (size_t i = 0; i < out.size(); ++i) out[i] = 0.5f * x[i];
          },
          &gen);
    } catch (const kvad::Error&) {
    }
  }
  return 0;
}
