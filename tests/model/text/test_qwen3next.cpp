// model/text/qwen3next.cpp's architectures (Qwen3-Next, with dense layers
// and with its MTP layer; Qwen3.5 dense, MoE and VL) from HF checkpoints
// and llama.cpp's GGUFs of them, against transformers' logits and
// llama.cpp's.
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

// Qwen3-Next: gated DeltaNet layers (chunked delta rule in the 80-token
// prefill, the recurrent form step by step) beside gated attention with
// partial rotary, zero-centred norms, a shared expert behind a sigmoid gate.
// With an f32 KV cache: 1e-4 (measured 4.2e-5, prefill and step by step;
// this random fixture amplifies rounding: q8_0 weights move it by 0.9). With the default f16
// cache: 5.0e-4 against transformers in f32 (transformers itself moves by
// 5.3e-4 when its keys and values are rounded to f16), and 1.5e-4 against
// that rounded run (logits-kv-f16.json; a K or V element that rounds to the
// other neighbouring f16 on one side is 5e-4 off), so 5e-4; a wrong gate,
// norm or head order is off by 1e-2 or more.
TEST(HfCheckpoint, Qwen3NextMatchesTransformers) {
  const kvad::KVTypes f32{kvad::DType::F32, kvad::DType::F32};
  for (const char* device : {"cpu", "sim"}) {
    auto src = kvad::open_hf_checkpoint((kDir / "qwen3next").string());
    check_source("qwen3next", "", src, device, 0, 1e-4, "transformers", 128, f32);
    check_source("qwen3next", "", src, device, 0, 1e-3, "transformers", 128);
    check_source("qwen3next", " (K/V in f16 on both sides)", src, device, 0, 5e-4, "transformers-kv-f16", 128);
  }
  auto src = kvad::open_hf_checkpoint((kDir / "qwen3next").string());
  EXPECT_NE(src->find("blk.0.ssm_in.weight"), nullptr);
  EXPECT_NE(src->find("blk.2.attn_q.weight"), nullptr);
  EXPECT_EQ(src->find("blk.2.ssm_a"), nullptr);
  EXPECT_EQ(src->get_int("qwen3next.rope.dimension_count", 0), 4);  // 0.25 of head_dim 16
  const kvad::SourceTensor* a = src->find("blk.0.ssm_a");
  ASSERT_NE(a, nullptr);
  for (int i = 0; i < 4; ++i) EXPECT_LT(static_cast<const float*>(a->data)[i], 0.0f);  // −exp(A_log)
}

// llama.cpp's converter splits in_proj_qkvz into attn_qkv and attn_gate,
// stores ssm_a = −exp(A_log), 1 + w norms and a [C, K] convolution: the
// same logits from those names, and llama.cpp's own on that file.
// llama.cpp (llama-cpp-python 0.3.36, f16 KV) is itself 1.0e-3 from
// transformers in f32 and 8.1e-4 from transformers with f16 K/V; kvad is
// 8.1e-4 from llama.cpp: 2e-3 here.
TEST(LlamaCppGguf, Qwen3NextMatchesTransformersAndLlamaCpp) {
  for (const char* device : {"cpu", "sim"}) {
    check_source("qwen3next", " (llama.cpp GGUF)", llama_cpp_gguf("qwen3next"), device, 0, 1e-4,
                 "transformers", 128, {kvad::DType::F32, kvad::DType::F32});
    check_source("qwen3next", " (llama.cpp GGUF, K/V in f16 on both sides)", llama_cpp_gguf("qwen3next"), device, 0,
                 5e-4, "transformers-kv-f16", 128);
  }
  check_source("qwen3next", " (llama.cpp GGUF)", llama_cpp_gguf("qwen3next"), "cpu", 0, 2e-3, "llama.cpp", 128);
}

