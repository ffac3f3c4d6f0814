// model/text/deepseek2.cpp (DeepSeek V2, V2-Lite, V3; FP8 checkpoints)
// from HF checkpoints and llama.cpp's GGUFs of them, against transformers'
// logits and llama.cpp's.
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

// DeepSeek V2 / V3 (GGUF deepseek2): MLA over the latent cache, absorbed
// (W_UK folded into the query, W_UV after attention) for prefill and decode;
// routed experts with shared experts. The latent cache is f32 whatever the
// KV types say (printed as f32 here), so 1e-4.
// deepseek_v3: q_lora_rank, sigmoid + e_score_correction_bias, noaux_tc over
// 4 groups, norm_topk_prob, routed_scaling_factor 2.5, YaRN (mscale 1).
// deepseek_v2_lite: direct q_proj, softmax group_limited_greedy, 2 shared
// experts, YaRN with mscale_all_dim 0.707. deepseek_v2: q_lora, greedy.
const kvad::KVTypes kLatentF32 = {kvad::DType::F32, kvad::DType::F32};  // what deepseek2's latent rows are anyway

TEST(HfCheckpoint, DeepseekMatchesTransformers) {
  for (const char* name : {"deepseek_v3", "deepseek_v2_lite", "deepseek_v2"})
    for (const char* device : {"cpu", "sim"})
      check_source(name, "", kvad::open_hf_checkpoint((kDir / name).string()), device, 0, 1e-4, "transformers", 64,
                   kLatentF32);
}

// The two forms of MLA: the prefill above was expanded (one sequence of 14
// tokens: fewer multiply-adds than absorbed) and the step-by-step decode
// absorbed; forced either way, prefill and decode agree with each other and
// with transformers.
TEST(HfCheckpoint, DeepseekAbsorbedAndExpandedAgree) {
  for (const char* mode : {"absorbed", "expanded"}) {
    ::setenv("KVAD_MLA_PREFILL", mode, 1);
    for (const char* name : {"deepseek_v3", "deepseek_v2_lite"}) {
      const Reference ref = read_reference(kDir / name);
      std::shared_ptr<kvad::Model> m = kvad::load_model(kvad::open_hf_checkpoint((kDir / name).string()), {});
      const int64_t V = m->hparams().n_vocab;
      const int n = static_cast<int>(ref.tokens.size());
      kvad::Session s(m, 64, 1, 2), t(m, 64, 1, 2);
      kvad::Batch b;
      for (int i = 0; i < n; ++i) b.add(ref.tokens[i], i, 0, true);
      const std::vector<float> all = s.forward(b);
      double vs_ref = 0, vs_step = 0;
      for (int i = 0; i < n; ++i) {
        kvad::Batch d;
        d.add(ref.tokens[i], i, 0, true);
        const std::vector<float>& step = t.forward(d);
        vs_step = std::max(vs_step, rel_err(std::vector<float>(step.begin(), step.end()), &all[i * V]));
        vs_ref = std::max(vs_ref, rel_err(ref.logits[i], &all[i * V]));
      }
      std::printf("%s, %s prefill: vs transformers %.2e, vs absorbed decode %.2e\n", name, mode, vs_ref, vs_step);
      EXPECT_LT(vs_ref, 1e-4) << name << " " << mode;
      EXPECT_LT(vs_step, 1e-4) << name << " " << mode;
    }
  }
  ::setenv("KVAD_MLA_PREFILL", "banana", 1);
  EXPECT_THROW(kvad::load_model(kvad::open_hf_checkpoint((kDir / "deepseek_v3").string()), {}), kvad::Error);
  ::unsetenv("KVAD_MLA_PREFILL");
}

