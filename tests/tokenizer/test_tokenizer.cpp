// Tokenizer tests against references not written here:
// - llama.cpp's vocabulary suites (../shared/peer-data/tokenizer): expected ids
//   from each model's HuggingFace tokenizer;
// - tests/fixtures/tokenizer/smollm2.json: ids from llama.cpp
//   (tools/make_tokenizer_reference.py) for the SmolLM2 vocabulary.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/utf8.h"
#include "io/gguf.h"
#include "tokenizer/tokenizer.h"

namespace fs = std::filesystem;
using kvad::Tokenizer;

namespace {

const std::string kPeerDir = std::string(KVAD_PEER_DATA) + "/tokenizer";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> split(const std::string& s, const std::string& sep) {
  std::vector<std::string> out;
  size_t start = 0, p;
  while ((p = s.find(sep, start)) != std::string::npos) {
    out.push_back(s.substr(start, p - start));
    start = p + sep.size();
  }
  out.push_back(s.substr(start));
  return out;
}

std::string ids_str(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) {
    if (!s.empty()) s += ' ';
    s += std::to_string(id);
  }
  return s;
}

std::string escaped(const std::string& s) {
  std::string o;
  for (unsigned char c : s) {
    if (c == '\n') o += "\\n";
    else if (c == '\t') o += "\\t";
    else o += static_cast<char>(c);
  }
  return o;
}

bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    int len = kvad::utf8::seq_len(static_cast<uint8_t>(s[i]));
    if (len == 0 || i + len > s.size()) return false;
    for (int k = 1; k < len; ++k)
      if ((static_cast<uint8_t>(s[i + k]) & 0xC0) != 0x80) return false;
    i += len;
  }
  return true;
}

struct Loaded {
  std::unique_ptr<kvad::gguf::File> file;
  std::unique_ptr<Tokenizer> tok;
};

Loaded load_suite(const std::string& name) {
  Loaded l;
  l.file = kvad::gguf::File::open(kPeerDir + "/ggml-vocab-" + name + ".gguf");
  l.tok = Tokenizer::from_gguf(*l.file);
  return l;
}

// ---------------------------------------------------------------------------
// llama.cpp's vocabulary suites.

class VocabSuite : public ::testing::TestWithParam<std::string> {};

TEST_P(VocabSuite, MatchesReference) {
  const std::string base = kPeerDir + "/ggml-vocab-" + GetParam() + ".gguf";
  if (!fs::exists(base)) FAIL() << "peer data missing: " << base << " (configure with -DKVAD_PEER_DATA=...)";
  Loaded l = load_suite(GetParam());
  std::vector<std::string> inputs = split(read_file(base + ".inp"), "\n__ggml_vocab_test__\n");
  std::vector<std::string> outputs = split(read_file(base + ".out"), "\n");
  ASSERT_FALSE(inputs.empty());
  ASSERT_TRUE(inputs.back().empty());  // the file ends with a separator
  inputs.pop_back();
  ASSERT_TRUE(outputs.back().empty());  // and with a newline
  outputs.pop_back();
  ASSERT_EQ(inputs.size(), outputs.size());
  int failed = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::vector<int32_t> expect;
    std::istringstream ss(outputs[i]);
    for (int32_t id; ss >> id;) expect.push_back(id);
    std::vector<int32_t> got = l.tok->encode(inputs[i], /*add_special=*/false, /*parse_special=*/false);
    if (got != expect) {
      ++failed;
      ADD_FAILURE() << GetParam() << " case " << i << " \"" << escaped(inputs[i]) << "\"\n  expected: " << ids_str(expect)
                    << "\n  got:      " << ids_str(got);
    }
  }
  EXPECT_EQ(failed, 0);
}

