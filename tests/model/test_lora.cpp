// LoRA adapters at run time (model/lora.h) against transformers + peft:
// tools/make_lora_fixtures.py's random PEFT adapters for the tiny HF
// checkpoints (tests/fixtures/lora/<base>/{a,b}), peft's logits with a at
// strength 1 and with a at 0.5 and b (rsLoRA) at 1.5 active together, and
// llama.cpp's convert_lora_to_gguf.py of a. kvad with an f32 KV cache must
// match to hf_checkpoint_util's 1e-4 (relative to the largest logit), on
// cpu and sim; strength 0 gives the base's logits bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "base/error.h"
#include "engine/session.h"
#include "hf_checkpoint_util.h"
#include "model/hf.h"
#include "model/lora.h"
#include "model/quantize_once.h"
#include "model/registry.h"

namespace {

using kvad::hf_test::kDir;
// A function, not a global: kDir lives in another translation unit.
kvad::hf_test::fs::path lora_dir() { return kDir.parent_path() / "lora"; }

std::shared_ptr<kvad::Model> base(const char* name, const char* device = "cpu") {
  kvad::DeviceOptions o;
  o.device = device;
  o.dtype = "f32";
  return kvad::load_model(kvad::open_hf_checkpoint((kDir / name).string()), o);
}

// Logits at every position of the reference's tokens in one prefill.
std::vector<float> prefill(const std::shared_ptr<kvad::Model>& m, const std::vector<int32_t>& tokens,
                           std::shared_ptr<const kvad::LoraSet> lora) {
  kvad::Session s(m, 64, 1, 2, kvad::hf_test::kF32Kv);
  s.set_lora(std::move(lora));
  kvad::Batch b;
  for (size_t i = 0; i < tokens.size(); ++i) b.add(tokens[i], static_cast<int32_t>(i), 0, true);
  return s.forward(b);
}

double worst(const kvad::hf_test::Reference& ref, const std::vector<float>& got) {
  const size_t V = ref.logits[0].size();
  double w = 0;
  for (size_t i = 0; i < ref.tokens.size(); ++i) w = std::max(w, kvad::hf_test::rel_err(ref.logits[i], &got[i * V]));
  return w;
}

std::shared_ptr<const kvad::LoraSet> set_of(std::vector<kvad::LoraUse> uses) {
  auto s = std::make_shared<kvad::LoraSet>();
  s->uses = std::move(uses);
  return s;
}

std::string error_of(const std::string& path, const char* base_name = "llama") {
  try {
    kvad::load_lora(path, *base(base_name));
  } catch (const kvad::Error& e) {
    return e.what();
  }
  return "";
}

class PeftLogits : public ::testing::TestWithParam<std::tuple<const char*, const char*>> {};

TEST_P(PeftLogits, MatchPeftAtStrengthsAndStacked) {
  const auto [name, device] = GetParam();
  const std::shared_ptr<kvad::Model> m = base(name, device);
  const auto a = kvad::load_lora((lora_dir() / name / "a").string(), *m);
  const auto b = kvad::load_lora((lora_dir() / name / "b").string(), *m);
  EXPECT_GT(a->pairs.size(), 0u);
  EXPECT_GT(a->bytes, 0u);
  const auto one = kvad::hf_test::read_reference(lora_dir() / name, "logits-a.json");
  const double e1 = worst(one, prefill(m, one.tokens, set_of({{a, 1.0f}})));
  const auto two = kvad::hf_test::read_reference(lora_dir() / name, "logits-a0.5-b1.5.json");
  const double e2 = worst(two, prefill(m, two.tokens, set_of({{a, 0.5f}, {b, 1.5f}})));
  // The adapters move the logits far more than the tolerance.
  const auto plain = kvad::hf_test::read_reference(kDir / name);
  const double moved = worst(one, prefill(m, plain.tokens, nullptr));
  std::printf("%s on %s: max |diff| / max |logit| vs peft: a@1 %.2e, a@0.5+b@1.5 %.2e (base vs a@1: %.2e)\n", name,
              device, e1, e2, moved);
  EXPECT_LT(e1, 1e-4);
  EXPECT_LT(e2, 1e-4);
  EXPECT_GT(moved, 1e-2);
}

TEST_P(PeftLogits, StrengthZeroIsTheBaseExactly) {
  const auto [name, device] = GetParam();
  const std::shared_ptr<kvad::Model> m = base(name, device);
  const auto a = kvad::load_lora((lora_dir() / name / "a").string(), *m);
  const auto ref = kvad::hf_test::read_reference(kDir / name);
  EXPECT_EQ(prefill(m, ref.tokens, nullptr), prefill(m, ref.tokens, set_of({{a, 0.0f}})));
}

INSTANTIATE_TEST_SUITE_P(Bases, PeftLogits,
                         ::testing::Combine(::testing::Values("llama", "qwen2", "gemma3", "qwen3moe"),
                                            ::testing::Values("cpu", "sim")),
                         [](const auto& i) {
                           return std::string(std::get<0>(i.param)) + "_" + std::get<1>(i.param);
                         });

// llama.cpp's convert_lora_to_gguf.py of adapter a gives peft's logits
// (for llama with its Q/K rows permuted back to the HF base's layout).
TEST(GgufLora, ConvertedAdapterMatchesPeft) {
  for (const char* name : {"llama", "qwen2", "gemma3", "qwen3moe"}) {
    const std::shared_ptr<kvad::Model> m = base(name);
    const auto a = kvad::load_lora((lora_dir() / name / "a.gguf").string(), *m);
    const auto one = kvad::hf_test::read_reference(lora_dir() / name, "logits-a.json");
    const double e = worst(one, prefill(m, one.tokens, set_of({{a, 1.0f}})));
    std::printf("%s: GGUF adapter vs peft: %.2e\n", name, e);
    EXPECT_LT(e, 1e-4) << name;
  }
}

TEST(GgufLora, AnotherArchitectureIsRefused) {
  const std::string e = error_of((lora_dir() / "gemma3" / "a.gguf").string(), "llama");
  EXPECT_NE(e.find("a LoRA for architecture gemma3, the model is llama"), std::string::npos) << e;
}

TEST(PeftLora, BadAdaptersAreRefusedClearly) {
  const std::string bad = (lora_dir() / "bad").string();
  std::string e = error_of(bad + "/shape");
  EXPECT_NE(e.find("does not fit"), std::string::npos) << e;
  EXPECT_NE(e.find("blk.0.attn_q.weight [64, 64]"), std::string::npos) << e;
  EXPECT_NE(e.find("[4, 65]"), std::string::npos) << e;
  e = error_of(bad + "/rank");
  EXPECT_NE(e.find("rank mismatch for blk.0.attn_q.weight"), std::string::npos) << e;
  e = error_of(bad + "/unknown");
  EXPECT_NE(e.find("cannot place base_model.model.model.layers.0.self_attn.qq_proj.lora_A.weight"), std::string::npos)
      << e;
  e = error_of(bad + "/config_r");
  EXPECT_NE(e.find("adapter_config.json says r = 8"), std::string::npos) << e;
  e = error_of(bad + "/no_config");
  EXPECT_NE(e.find("missing adapter_config.json"), std::string::npos) << e;
  e = error_of(bad + "/nowhere");
  EXPECT_NE(e.find("no such file or folder"), std::string::npos) << e;
  // llama's adapter on gemma3: shapes and names differ.
  e = error_of((lora_dir() / "llama" / "a").string(), "gemma3");
  EXPECT_NE(e.find("does not fit"), std::string::npos) << e;
}

TEST(PeftLora, StrengthArgument) {
  EXPECT_EQ(kvad::parse_lora_arg("dir/a").second, 1.0f);
  EXPECT_EQ(kvad::parse_lora_arg("dir/a@0.25"), std::make_pair(std::string("dir/a"), 0.25f));
  EXPECT_EQ(kvad::parse_lora_arg("dir/a@-1").second, -1.0f);
  for (const char* s : {"a@nan", "a@NaN", "a@inf", "a@", "a@x", "a@1e99999"}) {
    try {
      kvad::parse_lora_arg(s);
      ADD_FAILURE() << s;
    } catch (const kvad::Error& e) {
      EXPECT_NE(std::string(e.what()).find("not a finite number"), std::string::npos) << e.what();
    }
  }
}

}  // namespace

