// Multi-token prediction layers (Model::forward_mtp; DeepSeek V3's nextn
// layer in deepseek2.cpp, Qwen3-Next's MTP block in qwen3next.cpp) against
// the step assembled from transformers' own modules
// (tools/make_mtp_reference.py): every position of a prompt, fed the main
// model's pre-norm hidden states (Model::forward's prenorm), and one step
// chained on the layer's own state.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <unistd.h>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/thread_pool.h"
#include "engine/session.h"
#include "hf_checkpoint_util.h"
#include "io/gguf.h"
#include "io/tensor_source.h"
#include "model/hf.h"
#include "model/registry.h"

namespace {

using namespace kvad::hf_test;

struct MtpReference {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;  // position i: the logits for token i + 2
  int32_t chain_guess = 0;
  std::vector<float> chained;
};

MtpReference read_mtp(const fs::path& file) {
  std::ifstream f(file);
  const nlohmann::json j = nlohmann::json::parse(f);
  MtpReference r;
  r.tokens = j["tokens"].get<std::vector<int32_t>>();
  r.logits = j["mtp_logits"].get<std::vector<std::vector<float>>>();
  r.chain_guess = j["chain_guess"].get<int32_t>();
  r.chained = j["chained_logits"].get<std::vector<float>>();
  return r;
}

std::shared_ptr<kvad::Model> load(const std::string& what, const char* device) {
  kvad::DeviceOptions o;
  o.device = device;
  if (what.ends_with(".gguf")) return kvad::load_model(kvad::gguf::File::open((kDir / what).string()), o);
  return kvad::load_model(kvad::open_hf_checkpoint((kDir / what).string()), o);
}

// The main model's prompt with its pre-norm states, then the MTP layer over
// positions 0 .. T-2 (state i, token i + 1) and a chained step at T-1.
void check(const std::string& model, const char* fixture, const char* device, double tol) {
  SCOPED_TRACE(model + " on " + device);
  const MtpReference ref = read_mtp(kDir / fixture / "mtp_logits.json");
  const std::shared_ptr<kvad::Model> m = load(model, device);
  ASSERT_EQ(m->n_mtp(), 1);
  const int64_t E = m->hparams().n_embd, V = m->hparams().n_vocab;
  const int32_t T = static_cast<int32_t>(ref.tokens.size());
  kvad::ThreadPool pool(2);
  std::unique_ptr<kvad::Cache> main = m->new_cache(64, 1, 64, {kvad::DType::F32, kvad::DType::F32});
  std::vector<int32_t> pos(T), seq(T, 0), out(T);
  for (int32_t i = 0; i < T; ++i) pos[i] = out[i] = i;
  std::vector<float> logits(static_cast<size_t>(T * V)), h(static_cast<size_t>(T * E));
  m->forward(pool, *main, {ref.tokens.data(), pos.data(), seq.data(), T, out.data(), T}, logits.data(), h.data());

  std::unique_ptr<kvad::Cache> mc = m->new_mtp_cache(64, 1, 64, {kvad::DType::F32, kvad::DType::F32});
  const int32_t n = T - 1;
  std::vector<float> ml(static_cast<size_t>(n * V)), mh(static_cast<size_t>(n * E));
  m->forward_mtp(pool, *mc, {ref.tokens.data() + 1, pos.data(), seq.data(), n, out.data(), n}, h.data(), ml.data(),
                 mh.data());
  ASSERT_EQ(ref.logits.size(), static_cast<size_t>(n));
  double worst = 0;
  for (int32_t i = 0; i < n; ++i) worst = std::max(worst, rel_err(ref.logits[i], &ml[static_cast<size_t>(i * V)]));
  // The chained step: the argmax of the last row, with the layer's own state.
  const float* last = &ml[static_cast<size_t>((n - 1) * V)];
  EXPECT_EQ(static_cast<int32_t>(std::max_element(last, last + V) - last), ref.chain_guess);
  std::vector<float> cl(static_cast<size_t>(V));
  const int32_t p = n, zero = 0;
  m->forward_mtp(pool, *mc, {&ref.chain_guess, &p, &zero, 1, &zero, 1}, &mh[static_cast<size_t>((n - 1) * E)],
                 cl.data(), nullptr);
  const double chained = rel_err(ref.chained, cl.data());
  std::printf("[mtp] %s %s: %d positions, max relative error %.2e; chained step %.2e\n", model.c_str(), device, n,
              worst, chained);
  EXPECT_LT(worst, tol);
  EXPECT_LT(chained, tol);
}

TEST(Mtp, DeepseekV3MatchesTransformersModules) {
  for (const char* device : {"cpu", "sim"}) check("deepseek_v3_mtp", "deepseek_v3_mtp", device, 1e-5);
}

TEST(Mtp, Qwen3NextMatchesTransformersModules) {
  for (const char* device : {"cpu", "sim"}) check("qwen3next/llama.cpp-mtp-f32.gguf", "qwen3next", device, 1e-5);
}

// The HF checkpoint with Qwen3-Next's mtp.* tensors (the fixture's
// model.safetensors with tools/make_mtp_reference.py's mtp.safetensors as a
// second shard): numbered after the decoder as llama.cpp's converter does,
// the same logits as its GGUF.
TEST(Mtp, Qwen3NextHfCheckpointMatchesTransformersModules) {
  const fs::path dir = fs::temp_directory_path() / ("kvad-mtp-qwen3next-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path src = kDir / "qwen3next";
  fs::copy_file(src / "config.json", dir / "config.json");
  nlohmann::json map = nlohmann::json::object();
  for (const auto& [from, to] : {std::pair<const char*, const char*>{"model.safetensors", "model-00001-of-00002.safetensors"},
                                 {"mtp.safetensors", "model-00002-of-00002.safetensors"}}) {
    fs::copy_file(src / from, dir / to);
    const std::shared_ptr<const kvad::TensorSource> shard = kvad::safetensors_source((dir / to).string());
    for (const kvad::SourceTensor& t : shard->tensors()) map[t.name] = to;
  }
  std::ofstream(dir / "model.safetensors.index.json") << nlohmann::json{{"weight_map", map}}.dump();
  for (const char* device : {"cpu", "sim"}) check(dir.string(), "qwen3next", device, 1e-5);  // kDir / absolute: itself
  fs::remove_all(dir);
}

// A checkpoint without MTP tensors runs none (transformers saves DeepSeek
// V3 without them although its config asks for one), and says so.
TEST(Mtp, AModelWithoutTheLayerRefuses) {
  for (const char* name : {"deepseek_v3", "qwen3next/llama.cpp-f32.gguf", "llama"}) {
    const std::shared_ptr<kvad::Model> m = load(name, "cpu");
    EXPECT_EQ(m->n_mtp(), 0) << name;
    try {
      m->new_mtp_cache(16, 1, 16);
      ADD_FAILURE() << name << ": no error";
    } catch (const kvad::Error& e) {
      EXPECT_NE(std::string(e.what()).find("no multi-token prediction layer"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
