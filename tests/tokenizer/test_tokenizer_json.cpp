// tokenizer.json tokenizers against HF `tokenizers` (PyPI): the fixtures in
// tests/fixtures/hf_tokenizer/ (made by tools/make_hf_tokenizer_fixtures.py)
// hold tokenizer.json files of several families and, for ~3,000 strings
// each, the ids `tokenizers` gives (with and without add_special_tokens, with
// special-token text parsed or not) and its decode with and without
// skip_special_tokens. Every string must be equal. Also: tokenizer_config.json,
// the path API, and a corpus of broken files (errors, never crashes).
#include <gtest/gtest.h>
#include <malloc.h>

#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/utf8.h"
#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "tokenizer/tokenizer.h"
#include "gunzip.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using kvad::Tokenizer;

namespace {

// KVAD_HF_FIXTURES overrides the folder (fixtures made elsewhere, e.g. with
// another tokenizers version, by make_hf_tokenizer_fixtures.py --out).
const std::string kDir = [] {
  const char* e = std::getenv("KVAD_HF_FIXTURES");
  return e && *e ? std::string(e) : std::string(KVAD_SOURCE_DIR) + "/tests/fixtures/hf_tokenizer";
}();
const std::string kSrcDir = std::string(KVAD_SOURCE_DIR) + "/tests/fixtures/hf_tokenizer";  // broken/, seeds/

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

using kvad::test::gunzip;

std::string ids_str(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += (s.empty() ? "" : " ") + std::to_string(id);
  return s;
}

std::string escaped(const std::string& s) {
  std::string o;
  for (unsigned char c : s) {
    if (c == '\n') o += "\\n";
    else if (c == '\t') o += "\\t";
    else if (c < 0x20 || c == 0x7F) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02X", c);
      o += b;
    } else o += static_cast<char>(c);
  }
  return o;
}

// The tokenizer.json text of a family: its own file, or its base's with the
// overlay applied (top-level keys replaced, "model" keys merged).
std::string tokenizer_text(const json& ref) {
  if (ref.contains("file")) return gunzip(read_file(kDir + "/" + ref.at("file").get<std::string>()));
  json base = json::parse(gunzip(read_file(kDir + "/" + ref.at("base").get<std::string>())));
  for (const auto& [k, v] : ref.at("overlay").items()) {
    if (k == "model")
      for (const auto& [mk, mv] : v.items()) base["model"][mk] = mv;
    else
      base[k] = v;
  }
  return base.dump();
}

std::vector<std::string> families() {
  std::vector<std::string> out;
  std::istringstream in(read_file(kDir + "/families.txt"));
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(line);
  return out;
}

// ---------------------------------------------------------------------------

class HfFamily : public ::testing::TestWithParam<std::string> {};

// Every case of the fixture `fx` through `tok`; returns the number equal to
// tokenizers' (failures for the first 12 that are not).
size_t check_cases(const std::string& name, const Tokenizer& tok, const json& fx, size_t& n, double& enc_ms) {
  size_t equal = 0, reported = 0;
  n = 0;
  enc_ms = 0;
  for (const json& c : fx.at("cases")) {
    const std::string text = c[0].get<std::string>();
    const auto ids = c[1].get<std::vector<int32_t>>();
    const auto ids_sp = c[2].is_null() ? ids : c[2].get<std::vector<int32_t>>();
    const auto ids_np = c[3].is_null() ? ids : c[3].get<std::vector<int32_t>>();
    const std::string dec = c[4].get<std::string>();
    const std::string dec_skip = c[5].is_null() ? dec : c[5].get<std::string>();
    const auto e0 = std::chrono::steady_clock::now();
    const auto got = tok.encode(text, false, true);
    enc_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - e0).count();
    const auto got_sp = tok.encode(text, true, true);
    const auto got_np = tok.encode(text, false, false);
    const std::string got_dec = tok.decode(ids_sp, true), got_skip = tok.decode(ids_sp, false);
    ++n;
    const bool ok = got == ids && got_sp == ids_sp && got_np == ids_np && got_dec == dec && got_skip == dec_skip;
    if (ok) {
      ++equal;
      continue;
    }
    if (++reported > 12) continue;
    std::ostringstream m;
    m << name << " \"" << escaped(text) << "\"";
    if (got != ids) m << "\n  encode:              expected " << ids_str(ids) << "\n                      got      " << ids_str(got);
    if (got_sp != ids_sp)
      m << "\n  add_special:         expected " << ids_str(ids_sp) << "\n                      got      " << ids_str(got_sp);
    if (got_np != ids_np)
      m << "\n  parse_special=false: expected " << ids_str(ids_np) << "\n                      got      " << ids_str(got_np);
    if (got_dec != dec) m << "\n  decode:      expected \"" << escaped(dec) << "\"\n               got      \"" << escaped(got_dec) << "\"";
    if (got_skip != dec_skip)
      m << "\n  decode skip: expected \"" << escaped(dec_skip) << "\"\n               got      \"" << escaped(got_skip) << "\"";
    ADD_FAILURE() << m.str();
  }
  return equal;
}

