// FluxTransformer2D (model/image/flux.h) against diffusers' FluxTransformer2DModel in f32 on
// two tiny random transformers (tests/fixtures/flux, tools/make_flux_fixtures.py): 2 double and
// 2 single blocks, head dim 16 over three RoPE axes (4, 6, 6), guidance embedding off (schnell)
// and on (dev), batch 2: PSNR >= 100 dB; every tensor read; inputs that do not fit throw. The
// FluxPipeline folders read, and configs that contradict the weights or each other refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <unistd.h>
#include <vector>

#include "psnr.h"
#include "base/error.h"
#include "io/tensor_source.h"
#include "model/image/flux.h"
#include "model/image/pipeline.h"
#include "model/registry.h"
#include "model/weights.h"
#include "tensor/ops.h"

namespace fs = std::filesystem;
using namespace kvad;
using kvad::test::psnr;
using namespace kvad::image;

namespace {

fs::path dir() { return fs::path(KVAD_SOURCE_DIR) / "tests" / "fixtures" / "flux"; }

class Flux : public ::testing::TestWithParam<std::string> {
 protected:
  std::shared_ptr<const TensorSource> ref_ = safetensors_source((dir() / "transformer.safetensors").string());
  std::vector<float> floats(const std::string& name) const {
    const SourceTensor* t = ref_->find(name);
    if (!t) throw Error("no reference tensor " + name);
    std::vector<float> v(t->n_bytes / 4);
    std::memcpy(v.data(), t->data, t->n_bytes);
    return v;
  }
  Tensor input(const std::string& name) const {
    const SourceTensor* t = ref_->find(name);
    if (!t) throw Error("no reference tensor " + name);
    return ops::from_host(t->data, DType::F32, t->ne, Device::cpu());
  }
  static FluxTransformerConfig config(const std::string& m) {
    const fs::path p = dir() / ("pipeline_" + m) / "transformer" / "config.json";
    std::ifstream in(p);
    return parse_flux_config(nlohmann::json::parse(in), p.string());
  }
  FluxTransformer2D::Input inputs(const std::string& m) const {
    const std::string k = m + ".";
    FluxTransformer2D::Input in;
    in.hidden_states = input(k + "hidden_states");
    in.encoder_hidden_states = input(k + "encoder_hidden_states");
    in.pooled_projections = input(k + "pooled");
    in.timestep = floats(k + "timestep").at(0);
    if (ref_->find(k + "guidance")) in.guidance = floats(k + "guidance").at(0);
    in.img_ids = floats(k + "img_ids");
    in.txt_ids = floats(k + "txt_ids");
    return in;
  }
};

TEST_P(Flux, MatchesDiffusers) {
  const std::string m = GetParam();
  const FluxTransformerConfig c = config(m);
  EXPECT_EQ(c.guidance_embeds, m == "dev");
  EXPECT_EQ(c.axes_dims_rope, (std::vector<int64_t>{4, 6, 6}));
  std::shared_ptr<const TensorSource> w =
      safetensors_source((dir() / ("pipeline_" + m) / "transformer" / "diffusion_pytorch_model.safetensors").string());
  WeightLoader wl(w, DeviceOptions{});
  const FluxTransformer2D t(wl.root(), c);
  wl.finish();  // every tensor read
  const Tensor y = t.forward(inputs(m));
  EXPECT_EQ(y.ne, (std::array<int64_t, 4>{64, 24, 2, 1}));
  std::vector<float> got(static_cast<size_t>(y.n_elements()));
  ops::to_host(ops::cont(y), got.data());
  const double p = psnr(got, floats(m + ".out"));
  std::printf("%s: PSNR %.1f dB\n", m.c_str(), p);
  EXPECT_GE(p, 100);
}

TEST_P(Flux, BadInputsThrow) {
  const std::string m = GetParam();
  std::shared_ptr<const TensorSource> w =
      safetensors_source((dir() / ("pipeline_" + m) / "transformer" / "diffusion_pytorch_model.safetensors").string());
  WeightLoader wl(w, DeviceOptions{});
  const FluxTransformer2D t(wl.root(), config(m));
  FluxTransformer2D::Input in = inputs(m);
  in.guidance = in.guidance ? std::nullopt : std::optional<float>(3.5f);
  EXPECT_THROW(t.forward(in), Error);
  in = inputs(m);
  in.img_ids.pop_back();
  EXPECT_THROW(t.forward(in), Error);
  in = inputs(m);
  in.timestep = NAN;
  EXPECT_THROW(t.forward(in), Error);
  in = inputs(m);
  in.hidden_states = input(m + ".encoder_hidden_states");
  EXPECT_THROW(t.forward(in), Error);
}

INSTANTIATE_TEST_SUITE_P(Tiny, Flux, ::testing::Values("schnell", "dev"));

TEST(FluxConfig, RefusesWhatItCannotRun) {
  auto parse = [](const char* j) { return parse_flux_config(nlohmann::json::parse(j), "config.json"); };
  EXPECT_NO_THROW(parse("{}"));
  EXPECT_EQ(parse("{}").inner_dim(), 3072);
  EXPECT_THROW(parse(R"({"axes_dims_rope": [16, 56, 54]})"), Error);  // sums to 126, not 128
  EXPECT_THROW(parse(R"({"axes_dims_rope": [15, 57, 56]})"), Error);  // odd
  EXPECT_THROW(parse(R"({"patch_size": 2})"), Error);
  EXPECT_THROW(parse(R"({"num_layers": "19"})"), Error);
  EXPECT_THROW(parse(R"({"guidance_embeds": 1})"), Error);
  EXPECT_THROW(parse(R"({"attention_head_dim": 0})"), Error);
}

TEST(FluxPipeline, ReadsTheFolderAndRefusesContradictions) {
  // A copy whose transformer config contradicts its weights or the VAE: one clear error each.
  const fs::path tmp = fs::temp_directory_path() / ("kvad_flux_" + std::to_string(::getpid()));
  fs::remove_all(tmp);
  fs::copy(dir() / "pipeline_dev", tmp, fs::copy_options::recursive | fs::copy_options::copy_symlinks);
  const fs::path cfg = tmp / "transformer" / "config.json";
  nlohmann::json j;
  {
    std::ifstream in(cfg);
    j = nlohmann::json::parse(in);
  }
  auto expect_error = [&](const char* key, const nlohmann::json& v, const std::string& needle) {
    nlohmann::json k = j;
    k[key] = v;
    std::ofstream(cfg) << k.dump();
    try {
      image::open_pipeline(tmp.string());
      ADD_FAILURE() << key << " " << v.dump() << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error("num_layers", 3, "num_layers");
  expect_error("joint_attention_dim", 40, "joint_attention_dim");
  expect_error("in_channels", 16, "latent_channels");
  expect_error("guidance_embeds", false, "guidance_embeds");
  expect_error("pooled_projection_dim", 24, "pooled_projection_dim");
  std::ofstream(tmp / "model_index.json") << R"({"_class_name": "FluxPipeline", "transformer": ["diffusers", "X"]})";
  EXPECT_THROW(image::open_pipeline(tmp.string()), Error);  // components missing
  fs::remove_all(tmp);

  const image::Pipeline pl = image::open_pipeline((dir() / "pipeline_dev").string());
  ASSERT_TRUE(pl.transformer);
  EXPECT_TRUE(pl.transformer->guidance_embeds);
  EXPECT_EQ(pl.vae.latent_channels, 16);
  EXPECT_FALSE(pl.vae.use_quant_conv);
  EXPECT_DOUBLE_EQ(pl.vae.shift_factor, 0.1159);
  EXPECT_DOUBLE_EQ(pl.vae.scaling_factor, 0.3611);
  EXPECT_FALSE(pl.text_encoder_2);
  EXPECT_FALSE(pl.t5_config.empty());
  EXPECT_FALSE(image::open_pipeline((dir() / "pipeline_schnell").string()).transformer->guidance_embeds);
}

}  // namespace
