// engine/diffusion/torch_rng.h against torch's own draws
// (tests/fixtures/diffusion/noise.json, tools/make_diffusion_fixtures.py):
// torch.randn with torch.Generator("cpu").manual_seed(seed), bit for bit.
#include <gtest/gtest.h>

#include <bit>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/diffusion/torch_rng.h"
#include "hub/sha256.h"

namespace {

using kvad::diffusion::TorchGenerator;
using kvad::diffusion::torch_randn;

nlohmann::json fixture() {
  std::ifstream f(std::string(KVAD_SOURCE_DIR) + "/tests/fixtures/diffusion/noise.json");
  EXPECT_TRUE(f) << "missing tests/fixtures/diffusion/noise.json";
  std::stringstream ss;
  ss << f.rdbuf();
  return nlohmann::json::parse(ss.str());
}

std::vector<uint32_t> bits(std::span<const float> v) {
  std::vector<uint32_t> b;
  for (float x : v) b.push_back(std::bit_cast<uint32_t>(x));
  return b;
}

TEST(TorchRng, EqualsTorchRandnBitForBit) {
  const nlohmann::json j = fixture();
  int small = 0, large = 0;
  for (const auto& c : j.at("cases")) {
    const uint64_t seed = c.at("seed").get<uint64_t>();
    const size_t n = c.at("n").get<size_t>();
    const std::vector<float> v = torch_randn(seed, n);
    SCOPED_TRACE("seed " + std::to_string(seed) + ", n " + std::to_string(n));
    if (c.contains("bits")) {
      EXPECT_EQ(bits(v), c.at("bits").get<std::vector<uint32_t>>());
      ++small;
    } else {
      kvad::hub::Sha256 h;
      h.update(v.data(), v.size() * sizeof(float));  // little-endian float32, as numpy's "<f4"
      EXPECT_EQ(h.hex_digest(), c.at("sha256").get<std::string>());
      EXPECT_EQ(bits(std::span(v).first(8)), c.at("first_bits").get<std::vector<uint32_t>>());
      EXPECT_EQ(bits(std::span(v).last(8)), c.at("last_bits").get<std::vector<uint32_t>>());
      ++large;
    }
  }
  EXPECT_GE(small, 30);
  EXPECT_GE(large, 8);
}

// One generator drawing 64, 64, 5 and 5 values: the float path leaves the
// stream where torch leaves it, and the double path's cached sine carries
// over from one call to the next.
TEST(TorchRng, OneGeneratorKeepsItsStream) {
  const nlohmann::json s = fixture().at("stream");
  TorchGenerator g(s.at("seed").get<uint64_t>());
  for (const auto& d : s.at("draws")) {
    std::vector<float> v(d.size());
    g.randn(v);
    EXPECT_EQ(bits(v), d.get<std::vector<uint32_t>>());
  }
}

TEST(TorchRng, SeedKeepsItsLow32Bits) {
  EXPECT_EQ(torch_randn(5, 40), torch_randn((uint64_t{1} << 32) + 5, 40));
  EXPECT_NE(torch_randn(5, 40), torch_randn(6, 40));
  // mt19937's first output for seed 5489 (the C++ standard's check value is the 10000th).
  TorchGenerator g(5489);
  EXPECT_EQ(g.random(), 3499211612u);
  EXPECT_TRUE(torch_randn(1, 0).empty());
}

}  // namespace
