// The HF view (model/hf.h) across architectures: llama.cpp's converter's
// GGUFs of the tiny checkpoints against transformers and against llama.cpp,
// the list-only view, the CUDA row where the machine has one, the rope
// scaling keys, GGUF naming, and malformed configs as clear errors. The
// per-architecture tests are in tests/model/text/, one file per
// src/model/text/ file; the quantize-once cache in test_quantize_once.cpp.
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

// GGUFs written by llama.cpp's converter: the same logits from llama.cpp's
// names and keys (rope_freqs.weight, rope.scaling.* for YaRN,
// rope_factors_short/long, attn_qkv, position_embd, ffn_*_exps).
TEST(LlamaCppGguf, NewArchitecturesMatchTransformers) {
  const kvad::KVTypes f32{kvad::DType::F32, kvad::DType::F32};
  for (const char* name : {"llama3", "qwen2_yarn", "gpt2", "phi3", "phi3_long", "qwen3moe_sparse"})
    for (const char* device : {"cpu", "sim"}) {
      check_source(name, " (llama.cpp GGUF)", llama_cpp_gguf(name), device, 0, 1e-4, "transformers", 64, f32);
      check_source(name, " (llama.cpp GGUF)", llama_cpp_gguf(name), device);
    }
  // gpt-oss: llama.cpp's converter writes no YaRN truncate flag (llama.cpp
  // always rounds the correction dims), so the GGUF gives transformers'
  // logits with rope_parameters.truncate true (tools/make_tiny_hf.py wrote
  // them; truncate false moves them by 2.4e-2).
  for (const char* device : {"cpu", "sim"}) {
    check_source("gpt_oss", " (llama.cpp GGUF)", llama_cpp_gguf("gpt_oss"), device, 0, 1e-4, "transformers (truncate)",
                 64, f32);
    check_source("gpt_oss", " (llama.cpp GGUF)", llama_cpp_gguf("gpt_oss"), device, 0, 1e-3, "transformers (truncate)");
  }
  // llama.cpp's converter writes no sliding window for Mistral (llama.cpp runs
  // it with full attention), so only the positions inside the window agree.
  check_source("mistral", " (llama.cpp GGUF, positions < window 4)", llama_cpp_gguf("mistral"), "cpu", 4, 1e-4,
               "transformers", 64, f32);
  check_source("mistral", " (llama.cpp GGUF, positions < window 4)", llama_cpp_gguf("mistral"), "cpu", 4);
}

// kvad against llama.cpp itself (llama-cpp-python 0.3.36) on the same GGUFs,
// at the positions where llama.cpp implements what transformers does: it
// runs Mistral and Phi-3 without their sliding windows, so only positions
// inside the window are compared there. llama-cpp-python ran with a context
// of 256, past Phi-3's original 64, so llama.cpp took LongRoPE's long factors;
// kvad with a 256-position cache takes them too.
TEST(LlamaCppGguf, MatchesLlamaCpp) {
  for (const char* name : {"llama3", "qwen2_yarn", "gpt2", "qwen3moe_sparse"})
    check_source(name, " (llama.cpp GGUF)", llama_cpp_gguf(name), "cpu", 0, 1e-3, "llama.cpp");
  // gpt-oss: 2e-3, as llama.cpp's own logits are 8.5e-4 from transformers'
  // f32 ones (truncate true) on this model, kvad's 4.6e-4.
  for (const char* device : {"cpu", "sim"})
    check_source("gpt_oss", " (llama.cpp GGUF)", llama_cpp_gguf("gpt_oss"), device, 0, 2e-3, "llama.cpp");
  check_source("mistral", " (llama.cpp GGUF, positions < window 4)", llama_cpp_gguf("mistral"), "cpu", 4, 1e-3,
               "llama.cpp");
  check_source("phi3_long", " (llama.cpp GGUF, positions < window 8)", llama_cpp_gguf("phi3_long"), "cpu", 8, 1e-3,
               "llama.cpp");
  check_source("phi3", " (llama.cpp GGUF, long factors at n_ctx 256, positions < window 8)", llama_cpp_gguf("phi3"),
               "cpu", 8, 1e-3, "llama.cpp", 256);
}

