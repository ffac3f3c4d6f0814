// T5's encoder (model/image/t5_encoder.h) on tiny random T5EncoderModels
// against transformers in f32 (tests/fixtures/t5, made by
// tools/make_t5_fixtures.py): last_hidden_state at PSNR >= 100 dB for the
// gated-GELU (T5 v1.1, one file) and the relu (T5 v1.0, sharded) configs,
// sequences of 1 to 150 tokens; the relative position buckets equal
// transformers' for -300..300; bad ids, lengths and configs are clear errors.
#include <gtest/gtest.h>

#include <cmath>
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
#include "model/image/t5_encoder.h"
#include "tensor/ops.h"

namespace fs = std::filesystem;
using namespace kvad;
using namespace kvad::image;
using kvad::image_test::floats;
using kvad::image_test::host;
using kvad::image_test::ints;
using kvad::test::psnr;

namespace {

fs::path fixtures() { return fs::path(KVAD_SOURCE_DIR) / "tests" / "fixtures" / "t5"; }

class T5 : public ::testing::Test {
 protected:
  std::shared_ptr<const TensorSource> ref_ = safetensors_source((fixtures() / "reference.safetensors").string());
  const SourceTensor& ref(const std::string& name) {
    const SourceTensor* t = ref_->find(name);
    if (!t) throw Error("reference.safetensors has no " + name);
    return *t;
  }
  void check(const std::string& name, int64_t d_model) {
    const std::unique_ptr<T5Encoder> enc = T5Encoder::load((fixtures() / name).string());
    EXPECT_EQ(enc->config().d_model, d_model);
    for (int i = 0; i < 4; ++i) {
      const std::vector<int32_t> ids = ints(ref(name + ".ids." + std::to_string(i)));
      const Tensor h = enc->encode(ids);
      EXPECT_EQ(h.type, DType::F32);
      EXPECT_EQ(h.ne[0], d_model);
      EXPECT_EQ(h.ne[1], static_cast<int64_t>(ids.size()));
      const double db = psnr(host(h), floats(ref(name + ".hidden." + std::to_string(i))));
      std::printf("%s: %zu tokens: PSNR %.1f dB\n", name.c_str(), ids.size(), db);
      EXPECT_GE(db, 100.0) << name << " sequence " << i;
    }
  }
};

TEST_F(T5, BucketsEqualTransformers) {
  for (auto [nb, md] : std::vector<std::pair<int, int>>{{32, 128}, {32, 20}, {16, 12}}) {
    const std::vector<int32_t> want = ints(ref("buckets." + std::to_string(nb) + "." + std::to_string(md)));
    ASSERT_EQ(want.size(), 601u);
    for (int r = -300; r <= 300; ++r)
      EXPECT_EQ(t5_relative_position_bucket(r, nb, md), want[r + 300]) << "relative position " << r << ", " << nb
                                                                         << " buckets, max_distance " << md;
  }
}

TEST_F(T5, GatedGeluEqualsTransformers) { check("gated", 64); }
TEST_F(T5, ReluShardedEqualsTransformers) { check("relu", 32); }

TEST_F(T5, BadInputIsAnError) {
  const std::unique_ptr<T5Encoder> enc = T5Encoder::load((fixtures() / "relu").string());
  const std::vector<int32_t> bad = {1, 2, 128}, neg = {-1};
  EXPECT_THROW(enc->encode(bad), Error);
  EXPECT_THROW(enc->encode(neg), Error);
  EXPECT_THROW(enc->encode({}), Error);
  EXPECT_THROW(enc->encode(std::vector<int32_t>(4097, 1)), Error);
  EXPECT_THROW(T5Encoder::load((fixtures() / "nowhere").string()), Error);
  using nlohmann::json;
  EXPECT_THROW(parse_t5_config(json::parse(R"({"feed_forward_proj": "gated-gelu-x"})"), "c"), Error);
  EXPECT_THROW(parse_t5_config(json::parse(R"({"feed_forward_proj": "double-gelu"})"), "c"), Error);
  EXPECT_THROW(parse_t5_config(json::parse(R"({"feed_forward_proj": "gated-mish"})"), "c"), Error);
  EXPECT_THROW(parse_t5_config(json::parse(R"({"d_model": 0})"), "c"), Error);
  EXPECT_THROW(parse_t5_config(json::parse(R"({"num_heads": 1e9})"), "c"), Error);
  EXPECT_THROW(parse_t5_config(json::parse("[1]"), "c"), Error);
  const T5Config g = parse_t5_config(json::parse(R"({"feed_forward_proj": "gated-gelu"})"), "c");
  EXPECT_TRUE(g.is_gated_act);
  EXPECT_EQ(g.dense_act_fn, "gelu_new");
  const T5Config e = parse_t5_config(json::parse(R"({"feed_forward_proj": "gelu"})"), "c");
  EXPECT_FALSE(e.is_gated_act);
  EXPECT_EQ(e.dense_act_fn, "gelu");
  // A config whose widths contradict the weights names the tensor.
  const fs::path dir = fs::temp_directory_path() / ("kvad_t5_bad_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  json cfg = json::parse(std::ifstream(fixtures() / "relu" / "config.json"));
  cfg["d_ff"] = 50;
  std::ofstream(dir / "config.json") << cfg.dump();
  for (const auto& f : fs::directory_iterator(fixtures() / "relu"))
    if (f.path().filename() != "config.json") fs::copy_file(f.path(), dir / f.path().filename());
  try {
    T5Encoder::load(dir.string());
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("DenseReluDense.wi.weight"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

}  // namespace