namespace {

// Beside a quantized base: the quantize-once q8_0 GGUF of the llama fixture
// (llama.cpp's layout, Q/K rows permuted), adapter a as PEFT saved it (its
// Q/K rows permuted on load) and as llama.cpp converted it (already in that
// layout): both near peft's logits, within q8_0's own error of the base.
TEST(LoraQuantizedBase, Q8_0GgufBaseTakesBothAdapterFormats) {
  const kvad::hf_test::fs::path cache =
      kvad::hf_test::fs::temp_directory_path() / ("kvad-lora-q-" + std::to_string(::getpid()));
  const kvad::QuantizeOnceKey key{cache.string(), "kvad-test/tiny-llama-lora", "0123456789abcdef"};
  auto q = kvad::quantize_once(kvad::open_hf_checkpoint((kDir / "llama").string()), "q8_0", key);
  ASSERT_EQ(q->find("blk.0.attn_q.weight")->type, kvad::DType::Q8_0);
  std::shared_ptr<kvad::Model> m = kvad::load_model(q, kvad::DeviceOptions{});
  const auto plain = kvad::hf_test::read_reference(kDir / "llama");
  const double base_err = worst(plain, prefill(m, plain.tokens, nullptr));
  const auto one = kvad::hf_test::read_reference(lora_dir() / "llama", "logits-a.json");
  std::vector<std::vector<float>> got;
  for (const char* file : {"a", "a.gguf"}) {
    const auto a = kvad::load_lora((lora_dir() / "llama" / file).string(), *m);
    got.push_back(prefill(m, one.tokens, set_of({{a, 1.0f}})));
    const double e = worst(one, got.back());
    std::printf("llama q8_0 base + %s: vs peft %.2e (the q8_0 base alone vs transformers %.2e)\n", file, e, base_err);
    EXPECT_LT(e, 3 * base_err) << file;
  }
  // The two spellings of one adapter agree to f32 rounding: the rows each
  // was permuted into (or left in) are the same.
  EXPECT_LT(kvad::hf_test::rel_err(got[0], got[1].data()), 1e-5);
  kvad::hf_test::fs::remove_all(cache);
}

}  // namespace