// open_hf_checkpoint(dir, list_only): every tensor listed with the full
// view's name, format, shape and size, but the ones the view would make in
// memory (the stacked experts, GPT-2's transposed Conv1D matrices,
// DeepSeek's dequantized FP8 matrices, gpt-oss's split and repacked
// experts) not made;
// quantize_once refuses such a view on a miss rather than read nulls, and
// quantize_once(dir) on a miss opens the checkpoint in full.
TEST(HfCheckpoint, ListOnlyViewListsWithoutCopying) {
  for (const char* name : {"qwen3moe", "gpt2", "deepseek_v3_fp8", "gpt_oss", "gpt_oss_mxfp4"}) {
    SCOPED_TRACE(name);
    auto full = kvad::open_hf_checkpoint((kDir / name).string());
    auto list = kvad::open_hf_checkpoint((kDir / name).string(), /*list_only=*/true);
    ASSERT_EQ(full->tensors().size(), list->tensors().size());
    int made = 0;
    for (size_t i = 0; i < full->tensors().size(); ++i) {
      const kvad::SourceTensor &a = full->tensors()[i], &b = list->tensors()[i];
      EXPECT_EQ(a.name, b.name);
      EXPECT_EQ(a.type, b.type);
      EXPECT_EQ(a.ne, b.ne);
      EXPECT_EQ(a.n_bytes, b.n_bytes);
      ASSERT_NE(a.data, nullptr) << a.name;
      if (!b.data) ++made;
    }
    if (std::string(name) != "qwen3moe" && std::string(name) != "gpt2") {  // FP8, lanes, MXFP4 repacking
      EXPECT_GT(made, 0);
      continue;
    }
    EXPECT_EQ(made, std::string(name) == "qwen3moe" ? 2 * 3 : 2 * 4);  // 2 sparse layers x 3 stacks; 2 layers x 4 Conv1D
    EXPECT_EQ(list->find(std::string(name) == "qwen3moe" ? "blk.0.ffn_gate_exps.weight" : "blk.0.attn_qkv.weight")->data,
              nullptr);
  }
  const fs::path cache = fs::temp_directory_path() / ("kvad-qlist-" + std::to_string(::getpid()));
  fs::remove_all(cache);
  const kvad::QuantizeOnceKey key{cache.string(), "kvad-test/tiny-qwen3moe", "0123456789abcdef"};
  try {
    kvad::quantize_once(kvad::open_hf_checkpoint((kDir / "qwen3moe").string(), true), "q8_0", key);
    ADD_FAILURE() << "a list-only view was quantized";
  } catch (const kvad::Error& e) {
    EXPECT_NE(std::string(e.what()).find("is listed, not loaded"), std::string::npos) << e.what();
  }
  bool hit = true;
  auto q = kvad::quantize_once((kDir / "qwen3moe").string(), "q8_0", key, &hit);
  EXPECT_FALSE(hit);
  EXPECT_EQ(q->find("blk.0.ffn_gate_exps.weight")->type, kvad::DType::Q8_0);
  fs::remove_all(cache);
}

// The same on CUDA where this machine has it, for fixtures of architectures
// whose ops the CUDA row has (test_registry.cpp). 5e-3: the GPU's f32 products
// sum in another order; a wrong rope factor or q/k/v view is of order 1e-1.
TEST(HfCheckpoint, CudaMatchesTransformers) {
  if (const std::string why = kvad::backend_unavailable("cuda"); !why.empty()) GTEST_SKIP() << why;
  for (const char* name : {"llama3", "mistral", "qwen2_yarn", "gpt2", "phi3", "phi3_long"})
    check_source(name, "", kvad::open_hf_checkpoint((kDir / name).string()), "cuda", 0, 5e-3);
}

TEST(HfCheckpoint, RopeScalingIsWrittenAsLlamaCppDoes) {
  auto l3 = kvad::open_hf_checkpoint((kDir / "llama3").string());
  const kvad::SourceTensor* f = l3->find("rope_freqs.weight");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->ne[0], 8);  // n_rot / 2
  const float* d = static_cast<const float*>(f->data);
  EXPECT_EQ(d[0], 1.0f);   // high frequencies kept
  EXPECT_EQ(d[7], 8.0f);   // low ones divided by factor
  auto yarn = kvad::open_hf_checkpoint((kDir / "qwen2_yarn").string());
  EXPECT_EQ(yarn->get_string("qwen2.rope.scaling.type", ""), "yarn");
  EXPECT_EQ(yarn->get_float("qwen2.rope.scaling.factor", 0), 4.0);
  EXPECT_EQ(yarn->get_int("qwen2.rope.scaling.original_context_length", 0), 256);
  auto mistral = kvad::open_hf_checkpoint((kDir / "mistral").string());
  EXPECT_EQ(mistral->get_int("llama.attention.sliding_window", 0), 4);
}

TEST(HfCheckpoint, NamesAreGgufNames) {
  auto src = kvad::open_hf_checkpoint((kDir / "llama").string());
  EXPECT_NE(src->find("blk.1.attn_q.weight"), nullptr);
  EXPECT_NE(src->find("output.weight"), nullptr);
  EXPECT_EQ(src->find("model.layers.1.self_attn.q_proj.weight"), nullptr);
  EXPECT_EQ(src->get_int("llama.block_count", 0), 2);
  EXPECT_EQ(src->get_string("general.architecture", ""), "llama");
  EXPECT_EQ(src->find("blk.0.attn_norm.weight")->type, kvad::DType::F32);
}

