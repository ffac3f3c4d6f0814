// T5's tokenizer (tokenizer/t5.h) against transformers' T5Tokenizer
// (tests/fixtures/t5_tokenizer, made by tools/make_t5_tokenizer_fixtures.py
// with a SentencePiece model trained there in T5's shape, nmt_nfkc rules):
// from spiece.model (kvad's ModelProto reader) and from tokenizer.json
// (tokenizers' Precompiled normalizer), id for id on the peer-data suites'
// strings, targeted normalization strings and generated ones; FLUX's
// padded prompt ids; every broken spiece.model a clean error.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/error.h"
#include "gunzip.h"
#include "tokenizer/precompiled.h"
#include "tokenizer/spiece_model.h"
#include "tokenizer/t5.h"

namespace fs = std::filesystem;
using namespace kvad;
using nlohmann::json;

namespace {

fs::path fixtures() { return fs::path(KVAD_SOURCE_DIR) / "tests" / "fixtures" / "t5_tokenizer"; }

std::string model_bytes() { return test::gunzip_file((fixtures() / "spiece.model.gz").string()); }

const json& cases() {
  static const json j = json::parse(test::gunzip_file((fixtures() / "cases.json.gz").string()));
  return j;
}

// A folder holding `file` with `bytes`, removed at the end of the test.
struct TempFolder {
  fs::path dir;
  explicit TempFolder(const std::string& tag) {
    dir = fs::temp_directory_path() / ("kvad_t5tok_" + tag + "_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  void write(const std::string& file, const std::string& bytes) const {
    std::ofstream(dir / file, std::ios::binary) << bytes;
  }
  ~TempFolder() { fs::remove_all(dir); }
};

void expect_cases(const Tokenizer& tok, const char* what) {
  size_t ok = 0, n = 0, sp_differs = 0;
  for (const json& c : cases()["cases"]) {
    const std::string text = c[0].get<std::string>();
    const std::vector<int32_t> want = c[1].get<std::vector<int32_t>>();
    const std::vector<int32_t> got = tok.encode(text, true, true);
    ++n;
    if (got == want) ++ok;
    else if (n - ok <= 10) ADD_FAILURE() << what << ": " << json(text).dump() << "\n got " << json(got).dump()
                                         << "\nwant " << json(want).dump();
    if (!c[2].is_null() && c[2].get<std::vector<int32_t>>() != want) ++sp_differs;
  }
  std::printf("%s: %zu of %zu strings equal transformers' T5Tokenizer (%zu of them tokenized otherwise by "
              "sentencepiece %s)\n",
              what, ok, n, sp_differs, cases()["sentencepiece"].get<std::string>().c_str());
  EXPECT_EQ(ok, n);
}

TEST(T5Tokenizer, FromSpieceModelEqualsTransformers) {
  const tok::SpieceModel m = tok::parse_spiece_model(model_bytes(), "spiece.model");
  EXPECT_EQ(m.pieces.size(), 2000u);
  EXPECT_EQ(m.model_type, 1);
  EXPECT_EQ(m.unk_id, 2);
  EXPECT_EQ(m.eos_id, 1);
  EXPECT_EQ(m.pad_id, 0);
  EXPECT_EQ(m.bos_id, -1);
  EXPECT_EQ(m.normalizer_name, "nmt_nfkc");
  EXPECT_TRUE(m.add_dummy_prefix);
  EXPECT_FALSE(m.byte_fallback);
  EXPECT_FALSE(m.precompiled_charsmap.empty());
  EXPECT_EQ(m.pieces[1].piece, "</s>");
  EXPECT_EQ(m.pieces[1].type, 3);  // CONTROL
  EXPECT_EQ(m.pieces[2].type, 2);  // UNKNOWN
  TempFolder f("spiece");
  f.write("spiece.model", model_bytes());
  const std::unique_ptr<Tokenizer> tok = t5_tokenizer(f.dir.string());
  EXPECT_EQ(tok->n_vocab(), 2100);
  EXPECT_EQ(tok->find_token("<extra_id_0>"), 2099);
  expect_cases(*tok, "spiece.model");
}

TEST(T5Tokenizer, FromTokenizerJsonEqualsTransformers) {
  json tj = json::parse(test::gunzip_file((fixtures() / "tokenizer.json.gz").string()));
  ASSERT_EQ(tj["normalizer"]["precompiled_charsmap"], "@spiece.model");
  const tok::SpieceModel m = tok::parse_spiece_model(model_bytes(), "spiece.model");
  tj["normalizer"]["precompiled_charsmap"] = tok::base64_encode(m.precompiled_charsmap);
  TempFolder f("json");
  f.write("tokenizer.json", tj.dump());
  f.write("spiece.model", "not read: tokenizer.json comes first");
  expect_cases(*t5_tokenizer(f.dir.string()), "tokenizer.json");
}

TEST(T5Tokenizer, FluxPromptIds) {
  TempFolder f("flux");
  f.write("spiece.model", model_bytes());
  const std::unique_ptr<Tokenizer> tok = t5_tokenizer(f.dir.string());
  for (const json& c : cases()["flux"]) {
    const std::string prompt = c[0].get<std::string>();
    const int64_t n = c[1].get<int64_t>();
    EXPECT_EQ(t5_prompt_ids(*tok, prompt, n), c[2].get<std::vector<int32_t>>()) << json(prompt).dump() << " " << n;
  }
  EXPECT_THROW(t5_prompt_ids(*tok, "x", 0), Error);
  EXPECT_THROW(t5_prompt_ids(*tok, "x", int64_t{1} << 20), Error);
}

TEST(T5Tokenizer, Base64RoundTrips) {
  for (const std::string& s : std::vector<std::string>{"", "a", "ab", "abc", "abcd", std::string("\0\xff\x80", 3)}) {
    EXPECT_EQ(tok::base64_decode(tok::base64_encode(s)), s);
  }
  EXPECT_EQ(tok::base64_encode("hello"), "aGVsbG8=");
  EXPECT_FALSE(tok::base64_decode("a$bc"));
  EXPECT_FALSE(tok::base64_decode("abcde"));
}

// Each broken model (tests/fixtures/t5_tokenizer/broken, fuzz_spiece_model's
// seeds) is a kvad::Error; survives_* load and tokenize.
TEST(T5Tokenizer, BrokenModelsAreCleanErrors) {
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(fixtures() / "broken")) {
    std::ifstream in(e.path(), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string name = e.path().filename().string();
    ++n;
    auto load = [&] { return t5_tokenizer_from_spiece(tok::parse_spiece_model(bytes, name), name, 2); };
    if (name.starts_with("survives_")) {
      const std::unique_ptr<Tokenizer> t = load();
      EXPECT_FALSE(t->encode("a b\xEF\xBD\xB6\xEF\xBE\x9E", true, true).empty()) << name;
      continue;
    }
    try {
      load();
      ADD_FAILURE() << name << ": no error";
    } catch (const Error& err) {
      const std::string msg = err.what();
      std::printf("%s\n", msg.c_str());
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
      EXPECT_EQ(msg.rfind(name, 0), 0u) << msg;  // names the file
    }
  }
  EXPECT_GE(n, 30u);
  EXPECT_THROW(t5_tokenizer((fixtures() / "nowhere").string()), Error);
}

}  // namespace
