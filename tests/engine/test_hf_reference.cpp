// Real weights in HF layout against transformers: the store's SmolLM2-135M
// and Gemma 3 270M as HF checkpoints (tools/make_hf_checkpoint.py, run by
// scripts/setup into $KVAD_HOME/hf-cache), and transformers' own greedy
// continuations and top-10 logits on them (tests/fixtures/hf_reference/,
// made by tools/make_hf_reference.py with torch). kvad reads the checkpoint
// through the HF path (safetensors, config.json, tokenizer.json) at
// --quant none (bf16 as stored) and through the quantize-once cache at q8_0
// (with the tokenizer the cache file keeps, which a cached kvad run reads):
// the prompt ids equal transformers' exactly, free-running greedy decoding
// equals transformers' up to the first near-tie (top-2 margin < 0.5), and
// the listed logits are within the tolerance of the GGUF reference tests.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/chat_prompt.h"
#include "model_path.h"
#include "reference_check.h"
#include "engine/session.h"
#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "io/tensor_source.h"
#include "model/hf.h"
#include "model/quantize_once.h"
#include "model/registry.h"
#include "tokenizer/tokenizer.h"
#include "../tokenizer/gunzip.h"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

using kvad::test::kvad_home;

struct Stats {
  int prompts = 0, full_equal = 0;
  double max_diff = 0;
};

void run(const char* fixture, const std::string& quant, double logit_tol) {
  std::ifstream in(fs::path(KVAD_SOURCE_DIR) / "tests" / "fixtures" / "hf_reference" / fixture);
  const json ref = json::parse(in);
  const std::string repo = ref["repo"], commit = ref["commit"];
  const fs::path snap = fs::path(kvad_home()) / "hf-cache" / ("models--" + repo.substr(0, repo.find('/')) + "--" +
                                                               repo.substr(repo.find('/') + 1)) / "snapshots" / commit;
  if (!fs::exists(snap / "model.safetensors"))
    GTEST_SKIP() << snap << " is missing (scripts/setup makes it with tools/make_hf_checkpoint.py)";
  // The checkpoint is the one the reference was computed from.
  const std::string blob = fs::read_symlink(snap / "model.safetensors").filename().string();
  ASSERT_EQ(blob, ref["files"]["model.safetensors"]["blob"].get<std::string>());

  std::shared_ptr<const kvad::TensorSource> src = kvad::open_hf_checkpoint(snap.string());
  std::unique_ptr<kvad::Tokenizer> tok;
  if (quant != "none") {
    // As kvad run does: the quantize-once cache keeps the tokenizer, and a
    // cached load reads it from there (so the prompt ids below check it too).
    const fs::path cache = fs::temp_directory_path() / ("kvad-hfref-" + std::to_string(::getpid()));
    src = kvad::quantize_once(src, quant, {cache.string(), repo, commit, snap.string()});
    fs::remove_all(cache);  // the file stays mapped
    tok = kvad::Tokenizer::from_gguf(*kvad::gguf_file(*src));
  } else {
    tok = kvad::Tokenizer::from_tokenizer_json((snap / "tokenizer.json").string(),
                                               (snap / "tokenizer_config.json").string());
  }
  std::shared_ptr<kvad::Model> model = kvad::load_model(src, kvad::DeviceOptions{});
  Stats st;
  for (const json& p : ref["prompts"]) {
    std::vector<int32_t> ids;
    if (p["kind"] == "chat")
      ids = kvad::ChatPrompt::from_tokenizer(*tok, repo).tokenize(p["messages"], true);
    else
      // HF tokenizers split added special tokens out of any text, raw or not.
      ids = tok->encode(p["text"].get<std::string>(), /*add_special=*/true, /*parse_special=*/true);
    ASSERT_EQ(ids, p["prompt_ids"].get<std::vector<int32_t>>()) << "tokenization of " << p.dump().substr(0, 80);
    auto prefill = [&](kvad::Session& s) {
      kvad::Batch b;
      for (size_t i = 0; i < ids.size(); ++i) b.add(ids[i], static_cast<int32_t>(i), 0, i + 1 == ids.size());
      return s.forward(b);
    };
    auto step = [&](kvad::Session& s, int32_t t, size_t k) {
      kvad::Batch d;
      d.add(t, static_cast<int32_t>(ids.size() + k), 0, true);
      return s.forward(d);
    };
    const auto greedy = p["greedy_ids"].get<std::vector<int32_t>>();
    const auto margins = p["margins"].get<std::vector<double>>();
    const int first_tie = p["first_near_tie"];
    // Teacher-forced on transformers' tokens: the listed logits at every step.
    {
      kvad::Session s(model, 1024, 1, 2);
      std::vector<float> logits = prefill(s);
      for (size_t k = 0; k < greedy.size(); ++k) {
        for (const json& e : p["steps"][k]) {
          const double d = std::fabs(logits[e[0].get<int>()] - e[1].get<double>());
          st.max_diff = std::max(st.max_diff, d);
          EXPECT_LE(d, logit_tol) << fixture << " prompt " << st.prompts << " step " << k;
        }
        logits = step(s, greedy[k], k);
      }
    }
    // Free-running greedy: equal up to the first near-tie.
    kvad::Session s(model, 1024, 1, 2);
    std::vector<float> logits = prefill(s);
    bool same = true;
    for (size_t k = 0; k < greedy.size(); ++k) {
      const int32_t next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      if (next != greedy[k]) {
        if (static_cast<int>(k) < first_tie)
          ADD_FAILURE() << fixture << " prompt " << st.prompts << ": step " << k << " kvad " << next
                        << ", transformers " << greedy[k] << " (margin " << margins[k] << ")";
        same = false;
        break;
      }
      logits = step(s, next, k);
    }
    st.full_equal += same;
    ++st.prompts;
  }
  std::printf("%s --quant %s: %d of %d greedy continuations equal transformers' over 16 tokens; max |logit diff| "
              "(top-10, teacher-forced, 16 steps) %.4f\n",
              fixture, quant.c_str(), st.full_equal, st.prompts, st.max_diff);
}