// A GGUF in memory holding tokenizer_json_gguf_keys(...) (as the
// quantize-once cache does), and the tokenizer kvad reads back from it.
struct GgufTokenizer {
  std::vector<uint8_t> bytes;
  std::unique_ptr<kvad::gguf::File> file;
  std::unique_ptr<Tokenizer> tok;
};
GgufTokenizer via_gguf(const std::string& text, const std::string& name, const std::string& config = "") {
  GgufTokenizer g;
  kvad::gguf::Writer w;
  for (const kvad::gguf::Value& v : kvad::tokenizer_json_gguf_keys(text, name, config)) w.add(v);
  g.bytes = w.to_bytes();
  g.file = kvad::gguf::File::parse(g.bytes.data(), g.bytes.size(), name + ".gguf");
  g.tok = Tokenizer::from_gguf(*g.file);
  return g;
}

TEST_P(HfFamily, EqualsTokenizers) {
  const std::string name = GetParam();
  const json fx = json::parse(gunzip(read_file(kDir + "/" + name + ".cases.json.gz")));
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<Tokenizer> tok = Tokenizer::from_tokenizer_json_text(tokenizer_text(fx.at("tokenizer")), name + ".json");
  const double load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  size_t n = 0;
  double enc_ms = 0;
  const size_t equal = check_cases(name, *tok, fx, n, enc_ms);
  std::printf("[ hf       ] %-20s %zu/%zu strings equal to tokenizers %s (load %.0f ms, encode %.1f ms)\n", name.c_str(), equal,
              n, fx.value("tokenizers", "?").c_str(), load_ms, enc_ms);
  EXPECT_EQ(equal, n);
  EXPECT_GE(n, 1000u);
}

// The tokenizer kept in a GGUF (the quantize-once cache's kvad.tokenizer.*
// keys beside llama.cpp's tokenizer.ggml.* ones) tokenizes every string of
// the suite as tokenizers does, and has the tokenizer.json one's ids, texts
// and types.
TEST_P(HfFamily, CacheGgufEqualsTokenizers) {
  const std::string name = GetParam();
  const json fx = json::parse(gunzip(read_file(kDir + "/" + name + ".cases.json.gz")));
  const std::string text = tokenizer_text(fx.at("tokenizer"));
  std::unique_ptr<Tokenizer> ref = Tokenizer::from_tokenizer_json_text(text, name + ".json");
  const GgufTokenizer g = via_gguf(text, name);
  const auto t0 = std::chrono::steady_clock::now();
  auto again = Tokenizer::from_gguf(*g.file);
  const double load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const Tokenizer& tok = *g.tok;
  ASSERT_EQ(tok.n_vocab(), ref->n_vocab());
  EXPECT_EQ(tok.bos(), ref->bos());
  EXPECT_EQ(tok.eos(), ref->eos());
  EXPECT_EQ(tok.unk(), ref->unk());
  EXPECT_EQ(tok.add_bos(), ref->add_bos());
  EXPECT_EQ(tok.add_eos(), ref->add_eos());
  EXPECT_EQ(tok.eog_ids(), ref->eog_ids());
  size_t same_ids = 0;
  for (int32_t i = 0; i < ref->n_vocab(); ++i)
    same_ids += tok.token_text(i) == ref->token_text(i) && tok.token_type(i) == ref->token_type(i) &&
                tok.token_to_piece(i, true) == ref->token_to_piece(i, true);
  EXPECT_EQ(same_ids, static_cast<size_t>(ref->n_vocab())) << name;
  size_t n = 0, same = 0;
  double enc_ms = 0;
  const size_t equal = check_cases(name, tok, fx, n, enc_ms);
  for (const json& c : fx.at("cases")) {
    const std::string s = c[0].get<std::string>();
    same += tok.encode(s, true, true) == ref->encode(s, true, true) && tok.encode(s, false, false) == ref->encode(s, false, false);
  }
  std::printf("[ gguf     ] %-20s %zu/%zu strings equal to tokenizers, %zu/%zu to tokenizer.json's (GGUF %zu KiB, load %.0f ms)\n",
              name.c_str(), equal, n, same, n, g.bytes.size() >> 10, load_ms);
  EXPECT_EQ(equal, n);
  EXPECT_EQ(same, n);
  EXPECT_EQ(again->n_vocab(), tok.n_vocab());
}

