// UNet2DCondition (model/image/unet.h) on the tiny random SD 1.5 and SDXL
// pipelines against diffusers' UNet2DConditionModel in f32
// (tests/fixtures/image_pipelines/unet.safetensors, made by
// tools/make_unet_fixtures.py): every output at PSNR >= 100 dB, from the
// diffusers folder and from the single file (the same output as the folder's),
// at sides that halve evenly and at sides the up-samplers must cut to the
// skips' sizes; the sim device bit for bit with the CPU; shapes that do not
// fit throw kvad::Error.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "image_fixtures.h"
#include "base/error.h"
#include "io/tensor_source.h"
#include "model/image/pipeline.h"
#include "model/image/unet.h"
#include "model/registry.h"
#include "model/weights.h"
#include "tensor/ops.h"

namespace fs = std::filesystem;
using namespace kvad;
using namespace kvad::image;
using kvad::image_test::fixtures;
using kvad::image_test::host;

namespace {


struct Compare {
  double psnr = 0, max_abs = 0;
};

// PSNR of `got` against `want` over want's peak, 10·log10(max|want|² / MSE), and max |got - want|.
Compare compare(const std::vector<float>& got, const std::vector<float>& want) {
  EXPECT_EQ(got.size(), want.size());
  Compare c;
  if (got.size() != want.size()) return c;
  double peak = 0, se = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    peak = std::max(peak, std::fabs(static_cast<double>(want[i])));
    se += d * d;
    c.max_abs = std::isnan(d) ? INFINITY : std::max(c.max_abs, std::fabs(d));
  }
  c.psnr = se == 0 ? 999 : 10 * std::log10(peak * peak / (se / want.size()));
  return c;
}

class UNet : public ::testing::Test {
 protected:
  std::shared_ptr<const TensorSource> ref_ = safetensors_source((fixtures() / "unet.safetensors").string());

  const SourceTensor& ref(const std::string& name) const {
    const SourceTensor* t = ref_->find(name);
    if (!t) throw Error("no reference tensor " + name);
    return *t;
  }
  std::vector<float> floats(const std::string& name) const {
    const SourceTensor& t = ref(name);
    EXPECT_EQ(t.type, DType::F32) << name;
    std::vector<float> v(t.n_bytes / 4);
    std::memcpy(v.data(), t.data, t.n_bytes);
    return v;
  }
  // The reference tensor on `d`, with its stored shape (ggml order).
  Tensor input(const std::string& name, Device d) const {
    const SourceTensor& t = ref(name);
    return ops::from_host(t.data, DType::F32, t.ne, d);
  }

  static Pipeline open(const std::string& kind, bool single_file) {
    PipelineOptions o;
    if (single_file) o.config = (fixtures() / kind).string();
    return open_pipeline((fixtures() / (single_file ? kind + ".safetensors" : kind)).string(), o);
  }

  // The UNet's output for case `c` of `kind` on `device`, as host floats.
  std::vector<float> run(const UNet2DCondition& u, const std::string& kind, const std::string& c) const {
    const std::string k = kind + "." + c + ".";
    const Device d = u.device();
    UNetAddedCond added;
    const bool xl = u.config().addition_embed_type == "text_time";
    if (xl) added = {input(k + "text_embeds", d), input(k + "time_ids", d)};
    const Tensor y = u.forward(input(k + "sample", d), floats(k + "timestep").at(0), input(k + "encoder_hidden_states", d),
                               xl ? &added : nullptr);
    const std::array<int64_t, 4> s = ref(k + "sample").ne;
    EXPECT_EQ(y.ne, (std::array<int64_t, 4>{u.config().out_channels, s[1], s[2], s[3]}));
    return host(y);
  }

  void check(const std::string& kind) {
    std::vector<std::vector<float>> folder_out;
    for (bool single : {false, true}) {
      SCOPED_TRACE(single ? kind + ".safetensors" : kind);
      const Pipeline pl = open(kind, single);
      WeightLoader wl(pl.weights, DeviceOptions{});
      const UNet2DCondition u(wl.root().sub("unet"), pl.unet);
      for (const std::string c : {"a", "b"}) {
        const std::vector<float> got = run(u, kind, c);
        const Compare r = compare(got, floats(kind + "." + c + ".out"));
        std::printf("%s %s case %s: PSNR %.1f dB, max abs diff %.3g\n", kind.c_str(), single ? "file" : "folder",
                    c.c_str(), r.psnr, r.max_abs);
        EXPECT_GE(r.psnr, 100) << "case " << c;
        if (!single)
          folder_out.push_back(got);
        else
          EXPECT_EQ(got, folder_out.at(c == "a" ? 0 : 1)) << "case " << c << ": the single file differs from the folder";
      }
      // Every UNet tensor is read.
      std::string left;
      try {
        wl.finish();
      } catch (const Error& e) {
        left = e.what();
      }
      EXPECT_EQ(left.find("unet."), std::string::npos) << left;
    }
  }

