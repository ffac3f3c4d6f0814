// model/text/gpt2.cpp from an HF checkpoint against transformers' logits
// (tolerances: hf_checkpoint_util.h); llama.cpp's GGUF of it is in
// test_hf_checkpoint.cpp's NewArchitecturesMatchTransformers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/error.h"
#include "engine/session.h"
#include "hf_checkpoint_util.h"
#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "io/quantize.h"
#include "io/tensor_source.h"
#include "model/cache.h"
#include "model/hf.h"
#include "model/quantize_once.h"
#include "model/registry.h"
#include "tensor/ops.h"
#include "tokenizer/tokenizer.h"

namespace {

using namespace kvad::hf_test;

TEST(HfCheckpoint, Gpt2MatchesTransformers) {  // learned positions, LayerNorm + biases, Conv1D transposed, tied head
  check("gpt2", "cpu");
  check("gpt2", "sim");
  auto src = kvad::open_hf_checkpoint((kDir / "gpt2").string());
  const kvad::SourceTensor* qkv = src->find("blk.0.attn_qkv.weight");
  ASSERT_NE(qkv, nullptr);
  EXPECT_EQ(qkv->ne[0], 64);   // n_in: rows of the transposed Conv1D weight
  EXPECT_EQ(qkv->ne[1], 192);  // q | k | v
  std::shared_ptr<kvad::Model> m = kvad::load_model(src, kvad::DeviceOptions{});
  try {
    kvad::Session s(m, 65, 1, 1);  // past the 64 learned positions
    ADD_FAILURE() << "a context longer than n_positions was accepted";
  } catch (const kvad::Error& e) {
    EXPECT_NE(std::string(e.what()).find("learned positions for 64"), std::string::npos) << e.what();
  }
}

}  // namespace