// Qwen3-Next with dense MLP layers (config mlp_only_layers [0, 1]: a DeltaNet
// and an attention layer with transformers' Qwen3NextMLP of intermediate_size
// 96, then two MoE layers; tools/make_tiny_hf.py qwen3next_dense), against
// transformers as the qwen3next fixture is: f32 KV to 1e-4, f16 KV to 1e-3
// and to 5e-4 against transformers with K/V rounded to f16, on cpu and sim,
// in one prefill and token by token. llama.cpp has no such file to compare:
// its converter cannot map a dense qwen3next layer (mlp.down_proj), and its
// qwen3next loader requires ffn_gate_inp in every layer.
TEST(HfCheckpoint, Qwen3NextDenseLayersMatchTransformers) {
  const kvad::KVTypes f32{kvad::DType::F32, kvad::DType::F32};
  for (const char* device : {"cpu", "sim"}) {
    auto src = kvad::open_hf_checkpoint((kDir / "qwen3next_dense").string());
    check_source("qwen3next_dense", "", src, device, 0, 1e-4, "transformers", 128, f32);
    check_source("qwen3next_dense", "", src, device, 0, 1e-3, "transformers", 128);
    check_source("qwen3next_dense", " (K/V in f16 on both sides)", src, device, 0, 5e-4, "transformers-kv-f16", 128);
  }
  auto src = kvad::open_hf_checkpoint((kDir / "qwen3next_dense").string());
  for (int il = 0; il < 4; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    EXPECT_EQ(src->find(p + "ffn_gate_inp.weight") == nullptr, il < 2) << il;  // the router: MoE layers only
    EXPECT_EQ(src->find(p + "ffn_down.weight") != nullptr, il < 2) << il;       // the dense MLP
    EXPECT_EQ(src->find(p + "ssm_a") != nullptr, il % 2 == 0) << il;           // DeltaNet at 0 and 2
  }
  EXPECT_EQ(src->find("blk.0.ffn_down.weight")->ne[0], 96);

  // The quantize-once file keeps the dense layers (q8_0) beside the split
  // DeltaNet projections, and runs.
  const fs::path cache = fs::temp_directory_path() / ("kvad-qcache-dense-" + std::to_string(::getpid()));
  fs::remove_all(cache);
  const kvad::QuantizeOnceKey key{cache.string(), "kvad-test/tiny-qwen3next_dense", "0123456789abcdef"};
  auto q = kvad::quantize_once(src, "q8_0", key);
  ASSERT_NE(q->find("blk.0.ffn_down.weight"), nullptr);
  EXPECT_EQ(q->find("blk.0.ffn_down.weight")->type, kvad::DType::Q8_0);
  EXPECT_NE(q->find("blk.0.attn_qkv.weight"), nullptr);
  EXPECT_EQ(q->find("blk.0.ssm_in.weight"), nullptr);
  const Reference ref = read_reference(kDir / "qwen3next_dense");
  std::shared_ptr<kvad::Model> m = kvad::load_model(q, kvad::DeviceOptions{});
  kvad::Session s(m, 128, 1, 1);
  kvad::Batch b;
  for (size_t i = 0; i < ref.tokens.size(); ++i) b.add(ref.tokens[i], static_cast<int32_t>(i), 0, true);
  const std::vector<float>& all = s.forward(b);
  double worst = 0;
  for (size_t i = 0; i < ref.tokens.size(); ++i)
    worst = std::max(worst, rel_err(ref.logits[i], &all[i * m->hparams().n_vocab]));
  std::printf("qwen3next_dense q8_0 via the quantize-once cache: max |diff| / max |logit| vs transformers %.2e\n", worst);
  EXPECT_TRUE(std::isfinite(worst));
  fs::remove_all(cache);
}