TEST_P(HfFamily, StreamDecoderKeepsCharactersWhole) {
  const std::string name = GetParam();
  const json fx = json::parse(gunzip(read_file(kDir + "/" + name + ".cases.json.gz")));
  auto tok = Tokenizer::from_tokenizer_json_text(tokenizer_text(fx.at("tokenizer")), name + ".json");
  // deepseek-llm and llama3 have added tokens "ü", "ö", ... that are byte
  // symbols too: tokenizers' decode turns them into lone bytes (and U+FFFD),
  // so their token streams need not be valid UTF-8. For the other families
  // every chunk is whole characters, and for byte-level ones the chunks put
  // together are the decoded text.
  const bool valid = name != "deepseek-llm" && name != "llama3";
  const bool byte_level = name == "gpt2" || name == "starcoder";
  int i = 0;
  for (const json& c : fx.at("cases")) {
    if (++i > 400) break;
    const auto ids = c[1].get<std::vector<int32_t>>();
    kvad::StreamDecoder dec(*tok, /*special=*/true);
    std::string all;
    for (int32_t id : ids) {
      std::string chunk = dec.push(id);
      if (valid) {
        EXPECT_EQ(kvad::utf8::incomplete_tail(chunk), 0u) << name;
      }
      all += chunk;
    }
    all += dec.flush();
    if (byte_level) {
      EXPECT_EQ(all, tok->decode(ids, true)) << name << " \"" << escaped(c[0].get<std::string>()) << "\"";
    }
  }
}

// The o200k-harmony vocabulary as a GGUF (tools/make_harmony_tokenizer_fixtures.py:
// tokenizer.ggml.pre "gpt-4o", as llama.cpp's converter names o200k): kvad's
// GGUF path must give what tokenizers gives from the tokenizer.json, special
// tokens parsed and not.
TEST(TokenizerJson, O200kGgufEqualsTokenizers) {
  const json fx = json::parse(gunzip(read_file(kDir + "/o200k-harmony.cases.json.gz")));
  auto f = kvad::gguf::File::open(std::string(KVAD_SOURCE_DIR) + "/tests/fixtures/tokenizer/o200k-harmony.gguf");
  std::unique_ptr<Tokenizer> tok = Tokenizer::from_gguf(*f);
  size_t n = 0, equal = 0;
  for (const json& c : fx.at("cases")) {
    const std::string text = c[0].get<std::string>();
    const auto ids = c[1].get<std::vector<int32_t>>();
    const auto ids_np = c[3].is_null() ? ids : c[3].get<std::vector<int32_t>>();
    const auto got = tok->encode(text, false, true), got_np = tok->encode(text, false, false);
    ++n;
    if (got == ids && got_np == ids_np && tok->decode(ids, true) == c[4].get<std::string>()) ++equal;
    else if (n - equal <= 8)
      ADD_FAILURE() << "\"" << escaped(text) << "\"\n  expected " << ids_str(ids) << "\n  got      " << ids_str(got)
                    << "\n  unparsed expected " << ids_str(ids_np) << "\n  got      " << ids_str(got_np);
  }
  std::printf("[ gguf     ] o200k-harmony %zu/%zu strings equal to tokenizers\n", equal, n);
  EXPECT_EQ(equal, n);
  // Harmony: <|end|> closes a message inside a reply; <|return|> and <|call|> end it.
  auto id = [&](const char* t) { return tok->encode(t, false, true).at(0); };
  EXPECT_FALSE(tok->is_eog(id("<|end|>")));
  EXPECT_TRUE(tok->is_eog(id("<|return|>")));
  EXPECT_TRUE(tok->is_eog(id("<|call|>")));
}

