// Tokenizer base: GGUF vocabulary loading, special-token matching, decode,
// StreamDecoder. The encoders live in bpe.cpp and spm.cpp.
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <array>

#include "base/error.h"
#include "base/utf8.h"
#include "io/gguf.h"
#include "tokenizer/hf_parts.h"
#include "tokenizer/vocab.h"

namespace kvad {

namespace tok {

int parse_byte_token(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  int hi = hex(t[3]), lo = hex(t[4]);
  if (hi < 0 || lo < 0) return -1;
  return hi * 16 + lo;
}

void Vocab::load_vocab(const gguf::File& f, const VocabDefaults& d) {
  where_ = f.path() + ": ";
  const gguf::Value* tv = f.find("tokenizer.ggml.tokens");
  if (!tv) throw Error(where_ + "no vocabulary (key tokenizer.ggml.tokens is missing)");
  tokens_ = tv->as_string_array();
  if (tokens_.empty()) throw Error(where_ + "tokenizer.ggml.tokens is empty");
  if (tokens_.size() > static_cast<size_t>(INT32_MAX))
    throw Error(where_ + "tokenizer.ggml.tokens has too many entries");
  const size_t n = tokens_.size();

  types_.assign(n, TokenType::NORMAL);
  if (const gguf::Value* ty = f.find("tokenizer.ggml.token_type")) {
    std::vector<int64_t> t = ty->as_int_array();
    if (t.size() != n)
      throw Error(where_ + "tokenizer.ggml.token_type has " + std::to_string(t.size()) + " entries, tokenizer.ggml.tokens has " +
                  std::to_string(n));
    for (size_t i = 0; i < n; ++i)
      types_[i] = (t[i] >= 0 && t[i] <= 6) ? static_cast<TokenType>(t[i]) : TokenType::UNDEFINED;
  }

  token_to_id_.reserve(n);
  for (size_t i = 0; i < n; ++i) token_to_id_[tokens_[i]] = static_cast<int32_t>(i);  // a duplicate: the last wins

  auto id_key = [&](const char* key, int32_t def) -> int32_t {
    const gguf::Value* v = f.find(key);
    if (!v) return (def >= 0 && static_cast<size_t>(def) < n) ? def : -1;
    int64_t id = v->as_int();
    if (id < 0 || static_cast<uint64_t>(id) >= n)
      throw Error(where_ + key + " = " + std::to_string(id) + " is outside the vocabulary (" + std::to_string(n) + " tokens)");
    return static_cast<int32_t>(id);
  };
  bos_ = id_key("tokenizer.ggml.bos_token_id", d.bos);
  eos_ = id_key("tokenizer.ggml.eos_token_id", d.eos);
  unk_ = id_key("tokenizer.ggml.unknown_token_id", d.unk);
  eot_ = id_key("tokenizer.ggml.eot_token_id", -1);
  eom_ = id_key("tokenizer.ggml.eom_token_id", -1);
  add_bos_ = f.get_bool("tokenizer.ggml.add_bos_token", d.add_bos);
  add_eos_ = f.get_bool("tokenizer.ggml.add_eos_token", d.add_eos);
  add_space_prefix_ = f.get_bool("tokenizer.ggml.add_space_prefix", d.add_space_prefix);
  // Chat templates: `tokenizer.chat_template`, and named ones as
  // `tokenizer.chat_template.NAME` (llama.cpp's convert_hf_to_gguf.py).
  static constexpr std::string_view kTmpl = "tokenizer.chat_template";
  for (const gguf::Value& v : f.metadata()) {
    const std::string& k = v.key();
    if (k.compare(0, kTmpl.size(), kTmpl) != 0 || v.type() != gguf::ValueType::STRING) continue;
    if (k.size() == kTmpl.size()) {
      chat_template_ = v.as_string();
      chat_templates_.insert(chat_templates_.begin(), {"default", chat_template_});
    } else if (k[kTmpl.size()] == '.') {
      chat_templates_.emplace_back(k.substr(kTmpl.size() + 1), v.as_string());
    }
  }

  // Tokens matched in the raw text before the encoder runs, longest first.
  special_ids_.clear();
  for (size_t i = 0; i < n; ++i) {
    TokenType t = types_[i];
    if ((t == TokenType::CONTROL || t == TokenType::USER_DEFINED || t == TokenType::UNKNOWN) && !tokens_[i].empty())
      special_ids_.push_back(static_cast<int32_t>(i));
  }
  std::stable_sort(special_ids_.begin(), special_ids_.end(),
                   [&](int32_t a, int32_t b) { return tokens_[a].size() > tokens_[b].size(); });
  find_eog();
}

void Vocab::find_eog() {
  // End of generation: eos, eot, eom, and special tokens that end a turn.
  static constexpr std::array<std::string_view, 12> kEnd = {
      "<|im_end|>", "<|eot_id|>", "<|end_of_text|>", "<end_of_turn>", "<|endoftext|>", "<|end|>",
      "</s>",       "<|return|>", "<|eom_id|>",      "<EOT>",         "<|call|>",      "<end_of_utterance>"};
  eog_.clear();
  for (int32_t id : {eos_, eot_, eom_})
    if (id >= 0) eog_.push_back(id);
  for (std::string_view s : kEnd) {
    auto it = token_to_id_.find(s);
    if (it == token_to_id_.end()) continue;
    TokenType t = types_[it->second];
    if (t == TokenType::CONTROL || t == TokenType::USER_DEFINED) eog_.push_back(it->second);
  }
  // o200k_harmony (gpt-oss): <|end|> closes a message inside a reply (the
  // analysis before the final answer); <|return|> and <|call|> end the
  // reply. llama.cpp drops <|end|> from its EOG list in the same case.
  auto control = [&](std::string_view s) {
    auto it = token_to_id_.find(s);
    return it != token_to_id_.end() &&
           (types_[it->second] == TokenType::CONTROL || types_[it->second] == TokenType::USER_DEFINED);
  };
  if (control("<|return|>") && control("<|call|>") && control("<|end|>")) {
    const int32_t end = token_to_id_.find(std::string_view("<|end|>"))->second;
    eog_.erase(std::remove(eog_.begin(), eog_.end(), end), eog_.end());
  }
  std::sort(eog_.begin(), eog_.end());
  eog_.erase(std::unique(eog_.begin(), eog_.end()), eog_.end());
}

}  // namespace tok

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const gguf::File& f) {
  if (const gguf::Value* hj = f.find(tok::kKeyJson)) {
    // An HF tokenizer kept by kvad (hf_gguf_keys): its own pipeline, with the
    // vocabulary of tokenizer.ggml.tokens.
    const std::string name = f.path() + ": " + tok::kKeyJson;
    tok::hf::ModelTables tables;
    const gguf::Value* tv = f.find("tokenizer.ggml.tokens");
    if (!tv) throw Error(f.path() + ": " + tok::kKeyJson + " needs tokenizer.ggml.tokens, which is missing");
    tables.tokens = &tv->as_string_array();
    if (const gguf::Value* v = f.find(tok::kKeyVocab)) tables.in_vocab = v->as_int_array();
    if (const gguf::Value* v = f.find(tok::kKeyMerges)) tables.merges = v->as_int_array();
    const gguf::Value* cv = f.find(tok::kKeyConfig);
    return tok::make_hf_tables(hj->as_string(), name, cv ? std::string_view(cv->as_string()) : std::string_view(),
                               f.path() + ": " + tok::kKeyConfig, tables);
  }
  const gguf::Value* m = f.find("tokenizer.ggml.model");
  if (!m) throw Error(f.path() + ": no tokenizer (key tokenizer.ggml.model is missing)");
  const std::string& model = m->as_string();
  if (model == "gpt2") return tok::make_bpe(f);
  if (model == "llama") return tok::make_spm(f);
  if (model == "bert") return tok::make_wordpiece(f);
  throw Error(f.path() + ": tokenizer.ggml.model = \"" + model +
              "\" is not supported (supported: \"gpt2\" byte-level BPE, \"llama\" SentencePiece, \"bert\" WordPiece)");
}

