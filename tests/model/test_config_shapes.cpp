// A checkpoint whose settings contradict its tensors is refused, naming
// both: the setting (for an HF checkpoint the config.json field beside the
// GGUF key it becomes) and the tensor (its HF name beside kvad's). As
// transformers refuses a checkpoint whose weights do not fit its config
// (from_pretrained's size-mismatch error), kvad does not run on the
// tensor's shape: before, a config.json with vocab_size 2^40 next to the
// fixtures' 128-row embedding loaded and ran. The tiny checkpoints are
// tools/make_tiny_hf.py's (tests/fixtures/hf_tiny), their GGUFs llama.cpp's
// converter's.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/error.h"
#include "hf_checkpoint_util.h"
#include "io/gguf.h"
#include "io/tensor_source.h"
#include "model/hf.h"
#include "model/registry.h"

namespace {

namespace fs = std::filesystem;
const fs::path kDir = fs::path(KVAD_SOURCE_DIR) / "tests" / "fixtures" / "hf_tiny";

nlohmann::json config_of(const char* fixture) {
  std::ifstream in(kDir / fixture / "config.json");
  return nlohmann::json::parse(in);
}

// Loads fixture `fixture`'s safetensors under `config` on the CPU; returns
// the error ("" when it loads).
std::string load_error(const char* fixture, const nlohmann::json& config) {
  const fs::path dir = fs::temp_directory_path() / ("kvad-shapes-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(kDir / fixture))
    if (e.path().extension() == ".safetensors" || e.path().filename() == "model.safetensors.index.json")
      fs::copy_file(e.path(), dir / e.path().filename(), fs::copy_options::overwrite_existing);
  std::ofstream(dir / "config.json") << config.dump();
  std::string what;
  try {
    (void)kvad::load_model(kvad::open_hf_checkpoint(dir.string()), kvad::DeviceOptions{});
  } catch (const kvad::Error& e) {
    what = e.what();
  }
  fs::remove_all(dir);
  return what;
}

using kvad::hf_test::WithInt;

std::string gguf_error(const char* fixture, const std::string& key, int64_t value) {
  auto gguf = kvad::gguf_source(kvad::gguf::File::open((kDir / fixture / "llama.cpp-f32.gguf").string()));
  try {
    (void)kvad::load_model(std::make_shared<WithInt>(gguf, key, value), kvad::DeviceOptions{});
  } catch (const kvad::Error& e) {
    return e.what();
  }
  return "";
}

// Every needle is in the message.
void expect_names(const std::string& what, std::initializer_list<const char*> needles) {
  EXPECT_NE(what, "") << "loaded";
  for (const char* n : needles) EXPECT_NE(what.find(n), std::string::npos) << "no '" << n << "' in: " << what;
}

// The HF view says where its keys and tensors come from; a GGUF's are its own.
TEST(ConfigShapes, TheHfViewNamesItsFieldsAndTensors) {
  auto hf = kvad::open_hf_checkpoint((kDir / "llama").string());
  EXPECT_EQ(hf->key_name("llama.embedding_length"), "llama.embedding_length (config.json hidden_size)");
  EXPECT_EQ(hf->key_name("llama.vocab_size"), "llama.vocab_size (config.json vocab_size)");
  EXPECT_EQ(hf->key_name("general.architecture"), "general.architecture");
  EXPECT_EQ(hf->tensor_name("token_embd.weight"), "token_embd.weight (model.embed_tokens.weight)");
  EXPECT_EQ(hf->tensor_name("blk.1.ffn_up.weight"), "blk.1.ffn_up.weight (model.layers.1.mlp.up_proj.weight)");
  EXPECT_EQ(hf->get_int("llama.vocab_size", 0), 128);
  auto gguf = kvad::gguf_source(kvad::gguf::File::open((kDir / "llama3" / "llama.cpp-f32.gguf").string()));
  EXPECT_EQ(gguf->key_name("llama.embedding_length"), "llama.embedding_length");
  EXPECT_EQ(gguf->tensor_name("token_embd.weight"), "token_embd.weight");
}

// The case: vocab_size 2^40 beside a 128-row embedding, and a
// vocabulary one row short, through every architecture's HF table.
TEST(ConfigShapes, VocabSizeOtherThanTheEmbeddingRowsIsRefused) {
  nlohmann::json j = config_of("llama");
  j["vocab_size"] = int64_t{1} << 40;
  expect_names(load_error("llama", j), {"llama.vocab_size (config.json vocab_size) 1099511627776",
                                        "128 rows of tensor token_embd.weight (model.embed_tokens.weight)"});
  for (const char* fixture : {"llama", "gemma3", "gemma2", "qwen2", "qwen3", "phi3", "qwen3moe", "qwen2moe", "mixtral",
                              "gpt_oss", "deepseek_v3", "qwen3next", "qwen35", "gpt2"}) {
    SCOPED_TRACE(fixture);
    nlohmann::json c = config_of(fixture);
    c["vocab_size"] = 127;
    expect_names(load_error(fixture, c), {"(config.json vocab_size) 127", "128 rows of tensor token_embd.weight"});
  }
}

// Widths and counts against the tensors that hold them: the error names the
// GGUF key, the config.json field and the tensor, in kvad's and HF's names.
TEST(ConfigShapes, WidthsAndCountsOtherThanTheTensorsAreRefused) {
  struct Case {
    const char* fixture;
    const char* field;
    int64_t value;
    std::vector<const char*> expect;
  };
  const std::vector<Case> cases = {
      {"llama", "hidden_size", 32,
       {"32 is llama.embedding_length (config.json hidden_size)", "token_embd.weight (model.embed_tokens.weight)"}},
      {"llama", "intermediate_size", 80,
       {"80 is llama.feed_forward_length (config.json intermediate_size)", "(model.layers.0.mlp.gate_proj.weight)"}},
      {"llama", "head_dim", 8,
       {"llama.attention.head_count (config.json num_attention_heads) × llama.attention.key_length (config.json "
        "head_dim)",
        "(model.layers.0.self_attn.q_proj.weight)"}},
      {"llama", "num_key_value_heads", 1,
       {"llama.attention.head_count_kv (config.json num_key_value_heads)", "(model.layers.0.self_attn.k_proj.weight)"}},
      {"gpt2", "n_embd", 32, {"32 is gpt2.embedding_length (config.json n_embd)", "wte.weight"}},
      {"qwen3moe", "num_local_experts", 6,
       {"6 is qwen3moe.expert_count (config.json num_local_experts)", "ffn_gate_inp.weight (model.layers."}},
      {"qwen3moe", "moe_intermediate_size", 24,
       {"24 is qwen3moe.expert_feed_forward_length (config.json moe_intermediate_size)",
        ".mlp.experts.0.gate_proj.weight, ...)"}},
      {"mixtral", "num_local_experts", 6,
       {"6 is llama.expert_count (config.json num_local_experts)", "block_sparse_moe.gate.weight"}},
      {"qwen2moe", "shared_expert_intermediate_size", 48,
       {"qwen2moe.expert_shared_feed_forward_length (config.json shared_expert_intermediate_size)",
        "mlp.shared_expert.gate_proj.weight"}},
      {"deepseek_v3", "moe_intermediate_size", 24,
       {"deepseek2.expert_feed_forward_length (config.json moe_intermediate_size)", "ffn_gate_exps.weight"}},
      {"gpt_oss", "intermediate_size", 48,
       {"gpt-oss.expert_feed_forward_length (config.json intermediate_size)", "ffn_gate_exps.weight"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.fixture) + " " + c.field);
    nlohmann::json j = config_of(c.fixture);
    j[c.field] = c.value;
    const std::string what = load_error(c.fixture, j);
    EXPECT_NE(what.find("has shape"), std::string::npos) << what;
    for (const char* n : c.expect) EXPECT_NE(what.find(n), std::string::npos) << "no '" << n << "' in: " << what;
  }
}

// The same checks on llama.cpp's GGUFs of the same checkpoints, by GGUF key.
TEST(ConfigShapes, GgufKeysOtherThanTheTensorsAreRefused) {
  expect_names(gguf_error("llama3", "llama.vocab_size", int64_t{1} << 40),
               {"llama.vocab_size 1099511627776 differs from the 128 rows of tensor token_embd.weight"});
  expect_names(gguf_error("llama3", "llama.embedding_length", 32),
               {"token_embd.weight has shape [64, 128], expected [32, 128]: 32 is llama.embedding_length"});
  expect_names(gguf_error("llama3", "llama.feed_forward_length", 80),
               {"blk.0.ffn_gate.weight has shape", "80 is llama.feed_forward_length"});
  expect_names(gguf_error("mixtral", "llama.expert_count", 6), {"blk.0.ffn_gate_inp.weight", "6 is llama.expert_count"});
  expect_names(gguf_error("qwen3next", "qwen3next.expert_feed_forward_length", 24),
               {"ffn_gate_exps.weight has shape", "24 is qwen3next.expert_feed_forward_length"});
}

// A source that wraps another by forwarding its getters (as these tests'
// and the fuzzers' editors do) sees the per-layer window pattern as an
// array, as the wrapped source does, and loads with it.
TEST(ConfigShapes, AWrappingSourceKeepsTheWindowPattern) {
  auto hf = kvad::open_hf_checkpoint((kDir / "qwen2_swa").string());
  ASSERT_TRUE(hf->is_array("qwen2.attention.sliding_window_pattern"));
  auto w = std::make_shared<WithInt>(hf, "kvad.unused", 0);
  EXPECT_TRUE(w->is_array("qwen2.attention.sliding_window_pattern"));
  EXPECT_FALSE(w->is_array("qwen2.attention.sliding_window"));
  EXPECT_FALSE(w->is_array("qwen2.attention.no_such_key"));
  EXPECT_NO_THROW((void)kvad::load_model(w, kvad::DeviceOptions{}));
}

// The unedited checkpoints load: their configs' vocab_size is their rows.
TEST(ConfigShapes, ConsistentCheckpointsLoad) {
  for (const auto& e : fs::directory_iterator(kDir)) {
    if (!fs::exists(e.path() / "config.json") || !fs::exists(e.path() / "model.safetensors")) continue;
    const std::string name = e.path().filename().string();
    SCOPED_TRACE(name);
    EXPECT_EQ(load_error(name.c_str(), config_of(name.c_str())), "");
  }
}

}  // namespace
