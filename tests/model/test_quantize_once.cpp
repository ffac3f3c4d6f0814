// The quantize-once cache (model/quantize_once.h) on the tiny HF
// checkpoints: written once and reused, the tokenizer kept, and the file
// laid out as llama.cpp's converter lays the same checkpoint out.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
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

// The quantize-once cache: a q8_0 GGUF written once (llama's Q/K rows
// permuted into GGUF's layout, so it loads as an ordinary llama GGUF), mapped
// on the next call, and its logits still close to transformers'.
TEST(HfCheckpoint, QuantizeOnceWritesAGgufOnceAndReusesIt) {
  const fs::path cache = fs::temp_directory_path() / ("kvad-qcache-" + std::to_string(::getpid()));
  fs::remove_all(cache);
  for (const char* name : {"llama", "gemma3", "qwen2", "qwen3", "llama3", "mistral", "qwen2_yarn", "gpt2",
                           "phi3_long", "qwen3moe", "qwen3moe_sparse", "gpt_oss", "qwen3next",
                           "qwen2_swa", "qwen2_yarn_notrunc"}) {
    SCOPED_TRACE(name);
    const fs::path dir = kDir / name;
    const kvad::QuantizeOnceKey key{cache.string(), std::string("kvad-test/tiny-") + name, "0123456789abcdef"};
    bool hit = true;
    auto q = kvad::quantize_once(kvad::open_hf_checkpoint(dir.string()), "q8_0", key, &hit);
    EXPECT_FALSE(hit);
    ASSERT_TRUE(fs::is_regular_file(kvad::quantize_once_path(key, "q8_0")));
    const kvad::SourceTensor* down = q->find("blk.1.ffn_down.weight");
    if (!down) down = q->find("blk.1.ffn_down_exps.weight");
    ASSERT_NE(down, nullptr);
    EXPECT_EQ(down->type, kvad::DType::Q8_0);
    if (const kvad::SourceTensor* e = q->find("blk.0.ffn_down_exps.weight")) {
      EXPECT_EQ(e->type, kvad::DType::Q8_0);  // the 3-D experts, quantized per row
      EXPECT_EQ(e->ne[2], std::string(name) == "qwen3moe_sparse" || std::string(name) == "qwen3next" ? 4 : 8);  // experts
    }
    EXPECT_EQ(q->find("blk.0.attn_norm.weight")->type, kvad::DType::F32);
    EXPECT_FALSE(q->has("kvad.rope.neox"));  // a plain GGUF: rows permuted instead
    auto again = kvad::quantize_once(kvad::open_hf_checkpoint(dir.string()), "q8_0", key, &hit);
    EXPECT_TRUE(hit);
    // From the directory (what the CLI calls): a hit without loading the
    // checkpoint's tensors, the GGUF's own 3-D experts mapped in place.
    hit = false;
    auto from_dir = kvad::quantize_once(dir.string(), "q8_0", key, &hit);
    EXPECT_TRUE(hit);
    EXPECT_EQ(kvad::gguf_file(*from_dir)->path(), kvad::quantize_once_path(key, "q8_0"));
    // kvad's keys survive the GGUF: the per-layer window pattern (a BOOL
    // array, as gguf-py writes it) and YaRN's truncate.
    if (std::string(name) == "qwen2_swa") {
      EXPECT_EQ(again->get_bool_array("qwen2.attention.sliding_window_pattern"),
                (std::vector<bool>{false, true, true}));
    }
    if (std::string(name) == "qwen2_yarn_notrunc") {
      EXPECT_EQ(again->get_int("kvad.rope.scaling.yarn_truncate", 1), 0);
    }

    const Reference ref = read_reference(dir);
    std::shared_ptr<kvad::Model> m = kvad::load_model(again, kvad::DeviceOptions{});
    kvad::Session s(m, std::max<int32_t>(64, static_cast<int32_t>(ref.tokens.size())), 1, 1);
    kvad::Batch b;
    for (size_t i = 0; i < ref.tokens.size(); ++i) b.add(ref.tokens[i], static_cast<int32_t>(i), 0, true);
    const std::vector<float>& all = s.forward(b);
    double worst = 0;
    for (size_t i = 0; i < ref.tokens.size(); ++i)
      worst = std::max(worst, rel_err(ref.logits[i], &all[i * m->hparams().n_vocab]));
    std::printf("%s q8_0 via the quantize-once cache: max |diff| / max |logit| vs transformers %.2e\n", name, worst);
    // Measured 1.6e-2 (llama) and 5.2e-2 (Gemma 3: six layers of random
    // norms around 1 amplify the q8_0 rounding): a quantization error, where a
    // wrong Q/K row order or a lost norm gives errors of order 1.
    // gpt_oss and qwen3next are left out of the bound: their tiny models are
    // chaotic under quantization (routers flip) — gpt_oss: transformers' own
    // logits move by 0.6 when its weights are rounded to q8_0 blocks
    // (measured 0.77 here); qwen3next: q8_0 moves it by 0.9 in llama.cpp as
    // well. For them only that the file is written, read back and runs is checked.
    if (std::string(name) != "gpt_oss" && std::string(name) != "qwen3next") {
      EXPECT_LT(worst, 1e-1);
    }
    EXPECT_TRUE(std::isfinite(worst));
  }
  fs::remove_all(cache);
}

