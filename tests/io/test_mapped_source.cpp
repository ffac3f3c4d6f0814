// mapped_source's reshaping rules (io/mapped_source.h): transposed Conv1D
// matrices, per-expert matrices stacked into one 3-D tensor, interleaved
// lanes split and each expert's matrix transposed (gpt-oss), and tensors
// made from settings; bad rules are clear errors naming the tensor.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <unistd.h>
#include <vector>

#include "base/error.h"
#include "io/mapped_source.h"
#include "io/tensor_source.h"

namespace {

namespace fs = std::filesystem;

struct Named {
  std::string name;
  std::vector<int64_t> shape;  // outermost first, as safetensors stores it
  std::vector<float> data;
};

// A safetensors file of f32 tensors (8-byte header length, JSON, bytes).
std::string write_safetensors(const std::vector<Named>& ts) {
  nlohmann::json h = nlohmann::json::object();
  size_t off = 0;
  for (const Named& t : ts) {
    h[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {off, off + t.data.size() * 4}}};
    off += t.data.size() * 4;
  }
  std::string head = h.dump();
  while (head.size() % 8) head += ' ';
  const fs::path p = fs::temp_directory_path() / ("kvad-mapped-" + std::to_string(::getpid()) + ".safetensors");
  std::ofstream f(p, std::ios::binary);
  const uint64_t n = head.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f << head;
  for (const Named& t : ts) f.write(reinterpret_cast<const char*>(t.data.data()), t.data.size() * 4);
  return p.string();
}

const float* floats(const kvad::SourceTensor* t) { return static_cast<const float*>(t->data); }

TEST(MappedSource, TransposesAMatrix) {
  const std::string p = write_safetensors({{"c", {2, 3}, {1, 2, 3, 4, 5, 6}}, {"v", {3}, {1, 2, 3}}});
  auto base = kvad::safetensors_source(p);
  auto m = kvad::mapped_source(base, {{"w", "c", kvad::TensorTransform::Transpose}, {"b", "v"}}, {});
  const kvad::SourceTensor* w = m->find("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->ne[0], 2);  // [3 rows of 2]: row j is column j of the stored [2, 3]
  EXPECT_EQ(w->ne[1], 3);
  const std::vector<float> want = {1, 4, 2, 5, 3, 6};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(floats(w)[i], want[i]);
  EXPECT_THROW(kvad::mapped_source(base, {{"w", "v", kvad::TensorTransform::Transpose}, {"c2", "c"}}, {}),
               kvad::Error);  // a vector
  fs::remove(p);
}

TEST(MappedSource, StacksParts) {
  const std::string p = write_safetensors(
      {{"e0", {2, 2}, {1, 2, 3, 4}}, {"e1", {2, 2}, {5, 6, 7, 8}}, {"e2", {2, 2}, {9, 10, 11, 12}}, {"odd", {4}, {0, 0, 0, 0}}});
  auto base = kvad::safetensors_source(p);
  auto rule = [](const char* name, const char* b, int64_t part) {
    kvad::TensorRename r{name, b};
    r.part = part;
    return r;
  };
  auto m = kvad::mapped_source(base, {rule("x", "e2", 2), rule("x", "e0", 0), rule("x", "e1", 1), {"o", "odd"}}, {});
  const kvad::SourceTensor* x = m->find("x");
  ASSERT_NE(x, nullptr);
  EXPECT_EQ(x->ne, (std::array<int64_t, 4>{2, 2, 3, 1}));
  EXPECT_EQ(x->n_dims, 3);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(floats(x)[i], i + 1.0f);
  try {
    kvad::mapped_source(base, {rule("x", "e0", 0), rule("x", "e2", 2), {"a", "e1"}, {"o", "odd"}}, {});
    ADD_FAILURE() << "a gap in the parts was accepted";
  } catch (const kvad::Error& e) {
    EXPECT_NE(std::string(e.what()).find("part 1 is missing"), std::string::npos) << e.what();
  }
  try {
    kvad::mapped_source(base, {rule("x", "e0", 0), rule("x", "odd", 1), {"a", "e1"}, {"b", "e2"}}, {});
    ADD_FAILURE() << "parts of different shapes were accepted";
  } catch (const kvad::Error& e) {
    EXPECT_NE(std::string(e.what()).find("differs in shape"), std::string::npos) << e.what();
  }
  fs::remove(p);
}

// gpt-oss's gate_up_proj [n_expert, n_in, 2·n_ff]: gate in the even columns,
// up in the odd, each matrix transposed to [n_expert, n_ff, n_in].
TEST(MappedSource, SplitsLanesAndTransposesEachMatrix) {
  // Two experts of [n_in 2, 2·n_ff 4]: value = 100·expert + 10·row + column.
  std::vector<float> gu;
  for (int e = 0; e < 2; ++e)
    for (int r = 0; r < 2; ++r)
      for (int c = 0; c < 4; ++c) gu.push_back(100.0f * e + 10.0f * r + c);
  const std::string p = write_safetensors({{"gu", {2, 2, 4}, gu}, {"bias", {2, 4}, {0, 1, 2, 3, 4, 5, 6, 7}}});
  auto base = kvad::safetensors_source(p);
  auto lane = [](const char* name, const char* b, kvad::TensorTransform t, int64_t l) {
    kvad::TensorRename r{name, b, t};
    r.lanes = 2;
    r.lane = l;
    return r;
  };
  using T = kvad::TensorTransform;
  auto m = kvad::mapped_source(base, {lane("gate", "gu", T::Transpose, 0), lane("up", "gu", T::Transpose, 1),
                                      lane("gate_b", "bias", T::ToF32, 0), lane("up_b", "bias", T::ToF32, 1)}, {});
  const kvad::SourceTensor* g = m->find("gate");
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->ne, (std::array<int64_t, 4>{2, 2, 2, 1}));  // [expert, n_ff, n_in]
  // gate[e][j][i] = gu[e][i][2j]; up[e][j][i] = gu[e][i][2j + 1].
  const std::vector<float> want_g = {0, 10, 2, 12, 100, 110, 102, 112}, want_u = {1, 11, 3, 13, 101, 111, 103, 113};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(floats(g)[i], want_g[i]) << i;
  for (int i = 0; i < 8; ++i) EXPECT_EQ(floats(m->find("up"))[i], want_u[i]) << i;
  const std::vector<float> want_gb = {0, 2, 4, 6}, want_ub = {1, 3, 5, 7};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(floats(m->find("gate_b"))[i], want_gb[i]);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(floats(m->find("up_b"))[i], want_ub[i]);
  // The same lane twice, a lane past the count, and lanes that do not divide
  // the columns are errors; so are f32 "blocks" for an MXFP4 repack.
  EXPECT_THROW(kvad::mapped_source(base, {lane("a", "gu", T::None, 0), lane("b", "gu", T::None, 0), {"c", "bias"}}, {}),
               kvad::Error);
  EXPECT_THROW(kvad::mapped_source(base, {lane("a", "gu", T::None, 2), {"c", "bias"}}, {}), kvad::Error);
  kvad::TensorRename three = lane("a", "gu", T::None, 0);
  three.lanes = 3;
  EXPECT_THROW(kvad::mapped_source(base, {three, {"c", "bias"}}, {}), kvad::Error);
  kvad::TensorRename mx{"m", "gu", T::Mxfp4};
  mx.scale = "bias";
  try {
    kvad::mapped_source(base, {mx}, {});
    ADD_FAILURE() << "f32 tensors were taken as MXFP4 blocks";
  } catch (const kvad::Error& e) {
    EXPECT_NE(std::string(e.what()).find("are not MXFP4 blocks"), std::string::npos) << e.what();
  }
  mx.scale = "missing";
  EXPECT_THROW(kvad::mapped_source(base, {mx, {"c", "bias"}}, {}), kvad::Error);
  fs::remove(p);
}

