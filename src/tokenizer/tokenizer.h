// Tokenizers built from GGUF metadata (`tokenizer.ggml.*` keys), or from
// HF `tokenizers` files (tokenizer.json, tokenizer_config.json).
//
// Supported: byte-level BPE (`tokenizer.ggml.model = "gpt2"`, GPT-2's byte to
// unicode map and merge ranks from `tokenizer.ggml.merges`) with the
// pre-tokenizer regexes named by `tokenizer.ggml.pre`; and SentencePiece
// (`tokenizer.ggml.model = "llama"`: scores, U+2581 word boundary, byte
// fallback tokens <0xXX>). Reference: llama.cpp's llama-vocab.cpp, whose
// results kvad matches (tests/tokenizer). Implementation: bpe.cpp, spm.cpp,
// pretokenizer.cpp (PCRE2), tokenizer.cpp. encode() and decode() are
// thread-safe.
//
// tokenizer.json (hf_tokenizer.cpp and the hf_*.cpp parts): the pipeline of
// HF `tokenizers` (PyPI) -- added tokens, normalizer, pre-tokenizer, model
// (BPE, WordPiece, WordLevel), post-processor, decoder -- whose results kvad
// matches id for id (tests/tokenizer/test_tokenizer_json.cpp, fixtures made
// by tools/make_hf_tokenizer_fixtures.py).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace kvad {

namespace gguf { class File; class Value; }

/// GGUF token types (`tokenizer.ggml.token_type`).
enum class TokenType : int32_t {
  UNDEFINED = 0, NORMAL = 1, UNKNOWN = 2, CONTROL = 3, USER_DEFINED = 4, UNUSED = 5, BYTE = 6,
};

class Tokenizer {
 public:
  /// Builds the tokenizer a GGUF describes. A file with kvad.tokenizer.json
  /// (tokenizer_json_gguf_keys: the quantize-once cache) gets the HF
  /// tokenizer kept there; others the one tokenizer.ggml.model names. Throws
  /// kvad::Error naming the file and key for a missing/unsupported model or
  /// pre-tokenizer, or malformed kvad.tokenizer.* keys.
  static std::unique_ptr<Tokenizer> from_gguf(const gguf::File& f);
  /// Builds the tokenizer an HF tokenizer.json describes, with BOS/EOS/pad
  /// and chat templates from a tokenizer_config.json when `config_path` is
  /// not empty. encode(text, add_special, parse_special) is tokenizers'
  /// `encode(text, add_special_tokens=add_special)` with
  /// `encode_special_tokens = !parse_special`; decode(ids, special) is its
  /// `decode(ids, skip_special_tokens=!special)`. add_special adds what the
  /// post_processor adds (transformers 5 ignores the config's add_bos_token
  /// and add_eos_token when there is a tokenizer.json); only when
  /// tokenizer.json has no post_processor do those flags add BOS/EOS
  /// ([bos] $A [eos], as transformers 4's Llama/Gemma tokenizers did).
  /// truncation and padding are ignored. Throws kvad::Error naming
  /// the file and the field for malformed or unsupported input; files over
  /// 128 MiB or nested deeper than 64 levels are refused.
  static std::unique_ptr<Tokenizer> from_tokenizer_json(const std::string& path, const std::string& config_path = "");
  /// The same from file contents in memory; `name` and `config_name` are
  /// used in error messages. An empty `config_json` means no config.
  static std::unique_ptr<Tokenizer> from_tokenizer_json_text(std::string_view json, const std::string& name,
                                                             std::string_view config_json = {},
                                                             const std::string& config_name = "tokenizer_config.json");
  virtual ~Tokenizer() = default;

