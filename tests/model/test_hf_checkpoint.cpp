// HF checkpoints (model/hf.h) against transformers: tiny random llama and
// Gemma 3 models that tools/make_tiny_hf.py saved with transformers'
// save_pretrained (f32 safetensors + config.json), and transformers' logits
// at every position. kvad reads them through each architecture's HF name
// table and must match, in one prefill and token by token, on cpu and on
// sim, to 1e-4 relative (max |diff| / max |logit|) with an f32 KV cache
// (--cache-type-k/-v f32; transformers runs in f32 throughout), and to 1e-3
// with the default f16 cache (llama.cpp's default), whose rounding of K and
// V alone moves the logits by up to ~6e-4. Measured, f32 / f16 cache:
// 1.5e-6 / 3.7e-4 llama, 1.9e-6 / 5.8e-4 Gemma 3, 1.4e-6 / 1.6e-4 qwen2,
// 1.7e-6 / 4.0e-4 qwen3, 1.6e-6 / 3.5e-4 llama3, 1.8e-6 / 2.0e-4 mistral,
// 1.6e-6 / 3.2e-4 qwen2_yarn, 1.5e-6 / 2.3e-5 gpt2, 1.9e-6 / 3.8e-4 phi3,
// 1.8e-6 / 5.3e-4 phi3_long, 1.8e-6 / 4.4e-4 qwen3moe, 1.5e-6 / 2.9e-4
// qwen3moe_sparse; dropping the rope scaling of llama3, mistral or
// qwen2_yarn moves transformers' own logits by 4e-2-0.7. Also: malformed
// configs and unknown tensors are clear errors.
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

namespace fs = std::filesystem;
const fs::path kDir = fs::path(KVAD_SOURCE_DIR) / "tests" / "fixtures" / "hf_tiny";

// A scratch checkpoint: a tiny fixture's safetensors (llama's by default)
// with an edited config.
struct Scratch {
  fs::path dir = fs::temp_directory_path() / ("kvad-hf-" + std::to_string(::getpid()));
  explicit Scratch(const std::string& config, const char* from = "llama") {
    fs::create_directories(dir);
    fs::copy_file(kDir / from / "model.safetensors", dir / "model.safetensors", fs::copy_options::overwrite_existing);
    std::ofstream(dir / "config.json") << config;
  }
  ~Scratch() { fs::remove_all(dir); }
};

struct Reference {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;
};

Reference read_reference(const fs::path& dir, const char* file = "logits.json") {
  std::ifstream in(dir / file);
  const nlohmann::json j = nlohmann::json::parse(in);
  Reference r;
  r.tokens = j["tokens"].get<std::vector<int32_t>>();
  r.logits = j["logits"].get<std::vector<std::vector<float>>>();
  return r;
}

double rel_err(const std::vector<float>& want, const float* got) {
  double d = 0, m = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    d = std::max(d, std::fabs(double(want[i]) - got[i]));
    m = std::max(m, std::fabs(double(want[i])));
  }
  return d / m;
}

// kvad on `src` against transformers' logits of fixture `name`, at the
// first n_check positions (all when 0), in one prefill and token by token.
// against = "llama.cpp": against llama.cpp's logits on the converter's GGUF
// instead; n_ctx: the sessions' context (which picks LongRoPE's factors).
// kv: the KV cache's formats.
double check_source(const char* name, const char* label, std::shared_ptr<const kvad::TensorSource> src,
                    const char* device, int n_check = 0, double tol = 1e-3, const char* against = "transformers",
                    int32_t n_ctx = 64, kvad::KVTypes kv = {}) {
  const std::string vs = against;
  const Reference ref = read_reference(kDir / name, vs == "transformers"              ? "logits.json"
                                                    : vs == "transformers (truncate)" ? "logits-truncate.json"
                                                    : vs == "transformers-kv-f16"     ? "logits-kv-f16.json"
                                                                                      : "llama.cpp-f32.logits.json");
  kvad::DeviceOptions o;
  o.device = device;
  o.dtype = "f32";  // cuda: keep the checkpoint's f32 (cpu and sim always do)
  std::shared_ptr<kvad::Model> m = kvad::load_model(std::move(src), o);
  const int64_t V = m->hparams().n_vocab;
  EXPECT_EQ(V, static_cast<int64_t>(ref.logits[0].size()));
  if (V != static_cast<int64_t>(ref.logits[0].size())) return 1;
  const int n = n_check ? n_check : static_cast<int>(ref.tokens.size());
  // One prefill with logits at every position.
  kvad::Session s(m, n_ctx, 1, 2, kv);
  kvad::Batch b;
  for (int i = 0; i < n; ++i) b.add(ref.tokens[i], i, 0, true);
  const std::vector<float>& all = s.forward(b);
  double worst = 0;
  for (int i = 0; i < n; ++i) worst = std::max(worst, rel_err(ref.logits[i], &all[i * V]));
  // Token by token.
  kvad::Session t(m, n_ctx, 1, 1, kv);
  double worst_step = 0;
  for (int i = 0; i < n; ++i) {
    kvad::Batch d;
    d.add(ref.tokens[i], i, 0, true);
    worst_step = std::max(worst_step, rel_err(ref.logits[i], t.forward(d).data()));
  }
  std::printf("%s%s on %s, %s KV cache: max |diff| / max |logit| vs %s: prefill %.2e, step by step %.2e\n", name,
              label, device, kv.k == kvad::DType::F32 ? "f32" : "f16", against, worst, worst_step);
  EXPECT_LT(worst, tol) << name << label << " on " << device;
  EXPECT_LT(worst_step, tol) << name << label << " on " << device;
  return std::max(worst, worst_step);
}

