// The VAE (model/image/vae.h) on the tiny random VAEs of
// tests/fixtures/image_pipelines (sd15/vae, sdxl/vae, vae_wide/) against
// diffusers' AutoencoderKL in f32 (vae.safetensors, made by
// tools/make_vae_fixtures.py): decode, encode (latent_dist.mean) and the
// tiled decode and tiled encode of enable_tiling() at PSNR >= 100 dB; the single file equals
// the folder; the sim device equals the CPU bit for bit; bad input throws.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "image_fixtures.h"
#include "psnr.h"
#include "base/error.h"
#include "io/tensor_source.h"
#include "model/image/pipeline.h"
#include "model/image/vae.h"
#include "model/weights.h"
#include "tensor/ops.h"

namespace fs = std::filesystem;
using namespace kvad;
using kvad::test::psnr;
using namespace kvad::image;
using kvad::image_test::fixtures;
using kvad::image_test::host;

namespace {


const TensorSource& refs() {
  static const std::shared_ptr<const TensorSource> src = safetensors_source((fixtures() / "vae.safetensors").string());
  return *src;
}

// diffusers' _tiled_encode (tools/make_vae_fixtures.py), names "tiled_encode/P.*".
const TensorSource& encode_refs() {
  static const std::shared_ptr<const TensorSource> src =
      safetensors_source((fixtures() / "vae_tiled_encode.safetensors").string());
  return *src;
}

const SourceTensor& reference(const std::string& name) {
  const bool enc = name.rfind("tiled_encode/", 0) == 0;
  const SourceTensor* t = enc ? encode_refs().find(name.substr(13)) : refs().find(name);
  if (!t) throw Error("no reference tensor " + name);
  return *t;
}

// A reference image tensor ([N, H, W, C] as stored: ne {C, W, H, N}) on `d`.
Tensor input(const std::string& name, Device d = Device::cpu()) {
  const SourceTensor& t = reference(name);
  return ops::from_host(t.data, DType::F32, t.ne, d);
}

// Compares `got` with reference `name`: PSNR over the reference's peak
// (10·log10(max|want|² / MSE)) >= 100 dB, printed with the largest |difference|.
void expect_close(const Tensor& got, const std::string& name, const std::string& what) {
  const SourceTensor& want = reference(name);
  EXPECT_EQ(got.ne, want.ne) << what << ": " << shape_str(got);
  const std::vector<float> g = host(got);
  const float* w = static_cast<const float*>(want.data);
  ASSERT_EQ(g.size(), want.n_bytes / 4) << what;
  double peak = 0, se = 0, max_diff = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double d = g[i] - static_cast<double>(w[i]);
    peak = std::max(peak, std::fabs(static_cast<double>(w[i])));
    se += d * d;
    max_diff = std::max(max_diff, std::fabs(d));
  }
  const double psnr = se == 0 ? 999 : 10 * std::log10(peak * peak / (se / static_cast<double>(g.size())));
  std::printf("%-34s PSNR %6.1f dB, max |diff| %.3g (peak %.3g)\n", what.c_str(), psnr, max_diff, peak);
  EXPECT_GE(psnr, 100) << what;
}

VaeTiling tiling_of(const std::string& kind) {
  const SourceTensor& t = reference(kind + ".tiling");
  std::vector<int32_t> v(2);
  std::memcpy(v.data(), t.data, 8);
  return {v[0], v[1]};
}

nlohmann::json read_json(const fs::path& p) {
  std::ifstream f(p);
  return nlohmann::json::parse(f);
}

// A pipeline's VAE on a device, with its loader (which the VAE's weights live in).
struct Loaded {
  Pipeline pl;
  std::unique_ptr<WeightLoader> wl;
  std::unique_ptr<AutoencoderKL> vae;
  Loaded(const std::string& path, const PipelineOptions& o, const std::string& device = "cpu")
      : pl(open_pipeline(path, o)) {
    DeviceOptions d;
    d.device = device;
    wl = std::make_unique<WeightLoader>(pl.weights, d);
    vae = std::make_unique<AutoencoderKL>(wl->root().sub("vae"), pl.vae);
  }
};

// vae_wide/ on its own (a VAE folder is no pipeline): names without a prefix.
struct Wide {
  AutoencoderKLConfig cfg = parse_vae_config(read_json(fixtures() / "vae_wide" / "config.json"), "vae_wide");
  WeightLoader wl;
  AutoencoderKL vae;
  explicit Wide(const std::string& device = "cpu")
      : wl(safetensors_source((fixtures() / "vae_wide" / "diffusion_pytorch_model.safetensors").string()),
           [&] {
             DeviceOptions d;
             d.device = device;
             return d;
           }()),
        vae(wl.root(), cfg) {}
};