  void check_sim(const std::string& kind) {
    const Pipeline pl = open(kind, false);
    WeightLoader cpu_wl(pl.weights, DeviceOptions{});
    DeviceOptions so;
    so.device = "sim";
    WeightLoader sim_wl(pl.weights, so);
    const UNet2DCondition cpu(cpu_wl.root().sub("unet"), pl.unet), sim(sim_wl.root().sub("unet"), pl.unet);
    ASSERT_EQ(sim.device().type, DeviceType::Sim);
    EXPECT_EQ(run(sim, kind, "b"), run(cpu, kind, "b")) << "sim must equal the CPU bit for bit";
  }
};

}  // namespace

TEST_F(UNet, Sd15MatchesDiffusers) { check("sd15"); }

TEST_F(UNet, SdxlMatchesDiffusers) { check("sdxl"); }

TEST_F(UNet, Sd15SimEqualsCpu) { check_sim("sd15"); }

TEST_F(UNet, SdxlSimEqualsCpu) { check_sim("sdxl"); }

TEST_F(UNet, BadInput) {
  const Pipeline sd = open("sd15", false), xl = open("sdxl", false);
  WeightLoader wl(sd.weights, DeviceOptions{}), wl_xl(xl.weights, DeviceOptions{});
  const UNet2DCondition u(wl.root().sub("unet"), sd.unet), u_xl(wl_xl.root().sub("unet"), xl.unet);
  const Device d = Device::cpu();
  const Tensor x = input("sd15.a.sample", d), ctx = input("sd15.a.encoder_hidden_states", d);
  const std::vector<float> zeros(5 * 8 * 16 * 2 * 80, 0.0f);
  const auto expect_error = [](const auto& f, const std::string& part) {
    try {
      f();
      ADD_FAILURE() << "no error; expected one naming " << part;
    } catch (const Error& e) {
      std::printf("error: %s\n", e.what());
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  // A sample of 5 channels for a UNet of 4.
  const Tensor x5 = ops::from_host(zeros.data(), DType::F32, {5, 8, 16, 2}, d);
  expect_error([&] { u.forward(x5, 1, ctx, nullptr); }, "sample");
  // Context of the wrong width, and of another batch.
  const Tensor ctx_w = ops::from_host(zeros.data(), DType::F32, {31, 77, 2, 1}, d);
  expect_error([&] { u.forward(x, 1, ctx_w, nullptr); }, "encoder_hidden_states");
  const Tensor ctx_n = ops::from_host(zeros.data(), DType::F32, {32, 7, 3, 1}, d);
  expect_error([&] { u.forward(x, 1, ctx_n, nullptr); }, "encoder_hidden_states");
  expect_error([&] { u.forward(x, NAN, ctx, nullptr); }, "timestep");
  // SDXL without its added conditions, with them of the wrong shape; SD 1.5 given them.
  const Tensor x_xl = input("sdxl.a.sample", d), ctx_xl = input("sdxl.a.encoder_hidden_states", d);
  expect_error([&] { u_xl.forward(x_xl, 1, ctx_xl, nullptr); }, "text_time");
  UNetAddedCond bad{input("sdxl.a.time_ids", d), input("sdxl.a.time_ids", d)};
  expect_error([&] { u_xl.forward(x_xl, 1, ctx_xl, &bad); }, "text_embeds");
  UNetAddedCond bad_ids{input("sdxl.a.text_embeds", d), input("sdxl.a.text_embeds", d)};
  expect_error([&] { u_xl.forward(x_xl, 1, ctx_xl, &bad_ids); }, "time_ids");
  UNetAddedCond good{input("sdxl.a.text_embeds", d), input("sdxl.a.time_ids", d)};
  expect_error([&] { u.forward(x, 1, ctx, &good); }, "addition_embed_type");
  EXPECT_NO_THROW(u_xl.forward(x_xl, 1, ctx_xl, &good));
}
