// A tokenizer from HF tokenizer.json (+ tokenizer_config.json).
//
// Source: tokenizers/src/tokenizer/mod.rs (encode_single_sequence, decode),
// added_vocabulary.rs (add_tokens: ids; extract_and_normalize: tokens with
// normalized=false are found in the raw text first, leftmost-longest, then
// each remaining piece is normalized and the normalized=true tokens, in their
// normalized form, are found in it; single_word, lstrip, rstrip; special
// tokens skipped when encode_special_tokens), tokenizer/serialization.rs; and
// transformers' tokenization_utils_tokenizers.py for tokenizer_config.json.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "base/error.h"
#include "base/utf8.h"
#include "tokenizer/hf_parts.h"
#include "tokenizer/unicode.h"
#include "tokenizer/vocab.h"

namespace kvad {

namespace tok {

namespace {

using hf::Ctx;
using hf::json;

// Byte trie over added-token texts; leftmost-longest matching.
class Trie {
 public:
  void add(std::string_view s, int32_t value) {
    int32_t node = 0;
    for (char c : s) {
      const uint64_t k = (static_cast<uint64_t>(node) << 8) | static_cast<uint8_t>(c);
      auto it = edges_.find(k);
      if (it == edges_.end()) {
        values_.push_back(-1);
        it = edges_.emplace(k, static_cast<int32_t>(values_.size() - 1)).first;
      }
      node = it->second;
    }
    values_[node] = value;
  }
  bool empty() const { return edges_.empty(); }
  /// Longest entry starting at `text[i]`: its value, and its end in `end`; -1 if none.
  int32_t longest_at(std::string_view text, size_t i, size_t& end) const {
    int32_t node = 0, best = -1;
    for (size_t k = i; k < text.size(); ++k) {
      auto it = edges_.find((static_cast<uint64_t>(node) << 8) | static_cast<uint8_t>(text[k]));
      if (it == edges_.end()) break;
      node = it->second;
      if (values_[node] >= 0) {
        best = values_[node];
        end = k + 1;
      }
    }
    return best;
  }

 private:
  std::unordered_map<uint64_t, int32_t> edges_;
  std::vector<int32_t> values_{-1};  // node 0 is the root
};

struct Added {
  std::string content;
  int32_t id = -1;
  bool single_word = false, lstrip = false, rstrip = false, normalized = true, special = false;
};

uint32_t last_char(std::string_view s) {
  size_t k = s.size() - 1;
  while (k > 0 && (static_cast<uint8_t>(s[k]) & 0xC0) == 0x80) --k;
  return utf8::decode(s, k);
}

class HfTokenizer final : public Vocab {
 public:
  HfTokenizer(std::string_view text, const std::string& name, std::string_view config, const std::string& config_name);

  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const override;
  std::string token_to_piece(int32_t id, bool special) const override;
  std::string decode(const std::vector<int32_t>& ids, bool special) const override;

 private:
  void read_added(const Ctx& c, const json& arr);
  void read_config(const Ctx& c, const json& cfg, bool no_post_processor);
  // tokenizers' find_matches: the splits of `text` by the added tokens in `trie`.
  void split_added(const Trie& trie, const std::string& text, bool at_start, bool parse_special,
                   std::vector<hf::Piece>& out) const;
  void check_id(int32_t id) const {
    if (id < 0 || id >= n_vocab())
      throw Error("token id " + std::to_string(id) + " is outside the vocabulary (" + std::to_string(n_vocab()) + " tokens)");
  }