std::vector<gguf::Value> tokenizer_json_gguf_keys(std::string_view json, const std::string& name,
                                                  std::string_view config_json, const std::string& config_name) {
  return tok::hf_gguf_keys(json, name, config_json, config_name);
}

std::unique_ptr<Tokenizer> Tokenizer::from_tokenizer_json_text(std::string_view json, const std::string& name,
                                                               std::string_view config_json,
                                                               const std::string& config_name) {
  return tok::make_hf(json, name, config_json, config_name);
}

void Tokenizer::add_eog_ids(const std::vector<int32_t>& ids) {
  for (int32_t id : ids) {
    if (id < 0 || id >= n_vocab())
      throw Error("end-of-generation id " + std::to_string(id) + " is outside the vocabulary (" +
                  std::to_string(n_vocab()) + " tokens)");
    eog_.push_back(id);
  }
  // o200k_harmony (gpt-oss): <|end|> closes a message inside a reply (the
  // analysis before the final answer); <|return|> and <|call|> end the
  // reply. llama.cpp drops <|end|> from its EOG list in the same case.
  auto control = [&](std::string_view s) {
    auto it = token_to_id_.find(s);
    return it != token_to_id_.end() &&
           (types_[it->second] == TokenType::CONTROL || types_[it->second] == TokenType::USER_DEFINED);
  };
  if (control("<|return|>") && control("<|call|>") && control("<|end|>")) {
    const int32_t end = token_to_id_.find(std::string_view("<|end|>"))->second;
    eog_.erase(std::remove(eog_.begin(), eog_.end(), end), eog_.end());
  }
  std::sort(eog_.begin(), eog_.end());
  eog_.erase(std::unique(eog_.begin(), eog_.end()), eog_.end());
}