// The cache keeps the checkpoint's tokenizer (tokenizer.json and
// tokenizer_config.json as GGUF keys): read back from the file it is the
// same tokenizer; the file is stamped with the tokenizer files, so changing
// one makes the next load write the file again.
TEST(HfCheckpoint, QuantizeOnceKeepsTheTokenizer) {
  const fs::path tmp = fs::temp_directory_path() / ("kvad-qtok-" + std::to_string(::getpid()));
  fs::remove_all(tmp);
  const fs::path dir = tmp / "ckpt", cache = tmp / "cache";
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(kDir / "llama")) fs::copy(e.path(), dir / e.path().filename());
  const char* tokenizer = R"({"version": "1.0", "added_tokens": [
      {"id": 0, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}],
    "normalizer": null, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
    "post_processor": null, "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
    "model": {"type": "BPE", "dropout": null, "unk_token": null, "byte_fallback": false, "ignore_merges": false,
              "vocab": {"<s>": 0, "a": 1, "b": 2, "\u0120": 3, "ab": 4, "\u0120ab": 5}, "merges": ["a b", "\u0120 ab"]}})";
  auto write = [&](const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; };
  write(dir / "tokenizer.json", tokenizer);
  write(dir / "tokenizer_config.json", R"({"bos_token": "<s>", "chat_template": "{{ messages[0]['content'] }}"})");
  const kvad::QuantizeOnceKey key{cache.string(), "kvad-test/tiny-llama-tok", "0123456789abcdef", dir.string()};
  bool hit = true;
  auto q = kvad::quantize_once(kvad::open_hf_checkpoint(dir.string()), "q8_0", key, &hit);
  EXPECT_FALSE(hit);
  std::shared_ptr<const kvad::gguf::File> f = kvad::gguf_file(*q);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->get_string("tokenizer.ggml.model", ""), "gpt2");
  EXPECT_EQ(f->get_string("tokenizer.chat_template", ""), "{{ messages[0]['content'] }}");
  auto ref = kvad::Tokenizer::from_tokenizer_json((dir / "tokenizer.json").string(), (dir / "tokenizer_config.json").string());
  auto tok = kvad::Tokenizer::from_gguf(*f);
  for (const char* text : {"ab ab", "aab b<s>ab", " b a"}) {
    EXPECT_EQ(tok->encode(text, true, true), ref->encode(text, true, true)) << text;
    EXPECT_EQ(tok->encode(text, false, false), ref->encode(text, false, false)) << text;
  }
  EXPECT_EQ(tok->bos(), 0);
  EXPECT_EQ(tok->chat_template(), ref->chat_template());
  (void)kvad::quantize_once(kvad::open_hf_checkpoint(dir.string()), "q8_0", key, &hit);
  EXPECT_TRUE(hit);
  write(dir / "tokenizer.json", std::string(tokenizer) + "\n");  // another tokenizer file
  auto q2 = kvad::quantize_once(kvad::open_hf_checkpoint(dir.string()), "q8_0", key, &hit);
  EXPECT_FALSE(hit);
  EXPECT_TRUE(kvad::gguf_file(*q2)->find(kvad::kGgufHfTokenizerKey));
  fs::remove_all(tmp);
}

// The quantize-once file is laid out as llama.cpp's converter lays the same
// checkpoint out (convert_hf_to_gguf.py's llama.cpp-f32.gguf, quantized by
// kvad quantize, whose q8_0 bytes are ggml's): every tensor of one is in the
// other with the same name, shape, type and bytes. Qwen3-Next: in_proj_qkvz
// split into attn_qkv (q, k, v of every head in turn) and attn_gate, the
// conv1d [C, K]; DeepSeek: kv_b_proj split into
// attn_k_b (each head transposed) and attn_v_b. A file in HF's fused form, or
// with a row order off, fails here (and in llama.cpp:
// tools/check_quantized_in_llama_cpp.py).
// The quantize-once q8_0 file of tiny checkpoint `name` (written under
// tmp/cache) holds llama.cpp's layout: every tensor of `kvad quantize` q8_0
// of llama.cpp's f32 conversion of the same checkpoint is in it, with the
// same type, shape and bytes, and nothing else is. Returns the file.
std::shared_ptr<const kvad::TensorSource> expect_llama_cpp_layout(const std::string& name, const fs::path& tmp) {
  const kvad::QuantizeOnceKey key{(tmp / "cache").string(), "kvad-test/tiny-" + name, "0123456789abcdef"};
  auto q = kvad::quantize_once(kvad::open_hf_checkpoint((kDir / name).string()), "q8_0", key);
  const std::string theirs = (tmp / (name + "-q8_0.gguf")).string();
  kvad::quant::quantize_file((kDir / name / "llama.cpp-f32.gguf").string(), theirs,
                             kvad::quant::find_quant_type("q8_0"));
  auto ref = kvad::gguf_source(kvad::gguf::File::open(theirs));
  EXPECT_EQ(q->tensors().size(), ref->tensors().size());
  size_t same = 0;
  for (const kvad::SourceTensor& r : ref->tensors()) {
    const kvad::SourceTensor* t = q->find(r.name);
    if (!t) {
      ADD_FAILURE() << r.name << " is not in the quantize-once file";
      continue;
    }
    EXPECT_EQ(t->type, r.type) << r.name;
    EXPECT_EQ(t->n_dims, r.n_dims) << r.name;
    EXPECT_EQ(t->ne, r.ne) << r.name;
    const bool equal = t->n_bytes == r.n_bytes && std::memcmp(t->data, r.data, r.n_bytes) == 0;
    EXPECT_TRUE(equal) << r.name << ": bytes differ";
    same += equal;
  }
  std::printf("%s: %zu of %zu tensors byte-equal to llama.cpp's converter's, quantized\n", name.c_str(), same,
              ref->tensors().size());
  return q;
}