// tokenizer_config.json beside tokenizer.json, against transformers'
// AutoTokenizer on the same two files.
TEST(TokenizerJson, ConfigEqualsTransformers) {
  int n_families = 0;
  for (const std::string& name : families()) {
    const json fx = json::parse(gunzip(read_file(kDir + "/" + name + ".cases.json.gz")));
    if (!fx.contains("transformers")) continue;
    const json& tf = fx["transformers"];
    auto tok = Tokenizer::from_tokenizer_json_text(tokenizer_text(fx.at("tokenizer")), name + ".json", tf.at("config").dump(),
                                                   name + "_config.json");
    auto id = [](const json& v) { return v.is_null() ? -1 : v.get<int32_t>(); };
    EXPECT_EQ(tok->bos(), id(tf.at("bos"))) << name;
    EXPECT_EQ(tok->eos(), id(tf.at("eos"))) << name;
    EXPECT_EQ(tok->pad(), id(tf.at("pad"))) << name;
    EXPECT_EQ(tok->chat_template(), tf.at("chat_template").get<std::string>()) << name;
    size_t n = 0, equal = 0;
    for (const json& c : tf.at("cases")) {
      const std::string text = c[0].get<std::string>();
      const auto expect = c[1].get<std::vector<int32_t>>();
      const auto got = tok->encode(text, true, true);
      ++n;
      if (got == expect) ++equal;
      else if (n - equal <= 5)
        ADD_FAILURE() << name << " \"" << escaped(text) << "\"\n  expected " << ids_str(expect) << "\n  got      " << ids_str(got);
    }
    std::printf("[ config   ] %-20s %zu/%zu strings equal to transformers %s\n", name.c_str(), equal, n,
                tf.value("version", "?").c_str());
    EXPECT_EQ(equal, n);
    // The same through a GGUF with tokenizer_json_gguf_keys (the quantize-once cache).
    const GgufTokenizer g = via_gguf(tokenizer_text(fx.at("tokenizer")), name, tf.at("config").dump());
    EXPECT_EQ(g.tok->bos(), tok->bos()) << name;
    EXPECT_EQ(g.tok->eos(), tok->eos()) << name;
    EXPECT_EQ(g.tok->pad(), tok->pad()) << name;
    EXPECT_EQ(g.tok->chat_template(), tok->chat_template()) << name;
    EXPECT_EQ(g.tok->chat_templates(), tok->chat_templates()) << name;
    EXPECT_EQ(g.file->get_string("tokenizer.chat_template", ""), tok->chat_template()) << name;
    size_t g_equal = 0;
    for (const json& c : tf.at("cases"))
      g_equal += g.tok->encode(c[0].get<std::string>(), true, true) == c[1].get<std::vector<int32_t>>();
    EXPECT_EQ(g_equal, n) << name << " via GGUF";
    ++n_families;
  }
  EXPECT_GE(n_families, 3);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HfFamily, ::testing::ValuesIn(families()), [](const auto& info) {
  std::string n = info.param;
  for (char& ch : n)
    if (ch == '-') ch = '_';
  return n;
});

// ---------------------------------------------------------------------------
// A small tokenizer written here, for tokenizer_config.json and the path API.

