// Pipeline parallel (model/pipeline.h) against one process: run under
// mpirun with 2 and 3 ranks (CTest test_pipeline_mpi2, test_pipeline_mpi3;
// alone, with world size 1, only the split arithmetic runs). Rank 0 loads
// the whole model as well and decodes 32 greedy tokens with both; the
// logits of every step must be bit-identical (the split moves the f32
// hidden state between ranks, it computes nothing differently), and so
// after a rewind (truncate, the recurrent snapshots of Qwen3-Next). The
// models: SmolLM2-135M (the store's GGUF) and transformers' tiny random
// checkpoints of llama, gemma3, qwen3moe, deepseek_v3, qwen3next, gpt2 and
// gpt_oss, and llama.cpp's GGUFs of deepseek_v3 and qwen3next (with its
// multi-token prediction layer, which the last stage holds).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/thread_pool.h"
#include "dist/comm.h"
#include "engine/session.h"
#include "io/gguf.h"
#include "io/tensor_source.h"
#include "model/hf.h"
#include "model/pipeline.h"
#include "model/registry.h"

namespace {

namespace fs = std::filesystem;
using kvad::dist::Comm;

const fs::path kTiny = fs::path(KVAD_SOURCE_DIR) / "tests" / "fixtures" / "hf_tiny";

fs::path store_model(const char* file) {
  const char* home = std::getenv("KVAD_HOME");
  const char* user = std::getenv("HOME");
  const fs::path base = home ? fs::path(home) : fs::path(user ? user : "/root") / ".cache" / "kvad";
  return base / "models" / file;
}

std::shared_ptr<const kvad::TensorSource> open(const fs::path& p) {
  if (fs::is_directory(p)) return kvad::open_hf_checkpoint(p.string());
  return kvad::gguf_source(kvad::gguf::File::open(p.string()));
}

Comm* split_world() {
  if (kvad::dist::launched_size() > 1 && !kvad::dist::mpi_built()) return nullptr;
  Comm& w = kvad::dist::world();
  return w.size() > 1 ? &w : nullptr;
}

// The greedy decode every rank-0 run makes: the prompt in one batch, then
// 32 tokens one at a time, then a rewind to position 5 and the same tokens
// again; every step's logits in order.
std::vector<std::vector<float>> decode(kvad::Session& s, int32_t n_vocab) {
  std::vector<std::vector<float>> out;
  std::vector<int32_t> prompt = {1, 17, 42, 7, 99, 3, 250, 11};
  for (int32_t& t : prompt) t %= n_vocab;
  kvad::Batch b;
  for (size_t i = 0; i < prompt.size(); ++i) b.add(prompt[i], static_cast<int32_t>(i), 0, i + 1 == prompt.size());
  std::vector<int32_t> all = prompt;
  out.push_back(s.forward(b));
  for (int t = 0; t < 32; ++t) {
    const std::vector<float>& l = out.back();
    int32_t best = 0;
    for (int32_t v = 1; v < n_vocab; ++v)
      if (l[v] > l[best]) best = v;
    b.clear();
    b.add(best, static_cast<int32_t>(all.size()), 0, true);
    all.push_back(best);
    out.push_back(s.forward(b));
  }
  const int32_t landed = s.truncate(0, 5);
  out.push_back({static_cast<float>(landed)});
  b.clear();
  for (size_t i = static_cast<size_t>(landed); i < all.size(); ++i)
    b.add(all[i], static_cast<int32_t>(i), 0, i + 1 == all.size() || i % 7 == 0);
  out.push_back(s.forward(b));
  return out;
}

// Every rank: loads its stage of `path`; rank 0 compares with the whole model.
void check_split(const fs::path& path) {
  Comm* comm = split_world();
  if (!comm) GTEST_SKIP() << "not run under mpirun with 2 or more ranks (test_pipeline_mpi2, _mpi3)";
  if (!fs::exists(path)) GTEST_SKIP() << path << " is absent (scripts/setup fetches the store's models)";
  {
    const auto src = open(path);
    const int64_t n = src->get_int(src->get_string("general.architecture", "") + ".block_count", 0);
    if (n < comm->size()) GTEST_SKIP() << path.filename() << " has " << n << " layers, fewer than the ranks";
  }
  kvad::DeviceOptions split;
  split.comm = comm;
  std::shared_ptr<kvad::Model> m = kvad::load_model(open(path), split);
  ASSERT_TRUE(m->pipelined());
  const auto stages = kvad::pipeline_split(m->n_blocks(), comm->size());
  EXPECT_EQ(m->stage_first(), stages[comm->rank()].first);
  EXPECT_EQ(m->stage_last(), stages[comm->rank()].second);
  if (comm->rank() != 0) {
    kvad::ThreadPool pool(1);
    kvad::serve_pipeline_stage(*m, pool);
    return;
  }
  std::shared_ptr<kvad::Model> whole = kvad::load_model(open(path), kvad::DeviceOptions{});
  EXPECT_LT(m->weight_bytes(), whole->weight_bytes());  // rank 0 holds only its part
  const int32_t n_vocab = static_cast<int32_t>(whole->hparams().n_vocab);
  std::vector<std::vector<float>> want, got;
  try {
    kvad::Session ref(whole, 64, 1, 1);
    want = decode(ref, n_vocab);
    kvad::Session s(m, 64, 1, 1);
    got = decode(s, n_vocab);
    EXPECT_LT(s.cache().bytes(), ref.cache().bytes());  // its layers' cache only
  } catch (const std::exception& e) {
    ADD_FAILURE() << e.what();
    kvad::stop_pipeline_stages(*comm, true);  // the other ranks fail too instead of waiting
    return;
  }
  kvad::stop_pipeline_stages(*comm, false);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(got[i].size(), want[i].size()) << "step " << i;
    EXPECT_EQ(std::memcmp(got[i].data(), want[i].data(), want[i].size() * sizeof(float)), 0)
        << path.filename() << ": logits of step " << i << " differ from one process's";
  }
}