// Tolerances on the top-10 logits. --quant none: the GGUF reference tests'
// 1.0 (measured 0.23 SmolLM2, 0.29 Gemma 3: kvad's bf16 weights are the
// reference's). q8_0: 2.0 (measured 1.27 and 1.55): here kvad's weights are
// q8_0 and transformers' bf16, so the difference is the quantization's, not
// the engine's (the GGUF tests compare the same quantized weights in both
// engines); greedy decoding still equals transformers' up to every near-tie.
TEST(HfReference, SmolLM2None) { run("smollm2-135m.json", "none", 1.0); }
TEST(HfReference, SmolLM2Q8_0) { run("smollm2-135m.json", "q8_0", 2.0); }
TEST(HfReference, Gemma3None) { run("gemma3-270m.json", "none", 1.0); }
TEST(HfReference, Gemma3Q8_0) { run("gemma3-270m.json", "q8_0", 2.0); }

// The tokenizer the quantize-once cache keeps, for the two real checkpoints:
// built from the cache file's keys it tokenizes every string of the
// tokenizer suite (tests/fixtures/hf_tokenizer/gpt2.cases.json.gz: the peer
// suites' strings and generated ones) exactly as the tokenizer.json one,
// with and without special tokens, and decodes alike.
TEST(HfReference, CacheTokenizerEqualsTokenizerJson) {
  const json cases =
      json::parse(kvad::test::gunzip_file(
          (fs::path(KVAD_SOURCE_DIR) / "tests" / "fixtures" / "hf_tokenizer" / "gpt2.cases.json.gz").string()));
  int checked = 0;
  for (const char* snap_rel : {"models--HuggingFaceTB--SmolLM2-135M-Instruct/snapshots/445506d8557cf6aae3c041117e8d4135ec426989",
                               "models--google--gemma-3-270m/snapshots/ae0e30b556162d6b557c9572dfa6fea5250c67fc"}) {
    const fs::path snap = fs::path(kvad_home()) / "hf-cache" / snap_rel;
    if (!fs::exists(snap / "tokenizer.json")) continue;
    SCOPED_TRACE(snap.string());
    const std::string tj = (snap / "tokenizer.json").string(), tc = (snap / "tokenizer_config.json").string();
    auto ref = kvad::Tokenizer::from_tokenizer_json(tj, tc);
    kvad::gguf::Writer w;
    for (const kvad::gguf::Value& v : kvad::tokenizer_json_file_gguf_keys(tj, tc)) w.add(v);
    const std::vector<uint8_t> bytes = w.to_bytes();
    auto f = kvad::gguf::File::parse(bytes.data(), bytes.size(), "cache.gguf");
    auto tok = kvad::Tokenizer::from_gguf(*f);
    EXPECT_EQ(tok->bos(), ref->bos());
    EXPECT_EQ(tok->eos(), ref->eos());
    EXPECT_EQ(tok->pad(), ref->pad());
    EXPECT_EQ(tok->add_bos(), ref->add_bos());
    EXPECT_EQ(tok->chat_template(), ref->chat_template());
    EXPECT_EQ(tok->eog_ids(), ref->eog_ids());
    size_t n = 0, equal = 0;
    for (const json& c : cases["cases"]) {
      const std::string text = c[0].get<std::string>();
      const auto ids = ref->encode(text, true, true);
      ++n;
      const bool same = tok->encode(text, true, true) == ids && tok->encode(text, false, false) == ref->encode(text, false, false) &&
                        tok->decode(ids, true) == ref->decode(ids, true) && tok->decode(ids, false) == ref->decode(ids, false);
      equal += same;
      if (!same && n - equal <= 3) ADD_FAILURE() << "differs: " << text.substr(0, 60);
    }
    std::printf("%s: %zu/%zu strings tokenized alike by the cache file's tokenizer and tokenizer.json's\n",
                snap.filename().c_str(), equal, n);
    EXPECT_EQ(equal, n);
    EXPECT_GE(n, 1000u);
    ++checked;
  }
  if (checked == 0) GTEST_SKIP() << "no HF checkpoint in " << kvad_home() << "/hf-cache (scripts/setup makes them)";
}