// A Qwen3-Next GGUF as llama.cpp's converter writes a checkpoint with its
// multi-token prediction layer (tools/make_qwen3next_mtp_gguf.py: the tiny
// checkpoint plus mtp.*, converted with the MTP export on): block_count 7
// with nextn_predict_layers 1, blk.6.* a gated-attention block and
// blk.6.nextn.*. kvad takes blk.6 as the MTP head, not a decoder layer:
// logits equal to the same file without it (llama.cpp-f32.gguf), and
// llama.cpp's own on it to 2e-3 (8.1e-4 measured, as on the file without).
// Run as a seventh decoder layer instead, they are 0.49 off.
TEST(LlamaCppGguf, Qwen3NextMtpLayerIsNotADecoderLayer) {
  const fs::path dir = kDir / "qwen3next";
  const Reference ref = read_reference(dir, "llama.cpp-mtp-f32.logits.json");
  std::vector<std::vector<float>> out;
  for (const char* file : {"llama.cpp-mtp-f32.gguf", "llama.cpp-f32.gguf"}) {
    SCOPED_TRACE(file);
    auto src = kvad::gguf_source(kvad::gguf::File::open((dir / file).string()));
    std::shared_ptr<kvad::Model> m = kvad::load_model(src, kvad::DeviceOptions{});
    EXPECT_EQ(m->hparams().n_layer, 6);
    kvad::Session s(m, 128, 1, 1);
    kvad::Batch b;
    for (size_t i = 0; i < ref.tokens.size(); ++i) b.add(ref.tokens[i], static_cast<int32_t>(i), 0, true);
    out.push_back(s.forward(b));
    double worst = 0;
    for (size_t i = 0; i < ref.tokens.size(); ++i)
      worst = std::max(worst, rel_err(ref.logits[i], &out.back()[i * m->hparams().n_vocab]));
    std::printf("qwen3next %s: max |diff| / max |logit| vs llama.cpp's logits on the MTP file %.2e\n", file, worst);
    EXPECT_LT(worst, 2e-3);
  }
  EXPECT_EQ(out[0], out[1]);
  // nextn_predict_layers must leave at least one decoder layer.
  const fs::path tmp = fs::temp_directory_path() / ("kvad-mtp-" + std::to_string(::getpid()) + ".gguf");
  {
    auto f = kvad::gguf::File::open((dir / "llama.cpp-mtp-f32.gguf").string());
    kvad::gguf::Writer w(3);
    for (const kvad::gguf::Value& v : f->metadata())
      w.add(v.key() == "qwen3next.nextn_predict_layers"
                ? kvad::gguf::make_uint(v.key(), kvad::gguf::ValueType::UINT32, 7)
                : v);
    for (const kvad::gguf::TensorInfo& t : f->tensors()) w.add_tensor(t.name, t.type, t.ne, t.data, t.n_bytes);
    w.write_file(tmp.string());
  }
  try {
    (void)kvad::load_model(kvad::gguf_source(kvad::gguf::File::open(tmp.string())), kvad::DeviceOptions{});
    ADD_FAILURE() << "no error for nextn_predict_layers 7 of 7 blocks";
  } catch (const kvad::Error& e) {
    EXPECT_NE(std::string(e.what()).find("nextn_predict_layers 7 is not in [0, qwen3next.block_count)"),
              std::string::npos)
        << e.what();
  }
  fs::remove(tmp);
}

// Qwen3.5 (tools/make_tiny_hf.py qwen35): Qwen3-Next's layers with split
// DeltaNet projections, 2 key heads to 6 value heads, 80 tokens (a chunk
// boundary of the delta rule); qwen35 dense, qwen35moe with experts and the
// gated shared expert, qwen35_vl the dense one as Qwen3_5ForConditionalGeneration
// (config qwen3_5 with text_config, model.language_model.*, a vision tower
// kvad does not read). The HF view reorders the value heads into llama.cpp's
// tiled order and the delta rule runs tiled. With the default f16 KV cache
// the reference is transformers with its K/V rounded to f16 too
// (logits-kv-f16.json): against transformers in f32 the rounding alone is
// 3.5e-4 (qwen35) to 1.0e-3 (qwen35moe).

TEST(HfCheckpoint, Qwen35MatchesTransformers) {
  for (const char* name : {"qwen35", "qwen35moe", "qwen35_vl"})
    for (const char* device : {"cpu", "sim"}) {
      auto src = kvad::open_hf_checkpoint((kDir / name).string());
      check_source(name, "", src, device, 0, 1e-4, "transformers", 128, kF32Kv);
      check_source(name, " (K/V in f16 on both sides)", src, device, 0, 5e-4, "transformers-kv-f16", 128);
    }
  auto src = kvad::open_hf_checkpoint((kDir / "qwen35_vl").string());
  EXPECT_EQ(src->get_string("general.architecture", ""), "qwen35");
  EXPECT_EQ(src->get_int("qwen35.rope.dimension_count", 0), 8);  // 0.25 of head_dim 32
  EXPECT_NE(src->find("blk.0.ssm_beta.weight"), nullptr);
  EXPECT_EQ(kvad::open_hf_checkpoint((kDir / "qwen35moe").string())->get_string("general.architecture", ""),
            "qwen35moe");
}