TEST(HfCheckpoint, BadConfigsAreClearErrors) {
  std::ifstream in(kDir / "llama" / "config.json");
  nlohmann::json good = nlohmann::json::parse(in);
  EXPECT_NE(error_of("{not json").find("invalid JSON"), std::string::npos);
  EXPECT_NE(error_of("[]").find("model_type"), std::string::npos);
  nlohmann::json j = good;
  j["model_type"] = "mamba";
  EXPECT_NE(error_of(j.dump()).find("'mamba' is not supported (kvad reads: llama"), std::string::npos);
  j = good;
  j.erase("hidden_size");
  EXPECT_NE(error_of(j.dump()).find("hidden_size"), std::string::npos);
  j = good;
  j["num_hidden_layers"] = "two";
  EXPECT_NE(error_of(j.dump()).find("num_hidden_layers is not an integer"), std::string::npos);
  j = good;
  j["num_hidden_layers"] = 3;  // the checkpoint has 2 layers
  EXPECT_NE(error_of(j.dump()).find("missing tensor blk.2"), std::string::npos);
  j = good;
  j["rope_parameters"]["rope_type"] = "dynamic";
  EXPECT_NE(error_of(j.dump()).find("rope type 'dynamic'"), std::string::npos);
  j = good;
  j["rope_parameters"] = {{"rope_type", "llama3"}, {"rope_theta", 10000.0}, {"factor", 8.0}};
  EXPECT_NE(error_of(j.dump()).find("low_freq_factor"), std::string::npos);
  j = good;
  j["rope_parameters"] = {{"rope_type", "longrope"}, {"rope_theta", 10000.0}, {"short_factor", {1.0, 2.0}}};
  EXPECT_NE(error_of(j.dump()).find("not a list of 8 numbers"), std::string::npos);
  j = good;
  j["sliding_window"] = -3;
  EXPECT_NE(error_of(j.dump()).find("sliding_window"), std::string::npos);
  j = good;
  j["hidden_size"] = 32;  // shapes no longer match
  EXPECT_NE(error_of(j.dump()).find("has shape"), std::string::npos);
}

// What fuzz_model_hparams found: hyper-parameters no tensor of the file can
// hold are refused at load, naming the key, before anything is sized by
// them (a 2^40-layer vector, a 2^40-float YaRN table, a head count whose
// weight-shape products overflow).
TEST(HfCheckpoint, HyperParametersBeyondTheTensorsAreRefused) {
  struct Case {
    const char *model, *key;
    int64_t value;
    const char* expect;
  };
  for (const Case& c : {Case{"llama3", "llama.block_count", int64_t{1} << 40, "block_count"},
                        Case{"gpt_oss", "gpt-oss.attention.key_length", int64_t{1} << 40, "key_length"},
                        Case{"gpt_oss", "gpt-oss.rope.dimension_count", int64_t{1} << 40, "rope.dimension_count"},
                        Case{"deepseek_v3", "deepseek2.attention.head_count", int64_t{1} << 40, "head_count"},
                        Case{"qwen3next", "qwen3next.embedding_length", int64_t{1} << 40, "embedding_length"},
                        Case{"gemma2", "gemma2.attention.head_count", 4096, "head_count"}}) {
    SCOPED_TRACE(std::string(c.model) + " " + c.key);
    auto gguf = kvad::gguf_source(kvad::gguf::File::open((kDir / c.model / "llama.cpp-f32.gguf").string()));
    try {
      (void)kvad::load_model(std::make_shared<WithInt>(gguf, c.key, c.value), kvad::DeviceOptions{});
      ADD_FAILURE() << "loaded";
    } catch (const kvad::Error& e) {
      EXPECT_NE(std::string(e.what()).find(c.expect), std::string::npos) << e.what();
    }
  }
}

// What fuzz_hf_config found: config.json values that sized a table or
// divided before any tensor was checked, and a field of the wrong JSON type
// escaping as nlohmann's exception, are one kvad::Error naming the field.
TEST(HfCheckpoint, ConfigSizesAndTypesTheFuzzerFoundAreClearErrors) {
  struct Case {
    const char* model;
    const char* field;
    nlohmann::json value;
    const char* expect;
  };
  for (const Case& c : {Case{"llama", "num_attention_heads", 0, "num_attention_heads must be positive"},
                        Case{"llama", "num_hidden_layers", int64_t{1} << 40, "num_hidden_layers 1099511627776 is not in"},
                        Case{"llama", "head_dim", int64_t{1} << 40, "head_dim 1099511627776 is not in"},
                        Case{"gpt2", "model_type", "gpt2", ""},  // control: the unedited config loads
                        Case{"qwen3next", "linear_value_head_dim", int64_t{1} << 40, "linear_value_head_dim"},
                        Case{"qwen35", "linear_num_value_heads", int64_t{1} << 40, "linear_num_value_heads"}}) {
    SCOPED_TRACE(std::string(c.model) + " " + c.field);
    std::ifstream in(kDir / c.model / "config.json");
    nlohmann::json j = nlohmann::json::parse(in);
    j[c.field] = c.value;
    const std::string e = error_of(j.dump(), c.model);
    if (std::string(c.expect).empty()) {
      EXPECT_EQ(e, "");
    } else {
      EXPECT_NE(e.find(c.expect), std::string::npos) << e;
    }
  }
  // gpt2's activation_function read as a string (the fuzzer set it to a number).
  std::ifstream in(kDir / "gpt2" / "config.json");
  nlohmann::json j = nlohmann::json::parse(in);
  j["activation_function"] = 7;
  EXPECT_NE(error_of(j.dump(), "gpt2").find("a field has the wrong type"), std::string::npos) << error_of(j.dump(), "gpt2");
}

}  // namespace