// The quantize-once cache file is a GGUF llama.cpp loads (DESIGN.md seam 9):
// tests/fixtures/reference/smollm2-135m-hf-q8_0.json is llama.cpp's greedy
// continuations and top-10 logits on the cache file of SmolLM2 at q8_0
// (tools/make_reference.py --cache-of, llama-cpp-python reading kvad's
// tensors and tokenizer.ggml.* keys). kvad, on the file it writes here from
// the same checkpoint and with the tokenizer it keeps there
// (Tokenizer::from_gguf), tokenizes all 24 prompts as llama.cpp did, agrees
// on top-1 wherever llama.cpp's margin is clear, and continues at least 5
// prompts exactly. Logits: 1.5, not test_reference.cpp's 1.0 — measured
// 1.34 with the AVX2 kernels ("def fibonacci", step 19) and 1.14 with the
// scalar reference kernels (KVAD_NO_SIMD=1; another prompt), every other
// prompt <= 0.96: the activation-quantization noise test_reference.cpp
// describes (kvad's two kernel sets differ from each other by as much), not
// a difference of the file (which a wrong tensor or key would show as
// whole units everywhere).
TEST(HfReference, SmolLM2Q8_0CacheFileEqualsLlamaCpp) {
  std::ifstream in(fs::path(KVAD_SOURCE_DIR) / "tests" / "fixtures" / "reference" / "smollm2-135m-hf-q8_0.json");
  kvad::test::ReferenceModel r;
  r.name = "smollm2-135m-hf-q8_0";
  r.j = nlohmann::json::parse(in);
  const std::string repo = r.j["cache_of"], commit = "445506d8557cf6aae3c041117e8d4135ec426989";
  const fs::path snap = fs::path(kvad_home()) / "hf-cache" / "models--HuggingFaceTB--SmolLM2-135M-Instruct" / "snapshots" / commit;
  if (!fs::exists(snap / "model.safetensors"))
    GTEST_SKIP() << snap << " is missing (scripts/setup makes it with tools/make_hf_checkpoint.py)";
  const fs::path cache = fs::temp_directory_path() / ("kvad-hfcache-" + std::to_string(::getpid()));
  auto src = kvad::quantize_once(kvad::open_hf_checkpoint(snap.string()), "q8_0", {cache.string(), repo, commit, snap.string()});
  const std::string file = kvad::quantize_once_path({cache.string(), repo, commit, snap.string()}, "q8_0");
  r.file = kvad::gguf_file(*src);
  fs::remove_all(cache);  // the file stays mapped
  ASSERT_TRUE(r.file);
  EXPECT_EQ(fs::path(file).filename().string(), r.j["model_file"].get<std::string>());
  r.model = kvad::load_model(src, kvad::DeviceOptions{});
  r.tok = kvad::Tokenizer::from_gguf(*r.file);
  r.add_bos = r.j["settings"]["add_bos"];
  r.n_ctx = r.j["settings"]["n_ctx"];
  EXPECT_EQ(r.file->get_string("tokenizer.ggml.model", ""), "gpt2");
  EXPECT_EQ(r.file->get_string("tokenizer.ggml.pre", ""), "smollm");  // as convert_hf_to_gguf.py names it
  const kvad::test::Tolerances tol{/*logit_tol=*/1.5, /*margin=*/0.5, /*min_exact=*/5};
  kvad::test::check_greedy_continuations(r, tol);
  kvad::test::check_batched_prefill(r, tol);
}

}  // namespace