// The HF checkpoint at --quant none against transformers (f32 throughout):
// with an f32 KV cache to the issue's 1e-4 (`tol32`, looser where noted),
// and with the default f16 cache, whose rounding of K and V alone moves the
// logits by up to ~9e-4 (transformers with K/V rounded to f16 gives 8.6e-4 on
// phi3_long), to 1e-3.
void check(const char* name, const char* device, double tol32 = 1e-4) {
  const auto src = kvad::open_hf_checkpoint((kDir / name).string());
  check_source(name, "", src, device, 0, tol32, "transformers", 64, {kvad::DType::F32, kvad::DType::F32});
  check_source(name, "", src, device, 0, 1e-3, "transformers", 64, {});
}

// The GGUF llama.cpp's convert_hf_to_gguf.py made of the same checkpoint
// (tools/convert_tiny_gguf.py): llama.cpp's tensor names and keys.
std::shared_ptr<const kvad::TensorSource> llama_cpp_gguf(const char* name) {
  return kvad::gguf_source(kvad::gguf::File::open((kDir / name / "llama.cpp-f32.gguf").string()));
}

TEST(HfCheckpoint, LlamaMatchesTransformers) {
  check("llama", "cpu");
  check("llama", "sim");
}

TEST(HfCheckpoint, Gemma3MatchesTransformers) {
  check("gemma3", "cpu");
  check("gemma3", "sim");
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

TEST(HfCheckpoint, Gpt2MatchesTransformers) {  // learned positions, LayerNorm + biases, Conv1D transposed, tied head
  check("gpt2", "cpu");
  check("gpt2", "sim");
  auto src = kvad::open_hf_checkpoint((kDir / "gpt2").string());
  const kvad::SourceTensor* qkv = src->find("blk.0.attn_qkv.weight");
  ASSERT_NE(qkv, nullptr);
  EXPECT_EQ(qkv->ne[0], 64);   // n_in: rows of the transposed Conv1D weight
  EXPECT_EQ(qkv->ne[1], 192);  // q | k | v
  std::shared_ptr<kvad::Model> m = kvad::load_model(src, kvad::DeviceOptions{});
  try {
    kvad::Session s(m, 65, 1, 1);  // past the 64 learned positions
    ADD_FAILURE() << "a context longer than n_positions was accepted";
  } catch (const kvad::Error& e) {
    EXPECT_NE(std::string(e.what()).find("learned positions for 64"), std::string::npos) << e.what();
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
    EXPECT_TRUE(what.find("CUDA") != std::string::npos || what.find("supported: llama") != std::string::npos)
        << what;
  }
}

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

// gpt-oss as OpenAI ships it, experts in MXFP4 (tools/make_tiny_hf.py's
// gpt_oss_mxfp4: OpenAI's _blocks/_scales layout), which llama.cpp's converter
// repacks into GGUF MXFP4 tensors: kvad reads them and matches llama.cpp and
// transformers (its own dequantization of the same bytes, in f32). 1e-2: the
// MXFP4 dot products of kvad and llama.cpp round activations to q8_0 blocks,
// which alone moves transformers' logits on this model by 2.5e-3 (measured:
// kvad 1.9e-3 from llama.cpp, 3.0e-3 from transformers; llama.cpp 2.8e-3 from
// transformers); experts with shuffled columns (a wrong nibble order) move
// them by 0.23.
TEST(LlamaCppGguf, GptOssMxfp4ExpertsMatchLlamaCpp) {
  auto src = llama_cpp_gguf("gpt_oss_mxfp4");
  ASSERT_NE(src->find("blk.0.ffn_gate_exps.weight"), nullptr);
  EXPECT_EQ(src->find("blk.0.ffn_gate_exps.weight")->type, kvad::DType::MXFP4);
  EXPECT_EQ(src->find("blk.1.ffn_down_exps.weight")->type, kvad::DType::MXFP4);
  for (const char* device : {"cpu", "sim"})
    check_source("gpt_oss_mxfp4", " (llama.cpp GGUF, MXFP4 experts)", llama_cpp_gguf("gpt_oss_mxfp4"), device, 0, 1e-2,
                 "llama.cpp");
  check_source("gpt_oss_mxfp4", " (llama.cpp GGUF, MXFP4 experts)", llama_cpp_gguf("gpt_oss_mxfp4"), "cpu", 0, 1e-2);
}

// The same checkpoint read by kvad itself: OpenAI's MXFP4 blocks and scales
// repacked at load into exactly the bytes llama.cpp's converter wrote, and
// the model's logits those of the converted GGUF.
TEST(HfCheckpoint, GptOssMxfp4ExpertsEqualTheConverters) {
  auto ours = kvad::open_hf_checkpoint((kDir / "gpt_oss_mxfp4").string());
  auto theirs = llama_cpp_gguf("gpt_oss_mxfp4");
  int n = 0;
  for (const kvad::SourceTensor& t : theirs->tensors()) {
    if (t.type != kvad::DType::MXFP4) continue;
    const kvad::SourceTensor* o = ours->find(t.name);
    ASSERT_NE(o, nullptr) << t.name;
    EXPECT_EQ(o->type, kvad::DType::MXFP4) << t.name;
    ASSERT_EQ(o->ne, t.ne) << t.name;
    ASSERT_EQ(o->n_bytes, t.n_bytes) << t.name;
    EXPECT_EQ(std::memcmp(o->data, t.data, t.n_bytes), 0) << t.name;
    ++n;
  }
  EXPECT_EQ(n, 6);  // gate, up, down x 2 layers
  for (const char* device : {"cpu", "sim"})
    check_source("gpt_oss_mxfp4", " (HF MXFP4 checkpoint)", ours, device, 0, 1e-2, "llama.cpp");
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

// gpt-oss: attention sinks, Q/K/V/O biases, 4:1 GQA, sliding (4) and full
// layers alternating, YaRN without truncation, 8 experts top-2 with router
// and expert biases, the clamped SwiGLU (the tiny model's gate/up values pass
// the limit 7), HF's interleaved gate_up_proj.
TEST(HfCheckpoint, GptOssMatchesTransformers) {
  check("gpt_oss", "cpu");
  check("gpt_oss", "sim");
}

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

TEST(HfCheckpoint, Qwen3MoeAllSparseMatchesTransformers) {  // 4 experts, top-2, renormalised
  check("qwen3moe_sparse", "cpu");
  check("qwen3moe_sparse", "sim");
}

// The same on CUDA where this machine has it (the CUDA row has every op these
// use; qwen3moe's MoE ops are cpu/sim only). 5e-3: the GPU's f32 products
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


std::string error_of(const std::string& config, const char* from = "llama") {
  Scratch s(config, from);
  try {
    kvad::load_model(kvad::open_hf_checkpoint(s.dir.string()), kvad::DeviceOptions{});
  } catch (const kvad::Error& e) {
    return e.what();
  }
  return "";
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

TEST(HfCheckpoint, BadGptOssConfigsAreClearErrors) {
  std::ifstream in(kDir / "gpt_oss" / "config.json");
  const nlohmann::json good = nlohmann::json::parse(in);
  EXPECT_EQ(error_of(good.dump(), "gpt_oss"), "");
  nlohmann::json j = good;
  j["layer_types"] = {"full_attention", "sliding_attention", "sliding_attention", "full_attention"};
  EXPECT_NE(error_of(j.dump(), "gpt_oss").find("layer_types is not a repeating pattern"), std::string::npos);
  j = good;
  j["layer_types"] = {"sliding_attention", "full_attention", "chunked_attention", "full_attention"};
  EXPECT_NE(error_of(j.dump(), "gpt_oss").find("'chunked_attention' is not supported"), std::string::npos);
  j = good;
  j["sliding_window"] = 0;
  EXPECT_NE(error_of(j.dump(), "gpt_oss").find("sliding_window must be positive"), std::string::npos);
  j = good;
  j["num_experts_per_tok"] = 9;  // of 8
  EXPECT_NE(error_of(j.dump(), "gpt_oss").find("expert_used_count"), std::string::npos);
  j = good;
  j["attention_bias"] = false;
  EXPECT_NE(error_of(j.dump(), "gpt_oss").find("attention_bias"), std::string::npos);
  j = good;
  j["intermediate_size"] = 48;  // the experts are 32 wide
  EXPECT_NE(error_of(j.dump(), "gpt_oss").find("has shape"), std::string::npos);
}

}  // namespace

namespace {

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

}  // namespace

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

namespace {

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

}  // namespace

namespace {

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

}  // namespace

namespace {

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
const kvad::KVTypes kF32Kv{kvad::DType::F32, kvad::DType::F32};

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

namespace {

// ---- Qwen2-MoE (tools/make_tiny_hf.py qwen2moe, qwen2moe_dense) ----------
// Qwen2's attention (random q/k/v biases, GQA 2:1), 8 experts top-2 and a
// shared expert (64 wide in qwen2moe, 48 in qwen2moe_dense; experts 32,
// dense MLP 96) behind a per-token
// sigmoid gate, untied head. qwen2moe: every layer sparse, norm_topk_prob
// false (Qwen2MoeConfig's default); qwen2moe_dense: layer 1 dense
// (mlp_only_layers), norm_topk_prob true.

// `src` with some tensors or metadata keys left out: a file that lacks them.
class Without final : public kvad::TensorSource {
 public:
  Without(std::shared_ptr<const kvad::TensorSource> src, std::vector<std::string> names)
      : src_(std::move(src)), names_(std::move(names)) {
    for (const kvad::SourceTensor& t : src_->tensors())
      if (!gone(t.name)) tensors_.push_back(t);
  }
  const std::string& path() const override { return src_->path(); }
  const std::vector<kvad::SourceTensor>& tensors() const override { return tensors_; }
  const kvad::SourceTensor* find(std::string_view name) const override {
    return gone(name) ? nullptr : src_->find(name);
  }
  std::shared_ptr<const void> keepalive() const override { return src_->keepalive(); }
  bool has(std::string_view key) const override { return !gone(key) && src_->has(key); }
  int64_t get_int(std::string_view key, int64_t def) const override {
    return gone(key) ? def : src_->get_int(key, def);
  }
  int64_t require_int(std::string_view key) const override {
    if (gone(key)) throw kvad::Error(path() + ": missing key " + std::string(key));
    return src_->require_int(key);
  }
  double get_float(std::string_view key, double def) const override {
    return gone(key) ? def : src_->get_float(key, def);
  }
  std::string get_string(std::string_view key, const std::string& def) const override {
    return gone(key) ? def : src_->get_string(key, def);
  }
  std::vector<bool> get_bool_array(std::string_view key) const override {
    return gone(key) ? std::vector<bool>{} : src_->get_bool_array(key);
  }

 private:
  bool gone(std::string_view name) const { return std::find(names_.begin(), names_.end(), name) != names_.end(); }
  std::shared_ptr<const kvad::TensorSource> src_;
  std::vector<std::string> names_;
  std::vector<kvad::SourceTensor> tensors_;
};

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

}  // namespace

namespace {

// ---- Mixtral (tools/make_tiny_hf.py mixtral, mixtral_swa) ----------------
// Mistral's attention (GQA 2:1) and in both layers 8 SwiGLU experts (48
// wide), top-2, softmax weights renormalised; untied head. HF model_type
// mixtral reads as GGUF "llama" with llama.expert_count / expert_used_count,
// as llama.cpp's converter writes it.

// `src` with one integer key replaced: a file that says otherwise.
class WithInt final : public kvad::TensorSource {
 public:
  WithInt(std::shared_ptr<const kvad::TensorSource> src, std::string key, int64_t value)
      : src_(std::move(src)), key_(std::move(key)), value_(value) {}
  const std::string& path() const override { return src_->path(); }
  const std::vector<kvad::SourceTensor>& tensors() const override { return src_->tensors(); }
  const kvad::SourceTensor* find(std::string_view name) const override { return src_->find(name); }
  std::shared_ptr<const void> keepalive() const override { return src_->keepalive(); }
  bool has(std::string_view key) const override { return key == key_ || src_->has(key); }
  int64_t get_int(std::string_view key, int64_t def) const override {
    return key == key_ ? value_ : src_->get_int(key, def);
  }
  int64_t require_int(std::string_view key) const override { return key == key_ ? value_ : src_->require_int(key); }
  double get_float(std::string_view key, double def) const override { return src_->get_float(key, def); }
  std::string get_string(std::string_view key, const std::string& def) const override {
    return src_->get_string(key, def);
  }
  std::vector<bool> get_bool_array(std::string_view key) const override { return src_->get_bool_array(key); }

 private:
  std::shared_ptr<const kvad::TensorSource> src_;
  std::string key_;
  int64_t value_;
};

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

namespace {

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

namespace {

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

}  // namespace

namespace {

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