TEST(PipelineSplit, EvenAndChosen) {
  using V = std::vector<std::pair<int64_t, int64_t>>;
  EXPECT_EQ(kvad::pipeline_split(30, 2), (V{{0, 15}, {15, 30}}));
  EXPECT_EQ(kvad::pipeline_split(30, 4), (V{{0, 7}, {7, 15}, {15, 23}, {23, 30}}));  // vLLM's get_pp_indices
  EXPECT_EQ(kvad::pipeline_split(3, 2), (V{{0, 2}, {2, 3}}));
  EXPECT_EQ(kvad::pipeline_split(5, 1), (V{{0, 5}}));
  EXPECT_EQ(kvad::pipeline_split(6, 2, {1, 5}), (V{{0, 1}, {1, 6}}));
  EXPECT_THROW(kvad::pipeline_split(2, 3), kvad::Error);           // more stages than layers
  EXPECT_THROW(kvad::pipeline_split(6, 2, {2, 3}), kvad::Error);   // adds up to 5
  EXPECT_THROW(kvad::pipeline_split(6, 2, {6, 0}), kvad::Error);   // an empty stage
  EXPECT_THROW(kvad::pipeline_split(6, 2, {1, 2, 3}), kvad::Error);
  EXPECT_THROW(kvad::pipeline_split(6, 0), kvad::Error);
}

TEST(Pipeline, SmolLM2) { check_split(store_model("smollm2-135m.gguf")); }
TEST(Pipeline, TinyLlama) { check_split(kTiny / "llama"); }
TEST(Pipeline, TinyGemma3) { check_split(kTiny / "gemma3"); }
TEST(Pipeline, TinyQwen3Moe) { check_split(kTiny / "qwen3moe"); }
TEST(Pipeline, TinyDeepseekV3) { check_split(kTiny / "deepseek_v3"); }
TEST(Pipeline, TinyDeepseekV3Gguf) { check_split(kTiny / "deepseek_v3" / "llama.cpp-f32.gguf"); }
TEST(Pipeline, TinyGpt2) { check_split(kTiny / "gpt2"); }
TEST(Pipeline, TinyGptOss) { check_split(kTiny / "gpt_oss"); }
TEST(Pipeline, TinyQwen3Next) { check_split(kTiny / "qwen3next"); }
TEST(Pipeline, TinyQwen3NextGgufWithMtp) { check_split(kTiny / "qwen3next" / "llama.cpp-mtp-f32.gguf"); }

// More stages than the model has layers: the same error on every rank,
// before any weight is taken (tiny llama has 2 layers; 3 ranks).
TEST(Pipeline, MoreStagesThanLayers) {
  Comm* comm = split_world();
  if (!comm || comm->size() < 3) GTEST_SKIP() << "needs 3 ranks (test_pipeline_mpi3)";
  kvad::DeviceOptions split;
  split.comm = comm;
  try {
    kvad::load_model(open(kTiny / "llama"), split);
    ADD_FAILURE() << "loaded 2 layers over " << comm->size() << " stages";
  } catch (const kvad::Error& e) {
    EXPECT_NE(std::string(e.what()).find("pipeline stages for a model of 2 layers"), std::string::npos) << e.what();
  }
}

}  // namespace
