// Internal: the parts of an HF `tokenizers` pipeline (tokenizer.json), each
// built from its JSON object: normalizers (hf_normalizer.cpp),
// pre-tokenizers (hf_pretokenizer.cpp), models (hf_model.cpp), decoders and
// post-processors (hf_decoder.cpp). hf_tokenizer.cpp puts them together.
//
// Source for every behaviour: huggingface/tokenizers, tokenizers/src/
// (normalizers/, pre_tokenizers/, models/, decoders/, processors/,
// tokenizer/normalizer.rs and pattern.rs). Text between the parts is valid
// UTF-8 (the input is sanitized first, as a Python str always is).
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace kvad::tok::hf {

using json = nlohmann::json;

/// Reads JSON values with errors that name the file and the field:
/// "<file>: <path>: <what is wrong>" (as kvad::Error).
class Ctx {
 public:
  explicit Ctx(std::string file) : file_(std::move(file)) {}
  const std::string& file() const { return file_; }
  [[noreturn]] void fail(const std::string& path, const std::string& msg) const;
  /// Member `key` of object `obj` (at `path`); an error when `obj` is not an
  /// object or the member is missing.
  const json& at(const json& obj, const std::string& path, const char* key) const;
  /// Member `key`, or nullptr when absent or null.
  const json* find(const json& obj, const std::string& path, const char* key) const;
  std::string str(const json& v, const std::string& path) const;
  bool boolean(const json& v, const std::string& path) const;
  int64_t integer(const json& v, const std::string& path, int64_t lo, int64_t hi) const;
  const json& array(const json& v, const std::string& path) const;
  const json& object(const json& v, const std::string& path) const;
  std::string opt_str(const json& obj, const std::string& path, const char* key, const std::string& def) const;
  bool opt_bool(const json& obj, const std::string& path, const char* key, bool def) const;
  /// The "type" member of a part, checked to be a string.
  std::string type(const json& obj, const std::string& path) const;

 private:
  std::string file_;
};

/// Parses JSON text; kvad::Error naming `file` for bad syntax, more than
/// kMaxJsonBytes or nesting deeper than kMaxJsonDepth.
json parse_json(std::string_view text, const std::string& file);
constexpr size_t kMaxJsonBytes = size_t{128} << 20;
constexpr int kMaxJsonDepth = 64;

/// A pattern of tokenizers' Replace and Split ({"String": s} or {"Regex": r}).
/// Regexes are Oniguruma's syntax there; kvad compiles them with PCRE2 (UTF,
/// UCP, ^ and $ at line ends as in Oniguruma's Ruby syntax), which agrees on
/// the patterns models ship. Matching is bounded (PCRE2 match limits).
class Pattern {
 public:
  Pattern(const Ctx& c, const json& j, const std::string& path);
  ~Pattern();
  Pattern(const Pattern&) = delete;
  Pattern& operator=(const Pattern&) = delete;
  /// Non-overlapping matches, leftmost first, as [begin, end) byte offsets;
  /// like Oniguruma's find_iter, an empty match right after the previous
  /// match is skipped.
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const;

 private:
  std::string literal_;
  void* code_ = nullptr;  // pcre2_code_8*, when a regex
};

/// One split of the input: plain text, or an added token already matched.
struct Piece {
  std::string text;
  int32_t id = -1;        ///< >= 0: an added token; the parts leave it alone
  bool at_start = false;  ///< begins at offset 0 of the input (Metaspace prepend_scheme "first")
};

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  /// Normalizes `s` in place; clears `at_start` when the first character was
  /// removed (tokenizers' alignments then start past offset 0).
  virtual void normalize(std::string& s, bool& at_start) const = 0;
};
std::unique_ptr<Normalizer> make_normalizer(const Ctx& c, const json& j, const std::string& path);

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  /// Splits every plain piece (id < 0) further; empty pieces are dropped.
  virtual void pre_tokenize(std::vector<Piece>& pieces) const = 0;
};
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const Ctx& c, const json& j, const std::string& path);

/// Vocabulary of a model: text -> id.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
using VocabMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class Model {
 public:
  virtual ~Model() = default;
  /// Token ids of one pre-tokenized word (non-empty).
  virtual void tokenize(std::string_view word, std::vector<int32_t>& out) const = 0;
  const VocabMap& vocab() const { return vocab_; }
  const std::string& type() const { return type_; }
  int32_t unk() const { return unk_; }
  bool byte_fallback() const { return byte_fallback_; }

 protected:
  VocabMap vocab_;
  std::string type_;
  int32_t unk_ = -1;
  bool byte_fallback_ = false;
};
/// Largest token id a tokenizer.json may use (bounds the tables built from it).
constexpr int64_t kMaxTokenId = (int64_t{1} << 22) - 1;

/// The vocabulary and merges of a model held outside its JSON object, as a
/// GGUF written by hf_gguf_keys holds them (kvad.tokenizer.*): the model's
/// vocabulary is model.vocab (what the JSON still lists) plus (tokens[i], i)
/// for every i with in_vocab[i] != 0; a BPE's merges are `merges` (rank
/// order, three ids each: left, right, merged) after model.merges.
struct ModelTables {
  const std::vector<std::string>* tokens = nullptr;
  std::vector<int64_t> in_vocab;
  std::vector<int64_t> merges;
};

/// Builds a model from its JSON object `j` (at `path`), with `tables`
/// (may be null) adding to its vocabulary and merges. When `merges_out` is
/// given, a BPE appends its merges to it as ModelTables::merges lists them.
std::unique_ptr<Model> make_model(const Ctx& c, const json& j, const std::string& path,
                                  const ModelTables* tables = nullptr, std::vector<int32_t>* merges_out = nullptr);

class Decoder {
 public:
  virtual ~Decoder() = default;
  /// tokenizers' decode_chain. `stream`: one token decoded on its own for
  /// streaming (kvad's token_to_piece): position-dependent steps act as for a
  /// token in the middle of the text, Strip is skipped, and bytes are kept
  /// as they are instead of being made valid UTF-8 (StreamDecoder holds back
  /// incomplete characters).
  virtual void decode_chain(std::vector<std::string>& tokens, bool stream) const = 0;
};
std::unique_ptr<Decoder> make_decoder(const Ctx& c, const json& j, const std::string& path);

/// Adds special tokens around a single sequence (add_special_tokens).
class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  virtual void process(std::vector<int32_t>& ids) const = 0;
};
/// TemplateProcessing, BertProcessing, RobertaProcessing, ByteLevel (adds
/// nothing) and Sequence; the ids come from the JSON.
std::unique_ptr<PostProcessor> make_post_processor(const Ctx& c, const json& j, const std::string& path);
/// transformers' update_post_processor: [bos] $A [eos].
std::unique_ptr<PostProcessor> make_bos_eos_processor(int32_t bos, int32_t eos);

/// GPT-2's bytes_to_unicode as UTF-8 text per byte, and its inverse (code point -> byte, -1 if none).
const std::array<std::string, 256>& byte_level_chars();
int byte_level_byte(uint32_t cp);

}  // namespace kvad::tok::hf
