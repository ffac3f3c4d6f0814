// Internal: what the BPE and SentencePiece tokenizers share (reading the
// vocabulary, special ids and flags from GGUF metadata). Not a public header.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "io/gguf.h"

#include "tokenizer/tokenizer.h"

namespace kvad::tok {

/// Defaults that differ by tokenizer model when a GGUF key is absent.
struct VocabDefaults {
  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = false;
  int32_t bos = -1, eos = -1, unk = -1;
};

class Vocab : public Tokenizer {
 protected:
  /// Reads tokens, types, special ids and flags; builds the lookup tables.
  /// Throws kvad::Error naming the file and key.
  void load_vocab(const gguf::File& f, const VocabDefaults& d);
  /// eog_ from eos_, eot_, eom_ and the CONTROL / USER_DEFINED tokens whose
  /// text is a known end-of-turn marker.
  void find_eog();
  /// "<path>: " for error messages.
  std::string where_;
};

/// Byte value of a "<0xXX>" token text; -1 when the text is not of that form.
int parse_byte_token(std::string_view text);

std::unique_ptr<Tokenizer> make_bpe(const gguf::File& f);
std::unique_ptr<Tokenizer> make_spm(const gguf::File& f);
/// tokenizer.ggml.model "bert" (gguf_wordpiece.cpp).
std::unique_ptr<Tokenizer> make_wordpiece(const gguf::File& f);
/// tokenizer.json (hf_tokenizer.cpp); `config` may be null.
std::unique_ptr<Tokenizer> make_hf(std::string_view json, const std::string& name, std::string_view config,
                                   const std::string& config_name);

/// The GGUF keys kvad keeps an HF tokenizer in (hf_gguf_keys): tokenizer.json
/// with the model's vocabulary and merges moved out, the flags of which
/// tokenizer.ggml.tokens entries are model.vocab entries (INT8 per id), the
/// merges as id triples (INT32), and tokenizer_config.json.
inline constexpr const char* kKeyJson = kGgufHfTokenizerKey;
inline constexpr const char* kKeyVocab = "kvad.tokenizer.in_vocab";
inline constexpr const char* kKeyMerges = "kvad.tokenizer.merges";
inline constexpr const char* kKeyConfig = "kvad.tokenizer.config";
namespace hf { struct ModelTables; }
/// A tokenizer.json whose model vocabulary and merges are partly in `tables`.
std::vector<gguf::Value> hf_gguf_keys(std::string_view json, const std::string& name, std::string_view config,
                                      const std::string& config_name);
std::unique_ptr<Tokenizer> make_hf_tables(std::string_view json, const std::string& name, std::string_view config,
                                          const std::string& config_name, const hf::ModelTables& tables);

}  // namespace kvad::tok