// The HF view's tensors are llama.cpp's converter output, value for value:
// names, the value-head reorder (attn_qkv's v rows, attn_gate, ssm_beta,
// ssm_alpha, ssm_a, ssm_dt, ssm_conv1d's v channels, ssm_out's columns), the
// 1 + w norms and −exp(A_log). So a quantize-once file of a Qwen3.5
// checkpoint is what llama.cpp expects.
TEST(HfCheckpoint, Qwen35ViewEqualsLlamaCppConversion) {
  for (const char* name : {"qwen35", "qwen35moe"}) {
    SCOPED_TRACE(name);
    auto hf = kvad::open_hf_checkpoint((kDir / name).string());
    auto gg = llama_cpp_gguf(name);
    size_t n = 0;
    for (const kvad::SourceTensor& t : gg->tensors()) {
      const kvad::SourceTensor* h = hf->find(t.name);
      ASSERT_NE(h, nullptr) << t.name;
      ASSERT_EQ(t.type, kvad::DType::F32) << t.name;
      ASSERT_EQ(h->type, kvad::DType::F32) << t.name;
      ASSERT_EQ(h->n_bytes, t.n_bytes) << t.name;
      EXPECT_EQ(h->ne, t.ne) << t.name;  // ssm_conv1d as GGUF's [C, K], not HF's [C, 1, K]
      EXPECT_EQ(h->n_dims, t.n_dims) << t.name;
      const auto* a = static_cast<const float*>(t.data);
      const auto* b = static_cast<const float*>(h->data);
      double d = 0;
      for (size_t i = 0; i < t.n_bytes / 4; ++i) d = std::max(d, std::fabs(double(a[i]) - b[i]) / (1 + std::fabs(a[i])));
      EXPECT_LT(d, 1e-6) << t.name;
      ++n;
    }
    EXPECT_EQ(n, hf->tensors().size());
    // The keys llama.cpp's qwen35 loader requires, as its converter writes them.
    const std::string arch = name;
    EXPECT_EQ(kvad::gguf_file(*gg)->find(arch + ".rope.dimension_sections")->as_int_array(),
              (std::vector<int64_t>{2, 1, 1, 0}));
    EXPECT_TRUE(std::holds_alternative<std::vector<int64_t>>(
        kvad::mapped_metadata(*hf)->at(arch + ".rope.dimension_sections")));
    EXPECT_EQ(std::get<std::vector<int64_t>>(kvad::mapped_metadata(*hf)->at(arch + ".rope.dimension_sections")),
              (std::vector<int64_t>{2, 1, 1, 0}));
  }
}

// The test above can fail: the checkpoint read through the same name table
// without the reorder (HF's grouped value heads under the tiled delta rule)
// is far from transformers.
TEST(HfCheckpoint, Qwen35WithoutTheHeadReorderIsWrong) {
  const fs::path dir = kDir / "qwen35";
  auto view = kvad::open_hf_checkpoint(dir.string());
  const kvad::ArchEntry* entry = nullptr;
  for (const kvad::ArchEntry& a : kvad::architectures())
    if (a.name == "qwen35") entry = &a;
  ASSERT_NE(entry, nullptr);
  auto raw = kvad::safetensors_source(dir.string());
  std::vector<kvad::TensorRename> rules;
  std::vector<std::string> ignored;
  for (const kvad::SourceTensor& t : raw->tensors()) {
    kvad::TensorRename r;
    ASSERT_TRUE(entry->hf->tensor(t.name, r)) << t.name;
    r.base = t.name;
    if (r.name.empty()) ignored.push_back(t.name);
    else rules.push_back(r);
  }
  auto grouped = kvad::mapped_source(raw, rules, *kvad::mapped_metadata(*view), ignored);
  const double err = check_source("qwen35", " (value heads left grouped)", grouped, "cpu", 0, INFINITY,
                                  "transformers", 128, kF32Kv);
  EXPECT_GT(err, 1e-2);
}

