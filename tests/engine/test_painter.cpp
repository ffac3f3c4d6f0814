// The whole picture pipeline (engine/painter.h) on the tiny random SD 1.5 and
// SDXL pipelines of tests/fixtures/image_pipelines against diffusers' own
// StableDiffusionPipeline / StableDiffusionXLPipeline __call__ for the same
// seed, scheduler and settings (tests/fixtures/painter, made by
// tools/make_pipeline_fixtures.py): every 8-bit picture at PSNR >= 60 dB (or,
// for a case whose own sensitivity to float rounding is below 66 dB, within
// 6 dB of it: see floor_db in the script), for each scheduler kvad runs, a batch of two with a negative prompt, pictures
// that are not square, SDXL with negative_prompt="" (encoded) and without
// guidance. The single-file checkpoints paint what their folders paint, and
// the sim device what the CPU paints. Progress, cancelling, the metadata and
// the request's bounds are checked on the same models.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
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

namespace fs = std::filesystem;
using namespace kvad;
using kvad::test::psnr8;

namespace {

fs::path pipelines() { return fs::path(KVAD_SOURCE_DIR) / "tests" / "fixtures" / "image_pipelines"; }
fs::path fixtures() { return fs::path(KVAD_SOURCE_DIR) / "tests" / "fixtures" / "painter"; }

// One Painter per pipeline, layout, device and scheduler config, loaded once for the whole run.
// `overrides`: keys set in the scheduler config, as diffusers' from_config(config, **overrides).
const Painter& painter(const std::string& name, bool single_file = false, const std::string& device = "cpu",
                       const nlohmann::json& overrides = nlohmann::json::object()) {
  static std::map<std::string, std::unique_ptr<Painter>> cache;
  const std::string key = name + (single_file ? ".safetensors" : "") + "@" + device + overrides.dump();
  auto it = cache.find(key);
  if (it != cache.end()) return *it->second;
  image::PipelineOptions po;
  if (single_file) po.config = (pipelines() / name).string();  // the tiny configs and tokenizers
  image::Pipeline pl = image::open_pipeline((pipelines() / (single_file ? name + ".safetensors" : name)).string(), po);
  if (!overrides.empty()) {
    nlohmann::json cfg = nlohmann::json::parse(pl.scheduler_config);
    cfg.update(overrides);
    pl.scheduler_config = cfg.dump();
  }
  PainterOptions o;
  o.device.device = device;
  o.threads = 2;
  o.model_name = name;
  return *cache.emplace(key, std::make_unique<Painter>(std::move(pl), o)).first->second;
}

PaintRequest request_of(const nlohmann::json& c) {
  PaintRequest r;
  r.prompt = c["prompt"].get<std::string>();
  if (!c["negative_prompt"].is_null()) r.negative_prompt = c["negative_prompt"].get<std::string>();
  r.width = c["width"].get<int64_t>();
  r.height = c["height"].get<int64_t>();
  r.steps = c["steps"].get<int64_t>();
  r.cfg = c["cfg"].get<double>();
  r.seed = c["seed"].get<uint64_t>();
  r.scheduler = c["scheduler"].get<std::string>();
  r.n = c["n"].get<int64_t>();
  return r;
}

class PainterVsDiffusers : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::ifstream in(fixtures() / "cases.json");
    cases_ = nlohmann::json::parse(in);
    ref_ = safetensors_source((fixtures() / "images.safetensors").string());
  }
  static const SourceTensor& ref(const std::string& key) {
    const SourceTensor* t = ref_->find(key);
    if (!t) throw Error("no reference tensor " + key);
    return *t;
  }
  static inline nlohmann::json cases_;
  static inline std::shared_ptr<const TensorSource> ref_;
};

TEST_F(PainterVsDiffusers, EveryCase) {
  ASSERT_GE(cases_.size(), 15u);
  for (const nlohmann::json& c : cases_) {
    const std::string key = c["key"].get<std::string>();
    SCOPED_TRACE(key);
    const PaintRequest r = request_of(c);
    const PaintResult res = painter(c["pipeline"].get<std::string>(), false, "cpu", c["overrides"]).paint(r);
    const double floor = c["floor_db"].get<double>(), need = std::min(60.0, floor - 6);
    const SourceTensor& want = ref(key);  // uint8 [n, height, width, 3]
    ASSERT_EQ(want.stored_dtype, "U8");
    ASSERT_EQ(res.images.size(), static_cast<size_t>(r.n));
    const size_t per = static_cast<size_t>(r.width * r.height * 3);
    ASSERT_EQ(want.n_bytes, per * r.n);
    for (size_t i = 0; i < res.images.size(); ++i) {
      const PaintedImage& im = res.images[i];
      ASSERT_EQ(im.width, r.width);
      ASSERT_EQ(im.height, r.height);
      ASSERT_EQ(im.rgb.size(), per);
      const double p = psnr8(im.rgb.data(), static_cast<const uint8_t*>(want.data) + i * per, per);
      std::printf("%s image %zu: PSNR %.1f dB vs diffusers (diffusers vs itself under 1e-6: %.1f dB)\n", key.c_str(),
                  i, p, floor);
      EXPECT_GE(p, need) << "image " << i;
    }
  }
}