TEST_P(VocabSuite, DecodeRoundTrips) {
  const std::string base = kPeerDir + "/ggml-vocab-" + GetParam() + ".gguf";
  if (!fs::exists(base)) FAIL() << "peer data missing: " << base << " (configure with -DKVAD_PEER_DATA=...)";
  Loaded l = load_suite(GetParam());
  std::vector<std::string> inputs = split(read_file(base + ".inp"), "\n__ggml_vocab_test__\n");
  inputs.pop_back();
  for (const std::string& s : inputs) {
    EXPECT_EQ(l.tok->decode(l.tok->encode(s, false, false)), s) << GetParam() << " \"" << escaped(s) << "\"";
    // With BOS/EOS added, decode without special text gives the same.
    EXPECT_EQ(l.tok->decode(l.tok->encode(s, true, false)), s) << GetParam() << " \"" << escaped(s) << "\"";
  }
}

TEST_P(VocabSuite, StreamDecoderNeverSplitsCharacters) {
  const std::string base = kPeerDir + "/ggml-vocab-" + GetParam() + ".gguf";
  if (!fs::exists(base)) FAIL() << "peer data missing: " << base << " (configure with -DKVAD_PEER_DATA=...)";
  Loaded l = load_suite(GetParam());
  std::vector<std::string> inputs = split(read_file(base + ".inp"), "\n__ggml_vocab_test__\n");
  inputs.pop_back();
  for (const std::string& s : inputs) {
    std::vector<int32_t> ids = l.tok->encode(s, false, false);
    kvad::StreamDecoder dec(*l.tok);
    std::string all;
    for (int32_t id : ids) {
      std::string chunk = dec.push(id);
      EXPECT_TRUE(valid_utf8(chunk)) << "\"" << escaped(s) << "\"";
      all += chunk;
    }
    all += dec.flush();
    std::string expect;
    for (int32_t id : ids) expect += l.tok->token_to_piece(id);
    EXPECT_EQ(all, expect);
  }
}