// The cache holds c_kv | k_pe per token and layer, nothing expanded: the
// tiny models' 3 layers × (kv_lora_rank 32 + rope 8) f32, and the
// DeepSeek-V2-Lite shape (27 layers, 512 + 64) as 27 × 576 × 4 bytes.
TEST(HfCheckpoint, DeepseekCacheIsTheLatent) {
  kvad::DeviceOptions o;
  std::shared_ptr<kvad::Model> m = kvad::load_model(kvad::open_hf_checkpoint((kDir / "deepseek_v3").string()), o);
  EXPECT_EQ(m->new_cache(64, 2, 8)->bytes_per_token(), size_t{3 * (32 + 8) * 4});
  kvad::LayerSpec s;
  s.kind = kvad::LayerKind::Latent;
  s.kv_lora_rank = 512;
  s.rope_dim = 64;
  kvad::LayerCaches lite(std::vector<kvad::LayerSpec>(27, s), 4096, 1, 512, kvad::Device::cpu(), {});
  EXPECT_EQ(lite.bytes_per_token(), size_t{27 * 576 * 4});
  EXPECT_EQ(lite.bytes(), size_t{27} * 576 * 4 * 4096);
  // Rewind and prefix copy: continuing from a truncated or copied latent
  // gives transformers' logits again.
  const Reference ref = read_reference(kDir / "deepseek_v3");
  const int n = static_cast<int>(ref.tokens.size());
  kvad::Session sess(m, 64, 2, 2);
  kvad::Batch b;
  for (int i = 0; i < n; ++i) b.add(ref.tokens[i], i, 0, false);
  sess.forward(b);
  EXPECT_EQ(sess.truncate(0, 6), 6);
  ASSERT_TRUE(sess.copy_prefix(0, 1, 6));
  for (int seq = 0; seq < 2; ++seq)
    for (int i = 6; i < n; ++i) {
      kvad::Batch d;
      d.add(ref.tokens[i], i, seq, true);
      EXPECT_LT(rel_err(ref.logits[i], sess.forward(d).data()), 1e-4) << "sequence " << seq << " position " << i;
    }
}

// llama.cpp's converter on the same checkpoints: its deepseek2 keys and the
// split attn_k_b / attn_v_b form (the HF path reads the fused kv_b_proj as the
// older attn_kv_b). Against transformers on all three, and against llama.cpp
// (llama-cpp-python 0.3.36, f16 KV cache) on V3 and V2: llama.cpp takes a
// file without q_lora_rank only at V2-Lite's 26 or 27 layers, so the 3-layer
// V2-Lite has no llama.cpp logits. Greedy picks equal llama.cpp's wherever
// its best two logits are further apart than the tolerance.
TEST(LlamaCppGguf, DeepseekMatchesTransformersAndLlamaCpp) {
  for (const char* name : {"deepseek_v3", "deepseek_v2_lite", "deepseek_v2"})
    for (const char* device : {"cpu", "sim"})
      check_source(name, " (llama.cpp GGUF)", llama_cpp_gguf(name), device, 0, 1e-4, "transformers", 64, kLatentF32);
  for (const char* name : {"deepseek_v3", "deepseek_v2"}) {
    check_source(name, " (llama.cpp GGUF)", llama_cpp_gguf(name), "cpu", 0, 1e-3, "llama.cpp", 64, kLatentF32);
    const Reference ref = read_reference(kDir / name, "llama.cpp-f32.logits.json");
    std::shared_ptr<kvad::Model> m = kvad::load_model(llama_cpp_gguf(name), kvad::DeviceOptions{});
    const int64_t V = m->hparams().n_vocab;
    kvad::Session s(m, 64, 1, 2);
    kvad::Batch b;
    for (size_t i = 0; i < ref.tokens.size(); ++i) b.add(ref.tokens[i], static_cast<int32_t>(i), 0, true);
    const std::vector<float>& all = s.forward(b);
    int compared = 0;
    for (size_t i = 0; i < ref.tokens.size(); ++i) {
      std::vector<float> r = ref.logits[i];
      const auto best = std::max_element(r.begin(), r.end()) - r.begin();
      const float top = r[best], scale = *std::max_element(r.begin(), r.end(), [](float x, float y) {
        return std::fabs(x) < std::fabs(y);
      });
      r[best] = -INFINITY;
      if (top - *std::max_element(r.begin(), r.end()) < 1e-3 * std::fabs(scale)) continue;  // a near-tie
      ++compared;
      const float* got = &all[i * V];
      EXPECT_EQ(std::max_element(got, got + V) - got, best) << name << " position " << i;
    }
    EXPECT_GT(compared, 10) << name;
  }
}

