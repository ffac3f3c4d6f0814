// model/text/gemma3.cpp's architectures from HF checkpoints and llama.cpp's
// GGUFs of them: Gemma 3 and Gemma 2 (soft-caps, sliding window), against
// transformers' logits (tolerances: hf_checkpoint_util.h) and llama.cpp's.
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

TEST(HfCheckpoint, Gemma3MatchesTransformers) {
  check("gemma3", "cpu");
  check("gemma3", "sim");
}

// Gemma 2 (tools/make_tiny_hf.py's gemma2: 4 layers, sliding window 4 on
// layers 0 and 2, attention soft-cap 2 and final soft-cap 0.5, both well
// inside the tiny model's ranges) against transformers, from the HF
// checkpoint and from llama.cpp's GGUF of it, and against llama.cpp.
TEST(HfCheckpoint, Gemma2MatchesTransformers) {
  check("gemma2", "cpu");
  check("gemma2", "sim");
}

// kvad's logits for `src` (one prefill, f32 KV cache) against fixture
// `name`'s transformers logits: max |diff| / max |logit| over every position.
double gemma2_error(std::shared_ptr<const kvad::TensorSource> src, const char* name = "gemma2") {
  const Reference ref = read_reference(kDir / name);
  std::shared_ptr<kvad::Model> m = kvad::load_model(std::move(src), kvad::DeviceOptions{});
  kvad::Session s(m, 64, 1, 1, {kvad::DType::F32, kvad::DType::F32});
  kvad::Batch b;
  for (size_t i = 0; i < ref.tokens.size(); ++i) b.add(ref.tokens[i], static_cast<int32_t>(i), 0, true);
  const std::vector<float>& all = s.forward(b);
  double worst = 0;
  for (size_t i = 0; i < ref.tokens.size(); ++i)
    worst = std::max(worst, rel_err(ref.logits[i], &all[i * m->hparams().n_vocab]));
  return worst;
}

// The test above can fail: the same weights with either soft-cap switched
// off (null in config.json, as HF writes "none"), or without the sliding
// window, are far from transformers' logits (measured in the message).
TEST(HfCheckpoint, Gemma2WithoutItsSoftcapsOrWindowFails) {
  std::ifstream in(kDir / "gemma2" / "config.json");
  const nlohmann::json good = nlohmann::json::parse(in);
  for (const char* edit : {"attn_logit_softcapping", "final_logit_softcapping", "sliding_window"}) {
    nlohmann::json j = good;
    if (std::string(edit) == "sliding_window") {
      j[edit] = 4096;
    } else {
      j[edit] = nullptr;
    }
    Scratch s(j.dump(), "gemma2");
    const double err = gemma2_error(kvad::open_hf_checkpoint(s.dir.string()));
    std::printf("gemma2 without %s: max |diff| / max |logit| vs transformers %.2e\n", edit, err);
    EXPECT_GT(err, 5e-2) << edit;
  }
}

TEST(LlamaCppGguf, Gemma2MatchesTransformersAndLlamaCpp) {
  const kvad::KVTypes f32{kvad::DType::F32, kvad::DType::F32};
  auto src = llama_cpp_gguf("gemma2");
  EXPECT_EQ(src->get_float("gemma2.attn_logit_softcapping", 0), 2.0);
  EXPECT_EQ(src->get_float("gemma2.final_logit_softcapping", 0), 0.5);
  EXPECT_EQ(src->get_int("gemma2.attention.sliding_window", 0), 4);
  for (const char* device : {"cpu", "sim"}) {
    check_source("gemma2", " (llama.cpp GGUF)", src, device, 0, 1e-4, "transformers", 64, f32);
    check_source("gemma2", " (llama.cpp GGUF)", src, device);
  }
  // 2e-3, as for gpt-oss: llama.cpp's own logits are 1.5e-3 from
  // transformers' f32 ones on this model (its default flash attention rounds
  // Q and K/V to f16, and the scores, q/k scaled x8, reach 4x the cap; with
  // an f32 cache and no flash attention it is 4.7e-4), kvad's with the f16
  // cache 7.4e-4. Measured: kvad 1.4e-3 from llama.cpp.
  check_source("gemma2", " (llama.cpp GGUF)", src, "cpu", 0, 2e-3, "llama.cpp");
}

// The quantize-once GGUF keeps Gemma 2's keys (a soft-cap of 0 too: HF's
// null, which llama.cpp would read as its default 50 if the key were left out).
TEST(HfCheckpoint, Gemma2QuantizeOnceKeepsTheSoftcaps) {
  const fs::path tmp = fs::temp_directory_path() / ("kvad-qgemma2-" + std::to_string(::getpid()));
  fs::remove_all(tmp);
  std::ifstream in(kDir / "gemma2" / "config.json");
  nlohmann::json j = nlohmann::json::parse(in);
  j["attn_logit_softcapping"] = nullptr;
  Scratch s(j.dump(), "gemma2");
  const kvad::QuantizeOnceKey key{(tmp / "cache").string(), "kvad-test/tiny-gemma2", "0123456789abcdef"};
  auto q = kvad::quantize_once(kvad::open_hf_checkpoint(s.dir.string()), "q8_0", key);
  EXPECT_EQ(q->get_float("gemma2.attn_logit_softcapping", -1), 0.0);
  EXPECT_EQ(q->get_float("gemma2.final_logit_softcapping", -1), 0.5);
  auto full = kvad::quantize_once(kvad::open_hf_checkpoint((kDir / "gemma2").string()), "q8_0",
                                  {(tmp / "cache").string(), "kvad-test/tiny-gemma2-full", "0123456789abcdef"});
  const double err = gemma2_error(full);
  std::printf("gemma2 q8_0 via the quantize-once cache: max |diff| / max |logit| vs transformers %.2e\n", err);
  EXPECT_LT(err, 1e-1);
  fs::remove_all(tmp);
}

TEST(HfCheckpoint, BadGemma2ConfigsAreClearErrors) {
  std::ifstream in(kDir / "gemma2" / "config.json");
  const nlohmann::json good = nlohmann::json::parse(in);
  nlohmann::json j = good;
  j["layer_types"] = {"full_attention", "sliding_attention", "full_attention", "sliding_attention"};
  EXPECT_NE(error_of(j.dump(), "gemma2").find("Gemma 2's pattern"), std::string::npos) << error_of(j.dump(), "gemma2");
  j = good;
  j["attn_logit_softcapping"] = -1.0;
  EXPECT_NE(error_of(j.dump(), "gemma2").find("attn_logit_softcapping"), std::string::npos);
  j = good;
  j["query_pre_attn_scalar"] = 64;
  EXPECT_NE(error_of(j.dump(), "gemma2").find("query_pre_attn_scalar"), std::string::npos);
  j = good;
  j["use_bidirectional_attention"] = true;
  EXPECT_NE(error_of(j.dump(), "gemma2").find("use_bidirectional_attention"), std::string::npos);
}

}  // namespace
