// The parts of the Painter (engine/painter.h, engine/diffusion/latents.h)
// that need no model: a request's bounds, latents between torch's NCHW and
// kvad's {C, W, H, N}, classifier-free guidance, and the VAE output's bytes
// as diffusers' postprocess and numpy_to_pil make them (values from numpy).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "base/error.h"
#include "engine/diffusion/latents.h"
#include "engine/painter.h"

using namespace kvad;
using namespace kvad::diffusion;

namespace {

std::string error_of(const PaintRequest& r) {
  try {
    check_paint_request(r);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

PaintRequest ok() {
  PaintRequest r;
  r.prompt = "a cat";
  r.width = 512;
  r.height = 768;
  return r;
}

TEST(PaintRequest, InBoundsPasses) {
  EXPECT_EQ(error_of(ok()), "");
  PaintRequest r = ok();
  r.width = r.height = 0;  // the pipeline's default
  r.steps = 1000;
  r.n = 16;
  r.cfg = 0;
  r.scheduler = "DPM++ 2M Karras";
  r.negative_prompt = "";
  EXPECT_EQ(error_of(r), "");
  r.width = 64, r.height = 2048, r.cfg = 100;
  EXPECT_EQ(error_of(r), "");
}

TEST(PaintRequest, OutOfBoundsNamesTheField) {
  auto with = [](auto edit) {
    PaintRequest r = ok();
    edit(r);
    return error_of(r);
  };
  EXPECT_NE(with([](PaintRequest& r) { r.width = 500; }).find("width 500 is out of range (a multiple of 8"),
            std::string::npos);
  EXPECT_NE(with([](PaintRequest& r) { r.height = 56; }).find("height 56"), std::string::npos);
  EXPECT_NE(with([](PaintRequest& r) { r.height = 2056; }).find("height 2056"), std::string::npos);
  EXPECT_NE(with([](PaintRequest& r) { r.width = -8; }).find("width -8"), std::string::npos);
  EXPECT_NE(with([](PaintRequest& r) { r.steps = 0; }).find("steps 0 is out of range (1 to 1000)"), std::string::npos);
  EXPECT_NE(with([](PaintRequest& r) { r.steps = 1000000; }).find("steps 1000000"), std::string::npos);
  EXPECT_NE(with([](PaintRequest& r) { r.n = 0; }).find("images 0"), std::string::npos);
  EXPECT_NE(with([](PaintRequest& r) { r.n = 17; }).find("images 17"), std::string::npos);
  EXPECT_NE(with([](PaintRequest& r) { r.prompt.assign(kPaintMaxPromptBytes + 1, 'a'); }).find("the prompt is 65537"),
            std::string::npos);
  EXPECT_NE(with([](PaintRequest& r) { r.negative_prompt = std::string(kPaintMaxPromptBytes + 1, 'a'); })
                .find("the negative prompt"),
            std::string::npos);
  EXPECT_NE(with([](PaintRequest& r) { r.cfg = std::nan(""); }).find("cfg scale"), std::string::npos);
  EXPECT_NE(with([](PaintRequest& r) { r.cfg = -0.5; }).find("cfg scale"), std::string::npos);
  EXPECT_NE(with([](PaintRequest& r) { r.cfg = 100.5; }).find("cfg scale"), std::string::npos);
  EXPECT_NE(with([](PaintRequest& r) { r.rng = "cuda"; }).find("unknown rng \"cuda\" (have: torch)"), std::string::npos);
  EXPECT_NE(with([](PaintRequest& r) { r.scheduler = "heun"; }).find("unknown scheduler \"heun\""), std::string::npos);
  for (const std::string& e : {with([](PaintRequest& r) { r.steps = 0; }), with([](PaintRequest& r) { r.width = 7; })})
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
}

TEST(PaintDefaults, AsDiffusersPipelines) {
  EXPECT_EQ(default_cfg(image::PipelineClass::StableDiffusion), 7.5);
  EXPECT_EQ(default_cfg(image::PipelineClass::StableDiffusionXL), 5.0);
  auto cls = [](const char* name, const char* extra = "") {
    return scheduler_for_class(
        SchedulerConfig::parse(std::string("{\"_class_name\": \"") + name + "\"" + extra + "}", "t.json"));
  };
  EXPECT_EQ(cls("EulerDiscreteScheduler"), "euler");
  EXPECT_EQ(cls("EulerAncestralDiscreteScheduler"), "euler_a");
  EXPECT_EQ(cls("DDIMScheduler"), "ddim");
  EXPECT_EQ(cls("DPMSolverMultistepScheduler", ", \"use_karras_sigmas\": true"), "dpm++2m");
  EXPECT_EQ(cls("PNDMScheduler"), "");
  EXPECT_EQ(cls("LMSDiscreteScheduler"), "");
}

// torch's x[n, c, y, x] (contiguous NCHW) is kvad's element (c, x, y, n) of ne {C, W, H, N}.
TEST(Latents, NchwAndChannelsLast) {
  const ImageDims d{2, 3, 4, 5};
  std::vector<float> nchw(static_cast<size_t>(d.count()));
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t c = 0; c < d.c; ++c)
      for (int64_t y = 0; y < d.h; ++y)
        for (int64_t x = 0; x < d.w; ++x)
          nchw[static_cast<size_t>(((n * d.c + c) * d.h + y) * d.w + x)] = static_cast<float>(1000 * n + 100 * c + 10 * y + x);
  std::vector<float> cwhn(nchw.size()), back(nchw.size());
  nchw_to_cwhn(nchw, cwhn, d);
  // ne {C, W, H, N}: ne[0] = C varies fastest, then W, then H, then N.
  size_t i = 0;
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t y = 0; y < d.h; ++y)
      for (int64_t x = 0; x < d.w; ++x)
        for (int64_t c = 0; c < d.c; ++c, ++i) ASSERT_EQ(cwhn[i], 1000 * n + 100 * c + 10 * y + x) << i;
  cwhn_to_nchw(cwhn, back, d);
  EXPECT_EQ(back, nchw);
  std::vector<float> small(3);
  EXPECT_THROW(nchw_to_cwhn(small, cwhn, d), Error);
  EXPECT_THROW(cwhn_to_nchw(cwhn, small, d), Error);
}

TEST(Latents, GuidanceCombine) {
  const std::vector<float> uncond = {1.0f, -2.0f, 0.1f, 3.0f}, cond = {3.0f, -2.0f, 0.3f, -1.0f};
  std::vector<float> out(4);
  guidance_combine(uncond, cond, 7.5f, out);
  for (size_t i = 0; i < out.size(); ++i) {
    const float diff = cond[i] - uncond[i];  // each operation rounded to float, as torch's three kernels
    const float scaled = 7.5f * diff;
    EXPECT_EQ(out[i], uncond[i] + scaled) << i;
  }
  EXPECT_EQ(out[0], 16.0f);
  EXPECT_EQ(out[1], -2.0f);
  guidance_combine(uncond, cond, 1.0f, out);
  EXPECT_EQ(out, cond);
  guidance_combine(uncond, cond, 0.0f, out);
  EXPECT_EQ(out, uncond);
  std::vector<float> in_place = uncond;
  guidance_combine(in_place, cond, 5.0f, in_place);
  EXPECT_EQ(in_place[0], 11.0f);
  EXPECT_THROW(guidance_combine(uncond, std::vector<float>(3), 1.0f, out), Error);
}

// (torch.from_numpy(x) / 2 + 0.5).clamp(0, 1).numpy() * 255, .round().astype("uint8"),
// computed with torch 2.15 and numpy for these float32 inputs.
TEST(Latents, BytesAsNumpyToPil) {
  const std::vector<float> x = {-1.0f, -0.5f, 0.0f, 0.3f, 0.999f, 1.2f, -3.0f, 0.0039215689f, 0.011764706f,
                                -0.98823529f, -0.99607843f, -0.4941176176071167f,
                                std::numeric_limits<float>::quiet_NaN()};
  const std::vector<uint8_t> want = {0, 64, 128, 166, 255, 255, 0, 128, 129, 1, 0, 64, 0};
  std::vector<uint8_t> got(x.size());
  to_rgb8(x, got);
  EXPECT_EQ(got, want);  // 127.5 -> 128 and 64.5 -> 64: numpy rounds half to even
  std::vector<uint8_t> small(2);
  EXPECT_THROW(to_rgb8(x, small), Error);
}

}  // namespace
