// model/text/llama.cpp's architectures from HF checkpoints and llama.cpp's
// GGUFs of them: llama, Llama 3's rope scaling, Mistral, Qwen2 (YaRN,
// sliding window), Qwen3, Phi-3 (LongRoPE), Qwen3-MoE, Qwen2-MoE and
// Mixtral, against transformers' logits (tolerances: hf_checkpoint_util.h).
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

TEST(HfCheckpoint, LlamaMatchesTransformers) {
  check("llama", "cpu");
  check("llama", "sim");
}

TEST(HfCheckpoint, Qwen2MatchesTransformers) {  // Q/K/V biases, tied head
  check("qwen2", "cpu");
  check("qwen2", "sim");
}

TEST(HfCheckpoint, Qwen3MatchesTransformers) {  // QK-norm, head_dim != n_embd / n_head, untied head
  check("qwen3", "cpu");
  check("qwen3", "sim");
}

// Rope options shared by every architecture (model/rope.h).
TEST(HfCheckpoint, Llama3RopeScalingMatchesTransformers) {  // rope_freqs from rope_parameters
  check("llama3", "cpu");
  check("llama3", "sim");
}

TEST(HfCheckpoint, MistralMatchesTransformers) {  // sliding window 4 < 14 tokens, linear rope scaling, 4:1 GQA
  check("mistral", "cpu");
  check("mistral", "sim");
}

TEST(HfCheckpoint, YarnMatchesTransformers) {  // qwen2 with YaRN factor 4
  check("qwen2_yarn", "cpu");
  check("qwen2_yarn", "sim");
}

// YaRN with truncate: false (tools/make_tiny_hf.py: qwen2_yarn's weights,
// beta_fast 20, beta_slow 1.5): the correction dims used as computed. The
// same checkpoint read with truncate true is measurably off transformers'.
TEST(HfCheckpoint, YarnWithoutTruncationMatchesTransformers) {
  check("qwen2_yarn_notrunc", "cpu");
  check("qwen2_yarn_notrunc", "sim");
  auto src = kvad::open_hf_checkpoint((kDir / "qwen2_yarn_notrunc").string());
  EXPECT_EQ(src->get_int("kvad.rope.scaling.yarn_truncate", 1), 0);
  std::ifstream in(kDir / "qwen2_yarn_notrunc" / "config.json");
  nlohmann::json cfg = nlohmann::json::parse(in);
  cfg["rope_parameters"]["truncate"] = true;
  const Scratch truncated(cfg.dump(), "qwen2_yarn_notrunc");
  const double off = check_source("qwen2_yarn_notrunc", " (read with truncate true)",
                                  kvad::open_hf_checkpoint(truncated.dir.string()), "cpu", 0, INFINITY,
                                  "transformers", 64, {kvad::DType::F32, kvad::DType::F32});
  EXPECT_GT(off, 1e-3);
}

// Qwen2 with use_sliding_window (window 4 < 14 tokens, max_window_layers 1
// of 3): layer 0 full, layers 1-2 windowed, from the config's layer_types
// and, without them, from max_window_layers; without use_sliding_window the
// window is ignored, as transformers ignores it (released Qwen2.5 configs
// carry sliding_window with use_sliding_window false).
TEST(HfCheckpoint, Qwen2SlidingWindowMatchesTransformers) {
  check("qwen2_swa", "cpu");
  check("qwen2_swa", "sim");
  auto src = kvad::open_hf_checkpoint((kDir / "qwen2_swa").string());
  EXPECT_EQ(src->get_int("qwen2.attention.sliding_window", 0), 4);
  EXPECT_EQ(src->get_bool_array("qwen2.attention.sliding_window_pattern"), (std::vector<bool>{false, true, true}));
  std::ifstream in(kDir / "qwen2_swa" / "config.json");
  const nlohmann::json cfg = nlohmann::json::parse(in);
  nlohmann::json j = cfg;
  j.erase("layer_types");  // transformers 4's configs: max_window_layers alone
  {
    const Scratch s(j.dump(), "qwen2_swa");
    auto no_types = kvad::open_hf_checkpoint(s.dir.string());
    EXPECT_EQ(no_types->get_bool_array("qwen2.attention.sliding_window_pattern"),
              (std::vector<bool>{false, true, true}));
    check_source("qwen2_swa", " (max_window_layers)", no_types, "cpu", 0, 1e-4, "transformers", 64,
                 {kvad::DType::F32, kvad::DType::F32});
  }
  j = cfg;
  j["use_sliding_window"] = false;
  {
    const Scratch s(j.dump(), "qwen2_swa");
    auto off = kvad::open_hf_checkpoint(s.dir.string());
    EXPECT_FALSE(off->has("qwen2.attention.sliding_window"));
    EXPECT_FALSE(off->has("qwen2.attention.sliding_window_pattern"));
    const double err = check_source("qwen2_swa", " (use_sliding_window false)", off, "cpu", 0, INFINITY,
                                    "transformers", 64, {kvad::DType::F32, kvad::DType::F32});
    EXPECT_GT(err, 1e-3);  // full attention everywhere: not transformers' windowed logits
  }
  j = cfg;
  j["layer_types"] = {"full_attention", "sliding_attention"};  // 2 entries for 3 layers
  {
    const Scratch s(j.dump(), "qwen2_swa");
    try {
      kvad::open_hf_checkpoint(s.dir.string());
      ADD_FAILURE() << "a short layer_types was accepted";
    } catch (const kvad::Error& e) {
      EXPECT_NE(std::string(e.what()).find("layer_types does not list every layer"), std::string::npos) << e.what();
    }
  }
}