bool Tokenizer::is_eog(int32_t id) const { return std::binary_search(eog_.begin(), eog_.end(), id); }

TokenType Tokenizer::token_type(int32_t id) const {
  if (id < 0 || id >= n_vocab())
    throw Error("token id " + std::to_string(id) + " is outside the vocabulary (" + std::to_string(n_vocab()) + " tokens)");
  return types_[id];
}

std::optional<int32_t> Tokenizer::find_token(std::string_view text) const {
  auto it = token_to_id_.find(text);
  if (it == token_to_id_.end()) return std::nullopt;
  return it->second;
}

// llama.cpp's tokenizer_st_partition: each special token in turn (longest
// first) splits every plain-text fragment at each of its occurrences.
std::vector<Tokenizer::Fragment> Tokenizer::split_special(std::string_view text, bool parse_special) const {
  std::vector<Fragment> frags;
  if (text.empty()) return frags;
  frags.push_back({-1, text});
  if (special_ids_.empty()) return frags;
  // Which byte pairs occur in the text: most special tokens can be skipped
  // without a search (some vocabularies have thousands of them).
  std::vector<uint64_t> pairs(65536 / 64, 0), bytes(4, 0);
  for (size_t i = 0; i < text.size(); ++i) {
    const auto b = static_cast<uint8_t>(text[i]);
    bytes[b >> 6] |= uint64_t{1} << (b & 63);
    if (i + 1 < text.size()) {
      const unsigned pr = (unsigned{b} << 8) | static_cast<uint8_t>(text[i + 1]);
      pairs[pr >> 6] |= uint64_t{1} << (pr & 63);
    }
  }
  std::vector<Fragment> next;
  for (int32_t id : special_ids_) {
    TokenType t = types_[id];
    if (!parse_special && t != TokenType::USER_DEFINED) continue;
    const std::string& s = tokens_[id];
    if (s.size() > text.size()) continue;
    const auto b0 = static_cast<uint8_t>(s[0]);
    if (s.size() == 1) {
      if (!(bytes[b0 >> 6] >> (b0 & 63) & 1)) continue;
    } else {
      const unsigned pr = (unsigned{b0} << 8) | static_cast<uint8_t>(s[1]);
      if (!(pairs[pr >> 6] >> (pr & 63) & 1)) continue;
    }
    bool found = false;
    for (const Fragment& fr : frags)
      if (fr.id < 0 && fr.text.find(s) != std::string_view::npos) { found = true; break; }
    if (!found) continue;
    next.clear();
    for (const Fragment& fr : frags) {
      if (fr.id >= 0) { next.push_back(fr); continue; }
      std::string_view rest = fr.text;
      size_t p;
      while ((p = rest.find(s)) != std::string_view::npos) {
        if (p > 0) next.push_back({-1, rest.substr(0, p)});
        next.push_back({id, std::string_view(s)});
        rest.remove_prefix(p + s.size());
      }
      if (!rest.empty()) next.push_back({-1, rest});
    }
    frags.swap(next);
  }
  return frags;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool special) const {
  std::string out;
  // SentencePiece: the encoder put a space before the text; drop it from the
  // first piece that has any text (as llama.cpp's detokenize and HF do).
  bool strip = add_space_prefix_ && model_ == "llama";
  for (int32_t id : ids) {
    std::string piece = token_to_piece(id, special);
    if (piece.empty()) continue;
    if (strip && piece[0] == ' ' && types_[id] != TokenType::CONTROL && types_[id] != TokenType::UNKNOWN)
      out.append(piece, 1, std::string::npos);
    else
      out += piece;
    strip = false;
  }
  return out;
}

std::string StreamDecoder::push(int32_t id) {
  pending_ += tok_.token_to_piece(id, special_);
  size_t keep = utf8::incomplete_tail(pending_);
  std::string out = pending_.substr(0, pending_.size() - keep);
  pending_.erase(0, pending_.size() - keep);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out;
  out.swap(pending_);
  return out;
}

}  // namespace kvad