// The quantize-once cache writes a DeepSeek HF checkpoint as a deepseek2
// GGUF with kv_b_proj split into attn_k_b and attn_v_b, as llama.cpp's
// converter writes it (the older fused attn_kv_b is refused by llama.cpp),
// which loads back at q8_0 (V2-Lite: no q_lora_rank).
TEST(HfCheckpoint, DeepseekQuantizeOnceWritesTheSplitKvB) {
  const fs::path cache = fs::temp_directory_path() / ("kvad-qcache-ds-" + std::to_string(::getpid()));
  fs::remove_all(cache);
  for (const char* name : {"deepseek_v2_lite"}) {
    SCOPED_TRACE(name);
    const fs::path dir = kDir / name;
    const kvad::QuantizeOnceKey key{cache.string(), std::string("kvad-test/tiny-") + name, "0123456789abcdef"};
    auto q = kvad::quantize_once(kvad::open_hf_checkpoint(dir.string()), "q8_0", key);
    EXPECT_EQ(q->find("blk.1.attn_kv_b.weight"), nullptr);
    ASSERT_NE(q->find("blk.1.attn_k_b.weight"), nullptr);
    ASSERT_NE(q->find("blk.1.attn_v_b.weight"), nullptr);
    EXPECT_EQ(q->find("blk.1.ffn_down_exps.weight")->type, kvad::DType::Q8_0);
    const Reference ref = read_reference(dir);
    std::shared_ptr<kvad::Model> m = kvad::load_model(q, kvad::DeviceOptions{});
    kvad::Session s(m, 64, 1, 1);
    kvad::Batch b;
    for (size_t i = 0; i < ref.tokens.size(); ++i) b.add(ref.tokens[i], static_cast<int32_t>(i), 0, true);
    const std::vector<float>& all = s.forward(b);
    double worst = 0;
    for (size_t i = 0; i < ref.tokens.size(); ++i)
      worst = std::max(worst, rel_err(ref.logits[i], &all[i * m->hparams().n_vocab]));
    std::printf("%s q8_0 via the quantize-once cache: max |diff| / max |logit| vs transformers %.2e\n", name, worst);
    EXPECT_LT(worst, 1e-1);
  }
  fs::remove_all(cache);
}