const char* kTiny = R"({
  "version": "1.0", "truncation": null, "padding": null,
  "added_tokens": [
    {"id": 0, "content": "<unk>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
    {"id": 1, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
    {"id": 2, "content": "</s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
    {"id": 9, "content": "<|im_end|>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}
  ],
  "normalizer": null,
  "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": false},
  "post_processor": {"type": "TemplateProcessing", "single": ["<s>", "$A"], "pair": ["<s>", "$A", "$B"],
                     "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
  "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
              {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
  "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>", "continuing_subword_prefix": null,
            "end_of_word_suffix": null, "fuse_unk": true, "byte_fallback": false, "ignore_merges": false,
            "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "\u2581": 3, "a": 4, "b": 5, "\u2581a": 6, "ab": 7, "\u2581ab": 8, "<|im_end|>": 9},
            "merges": ["\u2581 a", ["a", "b"], "\u2581a b"]}
})";

TEST(TokenizerJson, TinyModel) {
  auto t = Tokenizer::from_tokenizer_json_text(kTiny, "tiny.json");
  EXPECT_EQ(t->n_vocab(), 10);
  EXPECT_EQ(t->model(), "BPE");
  EXPECT_EQ(t->pre(), "Metaspace");
  EXPECT_EQ(ids_str(t->encode("ab ab", false, true)), "8 8");
  EXPECT_EQ(ids_str(t->encode("ab", true, true)), "1 8");
  EXPECT_EQ(ids_str(t->encode("ab</s>x", false, true)), "8 2 0");   // x: unknown
  EXPECT_EQ(ids_str(t->encode("xxab", false, true)), "3 0 7");      // fused unknowns
  EXPECT_EQ(t->decode({1, 8, 8, 2}), "ab ab");
  EXPECT_EQ(t->decode({8, 8}), "ab ab");
  EXPECT_EQ(t->decode({1, 8, 2}, true), "<s> ab</s>");
  EXPECT_EQ(t->bos(), 1);
  EXPECT_TRUE(t->add_bos());
  EXPECT_FALSE(t->add_eos());
  EXPECT_TRUE(t->is_eog(9));
  EXPECT_EQ(t->token_type(1), kvad::TokenType::CONTROL);
  EXPECT_EQ(t->token_type(0), kvad::TokenType::UNKNOWN);
  EXPECT_EQ(t->token_type(4), kvad::TokenType::NORMAL);
  EXPECT_EQ(t->token_to_piece(8), " ab");
  EXPECT_EQ(t->token_to_piece(1), "");
  EXPECT_EQ(t->token_to_piece(1, true), "<s>");
  EXPECT_THROW(t->token_to_piece(10), kvad::Error);
  EXPECT_THROW(t->decode({99}), kvad::Error);
}

TEST(TokenizerJson, ConfigAndPathApi) {
  const fs::path dir = fs::temp_directory_path() / ("kvad-tokjson-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << kTiny;
  std::ofstream(dir / "tokenizer_config.json") << R"({
    "add_bos_token": true, "add_eos_token": true,
    "bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": false, "normalized": false},
    "eos_token": "<|im_end|>", "pad_token": "</s>", "unk_token": null,
    "chat_template": [{"name": "default", "template": "{{ messages }}"}, {"name": "tool_use", "template": "T"}]
  })";
  auto t = Tokenizer::from_tokenizer_json((dir / "tokenizer.json").string(), (dir / "tokenizer_config.json").string());
  EXPECT_EQ(t->bos(), 1);
  EXPECT_EQ(t->eos(), 9);
  EXPECT_EQ(t->pad(), 2);
  // The post_processor decides (transformers 5 drops add_bos_token and
  // add_eos_token when there is a tokenizer.json).
  EXPECT_TRUE(t->add_bos());
  EXPECT_FALSE(t->add_eos());
  EXPECT_EQ(ids_str(t->encode("ab", true, true)), "1 8");
  // Without a post_processor the flags apply.
  json nopp = json::parse(kTiny);
  nopp["post_processor"] = nullptr;
  std::ofstream(dir / "nopp.json") << nopp.dump();
  auto tn = Tokenizer::from_tokenizer_json((dir / "nopp.json").string(), (dir / "tokenizer_config.json").string());
  EXPECT_TRUE(tn->add_bos());
  EXPECT_TRUE(tn->add_eos());
  EXPECT_EQ(ids_str(tn->encode("ab", true, true)), "1 8 9");
  EXPECT_EQ(ids_str(Tokenizer::from_tokenizer_json((dir / "nopp.json").string())->encode("ab", true, true)), "8");
  EXPECT_EQ(t->chat_template(), "{{ messages }}");
  ASSERT_EQ(t->chat_templates().size(), 2u);
  EXPECT_EQ(t->chat_templates()[1].first, "tool_use");
  EXPECT_TRUE(t->is_eog(9));

  std::ofstream(dir / "c2.json") << R"({"add_bos_token": false, "bos_token": "<s>", "eos_token": "</s>", "chat_template": "X"})";
  auto t2 = Tokenizer::from_tokenizer_json((dir / "nopp.json").string(), (dir / "c2.json").string());
  EXPECT_EQ(ids_str(t2->encode("ab", true, true)), "8");
  EXPECT_FALSE(t2->add_bos());
  EXPECT_EQ(t2->bos(), 1);
  EXPECT_EQ(t2->chat_template(), "X");
  EXPECT_TRUE(t2->is_eog(2));

  // No flags: the post_processor decides.
  std::ofstream(dir / "c3.json") << R"({"bos_token": "<s>", "eos_token": "</s>"})";
  auto t3 = Tokenizer::from_tokenizer_json((dir / "tokenizer.json").string(), (dir / "c3.json").string());
  EXPECT_EQ(ids_str(t3->encode("ab", true, true)), "1 8");

  for (const char* bad : {R"({"bos_token": "<nope>"})", R"({"add_bos_token": "yes"})", R"({"chat_template": [{"name": 1}]})",
                          R"({"chat_template": 5})", R"([1, 2])", "{"}) {
    std::ofstream(dir / "bad.json") << bad;
    try {
      Tokenizer::from_tokenizer_json((dir / "tokenizer.json").string(), (dir / "bad.json").string());
      ADD_FAILURE() << "accepted " << bad;
    } catch (const kvad::Error& e) {
      EXPECT_NE(std::string(e.what()).find("bad.json"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(Tokenizer::from_tokenizer_json((dir / "missing.json").string()), kvad::Error);
  fs::remove_all(dir);
}

// ---------------------------------------------------------------------------
// Broken input: each file of the corpus must give a kvad::Error that names
// the file (and, where the corpus file says so in its "expect" member, the
// field); mutated versions of a valid file must give an error or a working
// tokenizer, never a crash, in bounded time.

// Broken kvad.tokenizer.* keys in a GGUF (a damaged or hostile cache file):
// each is a kvad::Error naming the file, never a crash or an id past the
// vocabulary.
TEST(TokenizerJson, BrokenGgufTokenizerKeys) {
  namespace gguf = kvad::gguf;
  const std::vector<gguf::Value> keys = kvad::tokenizer_json_gguf_keys(kTiny, "tiny.json");
  auto with = [&](const std::string& key, const gguf::Value* v) {
    gguf::Writer w;
    for (const gguf::Value& k : keys) {
      if (k.key() != key) w.add(k);
      else if (v) w.add(*v);
    }
    return w.to_bytes();
  };
  auto error_of = [](const std::vector<uint8_t>& bytes) -> std::string {
    try {
      auto f = gguf::File::parse(bytes.data(), bytes.size(), "broken.gguf");
      auto t = Tokenizer::from_gguf(*f);
      (void)t->encode("ab ab xx", true, true);
      return "";
    } catch (const kvad::Error& e) {
      return e.what();
    }
  };
  const std::string ok = error_of(with("", nullptr));
  EXPECT_EQ(ok, "");
  const gguf::Value short_flags = gguf::make_int_array("kvad.tokenizer.in_vocab", gguf::ValueType::INT8, {1, 1});
  const gguf::Value bad_len = gguf::make_int_array("kvad.tokenizer.merges", gguf::ValueType::INT32, {4, 5});
  const gguf::Value bad_id = gguf::make_int_array("kvad.tokenizer.merges", gguf::ValueType::INT32, {4, 5, 1000000});
  const gguf::Value neg_id = gguf::make_int_array("kvad.tokenizer.merges", gguf::ValueType::INT32, {-1, 5, 7});
  const gguf::Value not_json = gguf::make_string("kvad.tokenizer.json", "{\"model\": ");
  const gguf::Value not_array = gguf::make_string("kvad.tokenizer.merges", "4 5 7");
  const std::vector<std::pair<std::vector<uint8_t>, std::string>> cases = {
      {with("kvad.tokenizer.in_vocab", &short_flags), "vocabulary flags"},
      {with("kvad.tokenizer.merges", &bad_len), "multiple of 3"},
      {with("kvad.tokenizer.merges", &bad_id), "outside the vocabulary"},
      {with("kvad.tokenizer.merges", &neg_id), "outside the vocabulary"},
      {with("kvad.tokenizer.json", &not_json), "kvad.tokenizer.json"},
      {with("kvad.tokenizer.merges", &not_array), "kvad.tokenizer.merges"},
      {with("tokenizer.ggml.tokens", nullptr), "tokenizer.ggml.tokens"},
  };
  for (const auto& [bytes, what] : cases) {
    const std::string e = error_of(bytes);
    EXPECT_NE(e.find("broken.gguf"), std::string::npos) << e;
    EXPECT_NE(e.find(what), std::string::npos) << "want \"" << what << "\" in: " << e;
  }
}

TEST(TokenizerJson, BrokenCorpus) {
  const fs::path dir = kSrcDir + "/broken";
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string path = e.path().string();
    const std::string text = read_file(path);
    std::string expect;
    try {
      json j = json::parse(text);
      if (j.is_object() && j.contains("_expect")) expect = j["_expect"].get<std::string>();
    } catch (const json::exception&) {
    }
    try {
      auto t = Tokenizer::from_tokenizer_json(path);
      ADD_FAILURE() << path << " was accepted";
    } catch (const kvad::Error& err) {
      const std::string m = err.what();
      std::printf("[ broken   ] %s\n", m.substr(0, 160).c_str());
      EXPECT_NE(m.find(e.path().filename().string()), std::string::npos) << m;
      if (!expect.empty()) {
        EXPECT_NE(m.find(expect), std::string::npos) << path << ": " << m;
      }
    }
    ++n;
  }
  std::printf("[ broken   ] %d broken tokenizer.json files rejected\n", n);
  EXPECT_GE(n, 20);
}

// The fuzz target's seed corpus: small valid files, which must load.
TEST(TokenizerJson, SeedsLoad) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(kSrcDir + "/seeds")) {
    auto t = Tokenizer::from_tokenizer_json(e.path().string());
    const auto ids = t->encode("Hello world, 123 caf\xC3\xA9!", true, true);
    EXPECT_FALSE(ids.empty()) << e.path();
    for (int32_t id : ids) EXPECT_TRUE(id >= 0 && id < t->n_vocab());
    ++n;
  }
  EXPECT_GE(n, 3);
}

TEST(TokenizerJson, MutationsNeverCrash) {
  const std::string good = kTiny;
  uint64_t state = 0x2545F4914F6CDD1Dull;
  auto next = [&] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  int loaded = 0, rejected = 0;
  auto attempt = [&](const std::string& s) {
    try {
      auto t = Tokenizer::from_tokenizer_json_text(s, "m.json");
      for (const char* text : {"ab ab", "x</s>ab", "", " \xF0\x9F\xA6\x99"}) {
        auto ids = t->encode(text, true, true);
        (void)t->decode(ids, true);
        (void)t->decode(ids, false);
      }
      ++loaded;
    } catch (const kvad::Error&) {
      ++rejected;
    }
  };
  for (size_t cut = 0; cut < good.size(); cut += 7) attempt(good.substr(0, cut));
  for (int i = 0; i < 3000; ++i) {
    std::string s = good;
    const int edits = 1 + static_cast<int>(next() % 3);
    for (int k = 0; k < edits; ++k) {
      const size_t p = next() % s.size();
      static const char kChars[] = "{}[]\":,0123456789-abtn \\u";
      switch (next() % 3) {
        case 0: s[p] = kChars[next() % (sizeof kChars - 1)]; break;
        case 1: s.erase(p, 1 + next() % 4); break;
        default: s.insert(p, 1, kChars[next() % (sizeof kChars - 1)]); break;
      }
    }
    attempt(s);
  }
  // Deep nesting and a huge id.
  attempt(std::string(100000, '[') + std::string(100000, ']'));
  attempt(R"({"model": {"type": "BPE", "vocab": {"a": 4000000000}, "merges": []}})");
  attempt(R"({"model": {"type": "WordPiece", "vocab": {"a": 3999999}}})");
  std::printf("[ mutation ] %d loaded, %d rejected with kvad::Error\n", loaded, rejected);
  EXPECT_GT(rejected, 0);
}

}  // namespace