// The ldm single files (with the folders' configs) paint exactly what the folders paint.
TEST_F(PainterVsDiffusers, SingleFileEqualsFolder) {
  for (const char* name : {"sd15", "sdxl"}) {
    SCOPED_TRACE(name);
    PaintRequest r;
    r.prompt = "a photo of a cat";
    r.steps = 3;
    r.seed = 11;
    r.scheduler = "euler_a";
    const PaintResult a = painter(name).paint(r), b = painter(name, true).paint(r);
    ASSERT_EQ(a.images.size(), 1u);
    EXPECT_EQ(a.images[0].width, 64);  // the tiny UNet's sample_size 8, times 8
    EXPECT_TRUE(a.images[0].rgb == b.images[0].rgb);
  }
}

// The sim device (the CPU kernels behind a device boundary) paints what the CPU paints.
TEST_F(PainterVsDiffusers, SimEqualsCpu) {
  for (const char* name : {"sd15", "sdxl"}) {
    SCOPED_TRACE(name);
    PaintRequest r;
    r.prompt = "a lighthouse";
    r.negative_prompt = "fog";
    r.steps = 2;
    r.seed = 5;
    r.scheduler = "dpm++2m";
    const PaintResult a = painter(name).paint(r), b = painter(name, false, "sim").paint(r);
    EXPECT_TRUE(a.images[0].rgb == b.images[0].rgb);
  }
}

TEST_F(PainterVsDiffusers, ProgressCancelAndMetadata) {
  const Painter& p = painter("sd15");
  // The tiny SD 1.5 pipeline's scheduler is PNDM, which kvad does not run: Euler over its config.
  EXPECT_EQ(p.default_scheduler(), "euler");
  EXPECT_NE(p.default_scheduler_note().find("PNDMScheduler"), std::string::npos);
  EXPECT_EQ(painter("sdxl").default_scheduler(), "euler");
  EXPECT_EQ(painter("sdxl").default_scheduler_note(), "");

  PaintRequest r;
  r.prompt = "a red fox";
  r.steps = 3;
  r.seed = 9;
  r.n = 2;
  r.scheduler = "DPM++ 2M Karras";
  const PaintRequest s = p.settle(r);
  EXPECT_EQ(s.width, 64);
  EXPECT_EQ(s.height, 64);
  EXPECT_EQ(*s.cfg, 7.5);
  EXPECT_EQ(s.scheduler, "dpm++2m_karras");
  EXPECT_EQ(*painter("sdxl").settle(r).cfg, 5.0);

  std::vector<int64_t> steps;
  const PaintResult res = p.paint(r, [&](const PaintProgress& pr) {
    steps.push_back(pr.step);
    EXPECT_EQ(pr.total, 3);
    EXPECT_EQ(pr.latents.size(), static_cast<size_t>(2 * 4 * 8 * 8));
    EXPECT_EQ(pr.n, 2);
    EXPECT_EQ(pr.channels, 4);
    EXPECT_EQ(pr.latent_h, 8);
    EXPECT_GE(pr.step_s, 0);
  });
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3}));
  ASSERT_EQ(res.images.size(), 2u);
  EXPECT_FALSE(res.images[0].rgb == res.images[1].rgb);  // two draws of one noise batch
  EXPECT_EQ(png::a1111_parameters(res.images[1].parameters),
            "a red fox\nSteps: 3, Sampler: DPM++ 2M, Schedule type: Karras, CFG scale: 7.5, Seed: 9, Size: 64x64, "
            "Model: sd15");

  std::atomic<bool> stop{false};
  int calls = 0;
  EXPECT_THROW(p.paint(r, [&](const PaintProgress&) { stop = ++calls == 2; }, &stop), PaintCancelled);
  EXPECT_EQ(calls, 2);
  stop = true;
  EXPECT_THROW(p.paint(r, {}, &stop), PaintCancelled);
}

TEST_F(PainterVsDiffusers, BadRequests) {
  const Painter& p = painter("sd15");
  PaintRequest r;
  r.prompt = "x";
  r.width = 100;
  EXPECT_THROW(p.paint(r), Error);
  r.width = 64;
  r.steps = 0;
  EXPECT_THROW(p.paint(r), Error);
  r.steps = 2;
  r.scheduler = "lms";
  EXPECT_THROW(p.settle(r), Error);
}

}  // namespace