// Fused qkv_proj / gate_up_proj, partial rotary (8 of 16), LongRoPE, sliding window 8.
TEST(HfCheckpoint, Phi3MatchesTransformers) {  // short factors: context 64 <= original 64
  check("phi3", "cpu");
  check("phi3", "sim");
}

TEST(HfCheckpoint, Phi3LongFactorsMatchTransformers) {  // long factors: context 64 > original 8
  check("phi3_long", "cpu");
  check("phi3_long", "sim");
  auto src = kvad::open_hf_checkpoint((kDir / "phi3_long").string());
  EXPECT_NE(src->find("rope_factors_long.weight"), nullptr);
  EXPECT_NE(src->find("rope_factors_short.weight"), nullptr);
  EXPECT_EQ(src->get_int("phi3.rope.dimension_count", 0), 8);
  EXPECT_NEAR(src->get_float("phi3.rope.scaling.attn_factor", 0), std::sqrt(1 + std::log(32.0) / std::log(8.0)), 1e-9);
}

// 8 experts, top-2 renormalised, layer 1 dense (mlp_only_layers); HF's
// per-expert matrices stacked into GGUF's 3-D ffn_*_exps.
TEST(HfCheckpoint, Qwen3MoeMatchesTransformers) {
  check("qwen3moe", "cpu");
  check("qwen3moe", "sim");
  auto src = kvad::open_hf_checkpoint((kDir / "qwen3moe").string());
  const kvad::SourceTensor* g = src->find("blk.0.ffn_gate_exps.weight");
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->ne, (std::array<int64_t, 4>{64, 32, 8, 1}));
  EXPECT_NE(src->find("blk.1.ffn_gate.weight"), nullptr);  // the dense layer
  EXPECT_EQ(src->find("blk.1.ffn_gate_inp.weight"), nullptr);
  kvad::DeviceOptions cuda;
  cuda.device = "cuda";
  try {
    kvad::load_model(src, cuda);
  } catch (const kvad::Error& e) {  // without CUDA: the build/device says so; with it, the registry
    const std::string what = e.what();
    EXPECT_TRUE(what.find("CUDA") != std::string::npos || what.find("qwen3moe runs on: cpu, sim") != std::string::npos)
        << what;
  }
}

TEST(HfCheckpoint, Qwen3MoeAllSparseMatchesTransformers) {  // 4 experts, top-2, renormalised
  check("qwen3moe_sparse", "cpu");
  check("qwen3moe_sparse", "sim");
}

// Both paths give the same Llama 3 frequencies: kvad's rope_freqs.weight made
// from config.json equals the one llama.cpp's converter wrote.
TEST(LlamaCppGguf, Llama3RopeFreqsEqualTheConverters) {
  auto ours = kvad::open_hf_checkpoint((kDir / "llama3").string());
  auto theirs = llama_cpp_gguf("llama3");
  const kvad::SourceTensor *a = ours->find("rope_freqs.weight"), *b = theirs->find("rope_freqs.weight");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_EQ(a->ne, b->ne);
  for (int64_t i = 0; i < a->ne[0]; ++i)
    EXPECT_NEAR(static_cast<const float*>(a->data)[i], static_cast<const float*>(b->data)[i], 1e-6) << i;
}