void check_pipeline(const std::string& kind) {
  const Loaded l((fixtures() / kind).string(), {});
  const AutoencoderKL& vae = *l.vae;
  EXPECT_EQ(vae.downscale(), 8);
  expect_close(vae.decode(input(kind + ".z")), kind + ".decode", kind + " decode");
  expect_close(vae.encode(input(kind + ".x")), kind + ".mean", kind + " encode");
  const VaeTiling t = tiling_of(kind);
  const Tensor tz = input(kind + ".tiled_z");
  const Tensor tiled = vae.decode(tz, t);
  expect_close(tiled, kind + ".tiled", kind + " tiled decode {" + std::to_string(t.tile) + "," +
                                           std::to_string(t.overlap) + "}");
  // The tiles are really decoded apart: the untiled decode is another image.
  const std::vector<float> a = host(tiled), b = host(vae.decode(tz));
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(double(a[i]) - b[i]));
  EXPECT_GT(d, 1e-2) << "the tiled decode equals the untiled one";
  // A tile as large as the latent is no tiling (diffusers' _decode decides so).
  EXPECT_EQ(host(vae.decode(tz, {std::max(tz.ne[1], tz.ne[2]), 1})), b);
  // The mid-block attention a few query rows at a time (its score bound) is the same attention.
  const Loaded blocks((fixtures() / kind).string(), {});
  const Tensor z = input(kind + ".z");
  blocks.vae->set_attention_scores(7 * z.ne[1] * z.ne[2]);  // 7 query rows a block at the mid blocks (latent size)
  expect_close(blocks.vae->decode(z), kind + ".decode", kind + " decode, attention by 7 rows");
  expect_close(blocks.vae->encode(input(kind + ".x")), kind + ".mean", kind + " encode, attention by 7 rows");
  EXPECT_THROW(blocks.vae->set_attention_scores(0), Error);
  // Every VAE tensor was taken.
  std::string left;
  try {
    l.wl->finish();
  } catch (const Error& e) {
    left = e.what();
  }
  EXPECT_EQ(left.find("vae."), std::string::npos) << left;
}

}  // namespace

TEST(Vae, Sd15AgainstDiffusers) { check_pipeline("sd15"); }

TEST(Vae, SdxlAgainstDiffusers) { check_pipeline("sdxl"); }

// Widths that change from level to level (conv_shortcut), GroupNorm of 4, 16
// latent channels, no quant convs, and an image whose sides are no multiple of f.
TEST(Vae, WideAgainstDiffusers) {
  const Wide w;
  EXPECT_EQ(w.vae.downscale(), 4);
  expect_close(w.vae.decode(input("wide.z")), "wide.decode", "wide decode");
  expect_close(w.vae.encode(input("wide.x")), "wide.mean", "wide encode");
  expect_close(w.vae.encode(input("wide.x_odd")), "wide.mean_odd", "wide encode 21x18");
  w.wl.finish();
}

// diffusers' _tiled_encode (enable_tiling()): tiles cut short at the edges,
// batch 2 (sd15), sides no multiple of f (wide).
void check_tiled_encode(const AutoencoderKL& vae, const std::string& kind) {
  const std::string p = "tiled_encode/" + kind;
  const VaeTiling t = tiling_of(p);
  const Tensor x = input(p + ".tiled_x");
  const Tensor m = vae.encode(x, t);
  expect_close(m, p + ".tiled_mean",
               kind + " tiled encode {" + std::to_string(t.tile) + "," + std::to_string(t.overlap) + "}");
  expect_close(vae.encode(x), p + ".untiled_mean", kind + " untiled encode of the same image");
  const double d = psnr(host(m), host(vae.encode(x)));
  std::printf("%-34s PSNR %6.1f dB against the untiled encode\n", (kind + " tiled encode").c_str(), d);
  EXPECT_LT(d, 60) << "the tiled encode equals the untiled one";
  // A tile as large as the image is no tiling (diffusers' _encode decides so).
  EXPECT_EQ(host(vae.encode(x, {std::max(x.ne[1], x.ne[2]) / vae.downscale() + 1, 1})), host(vae.encode(x)));
  EXPECT_THROW(vae.encode(x, {4, 4}), Error);
}

TEST(Vae, TiledEncodeAgainstDiffusers) {
  for (const std::string kind : {"sd15", "sdxl"}) {
    const Loaded l((fixtures() / kind).string(), {});
    check_tiled_encode(*l.vae, kind);
  }
  const Wide w;
  check_tiled_encode(w.vae, "wide");
}