INSTANTIATE_TEST_SUITE_P(Peer, VocabSuite, ::testing::Values("gpt-2", "llama-spm", "deepseek-llm", "starcoder"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

// ---------------------------------------------------------------------------
// Behaviour on the suites' vocabularies.

TEST(Tokenizer, SpmByteFallbackAndStreaming) {
  Loaded l = load_suite("llama-spm");
  const Tokenizer& t = *l.tok;
  EXPECT_EQ(t.model(), "llama");
  // 🦙 (F0 9F A6 99) is not a piece: four byte tokens.
  std::vector<int32_t> ids = t.encode("Hi \xF0\x9F\xA6\x99!", false, false);
  int n_byte = 0;
  for (int32_t id : ids) n_byte += t.token_type(id) == kvad::TokenType::BYTE;
  EXPECT_EQ(n_byte, 4);
  EXPECT_EQ(t.token_to_piece(*t.find_token("<0x0A>")), "\n");

  kvad::StreamDecoder dec(t);
  std::vector<std::string> chunks;
  for (int32_t id : ids) chunks.push_back(dec.push(id));
  EXPECT_EQ(dec.flush(), "");
  std::string all;
  size_t held = 0;
  for (const std::string& c : chunks) {
    EXPECT_TRUE(valid_utf8(c));
    held += c.empty();
    all += c;
  }
  EXPECT_EQ(held, 3u);  // the first three bytes of the emoji were held back
  EXPECT_EQ(all, " Hi \xF0\x9F\xA6\x99!");
  EXPECT_EQ(t.decode(ids), "Hi \xF0\x9F\xA6\x99!");

  // A stream cut inside a character: flush() hands back what was held.
  kvad::StreamDecoder cut(t);
  std::string got;
  for (size_t i = 0; i + 2 < ids.size(); ++i) got += cut.push(ids[i]);
  got += cut.flush();
  EXPECT_EQ(got, " Hi \xF0\x9F\xA6");
}

TEST(Tokenizer, SpmSpecialTokens) {
  Loaded l = load_suite("llama-spm");
  const Tokenizer& t = *l.tok;
  EXPECT_EQ(t.bos(), 1);
  EXPECT_EQ(t.eos(), 2);
  EXPECT_TRUE(t.add_bos());
  EXPECT_FALSE(t.add_eos());
  EXPECT_TRUE(t.is_eog(2));
  EXPECT_FALSE(t.is_eog(1));
  std::vector<int32_t> plain = t.encode("Hello", false, false);
  std::vector<int32_t> with_bos = t.encode("Hello", true, false);
  ASSERT_EQ(with_bos.size(), plain.size() + 1);
  EXPECT_EQ(with_bos[0], 1);
  // "</s>" is plain text unless parse_special; parsed, it is the token, and
  // the text after it gets the prefix space again (as llama.cpp does).
  std::vector<int32_t> p = t.encode("Hello</s>", false, true);
  EXPECT_EQ(p.back(), 2);
  std::vector<int32_t> np = t.encode("Hello</s>", false, false);
  EXPECT_GT(np.size(), plain.size() + 1);
  EXPECT_EQ(std::count(np.begin(), np.end(), 2), 0);
  EXPECT_EQ(t.token_to_piece(1), "");
  EXPECT_EQ(t.token_to_piece(1, true), "<s>");
  EXPECT_EQ(t.decode({1, plain[0]}, true), "<s> Hello");
  EXPECT_EQ(t.decode(with_bos), "Hello");
  EXPECT_TRUE(t.encode("", false, false).empty());
  EXPECT_EQ(t.encode("", true, false), std::vector<int32_t>{1});
}

TEST(Tokenizer, BpeSpecialTokens) {
  Loaded l = load_suite("starcoder");
  const Tokenizer& t = *l.tok;
  EXPECT_EQ(t.pre(), "starcoder");
  EXPECT_EQ(t.encode("<fim_prefix>def f():<fim_suffix>", false, true).front(), 1);
  EXPECT_EQ(t.encode("x<fim_prefix>", false, true).back(), 1);
  std::vector<int32_t> np = t.encode("<fim_prefix>", false, false);
  EXPECT_GT(np.size(), 1u);
  EXPECT_EQ(t.decode(np), "<fim_prefix>");
  EXPECT_EQ(t.decode(t.encode("a<fim_prefix>b", false, true)), "ab");
  EXPECT_EQ(t.decode(t.encode("a<fim_prefix>b", false, true), true), "a<fim_prefix>b");
  EXPECT_TRUE(t.is_eog(0));  // <|endoftext|>
  // The file says nothing about BOS: BPE adds none by default.
  EXPECT_FALSE(t.add_bos());
  EXPECT_EQ(t.encode("hi", true, false), t.encode("hi", false, false));
}

TEST(Tokenizer, UserDefinedTokensAlwaysMatch) {
  // deepseek-llm marks "ü" etc. USER_DEFINED; HF and llama.cpp match them
  // even without special parsing (the suite's "Führer" case depends on it).
  Loaded l = load_suite("deepseek-llm");
  const Tokenizer& t = *l.tok;
  auto u = t.find_token("\xC3\xBC");
  ASSERT_TRUE(u.has_value());
  EXPECT_EQ(t.token_type(*u), kvad::TokenType::USER_DEFINED);
  std::vector<int32_t> ids = t.encode("\xC3\xBC", false, false);
  EXPECT_EQ(ids, std::vector<int32_t>{*u});
  EXPECT_TRUE(t.add_bos());  // from the file
  EXPECT_EQ(t.encode("a", true, false).front(), t.bos());
}

TEST(Tokenizer, InvalidIdsThrow) {
  Loaded l = load_suite("gpt-2");
  EXPECT_THROW(l.tok->token_to_piece(-1), kvad::Error);
  EXPECT_THROW(l.tok->token_to_piece(l.tok->n_vocab()), kvad::Error);
  EXPECT_THROW(l.tok->decode({0, 99999999}), kvad::Error);
}

TEST(Tokenizer, InvalidUtf8) {
  // Byte-level BPE: each byte that starts no valid sequence becomes U+FFFD
  // (as in llama.cpp).
  Loaded l = load_suite("gpt-2");
  const std::string s = "a\xFF\xFE b\xC3 \x80z\xE2\x82";
  EXPECT_EQ(l.tok->decode(l.tok->encode(s, false, false)),
            "a\xEF\xBF\xBD\xEF\xBF\xBD b\xEF\xBF\xBD \xEF\xBF\xBDz\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(l.tok->encode("\xF1", false, false), l.tok->encode("\xEF\xBF\xBD", false, false));
  // SentencePiece takes a lead byte's length on trust (as llama.cpp does), so
  // only stray continuation bytes and a truncated tail are checked there.
  Loaded m = load_suite("llama-spm");
  const std::string s2 = "a\x80\xBF b\xC3\xA9z\xE2\x82";
  EXPECT_EQ(m.tok->decode(m.tok->encode(s2, false, false)), s2);
}

// Random bytes (invalid UTF-8 included) never crash the encoders; byte-level
// BPE gets every byte back.
TEST(Tokenizer, RandomBytes) {
  uint64_t state = 0x9E3779B97F4A7C15ull;
  auto next = [&] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  for (const char* name : {"gpt-2", "llama-spm", "deepseek-llm", "starcoder"}) {
    Loaded l = load_suite(name);
    for (int i = 0; i < 200; ++i) {
      std::string s(next() % 64, '\0');
      for (char& c : s) {
        uint64_t r = next();
        c = static_cast<char>(r % 4 == 0 ? ' ' : r % 4 == 1 ? 'a' + (r >> 8) % 26 : (r >> 8) & 0xFF);
      }
      for (bool sp : {false, true}) {
        std::vector<int32_t> ids = l.tok->encode(s, true, sp);
        for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < l.tok->n_vocab());
        // (deepseek-llm is left out: it has USER_DEFINED tokens such as "ÿ"
        // that are also byte symbols, and such tokens decode as their text.)
        if (std::string(name) == "gpt-2" || std::string(name) == "starcoder") {
          std::string clean;  // invalid bytes as U+FFFD, overlong forms shortest
          for (size_t k = 0; k < s.size();) {
            kvad::utf8::append(clean, kvad::utf8::decode(s, k));
          }
          EXPECT_EQ(l.tok->decode(l.tok->encode(s, false, sp)), clean) << name;
        }
      }
    }
  }
}

// Prints the time to tokenize ~10 KB of mixed text (no assertion on time:
// DESIGN.md "Habits").
TEST(Tokenizer, Speed10KB) {
  std::string text;
  const std::string para =
      "The quick brown fox jumps over the lazy dog; 12345678 + 3.14159 = ?\n"
      "    def f(x): return {'a': x ** 2}  # code\n"
      "Unicode: naïve café, Привет мир, 你好世界, emoji 🚀😶‍🌫️✅\n\n";
  while (text.size() < 10 * 1024) text += para;
  for (const char* name : {"gpt-2", "llama-spm", "deepseek-llm", "starcoder"}) {
    Loaded l = load_suite(name);
    l.tok->encode(text, false, false);  // warm up
    const int reps = 5;
    auto t0 = std::chrono::steady_clock::now();
    size_t n = 0;
    for (int i = 0; i < reps; ++i) n = l.tok->encode(text, false, false).size();
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / reps;
    std::printf("[ speed    ] %-13s %zu bytes -> %zu tokens in %.2f ms\n", name, text.size(), n, ms);
  }
}

// ---------------------------------------------------------------------------
// Small vocabularies written here as GGUF bytes (no reader or writer needed
// beyond gguf::File::parse).

class GgufBytes {
 public:
  GgufBytes() {
    put32(0x46554747);  // "GGUF"
    put32(3);
    put64(0);           // tensors
    count_at_ = buf_.size();
    put64(0);           // kv count, patched
  }
  GgufBytes& str(const std::string& k, const std::string& v) {
    key(k, 8);
    putstr(v);
    return *this;
  }
  GgufBytes& u32(const std::string& k, uint32_t v) {
    key(k, 4);
    put32(v);
    return *this;
  }
  GgufBytes& strs(const std::string& k, const std::vector<std::string>& v) {
    key(k, 9);
    put32(8);
    put64(v.size());
    for (const auto& s : v) putstr(s);
    return *this;
  }
  GgufBytes& i32s(const std::string& k, const std::vector<int32_t>& v) {
    key(k, 9);
    put32(5);
    put64(v.size());
    for (int32_t x : v) put32(static_cast<uint32_t>(x));
    return *this;
  }
  std::vector<uint8_t> bytes() {
    std::vector<uint8_t> b = buf_;
    for (int i = 0; i < 8; ++i) b[count_at_ + i] = static_cast<uint8_t>(n_kv_ >> (8 * i));
    return b;
  }

 private:
  void key(const std::string& k, uint32_t type) {
    putstr(k);
    put32(type);
    ++n_kv_;
  }
  void put32(uint32_t v) {
    for (int i = 0; i < 4; ++i) buf_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  void put64(uint64_t v) {
    for (int i = 0; i < 8; ++i) buf_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  void putstr(const std::string& s) {
    put64(s.size());
    buf_.insert(buf_.end(), s.begin(), s.end());
  }
  std::vector<uint8_t> buf_;
  size_t count_at_ = 0;
  uint64_t n_kv_ = 0;
};

// GPT-2 byte symbols for the ASCII letters used below are the letters themselves.
std::vector<uint8_t> tiny_bpe(const std::string& pre) {
  return GgufBytes()
      .str("tokenizer.ggml.model", "gpt2")
      .str("tokenizer.ggml.pre", pre)
      .strs("tokenizer.ggml.tokens", {"a", "b", "c", "ab", "abc", "bc", "<|end|>"})
      .i32s("tokenizer.ggml.token_type", {1, 1, 1, 1, 1, 1, 3})
      .strs("tokenizer.ggml.merges", {"b c", "a b", "ab c"})
      .u32("tokenizer.ggml.eos_token_id", 6)
      .bytes();
}

TEST(Tokenizer, TinyBpeMergeOrder) {
  std::vector<uint8_t> b = tiny_bpe("gpt-2");
  auto f = kvad::gguf::File::parse(b.data(), b.size(), "tiny.gguf");
  auto t = Tokenizer::from_gguf(*f);
  // "b c" has the lowest rank: a + bc; "ab c" is never reached.
  EXPECT_EQ(t->encode("abc", false, false), (std::vector<int32_t>{0, 5}));
  EXPECT_EQ(t->encode("ab", false, false), std::vector<int32_t>{3});
  EXPECT_EQ(t->encode("abab", false, false), (std::vector<int32_t>{3, 3}));
  EXPECT_EQ(t->encode("ab<|end|>", false, true), (std::vector<int32_t>{3, 6}));
  EXPECT_TRUE(t->is_eog(6));
  EXPECT_EQ(t->eos(), 6);
}

TEST(Tokenizer, UnknownPreTokenizerIsAClearError) {
  std::vector<uint8_t> b = tiny_bpe("no-such-pre");
  auto f = kvad::gguf::File::parse(b.data(), b.size(), "tiny.gguf");
  try {
    Tokenizer::from_gguf(*f);
    FAIL() << "expected kvad::Error";
  } catch (const kvad::Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("tiny.gguf"), std::string::npos) << m;
    EXPECT_NE(m.find("no-such-pre"), std::string::npos) << m;
    EXPECT_NE(m.find("smollm"), std::string::npos) << m;  // the supported list
  }
}

TEST(Tokenizer, UnknownModelAndMissingKeysAreErrors) {
  std::vector<uint8_t> b = GgufBytes().str("tokenizer.ggml.model", "bert").strs("tokenizer.ggml.tokens", {"a"}).bytes();
  auto f = kvad::gguf::File::parse(b.data(), b.size(), "m.gguf");
  EXPECT_THROW(Tokenizer::from_gguf(*f), kvad::Error);
  std::vector<uint8_t> b2 = GgufBytes().str("general.name", "x").bytes();
  auto f2 = kvad::gguf::File::parse(b2.data(), b2.size(), "m.gguf");
  EXPECT_THROW(Tokenizer::from_gguf(*f2), kvad::Error);
  std::vector<uint8_t> b3 = GgufBytes()
                                .str("tokenizer.ggml.model", "gpt2")
                                .str("tokenizer.ggml.pre", "gpt-2")
                                .strs("tokenizer.ggml.tokens", {"a", "b"})
                                .strs("tokenizer.ggml.merges", {"a b"})
                                .u32("tokenizer.ggml.eos_token_id", 7)
                                .bytes();
  auto f3 = kvad::gguf::File::parse(b3.data(), b3.size(), "m.gguf");
  EXPECT_THROW(Tokenizer::from_gguf(*f3), kvad::Error);  // eos outside the vocabulary
}

// ---------------------------------------------------------------------------
// SmolLM2 (the project's default model) against llama.cpp.

std::string smollm2_path() {
  if (const char* p = std::getenv("KVAD_MODEL_SMOLLM2"); p && *p) return p;
  if (const char* h = std::getenv("KVAD_HOME"); h && *h) {
    std::string p = std::string(h) + "/models/smollm2-135m.gguf";
    if (fs::exists(p)) return p;
  }
  if (const char* home = std::getenv("HOME"); home && *home) {
    std::string p = std::string(home) + "/.cache/kvad/models/smollm2-135m.gguf";
    if (fs::exists(p)) return p;
  }
  return "";
}

TEST(Tokenizer, SmolLM2MatchesLlamaCpp) {
  const std::string path = smollm2_path();
  if (path.empty() || !fs::exists(path))
    GTEST_SKIP() << "SmolLM2 model not found (set KVAD_MODEL_SMOLLM2, or put it at $KVAD_HOME/models/smollm2-135m.gguf "
                    "or ~/.cache/kvad/models/smollm2-135m.gguf; scripts/setup fetches it)";
  auto f = kvad::gguf::File::open(path);
  auto t = Tokenizer::from_gguf(*f);
  EXPECT_EQ(t->pre(), "smollm");
  nlohmann::json j = nlohmann::json::parse(read_file(std::string(KVAD_SOURCE_DIR) + "/tests/fixtures/tokenizer/smollm2.json"));
  ASSERT_EQ(t->n_vocab(), j.at("n_vocab").get<int32_t>());
  int n = 0;
  for (const auto& c : j.at("cases")) {
    const std::string text = c.at("text").get<std::string>();
    const bool add_special = c.at("add_special").get<bool>();
    const bool parse_special = c.at("parse_special").get<bool>();
    const std::vector<int32_t> expect = c.at("ids").get<std::vector<int32_t>>();
    EXPECT_EQ(ids_str(t->encode(text, add_special, parse_special)), ids_str(expect))
        << "\"" << escaped(text) << "\" add_special=" << add_special << " parse_special=" << parse_special;
    if (c.contains("detok")) {
      EXPECT_EQ(t->decode(expect, parse_special), c.at("detok").get<std::string>());
    }
    ++n;
  }
  EXPECT_GE(n, 15);
  EXPECT_TRUE(t->is_eog(2));  // <|im_end|>
  EXPECT_TRUE(t->is_eog(0));  // <|endoftext|>
  EXPECT_FALSE(t->is_eog(1));
  EXPECT_EQ(t->chat_template(), f->get_string("tokenizer.chat_template", ""));
  EXPECT_NE(t->chat_template().find("im_start"), std::string::npos);
}

}  // namespace