// ---- Qwen2-MoE (tools/make_tiny_hf.py qwen2moe, qwen2moe_dense) ----------
// Qwen2's attention (random q/k/v biases, GQA 2:1), 8 experts top-2 and a
// shared expert (64 wide in qwen2moe, 48 in qwen2moe_dense; experts 32,
// dense MLP 96) behind a per-token
// sigmoid gate, untied head. qwen2moe: every layer sparse, norm_topk_prob
// false (Qwen2MoeConfig's default); qwen2moe_dense: layer 1 dense
// (mlp_only_layers), norm_topk_prob true.

// kvad --quant none against transformers: f32 KV to 1e-4, f16 KV to 1e-3,
// cpu and sim, one prefill and token by token. The HF view holds the shared
// expert under llama.cpp's names, the gate as [n_embd, 1]; the dense layer
// keeps ffn_gate/up/down and no router. Reading the router renormalised
// (norm_topk_prob true on the qwen2moe weights) is measurably off
// transformers, and a file without the shared expert's gate is refused.
TEST(HfCheckpoint, Qwen2MoeMatchesTransformers) {
  for (const char* name : {"qwen2moe", "qwen2moe_dense"})
    for (const char* device : {"cpu", "sim"}) check(name, device);
  auto src = kvad::open_hf_checkpoint((kDir / "qwen2moe").string());
  EXPECT_EQ(src->get_string("general.architecture", ""), "qwen2moe");
  EXPECT_EQ(src->get_int("kvad.moe.norm_topk_prob", -1), 0);
  EXPECT_EQ(src->get_int("qwen2moe.expert_shared_feed_forward_length", 0), 64);
  const kvad::SourceTensor* gate = src->find("blk.0.ffn_gate_inp_shexp.weight");
  ASSERT_NE(gate, nullptr);
  EXPECT_EQ(gate->ne, (std::array<int64_t, 4>{64, 1, 1, 1}));
  const kvad::SourceTensor* up = src->find("blk.2.ffn_up_shexp.weight");
  ASSERT_NE(up, nullptr);
  EXPECT_EQ(up->ne, (std::array<int64_t, 4>{64, 64, 1, 1}));
  EXPECT_NE(src->find("blk.0.attn_q.bias"), nullptr);
  auto dense = kvad::open_hf_checkpoint((kDir / "qwen2moe_dense").string());
  EXPECT_EQ(dense->get_int("kvad.moe.norm_topk_prob", -1), 1);
  EXPECT_NE(dense->find("blk.1.ffn_gate.weight"), nullptr);
  EXPECT_EQ(dense->find("blk.1.ffn_gate_inp.weight"), nullptr);
  EXPECT_EQ(dense->find("blk.1.ffn_gate_shexp.weight"), nullptr);
  EXPECT_NE(dense->find("blk.2.ffn_gate_inp_shexp.weight"), nullptr);

  std::ifstream in(kDir / "qwen2moe" / "config.json");
  nlohmann::json cfg = nlohmann::json::parse(in);
  cfg["norm_topk_prob"] = true;
  const Scratch renorm(cfg.dump(), "qwen2moe");
  const double off = check_source("qwen2moe", " (read with norm_topk_prob true)",
                                  kvad::open_hf_checkpoint(renorm.dir.string()), "cpu", 0, INFINITY, "transformers",
                                  64, {kvad::DType::F32, kvad::DType::F32});
  EXPECT_GT(off, 1e-3);
  try {
    kvad::load_model(std::make_shared<Without>(src, std::vector<std::string>{"blk.1.ffn_gate_inp_shexp.weight"}),
                     kvad::DeviceOptions{});
    ADD_FAILURE() << "a qwen2moe file without the shared expert's gate was accepted";
  } catch (const kvad::Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing tensor blk.1.ffn_gate_inp_shexp.weight"), std::string::npos)
        << e.what();
  }
}