// DeepSeek-V3 as its official checkpoints ship: float8_e4m3fn matrices with
// block scales (weight_scale_inv; 16x16 blocks in the fixture, edge blocks
// included) and a multi-token prediction layer. The view dequantizes each
// matrix to exactly torch's float32 values, the scales count as read, the MTP
// layer is loaded (its parameters are in the count) though forward does not
// run it, and the logits are transformers' on the dequantized weights.
TEST(HfCheckpoint, DeepseekFp8AndMtpLayer) {
  const fs::path dir = kDir / "deepseek_v3_fp8";
  auto src = kvad::open_hf_checkpoint(dir.string());
  std::ifstream in(dir / "dequantized.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  const kvad::SourceTensor* t = src->find("blk.1.attn_kv_a_mqa.weight");
  ASSERT_NE(t, nullptr);
  ASSERT_EQ(t->type, kvad::DType::F32);
  const std::vector<float> want = j["values"].get<std::vector<float>>();
  ASSERT_EQ(static_cast<int64_t>(want.size()), t->ne[0] * t->ne[1]);
  int differ = 0;
  for (size_t i = 0; i < want.size(); ++i) differ += static_cast<const float*>(t->data)[i] != want[i];
  EXPECT_EQ(differ, 0);
  EXPECT_EQ(src->find("blk.1.attn_kv_a_mqa.weight_scale_inv"), nullptr);
  ASSERT_NE(src->find("blk.3.nextn.eh_proj.weight"), nullptr);
  for (const char* device : {"cpu", "sim"})
    check_source("deepseek_v3_fp8", "", src, device, 0, 1e-4, "transformers", 64, kLatentF32);
  // The MTP layer's tensors are taken: the parameter count exceeds the same
  // model's without them by exactly their size.
  int64_t mtp = 0;
  for (const kvad::SourceTensor& s : src->tensors())
    if (s.name.rfind("blk.3.", 0) == 0) mtp += s.ne[0] * s.ne[1] * s.ne[2] * s.ne[3];
  EXPECT_GT(mtp, 0);
  auto with = kvad::load_model(src, kvad::DeviceOptions{});
  auto without = kvad::load_model(kvad::open_hf_checkpoint((kDir / "deepseek_v3").string()), kvad::DeviceOptions{});
  EXPECT_EQ(with->hparams().n_params - without->hparams().n_params, mtp);
}

// Malformed DeepSeek configs and FP8 settings are clear errors naming the field.
TEST(HfCheckpoint, DeepseekBadConfigsAreClearErrors) {
  const auto error_with = [](const char* fixture, const nlohmann::json& config) -> std::string {
    const fs::path dir = fs::temp_directory_path() / ("kvad-hf-ds-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    fs::copy_file(kDir / fixture / "model.safetensors", dir / "model.safetensors", fs::copy_options::overwrite_existing);
    std::ofstream(dir / "config.json") << config.dump();
    std::string what;
    try {
      kvad::load_model(kvad::open_hf_checkpoint(dir.string()), kvad::DeviceOptions{});
    } catch (const kvad::Error& e) {
      what = e.what();
    }
    fs::remove_all(dir);
    return what;
  };
  std::ifstream in3(kDir / "deepseek_v3" / "config.json"), in8(kDir / "deepseek_v3_fp8" / "config.json");
  const nlohmann::json v3 = nlohmann::json::parse(in3), fp8 = nlohmann::json::parse(in8);
  nlohmann::json j = v3;
  j["topk_method"] = "greedy";
  EXPECT_NE(error_with("deepseek_v3", j).find("topk_method 'greedy' is not noaux_tc"), std::string::npos);
  j = v3;
  j["topk_group"] = 5;  // more groups kept than there are
  EXPECT_NE(error_with("deepseek_v3", j).find("expert_group_count"), std::string::npos);
  j = v3;
  j.erase("kv_lora_rank");
  EXPECT_NE(error_with("deepseek_v3", j).find("kv_lora_rank"), std::string::npos);
  j = v3;
  j["qk_rope_head_dim"] = 7;
  EXPECT_NE(error_with("deepseek_v3", j).find("qk_rope_head_dim (even)"), std::string::npos);
  j = v3;
  j["q_lora_rank"] = nullptr;  // the file has q_a_proj / q_b_proj
  EXPECT_NE(error_with("deepseek_v3", j).find("attn_q.weight"), std::string::npos);
  j = fp8;
  j["quantization_config"]["quant_method"] = "awq";
  EXPECT_NE(error_with("deepseek_v3_fp8", j).find("quant_method 'awq' is not supported"), std::string::npos);
  j = fp8;
  j["quantization_config"]["weight_block_size"] = {128, 128};  // the scales are for 16x16 blocks
  EXPECT_NE(error_with("deepseek_v3_fp8", j).find("block scales"), std::string::npos);
  j = fp8;
  j.erase("quantization_config");  // FP8 bytes with no rule to read them
  EXPECT_NE(error_with("deepseek_v3_fp8", j), "");
}

// Resident on the sim device: after the first steps, a decode step moves
// its ids in (one transfer) and its logits out (one), nothing per layer.
TEST(HfCheckpoint, DeepseekStaysOnTheDevice) {
  kvad::DeviceOptions o;
  o.device = "sim";
  std::shared_ptr<kvad::Model> m = kvad::load_model(kvad::open_hf_checkpoint((kDir / "deepseek_v3").string()), o);
  kvad::Session s(m, 64, 1, 2);
  for (int32_t i = 0; i < 4; ++i) {
    if (i == 3) kvad::ops::reset_transfer_stats();
    kvad::Batch b;
    b.add(7 + i, i, 0, true);
    s.forward(b);
  }
  const kvad::ops::TransferStats st = kvad::ops::transfer_stats(kvad::DeviceType::Sim);
  EXPECT_EQ(st.to_host, 1);
  EXPECT_EQ(st.to_device, 1);
}

}  // namespace