// The thread-local scratch buffers of the pre-tokenizers, normalizers
// and decoders do not keep the size a huge input gave them.
TEST(TokenizerJson, ScratchBuffersDoNotKeepTheirPeak) {
  for (const char* name : {"gpt2", "llama3", "bert"}) {
    const json fx = json::parse(gunzip(read_file(kDir + "/" + name + ".cases.json.gz")));
    auto tok = Tokenizer::from_tokenizer_json_text(tokenizer_text(fx.at("tokenizer")), std::string(name) + ".json");
    std::string big;
    for (int i = 0; big.size() < (8u << 20); ++i) big += "word" + std::to_string(i % 1000) + ", ";
    (void)tok->encode("warm up", true, false);  // the small case's buffers are kept
    const size_t before = mallinfo2().uordblks;
    {
      std::vector<int32_t> ids = tok->encode(big, true, false);
      EXPECT_GT(ids.size(), 1000000u);
      (void)tok->decode(ids);
    }
    const size_t after = mallinfo2().uordblks;
    // 8 MiB of text makes ~2M pieces (tens of MiB of ranges); at most a few
    // MiB may stay (the kept small buffers, allocator slack).
    EXPECT_LT(after, before + (4u << 20)) << name << ": " << (after - before) / 1024 << " KiB kept";
  }
}