// use_sliding_window (tools/make_tiny_hf.py qwen2moe_swa: qwen2moe's weights,
// window 4 < 14 tokens, layer_types sliding / full / sliding as
// Qwen2MoeConfig derives them; windowed logits 0.17 from full attention's):
// the layers layer_types marks attend to the window, on cpu and sim. A
// config without layer_types is refused, not guessed.
TEST(HfCheckpoint, Qwen2MoeSlidingWindowMatchesTransformers) {
  std::ifstream in(kDir / "qwen2moe_swa" / "config.json");
  nlohmann::json cfg = nlohmann::json::parse(in);
  const Scratch s(cfg.dump(), "qwen2moe");
  auto src = kvad::open_hf_checkpoint(s.dir.string());
  EXPECT_EQ(src->get_int("qwen2moe.attention.sliding_window", 0), 4);
  EXPECT_EQ(src->get_bool_array("qwen2moe.attention.sliding_window_pattern"), (std::vector<bool>{true, false, true}));
  for (const char* device : {"cpu", "sim"}) {
    check_source("qwen2moe_swa", "", src, device, 0, 1e-4, "transformers", 64, {kvad::DType::F32, kvad::DType::F32});
    check_source("qwen2moe_swa", "", src, device, 0, 1e-3, "transformers", 64, {});
  }
  cfg.erase("layer_types");
  EXPECT_NE(error_of(cfg.dump(), "qwen2moe").find("use_sliding_window needs layer_types"), std::string::npos);
}

// llama.cpp's converter's GGUF of qwen2moe (tools/convert_tiny_gguf.py; no
// kvad.* keys, so the router is read unrenormalised, as llama.cpp's qwen2moe
// graph does): against transformers (f32 KV) to 1e-4 on cpu and sim, and
// against llama.cpp's own logits (llama-cpp-python 0.3.36, f16 KV; llama.cpp
// is itself 2.4e-4 from transformers) to 1e-3 as the other architectures.
// Without qwen2moe.expert_feed_forward_length and
// expert_shared_feed_forward_length (GGUFs from before the converter wrote
// them) the widths are llama.cpp's fallbacks, which this checkpoint's sizes
// satisfy (64 / top-2 = 32; shared 64), and the logits are the same.
// Its quantize-once file is llama.cpp's layout: every tensor of kvad
// quantize of the converter's f32 file is in it, with the same bytes.
TEST(LlamaCppGguf, Qwen2MoeMatchesTransformersAndLlamaCpp) {
  const kvad::KVTypes f32{kvad::DType::F32, kvad::DType::F32};
  auto gguf = llama_cpp_gguf("qwen2moe");
  EXPECT_FALSE(gguf->has("kvad.moe.norm_topk_prob"));
  EXPECT_EQ(gguf->get_int("qwen2moe.expert_shared_feed_forward_length", 0), 64);
  for (const char* device : {"cpu", "sim"})
    check_source("qwen2moe", " (llama.cpp GGUF)", gguf, device, 0, 1e-4, "transformers", 64, f32);
  check_source("qwen2moe", " (llama.cpp GGUF)", gguf, "cpu", 0, 1e-3, "llama.cpp");
  check_source("qwen2moe", " (llama.cpp GGUF without the expert widths)",
               std::make_shared<Without>(gguf, std::vector<std::string>{"qwen2moe.expert_feed_forward_length",
                                                                       "qwen2moe.expert_shared_feed_forward_length"}),
               "cpu", 0, 1e-3, "llama.cpp");

  // Its quantize-once file: QuantizeOnceWritesLlamaCppsLayout.
}

// ---- Mixtral (tools/make_tiny_hf.py mixtral, mixtral_swa) ----------------
// Mistral's attention (GQA 2:1) and in both layers 8 SwiGLU experts (48
// wide), top-2, softmax weights renormalised; untied head. HF model_type
// mixtral reads as GGUF "llama" with llama.expert_count / expert_used_count,
// as llama.cpp's converter writes it.

