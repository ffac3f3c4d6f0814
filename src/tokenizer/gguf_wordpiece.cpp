// GGUF tokenizer.ggml.model "bert" (WordPiece), as llama.cpp's
// convert_hf_to_gguf.py writes it (conversion/bert.py, BertModel.set_vocab):
// the HF vocabulary in "phantom space" form — a word-initial piece gets a
// U+2581 prefix, a continuation piece loses its "##", CONTROL tokens stay as
// they are. kvad undoes that mapping and runs the same pipeline as an HF
// BERT tokenizer.json (BertNormalizer with tokenizer.ggml.normalizer.lowercase,
// BertPreTokenizer, WordPiece with "##", [bos] $A [eos] as
// add_bos_token/add_eos_token say), through the tokenizer.json loader, so a
// GGUF BERT tokenizes exactly as transformers' BertTokenizerFast does.
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "io/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"

namespace kvad::tok {

std::unique_ptr<Tokenizer> make_wordpiece(const gguf::File& f) {
  using json = nlohmann::ordered_json;
  const gguf::Value* tv = f.find("tokenizer.ggml.tokens");
  const gguf::Value* yv = f.find("tokenizer.ggml.token_type");
  if (!tv) throw Error(f.path() + ": tokenizer.ggml.tokens is missing");
  const std::vector<std::string>& tokens = tv->as_string_array();
  const std::vector<int64_t> types = yv ? yv->as_int_array() : std::vector<int64_t>(tokens.size(), 1);
  if (types.size() != tokens.size())
    throw Error(f.path() + ": tokenizer.ggml.token_type has " + std::to_string(types.size()) + " entries for " +
                std::to_string(tokens.size()) + " tokens");
  static const std::string kPhantom = "\xE2\x96\x81";  // U+2581
  json vocab = json::object(), added = json::array();
  std::vector<std::string> text(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string& t = tokens[i];
    const bool control = types[i] == static_cast<int64_t>(TokenType::CONTROL);
    if (control) text[i] = t;
    else if (t.compare(0, kPhantom.size(), kPhantom) == 0) text[i] = t.substr(kPhantom.size());
    else text[i] = "##" + t;
    if (vocab.contains(text[i]))
      throw Error(f.path() + ": tokenizer.ggml.tokens[" + std::to_string(i) + "] \"" + t +
                  "\" maps to a WordPiece token that is already in the vocabulary");
    vocab[text[i]] = static_cast<int64_t>(i);
    if (control)
      added.push_back({{"id", i}, {"content", t}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                       {"normalized", false}, {"special", true}});
  }
  auto id_of = [&](const char* key) -> int64_t {
    const int64_t id = f.get_int(key, -1);
    if (id >= static_cast<int64_t>(tokens.size()))
      throw Error(f.path() + ": " + key + " " + std::to_string(id) + " is outside the vocabulary");
    return id;
  };
  const int64_t unk = id_of("tokenizer.ggml.unknown_token_id"), bos = id_of("tokenizer.ggml.bos_token_id"),
                eos = id_of("tokenizer.ggml.eos_token_id");
  if (unk < 0) throw Error(f.path() + ": a bert tokenizer needs tokenizer.ggml.unknown_token_id");
  json single = json::array(), specials = json::object();
  auto special = [&](int64_t id) {
    single.push_back({{"SpecialToken", {{"id", text[id]}, {"type_id", 0}}}});
    specials[text[id]] = {{"id", text[id]}, {"ids", {id}}, {"tokens", {text[id]}}};
  };
  if (bos >= 0 && f.get_bool("tokenizer.ggml.add_bos_token", true)) special(bos);
  single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
  if (eos >= 0 && f.get_bool("tokenizer.ggml.add_eos_token", true)) special(eos);
  const json doc = {
      {"version", "1.0"},
      {"added_tokens", added},
      {"normalizer",
       {{"type", "BertNormalizer"}, {"clean_text", true}, {"handle_chinese_chars", true}, {"strip_accents", nullptr},
        {"lowercase", f.get_bool("tokenizer.ggml.normalizer.lowercase", true)}}},
      {"pre_tokenizer", {{"type", "BertPreTokenizer"}}},
      {"post_processor", {{"type", "TemplateProcessing"}, {"single", single}, {"pair", single},
                          {"special_tokens", specials}}},
      {"decoder", {{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", true}}},
      {"model",
       {{"type", "WordPiece"}, {"unk_token", text[unk]}, {"continuing_subword_prefix", "##"},
        {"max_input_chars_per_word", 100}, {"vocab", vocab}}},
  };
  return make_hf(doc.dump(), f.path() + " (tokenizer.ggml.model bert)", "", "tokenizer_config.json");
}

}  // namespace kvad::tok
