// The image ops against PyTorch and diffusers (tests/fixtures/image_ops,
// made by tools/make_image_op_fixtures.py; torch is not needed here):
// F.conv2d, torch.nn.GroupNorm, F.interpolate(mode="nearest"), diffusers'
// GEGLU and F.scaled_dot_product_attention, each computed in float64 by
// torch from float32 inputs, on the CPU and on every device present.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "op_check.h"
#include "tensor/ops.h"

namespace {

using kvad::Device;
using kvad::DType;
using kvad::Tensor;
using json = nlohmann::json;
namespace ops = kvad::ops;
using namespace kvad::op_test;

json fixture(const std::string& name) {
  // KVAD_SOURCE_DIR from the environment first (a packed binary run from another tree).
  const char* env = std::getenv("KVAD_SOURCE_DIR");
  const std::string root = env && *env ? env : KVAD_SOURCE_DIR;
  const std::string path = root + "/tests/fixtures/image_ops/" + name + ".json";
  std::ifstream f(path);
  EXPECT_TRUE(f) << "missing " << path;
  std::stringstream ss;
  ss << f.rdbuf();
  return json::parse(ss.str());
}

// RFC 4648 base64 (the fixtures' float32 bytes); throws on a bad character.
std::vector<uint8_t> base64(const std::string& s) {
  std::vector<uint8_t> out;
  uint32_t acc = 0;
  int bits = 0;
  for (char ch : s) {
    if (ch == '=') break;
    const char* tab = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const char* p = std::strchr(tab, ch);
    if (!p || !ch) throw std::runtime_error("bad base64 character");
    acc = (acc << 6) | static_cast<uint32_t>(p - tab);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<uint8_t>(acc >> bits));
    }
  }
  return out;
}

Tensor tensor(const json& j) {
  const Shape ne = j.at("shape").get<Shape>();
  const std::vector<uint8_t> bytes = base64(j.at("f32").get<std::string>());
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));  // little-endian, as x86
  EXPECT_EQ(static_cast<int64_t>(v.size()), ne[0] * ne[1] * ne[2] * ne[3]);
  return ops::from_host(v.data(), DType::F32, ne, Device::cpu());
}

// Compares kvad's result on the CPU (and every device, op_check.h) with
// torch's: max |a - b| / max(1, |b|) <= tol.
void against_torch(const std::string& name, const std::vector<Tensor>& in, const json& want, double tol,
                   const std::function<Tensor(const std::vector<Tensor>&)>& op) {
  const Tensor ref = tensor(want);
  const Tensor got = op(in);
  EXPECT_EQ(got.ne, ref.ne) << name;
  const double e = max_err(host_f32(ref), host_f32(got));
  std::printf("[torch] %-44s cpu max_err %.3g (tol %.3g)\n", name.c_str(), e, tol);
  EXPECT_LE(e, tol) << name;
  check(name, in, 1e-3, op);
}

TEST(ImageOpsTorch, Conv2d) {
  const json doc = fixture("conv2d");
  ASSERT_FALSE(doc.at("cases").empty());
  for (const json& c : doc.at("cases")) {
    const kvad::Conv2dParams p{c.at("stride_w").get<int64_t>(), c.at("stride_h").get<int64_t>(),
                               c.at("pad_w").get<int64_t>(), c.at("pad_h").get<int64_t>()};
    const Tensor x = tensor(c.at("x")), w = tensor(c.at("weight"));
    const Tensor b = c.contains("bias") ? tensor(c.at("bias")) : Tensor{};
    for (DType wt : {DType::F32, DType::F16}) {
      // f16 weights round the torch weights (2^-11 relative each): 2e-3.
      const double tol = wt == DType::F32 ? 1e-5 : 2e-3;
      against_torch("conv2d " + c.at("name").get<std::string>() + " " + kvad::dtype_name(wt), {x, w, b}, c.at("out"),
                    tol, [&](const auto& t) { return ops::conv2d(t[0], ops::convert(ops::conv2d_weight(t[1]), wt), t[2], p); });
    }
  }
}

TEST(ImageOpsTorch, GroupNorm) {
  const json doc = fixture("group_norm");
  ASSERT_FALSE(doc.at("cases").empty());
  for (const json& c : doc.at("cases")) {
    const Tensor x = tensor(c.at("x"));
    const Tensor w = c.contains("weight") ? tensor(c.at("weight")) : Tensor{};
    const Tensor b = c.contains("bias") ? tensor(c.at("bias")) : Tensor{};
    const int64_t groups = c.at("groups");
    const float eps = c.at("eps");
    against_torch("group_norm " + c.at("name").get<std::string>(), {x, w, b}, c.at("out"), 2e-6,
                  [&](const auto& t) { return ops::group_norm(t[0], groups, t[1], t[2], eps); });
  }
}

TEST(ImageOpsTorch, UpsampleNearest) {
  const json doc = fixture("upsample");
  ASSERT_FALSE(doc.at("cases").empty());
  for (const json& c : doc.at("cases")) {
    const int64_t f = c.at("factor");
    against_torch("upsample " + c.at("name").get<std::string>(), {tensor(c.at("x"))}, c.at("out"), 0,
                  [f](const auto& t) { return ops::upsample_nearest2d(t[0], f); });
  }
}

TEST(ImageOpsTorch, Geglu) {
  const json doc = fixture("geglu");
  ASSERT_FALSE(doc.at("cases").empty());
  for (const json& c : doc.at("cases")) {
    const Tensor x = tensor(c.at("x")), w = tensor(c.at("proj_weight")), b = tensor(c.at("proj_bias"));
    against_torch(c.at("name").get<std::string>(), {x, w, b}, c.at("out"), 1e-5,
                  [](const auto& t) { return ops::geglu_split(ops::matmul(t[0], t[1], &t[2])); });
  }
}

TEST(ImageOpsTorch, Attention) {
  const json doc = fixture("attention");
  ASSERT_FALSE(doc.at("cases").empty());
  for (const json& c : doc.at("cases")) {
    const float scale = c.at("scale");
    against_torch("sdpa " + c.at("name").get<std::string>(), {tensor(c.at("q")), tensor(c.at("k")), tensor(c.at("v"))},
                  c.at("out"), 1e-5, [scale](const auto& t) { return ops::sdpa(t[0], t[1], t[2], scale); });
  }
}

}  // namespace