TEST(HfCheckpoint, QuantizeOnceWritesLlamaCppsLayout) {
  const fs::path tmp = fs::temp_directory_path() / ("kvad-qlayout-" + std::to_string(::getpid()));
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  for (const char* name : {"qwen3next", "deepseek_v3", "deepseek_v2", "qwen35", "qwen35moe", "qwen2moe", "mixtral"}) {
    SCOPED_TRACE(name);
    auto q = expect_llama_cpp_layout(name, tmp);
    if (std::string(name) == "qwen3next") {
      EXPECT_EQ(q->get_bool_array("qwen3next.attention.recurrent_layers"),
                (std::vector<bool>{true, true, false, true, true, false}));
    }
    if (std::string(name) == "deepseek_v3") {
      std::shared_ptr<const kvad::gguf::File> f = kvad::gguf_file(*q);
      ASSERT_TRUE(f);
      const kvad::gguf::Value* norm = f->find("deepseek2.expert_weights_norm");
      ASSERT_NE(norm, nullptr);
      EXPECT_EQ(norm->type(), kvad::gguf::ValueType::BOOL);  // llama.cpp refuses it as an integer
      EXPECT_FALSE(q->has("deepseek2.nextn_predict_layers"));  // no MTP tensors: llama.cpp would count a layer less
    }
    if (std::string(name) == "qwen2moe") {
      EXPECT_EQ(q->get_int("kvad.moe.norm_topk_prob", -1), 0);
    }
    if (std::string(name) == "mixtral") {
      EXPECT_EQ(q->get_int("llama.expert_count", 0), 8);
    }
  }
  fs::remove_all(tmp);
}

}  // namespace

namespace {

// The float forms (f32, f16, bf16) of an HF checkpoint: every matrix in that
// type, the norms as the view holds them, and logits as close to
// transformers' as the type's rounding allows.
TEST(HfCheckpoint, QuantizeOnceFloatForms) {
  const fs::path cache = fs::temp_directory_path() / ("kvad-qfloat-" + std::to_string(::getpid()));
  fs::remove_all(cache);
  const fs::path dir = kDir / "llama";
  const kvad::QuantizeOnceKey key{cache.string(), "kvad-test/tiny-llama", "0123456789abcdef"};
  const Reference ref = read_reference(dir);
  // Measured 3.7e-4 (f32: the f16 KV cache's rounding alone), 6.8e-4 (f16),
  // 5.7e-3 (bf16); a wrong layout gives errors of order 1.
  for (const auto& [form, type, bound] : {std::tuple{"f32", kvad::DType::F32, 1e-3}, std::tuple{"f16", kvad::DType::F16, 2e-3},
                                          std::tuple{"bf16", kvad::DType::BF16, 2e-2}}) {
    SCOPED_TRACE(form);
    bool hit = true;
    auto q = kvad::quantize_once(dir.string(), form, key, &hit);
    EXPECT_FALSE(hit);
    EXPECT_EQ(q->find("blk.0.ffn_down.weight")->type, type);
    EXPECT_EQ(q->find("blk.0.attn_norm.weight")->type, kvad::DType::F32);
    std::shared_ptr<kvad::Model> m = kvad::load_model(q, kvad::DeviceOptions{});
    kvad::Session s(m, std::max<int32_t>(64, static_cast<int32_t>(ref.tokens.size())), 1, 1);
    kvad::Batch b;
    for (size_t i = 0; i < ref.tokens.size(); ++i) b.add(ref.tokens[i], static_cast<int32_t>(i), 0, true);
    const std::vector<float>& all = s.forward(b);
    double worst = 0;
    for (size_t i = 0; i < ref.tokens.size(); ++i)
      worst = std::max(worst, rel_err(ref.logits[i], &all[i * m->hparams().n_vocab]));
    std::printf("llama %s via the quantize-once cache: max |diff| / max |logit| vs transformers %.2e\n", form, worst);
    EXPECT_LT(worst, bound);
  }
  fs::remove_all(cache);
}

}  // namespace
