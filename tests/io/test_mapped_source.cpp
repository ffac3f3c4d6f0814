// mapped_source's reshaping rules (io/mapped_source.h): transposed Conv1D
// matrices, per-expert matrices stacked into one 3-D tensor, and tensors
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
