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
#include <cctype>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "base/error.h"
#include "base/utf8.h"
#include "hub/sha256.h"
#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "tokenizer/hf_parts.h"
#include "tokenizer/hf_pre_hash.h"
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
  /// `j`: tokenizer.json parsed; `tables`, `merges_out`: as make_model's.
  HfTokenizer(const json& j, const std::string& name, std::string_view config, const std::string& config_name,
              const hf::ModelTables* tables = nullptr, std::vector<int32_t>* merges_out = nullptr);
  /// The GGUF keys of this tokenizer (hf_gguf_keys): `j` is the tokenizer.json
  /// it was built from, `merges` what make_model's merges_out collected.
  std::vector<gguf::Value> gguf_keys(const json& j, std::string_view config, const std::vector<int32_t>& merges) const;

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

HfTokenizer::HfTokenizer(const json& j, const std::string& name, std::string_view config, const std::string& config_name,
                         const hf::ModelTables* tables, std::vector<int32_t>* merges_out) {
  where_ = name + ": ";
  const Ctx c(name);
  c.object(j, "");
  model_impl_ = hf::make_model(c, c.at(j, "", "model"), "model", tables, merges_out);
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

// ---- GGUF keys ------------------------------------------------------------

// A part of type `type` at `j` or inside its Sequence.
const json* find_part(const json& j, const char* type) {
  if (!j.is_object()) return nullptr;
  auto t = j.find("type");
  if (t != j.end() && t->is_string() && *t == type) return &j;
  for (const char* list : {"pretokenizers", "normalizers", "decoders", "processors"}) {
    auto l = j.find(list);
    if (l == j.end() || !l->is_array()) continue;
    for (const json& e : *l)
      if (const json* p = find_part(e, type)) return p;
  }
  return nullptr;
}

// convert_hf_to_gguf.py does_token_look_special: added tokens some models
// leave unmarked that ought to be control tokens.
bool looks_special(std::string_view t) {
  if (t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]") return true;
  if (t.starts_with("<|") && t.ends_with("|>")) return true;
  if (t.starts_with("<\xEF\xBD\x9C") && t.ends_with("\xEF\xBD\x9C>")) return true;  // <｜ ... ｜>
  return t.starts_with("<unused") && t.ends_with(">");
}

std::string replace_all(std::string s, std::string_view from, std::string_view to) {
  for (size_t p = 0; (p = s.find(from, p)) != std::string::npos; p += to.size()) s.replace(p, from.size(), to);
  return s;
}

std::vector<gguf::Value> HfTokenizer::gguf_keys(const json& j, std::string_view config,
                                                const std::vector<int32_t>& merges) const {
  using gguf::ValueType;
  static const std::string kSpace = "\xE2\x96\x81";  // U+2581
  const size_t n = tokens_.size();
  const std::string& mt = model_impl_->type();
  const json* pre = j.contains("pre_tokenizer") ? &j["pre_tokenizer"] : nullptr;
  // Which of llama.cpp's tokenizers runs this one: byte-level BPE ("gpt2"),
  // SentencePiece-style BPE with byte fallback ("llama", scores standing in
  // for merge ranks), WordPiece ("bert"); anything else has no llama.cpp
  // counterpart here ("none": llama.cpp loads the file without a vocabulary).
  std::string kind = "none";
  if (mt == "BPE" && pre && find_part(*pre, "ByteLevel")) kind = "gpt2";
  else if (mt == "BPE" && model_impl_->byte_fallback()) kind = "llama";
  else if (mt == "WordPiece") kind = "bert";

  std::vector<const Added*> added(n, nullptr);
  for (const Added& a : added_) added[a.id] = &a;
  // The token list and types as the converter writes them (get_vocab_base,
  // _create_vocab_sentencepiece, BertModel.set_vocab's phantom space).
  std::vector<std::string> toks(n);
  std::vector<int64_t> types(n);
  for (size_t i = 0; i < n; ++i) {
    TokenType ty = TokenType::NORMAL;
    std::string t = tokens_[i];
    if (!present_[i]) {
      t = "[PAD" + std::to_string(i) + "]";
      ty = TokenType::UNUSED;
    } else if (const Added* a = added[i]) {
      if (a->special || looks_special(a->content)) {
        ty = static_cast<int32_t>(i) == unk_ && kind == "llama" ? TokenType::UNKNOWN : TokenType::CONTROL;
      } else {
        ty = TokenType::USER_DEFINED;
        t = replace_all(t, kSpace, " ");  // the converter pre-normalizes user-defined spaces
      }
    } else if (kind == "llama" && types_[i] == TokenType::BYTE) {
      ty = TokenType::BYTE;
    } else if (kind == "llama" && static_cast<int32_t>(i) == unk_) {
      ty = TokenType::UNKNOWN;
    }
    if (kind == "bert" && ty != TokenType::CONTROL) t = t.starts_with("##") ? t.substr(2) : kSpace + t;
    toks[i] = std::move(t);
    types[i] = static_cast<int64_t>(ty);
  }

  std::vector<gguf::Value> out;
  out.push_back(gguf::make_string("tokenizer.ggml.model", kind));
  if (kind == "gpt2" || kind == "bert") {
    // The converter's name for the pre-tokenizer: the hash of the ids of its
    // check text ("default" when it does not know it, as llama.cpp then reads).
    const std::vector<int32_t> ids = encode(kPreCheckText, true, true);
    std::string list = "[";
    for (size_t i = 0; i < ids.size(); ++i) list += (i ? ", " : "") + std::to_string(ids[i]);
    list += "]";
    hub::Sha256 h;
    h.update(list.data(), list.size());
    const char* name = llama_cpp_pre_name(h.hex_digest());
    out.push_back(gguf::make_string("tokenizer.ggml.pre", name ? name : "default"));
  } else if (kind == "llama") {
    out.push_back(gguf::make_string("tokenizer.ggml.pre", "default"));
  }
  out.push_back(gguf::make_string_array("tokenizer.ggml.tokens", toks));
  if (kind == "llama") {
    // llama.cpp's SentencePiece merges the adjacent pair whose merged token
    // scores highest; a BPE merges the pair of lowest rank. The score of a
    // token is minus the rank of the first merge that makes it; tokens no
    // merge makes score below every merge.
    const auto n_merges = static_cast<double>(merges.size() / 3);
    std::vector<double> scores(n, -n_merges - 1);
    std::vector<uint8_t> made(n, 0);
    for (size_t k = 0; k < merges.size(); k += 3) {
      const auto r = static_cast<size_t>(merges[k + 2]);
      if (!made[r]) scores[r] = -static_cast<double>(k / 3);
      made[r] = 1;
    }
    for (size_t i = 0; i < n; ++i)
      if (types[i] != static_cast<int64_t>(TokenType::NORMAL)) scores[i] = 0.0;
    out.push_back(gguf::make_float_array("tokenizer.ggml.scores", ValueType::FLOAT32, scores));
  }
  out.push_back(gguf::make_int_array("tokenizer.ggml.token_type", ValueType::INT32, types));
  if (kind == "gpt2") {
    std::vector<std::string> m;
    m.reserve(merges.size() / 3);
    for (size_t k = 0; k < merges.size(); k += 3) m.push_back(tokens_[merges[k]] + " " + tokens_[merges[k + 1]]);
    out.push_back(gguf::make_string_array("tokenizer.ggml.merges", std::move(m)));
  }
  auto id_key = [&](const char* key, int32_t id) {
    if (id >= 0) out.push_back(gguf::make_uint(key, ValueType::UINT32, static_cast<uint64_t>(id)));
  };
  id_key("tokenizer.ggml.bos_token_id", bos_);
  id_key("tokenizer.ggml.eos_token_id", eos_);
  id_key("tokenizer.ggml.unknown_token_id", unk_);
  id_key("tokenizer.ggml.padding_token_id", pad_);
  out.push_back(gguf::make_bool("tokenizer.ggml.add_bos_token", add_bos_));
  out.push_back(gguf::make_bool("tokenizer.ggml.add_eos_token", add_eos_));
  if (kind == "llama") {
    // A leading U+2581 is added by a Prepend normalizer or a Metaspace
    // pre-tokenizer that prepends (llama.cpp's SentencePiece adds it when
    // this key says so, and by default when it is absent).
    bool prefix = false;
    if (j.contains("normalizer"))
      if (const json* p = find_part(j["normalizer"], "Prepend")) prefix = p->value("prepend", "") == kSpace;
    if (pre)
      if (const json* m = find_part(*pre, "Metaspace"))
        prefix = m->contains("prepend_scheme") ? m->value("prepend_scheme", "always") != "never"
                                               : m->value("add_prefix_space", true);
    out.push_back(gguf::make_bool("tokenizer.ggml.add_space_prefix", prefix));
  }
  std::vector<std::string> named;
  for (const auto& [name, tmpl] : chat_templates_) {
    if (name == "default") {
      out.push_back(gguf::make_string("tokenizer.chat_template", tmpl));
      continue;
    }
    std::string nm;
    for (char ch : name) nm += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
    if (nm.empty()) continue;
    out.push_back(gguf::make_string("tokenizer.chat_template." + nm, tmpl));
    named.push_back(nm);
  }
  if (!named.empty()) out.push_back(gguf::make_string_array("tokenizer.chat_templates", named));

  // kvad's own keys: the pipeline exactly as tokenizer.json has it, with the
  // model's vocabulary and merges held as the tables above (ModelTables), so
  // that reading it back builds this tokenizer without a large JSON parse.
  json jj = j;
  if (mt == "BPE" || mt == "WordPiece" || mt == "WordLevel") {
    std::vector<int64_t> in_vocab(n, 0);
    json rest = json::object();
    for (const auto& [text, id] : model_impl_->vocab()) {
      if (toks[id] == text && !in_vocab[id]) in_vocab[id] = 1;
      else rest[text] = id;
    }
    jj["model"]["vocab"] = std::move(rest);
    out.push_back(gguf::make_int_array(kKeyVocab, ValueType::INT8, std::move(in_vocab)));
    if (mt == "BPE") {
      jj["model"]["merges"] = json::array();
      out.push_back(gguf::make_int_array(kKeyMerges, ValueType::INT32, std::vector<int64_t>(merges.begin(), merges.end())));
    }
  }
  out.push_back(gguf::make_string(kKeyJson, jj.dump()));
  if (!config.empty()) {
    // read_config reads the special tokens and templates, not the
    // added_tokens_decoder (tokenizer.json's added_tokens say the same).
    json cfg = json::parse(config);
    cfg.erase("added_tokens_decoder");
    out.push_back(gguf::make_string(kKeyConfig, cfg.dump()));
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
  return std::make_unique<HfTokenizer>(hf::parse_json(json, name), name, config, config_name);
}

std::unique_ptr<Tokenizer> make_hf_tables(std::string_view json, const std::string& name, std::string_view config,
                                          const std::string& config_name, const hf::ModelTables& tables) {
  return std::make_unique<HfTokenizer>(hf::parse_json(json, name), name, config, config_name, &tables);
}

std::vector<gguf::Value> hf_gguf_keys(std::string_view json, const std::string& name, std::string_view config,
                                      const std::string& config_name) {
  const hf::json j = hf::parse_json(json, name);
  std::vector<int32_t> merges;
  const HfTokenizer t(j, name, config, config_name, nullptr, &merges);
  return t.gguf_keys(j, config, merges);
}

}  // namespace tok

std::unique_ptr<Tokenizer> Tokenizer::from_tokenizer_json(const std::string& path, const std::string& config_path) {
  const std::string text = tok::read_text(path);
  const std::string config = config_path.empty() ? std::string() : tok::read_text(config_path);
  if (!config_path.empty() && config.empty()) throw Error(config_path + ": empty file");
  return tok::make_hf(text, path, config, config_path);
}

std::vector<gguf::Value> tokenizer_json_file_gguf_keys(const std::string& path, const std::string& config_path) {
  const std::string text = tok::read_text(path);
  const std::string config = config_path.empty() ? std::string() : tok::read_text(config_path);
  if (!config_path.empty() && config.empty()) throw Error(config_path + ": empty file");
  return tok::hf_gguf_keys(text, path, config, config_path);
}

}  // namespace kvad