// The tiny VAEs' sample_size 64 at f = 8: diffusers' default tiles of 8 latents, overlap 2, as sdxl.tiled used.
TEST(Vae, DiffusersTiling) {
  const Pipeline pl = open_pipeline((fixtures() / "sdxl").string());
  const VaeTiling t = diffusers_tiling(pl.vae), want = tiling_of("sdxl");
  EXPECT_EQ(t.tile, want.tile);
  EXPECT_EQ(t.overlap, want.overlap);
  AutoencoderKLConfig sd15;  // SD 1.5's own: sample_size 512, 4 levels
  sd15.sample_size = 512;
  sd15.block_out_channels = {128, 256, 512, 512};
  EXPECT_EQ(diffusers_tiling(sd15).tile, 64);
  EXPECT_EQ(diffusers_tiling(sd15).overlap, 16);
}

TEST(Vae, SingleFileEqualsFolder) {
  for (const std::string kind : {"sd15", "sdxl"}) {
    SCOPED_TRACE(kind);
    PipelineOptions o;
    o.config = (fixtures() / kind).string();
    const Loaded folder((fixtures() / kind).string(), {}), file((fixtures() / (kind + ".safetensors")).string(), o);
    const Tensor z = input(kind + ".z"), x = input(kind + ".x");
    EXPECT_EQ(host(folder.vae->decode(z)), host(file.vae->decode(z)));
    EXPECT_EQ(host(folder.vae->encode(x)), host(file.vae->encode(x)));
  }
}

// The sim device runs the CPU row's kernels on its own memory: the same bits.
TEST(Vae, SimEqualsCpu) {
  const Loaded cpu((fixtures() / "sd15").string(), {}), sim((fixtures() / "sd15").string(), {}, "sim");
  EXPECT_EQ(sim.vae->device(), Device::sim());
  const Device s = Device::sim();
  const Tensor out = sim.vae->decode(input("sd15.z", s));
  EXPECT_EQ(out.device(), s);
  EXPECT_EQ(host(out), host(cpu.vae->decode(input("sd15.z"))));
  EXPECT_EQ(host(sim.vae->encode(input("sd15.x", s))), host(cpu.vae->encode(input("sd15.x"))));
  const VaeTiling t = tiling_of("sd15");
  EXPECT_EQ(host(sim.vae->decode(input("sd15.tiled_z", s), t)), host(cpu.vae->decode(input("sd15.tiled_z"), t)));
  const VaeTiling te = tiling_of("tiled_encode/sd15");
  EXPECT_EQ(host(sim.vae->encode(input("tiled_encode/sd15.tiled_x", s), te)),
            host(cpu.vae->encode(input("tiled_encode/sd15.tiled_x"), te)));
  const Wide wc, ws("sim");
  EXPECT_EQ(host(ws.vae.decode(input("wide.z", s))), host(wc.vae.decode(input("wide.z"))));
  EXPECT_EQ(host(ws.vae.encode(input("wide.x_odd", s))), host(wc.vae.encode(input("wide.x_odd"))));
}

TEST(Vae, BadInput) {
  const Loaded l((fixtures() / "sd15").string(), {});
  const AutoencoderKL& vae = *l.vae;
  const std::vector<float> zeros(3 * 16 * 16 * 2, 0.0f);
  const auto cpu = [&](std::array<int64_t, 4> ne, DType t = DType::F32) {
    return ops::from_host(zeros.data(), t, ne, Device::cpu());
  };
  const auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string m = message([&] { vae.decode(cpu({3, 4, 4, 1})); });  // 3 channels, not 4
  EXPECT_NE(m.find("latent_channels 4"), std::string::npos) << m;
  EXPECT_NE(message([&] { vae.encode(cpu({4, 16, 16, 1})); }).find("in_channels 3"), std::string::npos);
  EXPECT_THROW(vae.decode(Tensor{}), Error);
  EXPECT_THROW(vae.decode(cpu({4, 4, 4, 1}, DType::F16)), Error);
  EXPECT_THROW(vae.decode(ops::permute(cpu({4, 4, 4, 1}), {0, 2, 1, 3})), Error);  // strided
  EXPECT_THROW(vae.decode(ops::to(cpu({4, 4, 4, 1}), Device::sim())), Error);      // another device
  EXPECT_THROW(vae.decode(cpu({4, 4, 4, 1}), {4, 4}), Error);                       // overlap >= tile
  EXPECT_THROW(vae.decode(cpu({4, 4, 4, 1}), {-1, 0}), Error);
  EXPECT_THROW(vae.decode(cpu({4, 4, 4, 1}), {2, -1}), Error);
  EXPECT_THROW(vae.encode(cpu({3, 4, 16, 1})), Error);  // narrower than f = 8
  // A config whose widths the weights do not have names the tensor.
  AutoencoderKLConfig c = l.pl.vae;
  c.block_out_channels = {64, 64, 64, 64};
  WeightLoader fresh(l.pl.weights, DeviceOptions{});
  const std::string bad = message([&] { AutoencoderKL vae64(fresh.root().sub("vae"), c); });
  EXPECT_NE(bad.find("vae.encoder.conv_in.weight"), std::string::npos) << bad;
}