  std::unique_ptr<hf::Model> model_impl_;
  std::unique_ptr<hf::Normalizer> normalizer_;
  std::unique_ptr<hf::PreTokenizer> pre_tokenizer_;
  std::unique_ptr<hf::PostProcessor> post_;
  std::unique_ptr<hf::Decoder> decoder_;
  std::vector<Added> added_;
  Trie raw_trie_, norm_trie_;            // values: index into added_
  std::vector<std::string> dec_text_;    // per id: the token as the decoder sees it
  std::vector<uint8_t> present_, skip_;  // per id: has a token; is an added special token
  std::vector<std::string> pieces_;      // per id: token_to_piece
};

HfTokenizer::HfTokenizer(std::string_view text, const std::string& name, std::string_view config,
                         const std::string& config_name) {
  where_ = name + ": ";
  const Ctx c(name);
  const json j = hf::parse_json(text, name);
  c.object(j, "");
  model_impl_ = hf::make_model(c, c.at(j, "", "model"), "model");
  model_ = model_impl_->type();
  if (const json* n = c.find(j, "", "normalizer")) normalizer_ = hf::make_normalizer(c, *n, "normalizer");
  if (const json* p = c.find(j, "", "pre_tokenizer")) {
    pre_tokenizer_ = hf::make_pre_tokenizer(c, *p, "pre_tokenizer");
    pre_ = c.type(*p, "pre_tokenizer");
  }
  const json* pp = c.find(j, "", "post_processor");
  if (pp) post_ = hf::make_post_processor(c, *pp, "post_processor");
  if (const json* d = c.find(j, "", "decoder")) decoder_ = hf::make_decoder(c, *d, "decoder");

  // The id table: the model's vocabulary, then the added tokens.
  int64_t max_id = -1;
  for (const auto& [t, id] : model_impl_->vocab()) max_id = std::max<int64_t>(max_id, id);
  if (const json* a = c.find(j, "", "added_tokens")) read_added(c, c.array(*a, "added_tokens"));
  for (const Added& a : added_) max_id = std::max<int64_t>(max_id, a.id);
  if (max_id < 0) c.fail("model.vocab", "the vocabulary is empty");
  const auto n = static_cast<size_t>(max_id + 1);
  tokens_.assign(n, std::string());
  types_.assign(n, TokenType::UNUSED);
  present_.assign(n, 0);
  skip_.assign(n, 0);
  for (const auto& [t, id] : model_impl_->vocab()) {
    tokens_[id] = t;
    types_[id] = TokenType::NORMAL;
    present_[id] = 1;
    if (model_impl_->byte_fallback() && parse_byte_token(t) >= 0) types_[id] = TokenType::BYTE;
  }
  // The model's unk_token is UNKNOWN when it is also a special added token
  // (then decode skips it, as tokenizers does); otherwise it decodes as text.
  unk_ = model_impl_->unk();
  std::vector<std::string> specials;
  for (const Added& a : added_) {
    tokens_[a.id] = a.content;
    present_[a.id] = 1;
    types_[a.id] = a.special ? (a.id == unk_ ? TokenType::UNKNOWN : TokenType::CONTROL) : TokenType::USER_DEFINED;
    if (a.special) specials.push_back(a.content);
  }
  dec_text_ = tokens_;
  token_to_id_.reserve(n);
  for (size_t i = 0; i < n; ++i)
    if (present_[i]) token_to_id_.emplace(tokens_[i], static_cast<int32_t>(i));
  for (const Added& a : added_) token_to_id_[a.content] = a.id;  // added tokens first, as token_to_id does

  // Added tokens with normalized=true are matched in their normalized form,
  // and the decoder sees that form (added_vocabulary.rs normalized_cache).
  for (size_t i = 0; i < added_.size(); ++i) {
    Added& a = added_[i];
    if (!a.normalized) {
      raw_trie_.add(a.content, static_cast<int32_t>(i));
      continue;
    }
    std::string norm = a.content;
    bool at_start = true;
    if (normalizer_) normalizer_->normalize(norm, at_start);
    dec_text_[a.id] = norm;
    if (!norm.empty()) norm_trie_.add(norm, static_cast<int32_t>(i));
  }
  // tokenizers' decode skips every token whose text (as the decoder sees
  // it) is a special token's content.
  std::sort(specials.begin(), specials.end());
  for (size_t i = 0; i < n; ++i)
    if (present_[i] && std::binary_search(specials.begin(), specials.end(), dec_text_[i])) skip_[i] = 1;

  if (!config.empty()) {
    const Ctx cc(config_name);
    const json cfg = hf::parse_json(config, config_name);
    cc.object(cfg, "");
    read_config(cc, cfg, pp == nullptr);
  }
  if (!post_) post_ = hf::make_bos_eos_processor(-1, -1);

  // What add_special_tokens adds: the ids before and after the sequence.
  constexpr int32_t kMark = std::numeric_limits<int32_t>::min();
  std::vector<int32_t> probe{kMark};
  post_->process(probe);
  const size_t at = std::find(probe.begin(), probe.end(), kMark) - probe.begin();
  for (int32_t id : probe)
    if (id != kMark && (id < 0 || static_cast<size_t>(id) >= n))
      c.fail("post_processor", "token id " + std::to_string(id) + " is outside the vocabulary (" + std::to_string(n) + " tokens)");
  add_bos_ = at > 0;
  add_eos_ = at + 1 < probe.size();
  // Without a config, BOS/EOS are what the template adds; with one, what
  // it names (as transformers' bos_token_id / eos_token_id).
  if (config.empty() && add_bos_) bos_ = probe.front();
  if (config.empty() && add_eos_) eos_ = probe.back();
  find_eog();

  pieces_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    if (!present_[i]) continue;
    std::vector<std::string> one{dec_text_[i]};
    if (decoder_) decoder_->decode_chain(one, /*stream=*/true);
    else one[0].insert(0, 1, ' ');
    for (const std::string& s : one) pieces_[i] += s;
  }
}

void HfTokenizer::read_added(const Ctx& c, const json& arr) {
  // add_tokens: the id is the one the text already has (an earlier added
  // token, else the model's vocabulary), else the next free id after the
  // model's vocabulary; the "id" in the file is not used.
  const int64_t vocab_size = static_cast<int64_t>(model_impl_->vocab().size());
  int64_t next_id = vocab_size;
  std::unordered_map<std::string, size_t> index;  // content -> added_ index
  for (size_t i = 0; i < arr.size(); ++i) {
    const std::string p = "added_tokens[" + std::to_string(i) + "]";
    const json& o = c.object(arr[i], p);
    Added a;
    a.content = c.str(c.at(o, p, "content"), p + ".content");
    if (const json* idj = c.find(o, p, "id")) c.integer(*idj, p + ".id", 0, hf::kMaxTokenId);
    a.single_word = c.opt_bool(o, p, "single_word", false);
    a.lstrip = c.opt_bool(o, p, "lstrip", false);
    a.rstrip = c.opt_bool(o, p, "rstrip", false);
    a.special = c.opt_bool(o, p, "special", false);
    a.normalized = c.opt_bool(o, p, "normalized", !a.special);
    if (a.content.empty()) continue;
    if (auto it = index.find(a.content); it != index.end()) {
      a.id = added_[it->second].id;
      added_[it->second] = a;
      continue;
    }
    auto v = model_impl_->vocab().find(a.content);
    if (v != model_impl_->vocab().end()) {
      a.id = v->second;
    } else {
      if (next_id > hf::kMaxTokenId) c.fail(p, "too many added tokens");
      a.id = static_cast<int32_t>(next_id++);
    }
    index.emplace(a.content, added_.size());
    added_.push_back(std::move(a));
  }
}

void HfTokenizer::read_config(const Ctx& c, const json& cfg, bool no_post_processor) {
  if (const json* t = c.find(cfg, "", "chat_template")) {
    if (t->is_string()) {
      chat_template_ = t->get<std::string>();
      chat_templates_.emplace_back("default", chat_template_);
    } else {
      const json& arr = c.array(*t, "chat_template");
      for (size_t i = 0; i < arr.size(); ++i) {
        const std::string p = "chat_template[" + std::to_string(i) + "]";
        std::string nm = c.str(c.at(arr[i], p, "name"), p + ".name");
        std::string tm = c.str(c.at(arr[i], p, "template"), p + ".template");
        if (nm == "default") chat_template_ = tm;
        chat_templates_.emplace_back(std::move(nm), std::move(tm));
      }
    }
  }
  // bos_token etc.: a string, or an AddedToken object {"content": ...}.
  auto token = [&](const char* key) -> int32_t {
    const json* v = c.find(cfg, "", key);
    if (!v) return -1;
    const std::string text = v->is_object() ? c.str(c.at(*v, key, "content"), std::string(key) + ".content") : c.str(*v, key);
    auto id = find_token(text);
    if (!id) c.fail(key, "\"" + text + "\" is not a token of the vocabulary");
    return *id;
  };
  bos_ = token("bos_token");
  eos_ = token("eos_token");
  pad_ = token("pad_token");
  if (int32_t u = token("unk_token"); u >= 0) unk_ = u;
  // add_bos_token / add_eos_token: transformers 5 ignores them when there
  // is a tokenizer.json (the post_processor decides); without a
  // post_processor they say what to add, as transformers 4's Llama and Gemma
  // tokenizers and llama.cpp's converter read them.
  const json* ab = c.find(cfg, "", "add_bos_token");
  const json* ae = c.find(cfg, "", "add_eos_token");
  const bool add_bos = ab && c.boolean(*ab, "add_bos_token");
  const bool add_eos = ae && c.boolean(*ae, "add_eos_token");
  if (no_post_processor && (ab || ae))
    post_ = hf::make_bos_eos_processor(add_bos ? bos_ : -1, add_eos ? eos_ : -1);
}

void HfTokenizer::split_added(const Trie& trie, const std::string& text, bool at_start, bool parse_special,
                              std::vector<hf::Piece>& out) const {
  if (trie.empty()) {
    if (!text.empty()) out.push_back({text, -1, at_start});
    return;
  }
  size_t start_offset = 0;
  auto plain = [&](size_t b, size_t e) {
    if (e > b) out.push_back({text.substr(b, e - b), -1, at_start && b == 0});
  };
  for (size_t i = 0; i < text.size();) {
    size_t end = 0;
    const int32_t k = trie.longest_at(text, i, end);
    if (k < 0) {
      ++i;
      continue;
    }
    const Added& a = added_[k];
    size_t start = i, stop = end;
    i = end;  // the matcher goes on after the match, kept or not
    if (a.special && !parse_special) continue;
    if (a.single_word) {
      const bool start_ok = start == 0 || !(uni::props(last_char(std::string_view(text).substr(0, start))) & uni::kWord);
      size_t q = stop;
      const bool stop_ok = stop == text.size() || !(uni::props(utf8::decode(text, q)) & uni::kWord);
      if (!start_ok || !stop_ok) continue;
    }
    if (a.lstrip) {  // back over whitespace, not into what is already split off
      size_t b = start;
      while (b > start_offset) {
        size_t k2 = b - 1;
        while (k2 > 0 && (static_cast<uint8_t>(text[k2]) & 0xC0) == 0x80) --k2;
        size_t q = k2;
        if (!uni::is_whitespace(utf8::decode(text, q))) break;
        b = k2;
      }
      start = std::max(b, start_offset);
    }
    if (a.rstrip) {
      while (stop < text.size()) {
        size_t q = stop;
        if (!uni::is_whitespace(utf8::decode(text, q))) break;
        stop = q;
      }
    }
    plain(start_offset, start);
    out.push_back({std::string(), a.id, false});
    start_offset = stop;
  }
  plain(start_offset, text.size());
}

std::vector<int32_t> HfTokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  std::string clean;
  if (uni::sanitize(text, clean)) text = clean;
  const std::string input(text);
  std::vector<hf::Piece> first, pieces;
  split_added(raw_trie_, input, true, parse_special, first);
  for (hf::Piece& p : first) {
    if (p.id >= 0) {
      pieces.push_back(std::move(p));
      continue;
    }
    bool at_start = p.at_start;
    if (normalizer_) normalizer_->normalize(p.text, at_start);
    split_added(norm_trie_, p.text, at_start, parse_special, pieces);
  }
  if (pre_tokenizer_) pre_tokenizer_->pre_tokenize(pieces);
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  for (const hf::Piece& p : pieces) {
    if (p.id >= 0) ids.push_back(p.id);
    else if (!p.text.empty()) model_impl_->tokenize(p.text, ids);
  }
  if (add_special) post_->process(ids);
  return ids;
}

std::string HfTokenizer::token_to_piece(int32_t id, bool special) const {
  check_id(id);
  const TokenType t = types_[id];
  if (t == TokenType::CONTROL || t == TokenType::UNKNOWN) return special ? tokens_[id] : std::string();
  return pieces_[id];
}

std::string HfTokenizer::decode(const std::vector<int32_t>& ids, bool special) const {
  std::vector<std::string> toks;
  toks.reserve(ids.size());
  for (int32_t id : ids) {
    check_id(id);
    if (!present_[id] || (!special && skip_[id])) continue;
    toks.push_back(dec_text_[id]);
  }
  std::string out;
  if (decoder_) {
    if (toks.empty()) return out;
    decoder_->decode_chain(toks, /*stream=*/false);
    for (const std::string& s : toks) out += s;
    return out;
  }
  for (size_t i = 0; i < toks.size(); ++i) {
    if (i) out += ' ';
    out += toks[i];
  }
  return out;
}

std::string read_text(const std::string& path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) throw Error(path + ": cannot read: " + ec.message());
  if (size > hf::kMaxJsonBytes)
    throw Error(path + ": " + std::to_string(size) + " bytes is more than the " + std::to_string(hf::kMaxJsonBytes >> 20) +
                " MiB a tokenizer file may have");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

std::unique_ptr<Tokenizer> make_hf(std::string_view json, const std::string& name, std::string_view config,
                                   const std::string& config_name) {
  return std::make_unique<HfTokenizer>(json, name, config, config_name);
}

}  // namespace tok

std::unique_ptr<Tokenizer> Tokenizer::from_tokenizer_json(const std::string& path, const std::string& config_path) {
  const std::string text = tok::read_text(path);
  const std::string config = config_path.empty() ? std::string() : tok::read_text(config_path);
  if (!config_path.empty() && config.empty()) throw Error(config_path + ": empty file");
  return tok::make_hf(text, path, config, config_path);
}

}  // namespace kvad
