// The FLUX.1 pipeline (engine/flux_painter.h, through the Painter) on the tiny random
// FluxPipelines of tests/fixtures/flux against diffusers' FluxPipeline.__call__ for the same
// seed and settings (tools/make_flux_fixtures.py): 4 steps of flow-matching Euler, guidance
// embedding on (dev, dynamic shifting) and off (schnell, two images): the packed latents after
// the last step at PSNR >= 80 dB and every 8-bit picture at PSNR >= 60 dB; T5's token ids equal;
// the request's FLUX-only bounds refused with one line.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "psnr.h"
#include "base/error.h"
#include "engine/painter.h"
#include "io/tensor_source.h"
#include "model/image/pipeline.h"
#include "tokenizer/t5.h"

namespace fs = std::filesystem;
using namespace kvad;
using kvad::test::psnr8;

namespace {

fs::path dir() { return fs::path(KVAD_SOURCE_DIR) / "tests" / "fixtures" / "flux"; }

const Painter& painter(const std::string& folder) {
  static std::map<std::string, std::unique_ptr<Painter>> cache;
  auto it = cache.find(folder);
  if (it != cache.end()) return *it->second;
  PainterOptions o;
  o.threads = 2;
  o.model_name = folder;
  return *cache.emplace(folder, std::make_unique<Painter>(image::open_pipeline((dir() / folder).string()), o))
              .first->second;
}

nlohmann::json cases() {
  std::ifstream in(dir() / "pipeline.json");
  return nlohmann::json::parse(in);
}

TEST(FluxPainter, PaintsWhatDiffusersPaints) {
  const auto ref = safetensors_source((dir() / "pipeline.safetensors").string());
  for (const nlohmann::json& c : cases()) {
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    const Painter& p = painter(c["pipeline"]);
    EXPECT_EQ(p.pipeline().pipeline_class, image::PipelineClass::Flux);
    PaintRequest r;
    r.prompt = c["prompt"];
    r.width = c["width"];
    r.height = c["height"];
    r.steps = c["steps"];
    r.cfg = c["guidance"].get<double>();
    r.seed = c["seed"];
    r.n = c["n"];
    int64_t steps_seen = 0;
    std::vector<float> last_latents;
    const PaintResult res = p.paint(r, [&](const PaintProgress& pr) {
      ++steps_seen;
      last_latents.assign(pr.latents.begin(), pr.latents.end());
    });
    EXPECT_EQ(steps_seen, r.steps);
    const SourceTensor* t5 = ref->find(name + ".t5_ids");
    ASSERT_TRUE(t5);
    std::vector<int32_t> want_ids(t5->n_bytes / 4);
    std::memcpy(want_ids.data(), t5->data, t5->n_bytes);
    EXPECT_EQ(t5_prompt_ids(*t5_tokenizer(p.pipeline().tokenizer_2), r.prompt, 512), want_ids);
    const SourceTensor* img = ref->find(name + ".image");
    ASSERT_TRUE(img);
    ASSERT_EQ(res.images.size(), static_cast<size_t>(r.n));
    const size_t per = img->n_bytes / static_cast<size_t>(r.n);
    for (int64_t i = 0; i < r.n; ++i) {
      const PaintedImage& im = res.images[static_cast<size_t>(i)];
      EXPECT_EQ(im.width, r.width);
      EXPECT_EQ(im.height, r.height);
      ASSERT_EQ(im.rgb.size(), per);
      const double db = psnr8(im.rgb.data(), static_cast<const uint8_t*>(img->data) + static_cast<size_t>(i) * per, per);
      std::printf("%s image %lld: PSNR %.1f dB\n", name.c_str(), static_cast<long long>(i), db);
      EXPECT_GE(db, 60);
    }
    // The packed latents diffusers ends with, against kvad's (the progress gives them unpacked, NCHW).
    const SourceTensor* lat = ref->find(name + ".latents");
    ASSERT_TRUE(lat);
    std::vector<float> want(lat->n_bytes / 4);
    std::memcpy(want.data(), lat->data, lat->n_bytes);
    ASSERT_EQ(last_latents.size(), want.size());
    const int64_t C = 16, h = 2 * (r.height / 16), w = 2 * (r.width / 16);
    double peak = 0, se = 0;
    for (int64_t n = 0; n < r.n; ++n)
      for (int64_t ch = 0; ch < C; ++ch)
        for (int64_t y = 0; y < h; ++y)
          for (int64_t x = 0; x < w; ++x) {
            const float got = last_latents[static_cast<size_t>(((n * C + ch) * h + y) * w + x)];
            const float ref_v = want[static_cast<size_t>(
                (n * (h / 2) * (w / 2) + (y / 2) * (w / 2) + x / 2) * C * 4 + ch * 4 + (y % 2) * 2 + x % 2)];
            peak = std::max(peak, std::fabs(double(ref_v)));
            se += (double(got) - ref_v) * (double(got) - ref_v);
          }
    const double db = se == 0 ? 999 : 10 * std::log10(peak * peak / (se / want.size()));
    std::printf("%s latents: PSNR %.1f dB\n", name.c_str(), db);
    EXPECT_GE(db, 80);
  }
}

TEST(FluxPainter, SettlesFluxDefaultsAndRefusesTheRest) {
  const Painter& p = painter("pipeline_dev");
  PaintRequest r;
  r.prompt = "x";
  const PaintRequest s = p.settle(r);
  EXPECT_EQ(s.width, 1024);
  EXPECT_EQ(s.height, 1024);
  EXPECT_DOUBLE_EQ(*s.cfg, 3.5);
  EXPECT_EQ(s.scheduler, "euler");
  r.width = 72;  // a multiple of 8, not of 16
  EXPECT_THROW(p.settle(r), Error);
  r.width = 64;
  r.scheduler = "dpm++2m";
  EXPECT_THROW(p.settle(r), Error);
}

}  // namespace