namespace {

// On the GPU (skipped without one): the side path through the CUDA row's
// f32 matmul, scale and add, to test_hf_checkpoint's CUDA tolerance.
TEST(LoraCuda, MatchesPeft) {
  if (const std::string why = kvad::backend_unavailable("cuda"); !why.empty()) GTEST_SKIP() << why;
  for (const char* name : {"llama", "qwen2", "gemma3", "qwen3moe"}) {
    const std::shared_ptr<kvad::Model> m = base(name, "cuda");
    const auto a = kvad::load_lora((lora_dir() / name / "a").string(), *m);
    const auto b = kvad::load_lora((lora_dir() / name / "b").string(), *m);
    const auto two = kvad::hf_test::read_reference(lora_dir() / name, "logits-a0.5-b1.5.json");
    const double e = worst(two, prefill(m, two.tokens, set_of({{a, 0.5f}, {b, 1.5f}})));
    std::printf("%s on cuda: a@0.5+b@1.5 vs peft %.2e\n", name, e);
    EXPECT_LT(e, 5e-3) << name;
  }
}

}  // namespace

namespace {

// A batch that mixes adapters (Batch::lora, one set per entry): sequence 0
// through a, 1 through a@0.5 + b@1.5, 2 through none, in one forward call
// (prompt rows interleaved, logits for some rows only); each sequence's
// logits equal peft's for its set and the base's exactly for the base.
TEST(LoraMixedBatch, EachRowThroughItsOwnAdapters) {
  for (const char* device : {"cpu", "sim"}) {
    const std::shared_ptr<kvad::Model> m = base("llama", device);
    const auto a = kvad::load_lora((lora_dir() / "llama" / "a").string(), *m);
    const auto b = kvad::load_lora((lora_dir() / "llama" / "b").string(), *m);
    const auto sa = set_of({{a, 1.0f}}), sab = set_of({{a, 0.5f}, {b, 1.5f}});
    const kvad::LoraSet* sets[3] = {sa.get(), sab.get(), nullptr};
    const auto ref_a = kvad::hf_test::read_reference(lora_dir() / "llama", "logits-a.json");
    const auto ref_ab = kvad::hf_test::read_reference(lora_dir() / "llama", "logits-a0.5-b1.5.json");
    const auto plain = kvad::hf_test::read_reference(kDir / "llama");
    const std::vector<float> base_alone = prefill(m, plain.tokens, nullptr);
    kvad::Session s(m, 64, 3, 2, kvad::hf_test::kF32Kv);
    kvad::Batch batch;
    const int n = static_cast<int>(plain.tokens.size());
    for (int i = 0; i < n; ++i)
      for (int q = 0; q < 3; ++q) {
        batch.add(plain.tokens[i], i, q, i % 2 == 1 || i == n - 1);  // logits at odd positions and the last
        batch.lora.push_back(sets[q]);
      }
    const std::vector<float>& got = s.forward(batch);
    const size_t V = plain.logits[0].size();
    double ea = 0, eab = 0;
    size_t row = 0;
    for (int i = 0; i < n; ++i) {
      if (!(i % 2 == 1 || i == n - 1)) continue;
      ea = std::max(ea, kvad::hf_test::rel_err(ref_a.logits[i], &got[(row + 0) * V]));
      eab = std::max(eab, kvad::hf_test::rel_err(ref_ab.logits[i], &got[(row + 1) * V]));
      for (size_t v = 0; v < V; ++v) ASSERT_EQ(got[(row + 2) * V + v], base_alone[i * V + v]) << device << " pos " << i;
      row += 3;
    }
    std::printf("llama mixed batch on %s: a %.2e, a@0.5+b@1.5 %.2e vs peft; the base row equals the base\n", device, ea,
                eab);
    EXPECT_LT(ea, 1e-4);
    EXPECT_LT(eab, 1e-4);
  }
}

}  // namespace