// kvad --quant none against transformers: f32 KV to 1e-4, f16 KV to 1e-3,
// cpu and sim, one prefill and token by token. The HF view stacks
// block_sparse_moe.experts.E.w1/w3/w2 into ffn_{gate,up,down}_exps and
// writes no expert_feed_forward_length (the experts are
// feed_forward_length wide). Reading the router unrenormalised
// (kvad.moe.norm_topk_prob 0) is measurably off transformers; a config
// with more experts per token than experts is refused.
TEST(HfCheckpoint, MixtralMatchesTransformers) {
  for (const char* device : {"cpu", "sim"}) check("mixtral", device);
  auto src = kvad::open_hf_checkpoint((kDir / "mixtral").string());
  EXPECT_EQ(src->get_string("general.architecture", ""), "llama");
  EXPECT_EQ(src->get_int("llama.expert_count", 0), 8);
  EXPECT_EQ(src->get_int("llama.expert_used_count", 0), 2);
  EXPECT_FALSE(src->has("llama.expert_feed_forward_length"));
  EXPECT_FALSE(src->has("llama.attention.sliding_window"));  // sliding_window null
  const kvad::SourceTensor* down = src->find("blk.1.ffn_down_exps.weight");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->ne, (std::array<int64_t, 4>{48, 64, 8, 1}));
  const kvad::SourceTensor* router = src->find("blk.0.ffn_gate_inp.weight");
  ASSERT_NE(router, nullptr);
  EXPECT_EQ(router->ne, (std::array<int64_t, 4>{64, 8, 1, 1}));

  const double off = check_source("mixtral", " (router not renormalised)",
                                  std::make_shared<WithInt>(src, "kvad.moe.norm_topk_prob", 0), "cpu", 0, INFINITY,
                                  "transformers", 64, {kvad::DType::F32, kvad::DType::F32});
  EXPECT_GT(off, 1e-2);

  std::ifstream in(kDir / "mixtral" / "config.json");
  nlohmann::json cfg = nlohmann::json::parse(in);
  cfg["num_experts_per_tok"] = 9;
  EXPECT_NE(error_of(cfg.dump(), "mixtral").find("num_experts_per_tok must be in 1..num_local_experts"),
            std::string::npos);
  cfg["num_experts_per_tok"] = 2;
  cfg.erase("num_local_experts");
  EXPECT_NE(error_of(cfg.dump(), "mixtral").find("num_local_experts"), std::string::npos);
}

// sliding_window 4 < 14 tokens (mixtral_swa: mixtral's weights; windowed
// logits 0.80 from full attention's): every layer attends to the window,
// as transformers' MixtralModel masks it, on cpu and sim.
TEST(HfCheckpoint, MixtralSlidingWindowMatchesTransformers) {
  std::ifstream in(kDir / "mixtral_swa" / "config.json");
  const Scratch s(nlohmann::json::parse(in).dump(), "mixtral");
  auto src = kvad::open_hf_checkpoint(s.dir.string());
  EXPECT_EQ(src->get_int("llama.attention.sliding_window", 0), 4);
  for (const char* device : {"cpu", "sim"}) {
    check_source("mixtral_swa", "", src, device, 0, 1e-4, "transformers", 64, {kvad::DType::F32, kvad::DType::F32});
    check_source("mixtral_swa", "", src, device, 0, 1e-3, "transformers", 64, {});
  }
}

// llama.cpp's converter's GGUF of mixtral (tools/convert_tiny_gguf.py):
// architecture llama, Q/K rows permuted for adjacent-pair RoPE, no
// expert_feed_forward_length (as every Mixtral GGUF: llama.cpp's llama
// graph sizes the experts by feed_forward_length). Against transformers
// (f32 KV) to 1e-4 on cpu and sim, and against llama.cpp's own logits
// (llama-cpp-python 0.3.36, f16 KV; llama.cpp is itself 2.7e-4 from
// transformers) to 1e-3 as the other architectures. A llama file whose
// experts are not feed_forward_length wide (the key says 32) is refused.
// The quantize-once file of the HF checkpoint is llama.cpp's layout: every
// tensor of kvad quantize of the converter's f32 file is in it with the
// same bytes (Q and K rows permuted as the converter does, experts stacked).
TEST(LlamaCppGguf, MixtralMatchesTransformersAndLlamaCpp) {
  const kvad::KVTypes f32{kvad::DType::F32, kvad::DType::F32};
  auto gguf = llama_cpp_gguf("mixtral");
  EXPECT_EQ(gguf->get_string("general.architecture", ""), "llama");
  EXPECT_FALSE(gguf->has("llama.expert_feed_forward_length"));
  EXPECT_EQ(gguf->get_int("llama.expert_count", 0), 8);
  for (const char* device : {"cpu", "sim"})
    check_source("mixtral", " (llama.cpp GGUF)", gguf, device, 0, 1e-4, "transformers", 64, f32);
  check_source("mixtral", " (llama.cpp GGUF)", gguf, "cpu", 0, 1e-3, "llama.cpp");
  try {
    kvad::load_model(std::make_shared<WithInt>(gguf, "llama.expert_feed_forward_length", 32), kvad::DeviceOptions{});
    ADD_FAILURE() << "experts read at the wrong width were accepted";
  } catch (const kvad::Error& e) {
    EXPECT_NE(std::string(e.what()).find("blk.0.ffn_"), std::string::npos) << e.what();
  }

  // Its quantize-once file: QuantizeOnceWritesLlamaCppsLayout.
}

}  // namespace