  /// Text -> token ids. `add_special`: add BOS/EOS as the file's
  /// `tokenizer.ggml.add_bos_token` / `add_eos_token` say. `parse_special`:
  /// text equal to a CONTROL (or UNKNOWN) token's text becomes that token;
  /// otherwise such text is tokenized as plain text. USER_DEFINED tokens
  /// (added, non-special tokens) are always matched, as HF tokenizers and
  /// llama.cpp do. Matching is longest token first (llama.cpp's
  /// tokenizer_st_partition).
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special,
                                      bool parse_special) const = 0;
  /// The bytes one token stands for (BPE bytes decoded, SentencePiece U+2581
  /// as space, <0xXX> as the byte). Control (and UNKNOWN) tokens decode to ""
  /// unless `special` is true, in which case their text is returned;
  /// USER_DEFINED tokens decode to their text; UNUSED/UNDEFINED to "".
  /// Throws kvad::Error for an id outside [0, n_vocab).
  virtual std::string token_to_piece(int32_t id, bool special = false) const = 0;
  /// Concatenated pieces; SentencePiece drops the one leading space that its
  /// encoder adds (as HF's decode does).
  virtual std::string decode(const std::vector<int32_t>& ids, bool special = false) const;

  int32_t n_vocab() const { return static_cast<int32_t>(tokens_.size()); }
  int32_t bos() const { return bos_; }   ///< -1 when none
  int32_t eos() const { return eos_; }   ///< -1 when none
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  /// End-of-generation: eos, `tokenizer.ggml.eot_token_id`, `eom`, and control
  /// tokens whose text is a known end marker (<|im_end|>, <|eot_id|>, <end_of_turn>, ...).
  bool is_eog(int32_t id) const;
  const std::string& token_text(int32_t id) const { return tokens_.at(id); }
  TokenType token_type(int32_t id) const;
  /// Exact vocabulary lookup of a token's text; nullopt when absent.
  std::optional<int32_t> find_token(std::string_view text) const;
  /// `tokenizer.ggml.model`, `tokenizer.ggml.pre`; for tokenizer.json the
  /// model's and the pre-tokenizer's "type" ("BPE", "ByteLevel", ...).
  const std::string& model() const { return model_; }
  const std::string& pre() const { return pre_; }
  int32_t unk() const { return unk_; }   ///< -1 when none
  int32_t eot() const { return eot_; }   ///< -1 when none
  int32_t eom() const { return eom_; }   ///< -1 when none
  /// `tokenizer.ggml.add_space_prefix` (SentencePiece: default true).
  bool add_space_prefix() const { return add_space_prefix_; }
  /// All end-of-generation ids (sorted).
  const std::vector<int32_t>& eog_ids() const { return eog_; }
  /// Adds end-of-generation ids (an HF checkpoint's generation_config.json
  /// eos_token_id list); ids outside the vocabulary throw kvad::Error.
  void add_eog_ids(const std::vector<int32_t>& ids);
  int32_t pad() const { return pad_; }  ///< -1 when none (tokenizer_config.json pad_token)
  /// tokenizer_config.json `chat_template`: the template itself, or the one
  /// named "default" of the list form; GGUF `tokenizer.chat_template` ("" when none).
  const std::string& chat_template() const { return chat_template_; }
  /// Every (name, template) of the list form; one ("default", t) for the
  /// string form; GGUF `tokenizer.chat_template.NAME` keys after the default.
  const std::vector<std::pair<std::string, std::string>>& chat_templates() const { return chat_templates_; }

 protected:
  /// Pieces of the input after special-token matching: a run of plain text
  /// (`id` = -1, `text` set) or one matched special token (`id` >= 0).
  struct Fragment {
    int32_t id = -1;
    std::string_view text;
  };
  std::vector<Fragment> split_special(std::string_view text, bool parse_special) const;

  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> token_to_id_;
  /// CONTROL / USER_DEFINED / UNKNOWN ids with non-empty text, longest text first.
  std::vector<int32_t> special_ids_;
  int32_t unk_ = -1, eot_ = -1, eom_ = -1;
  bool add_space_prefix_ = false;

  std::vector<std::string> tokens_;
  std::vector<TokenType> types_;
  std::vector<int32_t> eog_;
  int32_t bos_ = -1, eos_ = -1, pad_ = -1;
  bool add_bos_ = false, add_eos_ = false;
  std::string model_, pre_;
  std::string chat_template_;
  std::vector<std::pair<std::string, std::string>> chat_templates_;
};

/// The key whose presence says a GGUF keeps an HF tokenizer (tokenizer_json_gguf_keys).
inline constexpr const char* kGgufHfTokenizerKey = "kvad.tokenizer.json";
/// The GGUF keys of the HF tokenizer `json` (tokenizer.json text; `name`
/// for errors) with its tokenizer_config.json `config_json` (may be empty),
/// for a GGUF that llama.cpp and kvad both read (the quantize-once cache):
/// the tokenizer.ggml.* keys as llama.cpp's convert_hf_to_gguf.py writes them
/// (model "gpt2" with merges and the pre-tokenizer its hash table names for a
/// byte-level BPE; "llama" with scores for a SentencePiece-style BPE with
/// byte fallback, the scores ordering merges as the BPE's ranks do; "bert"
/// for WordPiece; "none" otherwise), bos/eos/unk/pad ids, add_bos_token,
/// add_eos_token, tokenizer.chat_template[.NAME]; and kvad.tokenizer.* keys
/// that from_gguf reads back into this very tokenizer (encode, decode and
/// special ids equal to from_tokenizer_json_text's). Throws kvad::Error as
/// from_tokenizer_json_text does.
std::vector<gguf::Value> tokenizer_json_gguf_keys(std::string_view json, const std::string& name,
                                                  std::string_view config_json = {},
                                                  const std::string& config_name = "tokenizer_config.json");

/// The same for the files at `path` and `config_path` (empty: none), read as
/// Tokenizer::from_tokenizer_json reads them.
std::vector<gguf::Value> tokenizer_json_file_gguf_keys(const std::string& path, const std::string& config_path = "");

/// Turns a stream of token ids into text that never ends inside a UTF-8
/// sequence: push() returns the bytes that are complete so far, holding back
/// a partial multi-byte character until the token that completes it.
/// Pieces are token_to_piece() as they are: unlike decode(), a SentencePiece
/// word's leading space is kept (generated text continues a prompt).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok, bool special = false) : tok_(tok), special_(special) {}
  std::string push(int32_t id);
  /// Whatever is held back (an incomplete sequence at the end of generation).
  std::string flush();

 private:
  const Tokenizer& tok_;
  bool special_;
  std::string pending_;
};

}  // namespace kvad
