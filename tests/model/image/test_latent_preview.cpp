// The latent preview (model/image/latent_preview.h) against what
// tools/fit_latent_preview.py computes with the tables it fitted
// (tests/fixtures/image_pipelines/latent_preview.safetensors): the same RGB8
// bytes (±1 where the f32 sums round across a half), on the CPU and sim.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "base/error.h"
#include "io/tensor_source.h"
#include "model/image/latent_preview.h"
#include "tensor/ops.h"

namespace fs = std::filesystem;
using namespace kvad;
using namespace kvad::image;

namespace {

const SourceTensor& fixture(const std::string& name) {
  static const std::shared_ptr<const TensorSource> src = safetensors_source(
      (fs::path(KVAD_SOURCE_DIR) / "tests" / "fixtures" / "image_pipelines" / "latent_preview.safetensors").string());
  const SourceTensor* t = src->find(name);
  if (!t) throw Error("no fixture tensor " + name);
  return *t;
}

}  // namespace

TEST(LatentPreview, MatchesTheFit) {
  for (const std::string key : {"sd", "wide"}) {
    SCOPED_TRACE(key);
    const SourceTensor& z = fixture(key + ".z");
    const SourceTensor& want = fixture(key + ".rgb8");
    const int64_t C = z.ne[0], w = z.ne[1], h = z.ne[2];
    EXPECT_EQ(C, key == "sd" ? 4 : 16);
    for (const Device d : {Device::cpu(), Device::sim()}) {
      const std::vector<uint8_t> got = latent_preview_rgb(ops::from_host(z.data, DType::F32, z.ne, d));
      ASSERT_EQ(got.size(), static_cast<size_t>(3 * w * h));
      ASSERT_EQ(want.n_bytes, got.size());
      const uint8_t* ref = static_cast<const uint8_t*>(want.data);
      int exact = 0, spread = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        exact += got[i] == ref[i];
        EXPECT_LE(std::abs(int(got[i]) - int(ref[i])), 1) << "byte " << i;
        spread += got[i] != got[0];
      }
      EXPECT_GT(spread, 0) << "a constant picture";
      std::printf("%s on %s: %d of %zu bytes exact, the rest within 1\n", key.c_str(), d.str().c_str(), exact,
                  got.size());
    }
  }
}

TEST(LatentPreview, SampleOfABatch) {
  std::vector<float> v(4 * 3 * 2 * 2, 0.0f);
  for (int i = 0; i < 4 * 3 * 2; ++i) v[4 * 3 * 2 + i] = 5.0f;  // sample 1: large values
  const Tensor z = ops::from_host(v.data(), DType::F32, {4, 3, 2, 2}, Device::cpu());
  const std::vector<uint8_t> a = latent_preview_rgb(z, 0), b = latent_preview_rgb(z, 1);
  EXPECT_EQ(a.size(), 18u);
  EXPECT_NE(a, b);
  const std::vector<float> one(v.begin() + 24, v.end());
  EXPECT_EQ(b, latent_preview_rgb(ops::from_host(one.data(), DType::F32, {4, 3, 2, 1}, Device::cpu())));
  // A zero latent is the bias alone: the same colour everywhere.
  for (size_t i = 3; i < a.size(); ++i) EXPECT_EQ(a[i], a[i % 3]);
}

TEST(LatentPreview, BadInput) {
  const std::vector<float> v(5 * 4, 0.0f);
  EXPECT_THROW(latent_preview_rgb(ops::from_host(v.data(), DType::F32, {5, 2, 2, 1}, Device::cpu())), Error);
  const Tensor z = ops::from_host(v.data(), DType::F32, {4, 5, 1, 1}, Device::cpu());
  EXPECT_THROW(latent_preview_rgb(z, 1), Error);
  EXPECT_THROW(latent_preview_rgb(z, -1), Error);
  EXPECT_THROW(latent_preview_rgb(Tensor{}), Error);
  EXPECT_THROW(latent_preview_rgb(ops::convert(z, DType::F16)), Error);
}