TEST(MappedSource, SyntheticTensors) {
  const std::string p = write_safetensors({{"v", {3}, {1, 2, 3}}});
  auto base = kvad::safetensors_source(p);
  kvad::SyntheticTensor s{"rope_freqs.weight", {2, 1, 1, 1}, 1, {1.0f, 8.0f}};
  auto m = kvad::mapped_source(base, {{"b", "v"}}, {}, {}, {s});
  ASSERT_NE(m->find("rope_freqs.weight"), nullptr);
  EXPECT_EQ(floats(m->find("rope_freqs.weight"))[1], 8.0f);
  kvad::SyntheticTensor short_data{"f", {3, 1, 1, 1}, 1, {1.0f}};
  EXPECT_THROW(kvad::mapped_source(base, {{"b", "v"}}, {}, {}, {short_data}), kvad::Error);
  kvad::SyntheticTensor clash{"b", {1, 1, 1, 1}, 1, {1.0f}};
  EXPECT_THROW(kvad::mapped_source(base, {{"b", "v"}}, {}, {}, {clash}), kvad::Error);
  fs::remove(p);
}

}  // namespace

namespace {
kvad::TensorRename chunk_rule(const std::string& name, const std::string& base, int64_t chunks, int64_t chunk) {
  kvad::TensorRename r;
  r.name = name;
  r.base = base;
  r.chunks = chunks;
  r.chunk = chunk;
  return r;
}
}  // namespace

// OpenCLIP's fused in_proj [3·n, n] as three [n, n] tensors, in place; every
// chunk must be named once, and the rows must divide.
TEST(MappedSource, CutsChunksInPlace) {
  const std::string p = write_safetensors({{"qkv", {3, 2}, {1, 2, 3, 4, 5, 6}}, {"odd", {4}, {1, 2, 3, 4}}});
  auto base = kvad::safetensors_source(p);
  auto m = kvad::mapped_source(
      base, {chunk_rule("q", "qkv", 3, 0), chunk_rule("k", "qkv", 3, 1), chunk_rule("v", "qkv", 3, 2), {"o", "odd"}}, {});
  const kvad::SourceTensor* k = m->find("k");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->ne[0], 2);
  EXPECT_EQ(k->ne[1], 1);
  EXPECT_EQ(k->shape, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(floats(k)[0], 3);
  EXPECT_EQ(floats(k)[1], 4);
  EXPECT_EQ(k->data, static_cast<const uint8_t*>(base->find("qkv")->data) + 8);  // no copy
  EXPECT_EQ(m->tensor_name("k"), "k (qkv)");
  // q twice; a chunk of rows that do not divide; qkv's v never named.
  EXPECT_THROW(kvad::mapped_source(base, {chunk_rule("q", "qkv", 3, 0), chunk_rule("q2", "qkv", 3, 0),
                                          chunk_rule("v", "qkv", 3, 2), {"o", "odd"}}, {}),
               kvad::Error);
  EXPECT_THROW(kvad::mapped_source(base, {chunk_rule("a", "odd", 3, 0), {"c", "qkv"}}, {}), kvad::Error);
  EXPECT_THROW(kvad::mapped_source(base, {chunk_rule("q", "qkv", 3, 0), chunk_rule("k", "qkv", 3, 1), {"o", "odd"}}, {}),
               kvad::Error);
  fs::remove(p);
}
