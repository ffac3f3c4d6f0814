// Split GGUF models (NAME-00001-of-0000N.gguf): parts written by gguf-py's
// own writer (tools/make_split_gguf.py, split_max_tensors=7) from a tiny
// random llama load as one model whose logits equal the unsplit file's bit
// for bit; a missing or inconsistent part is a clear error.
#include <gtest/gtest.h>

#include <filesystem>

#include "base/error.h"
#include "engine/session.h"
#include "io/gguf.h"
#include "io/tensor_source.h"
#include "model/registry.h"

namespace {

namespace fs = std::filesystem;
const fs::path kDir = fs::path(KVAD_SOURCE_DIR) / "tests" / "fixtures" / "gguf_split";

std::vector<float> logits_of(std::shared_ptr<const kvad::TensorSource> src) {
  std::shared_ptr<kvad::Model> m = kvad::load_model(std::move(src), kvad::DeviceOptions{});
  kvad::Session s(m, 64, 1, 1);
  kvad::Batch b;
  for (int32_t i = 0; i < 9; ++i) b.add((i * 7 + 3) % 50, i, 0, true);
  return s.forward(b);
}

TEST(GgufSplit, PartsLoadAsOneModel) {
  int n = 0;
  std::string prefix;
  ASSERT_TRUE(kvad::gguf_split_name((kDir / "tiny-00002-of-00003.gguf").string(), &prefix, &n));
  EXPECT_EQ(n, 3);
  EXPECT_FALSE(kvad::gguf_split_name((kDir / "tiny.gguf").string(), nullptr, nullptr));
  auto split = kvad::gguf_split_source((kDir / "tiny-00002-of-00003.gguf").string());
  auto whole = kvad::gguf_source(kvad::gguf::File::open((kDir / "tiny.gguf").string()));
  ASSERT_EQ(split->tensors().size(), whole->tensors().size());
  EXPECT_EQ(logits_of(split), logits_of(whole));
}

TEST(GgufSplit, MissingPartIsAClearError) {
  const fs::path tmp = fs::temp_directory_path() / ("kvad-split-" + std::to_string(::getpid()));
  fs::create_directories(tmp);
  fs::copy_file(kDir / "tiny-00001-of-00003.gguf", tmp / "tiny-00001-of-00003.gguf");
  fs::copy_file(kDir / "tiny-00003-of-00003.gguf", tmp / "tiny-00003-of-00003.gguf");
  try {
    kvad::gguf_split_source((tmp / "tiny-00001-of-00003.gguf").string());
    ADD_FAILURE() << "no error";
  } catch (const kvad::Error& e) {
    EXPECT_NE(std::string(e.what()).find("tiny-00002-of-00003.gguf"), std::string::npos) << e.what();
  }
  // A part renamed into another set: its split.no no longer matches.
  fs::copy_file(kDir / "tiny-00003-of-00003.gguf", tmp / "tiny-00002-of-00003.gguf");
  EXPECT_THROW(kvad::gguf_split_source((tmp / "tiny-00001-of-00003.gguf").string()), kvad::Error);
  fs::remove_all(tmp);
}

}  // namespace