// Its quantize-once file carries llama.cpp's keys and shapes (llama.cpp
// loads it: tools/check_quantized_in_llama_cpp.py gives logits bit-equal to
// llama.cpp's own q8_0 of its conversion).
TEST(HfCheckpoint, Qwen35QuantizeOnceIsALlamaCppQwen35File) {
  const fs::path cache = fs::temp_directory_path() / ("kvad-qcache35-" + std::to_string(::getpid()));
  fs::remove_all(cache);
  const kvad::QuantizeOnceKey key{cache.string(), "kvad-test/tiny-qwen35", "0123456789abcdef"};
  auto q = kvad::quantize_once(kvad::open_hf_checkpoint((kDir / "qwen35").string()), "q8_0", key);
  auto f = kvad::gguf_file(*q);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->find("qwen35.rope.dimension_sections")->as_int_array(), (std::vector<int64_t>{2, 1, 1, 0}));
  EXPECT_EQ(f->find("qwen35.attention.recurrent_layers")->as_int_array(),
            (std::vector<int64_t>{1, 1, 0, 1, 1, 0}));
  const kvad::SourceTensor* conv = q->find("blk.0.ssm_conv1d.weight");
  ASSERT_NE(conv, nullptr);
  EXPECT_EQ(conv->n_dims, 2);
  EXPECT_EQ(q->find("blk.0.attn_qkv.weight")->type, kvad::DType::Q8_0);
  const Reference ref = read_reference(kDir / "qwen35");
  std::shared_ptr<kvad::Model> m = kvad::load_model(q, kvad::DeviceOptions{});
  kvad::Session s(m, 128, 1, 1);
  kvad::Batch b;
  for (size_t i = 0; i < ref.tokens.size(); ++i) b.add(ref.tokens[i], static_cast<int32_t>(i), 0, true);
  const std::vector<float>& all = s.forward(b);
  for (float x : all) ASSERT_TRUE(std::isfinite(x));
  fs::remove_all(cache);
}

// Malformed Qwen3.5 configs are clear errors.
TEST(HfCheckpoint, Qwen35BadConfigsAreClearErrors) {
  std::ifstream in(kDir / "qwen35_vl" / "config.json");
  const nlohmann::json good = nlohmann::json::parse(in);
  nlohmann::json j = good;
  j["text_config"]["linear_num_value_heads"] = 5;  // not a multiple of the 2 key heads
  EXPECT_NE(error_of(j.dump(), "qwen35_vl").find("multiple of linear_num_key_heads"), std::string::npos)
      << error_of(j.dump(), "qwen35_vl");
  j = good;
  j["text_config"] = 3;
  EXPECT_NE(error_of(j.dump(), "qwen35_vl").find("text_config is not an object"), std::string::npos);
  j = good;
  j["text_config"]["rope_parameters"]["mrope_section"] = {1, 2, 3, 4, 5};
  EXPECT_NE(error_of(j.dump(), "qwen35_vl").find("mrope_section"), std::string::npos);
  j = good;
  j["text_config"]["linear_value_head_dim"] = 8;  // the checkpoint's heads are 16 wide
  EXPECT_NE(error_of(j.dump(), "qwen35_vl"), "");
  j = good;
  j["text_config"].erase("linear_num_key_heads");
  EXPECT_NE(error_of(j.dump(), "qwen35_vl").find("linear_num_key_heads"), std::string::npos);
}

// llama.cpp's qwen35 / qwen35moe GGUFs of the same checkpoints: against
// transformers (f32 KV) and against llama.cpp's own logits (llama-cpp-python
// 0.3.36, f16 KV; llama.cpp is itself 3.3e-4 / 5.7e-4 from transformers),
// within qwen3next's 2e-3.
TEST(LlamaCppGguf, Qwen35MatchesTransformersAndLlamaCpp) {
  for (const char* name : {"qwen35", "qwen35moe"}) {
    for (const char* device : {"cpu", "sim"})
      check_source(name, " (llama.cpp GGUF)", llama_cpp_gguf(name), device, 0, 1e-4, "transformers", 128, kF32Kv);
    check_source(name, " (llama.cpp GGUF)", llama_cpp_gguf(name), "cpu", 0, 2e-3, "llama.cpp", 128);
  }
}

}  // namespace
