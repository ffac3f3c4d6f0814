// Byte-level BPE (`tokenizer.ggml.model = "gpt2"`).
//
// Source: GPT-2's encoder.py (bytes_to_unicode, merges applied by rank) and
// llama.cpp's llm_tokenizer_bpe_session (merge order: lowest rank first, the
// leftmost pair among equal ranks; a piece that is not a vocabulary token
// falls back to its bytes' tokens).
//
// Text -> special-token fragments -> invalid UTF-8 replaced by U+FFFD ->
// pre-tokenizer pieces (regexes named by
// `tokenizer.ggml.pre`) -> each piece's bytes mapped to GPT-2's printable
// code points, one symbol per byte -> merges -> token ids.
#include <algorithm>
#include <array>
#include <queue>

#include "base/error.h"
#include "base/utf8.h"
#include "io/gguf.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/vocab.h"

namespace kvad::tok {

namespace {

/// GPT-2's bytes_to_unicode(): printable bytes map to themselves, the rest
/// to U+0100 + n in byte order. Returns the code point per byte.
std::array<uint32_t, 256> bytes_to_unicode() {
  std::array<uint32_t, 256> cp{};
  uint32_t n = 0;
  for (uint32_t b = 0; b < 256; ++b) {
    bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    cp[b] = printable ? b : 256 + n++;
  }
  return cp;
}

class BpeTokenizer final : public Vocab {
 public:
  BpeTokenizer(const gguf::File& f, const PreTokenizerSpec& spec)
      : splitter_(spec.regexes), ignore_merges_(spec.ignore_merges) {
    model_ = "gpt2";
    pre_ = f.get_string("tokenizer.ggml.pre", "default");
    VocabDefaults d;
    d.add_bos = spec.add_bos;
    load_vocab(f, d);
    const int32_t n_vocab = static_cast<int32_t>(tokens_.size());
    n_sym_ = n_vocab;

    // Byte <-> code point tables.
    const std::array<uint32_t, 256> cps = bytes_to_unicode();
    for (int b = 0; b < 256; ++b) {
      utf8::append(byte_text_[b], cps[b]);
      cp_to_byte_[cps[b]] = static_cast<int16_t>(b);
    }
    for (int b = 0; b < 256; ++b) byte_sym_[b] = symbol_id(byte_text_[b]);

    // Merges: "left right", rank = index. The first occurrence of a pair wins.
    const gguf::Value* mv = f.find("tokenizer.ggml.merges");
    if (!mv) throw Error(where_ + "BPE vocabulary without merges (key tokenizer.ggml.merges is missing)");
    const std::vector<std::string>& merges = mv->as_string_array();
    merges_.reserve(merges.size() * 2);
    std::string joined;
    for (size_t i = 0; i < merges.size(); ++i) {
      const std::string& m = merges[i];
      size_t sp = m.find(' ', 1);
      if (sp == std::string::npos || sp + 1 >= m.size())
        throw Error(where_ + "tokenizer.ggml.merges[" + std::to_string(i) + "] = \"" + m + "\" is not \"left right\"");
      std::string_view l(m.data(), sp), r(m.data() + sp + 1, m.size() - sp - 1);
      joined.assign(l).append(r);
      const int32_t li = symbol_id(l), ri = symbol_id(r), ji = symbol_id(joined);
      merges_.try_emplace(pair_key(li, ri), Merge{static_cast<int32_t>(i), ji});
    }

    // Pieces for decoding: NORMAL tokens are byte-encoded text.
    pieces_.resize(tokens_.size());
    for (size_t i = 0; i < tokens_.size(); ++i) {
      const std::string& t = tokens_[i];
      switch (types_[i]) {
        case TokenType::NORMAL: {
          std::string& p = pieces_[i];
          for (size_t k = 0; k < t.size();) {
            size_t start = k;
            uint32_t cp = utf8::decode(t, k);
            auto it = cp < cp_to_byte_.size() ? cp_to_byte_[cp] : int16_t{-1};
            if (it >= 0) p += static_cast<char>(it);
            else p.append(t, start, k - start);  // not a byte symbol: keep the text
          }
          break;
        }
        case TokenType::USER_DEFINED: pieces_[i] = t; break;
        case TokenType::BYTE: {
          int b = parse_byte_token(t);
          if (b >= 0) pieces_[i] = std::string(1, static_cast<char>(b));
          break;
        }
        default: break;  // CONTROL/UNKNOWN: text only when asked; UNUSED/UNDEFINED: nothing
      }
    }
  }

  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const override {
    std::vector<int32_t> out;
    out.reserve(text.size() / 3 + 4);
    if (add_special && add_bos_ && bos_ >= 0) out.push_back(bos_);
    for (const Fragment& fr : split_special(text, parse_special)) {
      if (fr.id >= 0) out.push_back(fr.id);
      else encode_text(fr.text, out);
    }
    if (add_special && add_eos_ && eos_ >= 0) out.push_back(eos_);
    return out;
  }

  std::string token_to_piece(int32_t id, bool special) const override {
    if (id < 0 || id >= n_vocab())
      throw Error("token id " + std::to_string(id) + " is outside the vocabulary (" + std::to_string(n_vocab()) + " tokens)");
    TokenType t = types_[id];
    if (t == TokenType::CONTROL || t == TokenType::UNKNOWN) return special ? tokens_[id] : std::string();
    return pieces_[id];
  }

 private:
  struct Merge {
    int32_t rank;
    int32_t result;  // symbol id of the joined text
  };
  struct Symbol {
    int32_t id;      // symbol id: a vocabulary id, or >= n_vocab for text outside it
    int32_t prev, next;
    uint32_t start, len;  // bytes of the piece it covers
  };
  struct Bigram {
    int32_t rank, left, right, lid, rid, result;
    // Priority queue order: lowest rank first, then leftmost.
    bool operator<(const Bigram& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };

  static uint64_t pair_key(int32_t l, int32_t r) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(l)) << 32) | static_cast<uint32_t>(r);
  }

  // Vocabulary id of a text, or an extra id for text outside the vocabulary
  // (merges may name such text; it then falls back to bytes when output).
  int32_t symbol_id(std::string_view s) {
    auto it = token_to_id_.find(s);
    if (it != token_to_id_.end()) return it->second;
    auto [e, inserted] = extra_.try_emplace(std::string(s), n_sym_);
    if (inserted) ++n_sym_;
    return e->second;
  }

  // The text as code points, written back as UTF-8: a byte that starts no
  // valid sequence becomes U+FFFD and an overlong sequence its shortest form
  // (llama.cpp's unicode_cpts_from_utf8 and re-encoding do the same; HF
  // tokenizers only ever see valid text). Returns false when nothing changed.
  static bool sanitize(std::string_view text, std::string& out) {
    size_t i = 0;
    while (i < text.size() && static_cast<uint8_t>(text[i]) < 0x80) ++i;  // ASCII prefix
    bool changed = false;
    std::string enc;
    for (size_t k = i; k < text.size();) {
      const size_t start = k;
      const uint32_t cp = utf8::decode(text, k);
      if (k - start == 1 && cp < 0x80) {
        if (changed) out += static_cast<char>(cp);
        continue;
      }
      enc.clear();
      utf8::append(enc, cp);
      if (!changed && enc != text.substr(start, k - start)) {
        out.assign(text.substr(0, start));
        changed = true;
      }
      if (changed) out += enc;
    }
    return changed;
  }

  void encode_text(std::string_view text, std::vector<int32_t>& out) const {
    thread_local std::vector<std::pair<size_t, size_t>> words;
    thread_local std::string clean;
    if (sanitize(text, clean)) text = clean;
    splitter_.split(text, words);
    for (const auto& [b, e] : words) encode_word(text.substr(b, e - b), out);
  }

  void add_bigram(std::vector<Bigram>& heap, const std::vector<Symbol>& sy, int32_t l, int32_t r) const {
    if (l < 0 || r < 0) return;
    auto it = merges_.find(pair_key(sy[l].id, sy[r].id));
    if (it == merges_.end()) return;
    heap.push_back({it->second.rank, l, r, sy[l].id, sy[r].id, it->second.result});
    std::push_heap(heap.begin(), heap.end());
  }

  void emit(const Symbol& s, std::string_view word, std::vector<int32_t>& out) const {
    if (s.id < n_vocab()) {
      out.push_back(s.id);
      return;
    }
    for (uint32_t k = 0; k < s.len; ++k) {  // not a token: its bytes' tokens
      int32_t b = byte_sym_[static_cast<uint8_t>(word[s.start + k])];
      if (b < n_vocab()) out.push_back(b);
    }
  }

  void encode_word(std::string_view word, std::vector<int32_t>& out) const {
    const size_t n = word.size();
    if (n == 0) return;
    if (ignore_merges_) {
      thread_local std::string enc;
      enc.clear();
      for (char c : word) enc += byte_text_[static_cast<uint8_t>(c)];
      auto it = token_to_id_.find(enc);
      if (it != token_to_id_.end()) {
        out.push_back(it->second);
        return;
      }
    }
    thread_local std::vector<Symbol> sy;
    thread_local std::vector<Bigram> heap;
    sy.clear();
    heap.clear();
    for (size_t i = 0; i < n; ++i)
      sy.push_back({byte_sym_[static_cast<uint8_t>(word[i])], static_cast<int32_t>(i) - 1,
                    i + 1 < n ? static_cast<int32_t>(i + 1) : -1, static_cast<uint32_t>(i), 1});
    for (size_t i = 1; i < n; ++i) add_bigram(heap, sy, static_cast<int32_t>(i - 1), static_cast<int32_t>(i));
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end());
      const Bigram bg = heap.back();
      heap.pop_back();
      Symbol& L = sy[bg.left];
      Symbol& R = sy[bg.right];
      // Stale: either side was merged since this pair was queued.
      if (L.len == 0 || R.len == 0 || L.id != bg.lid || R.id != bg.rid || L.next != bg.right) continue;
      L.id = bg.result;
      L.len += R.len;
      R.len = 0;
      L.next = R.next;
      if (R.next >= 0) sy[R.next].prev = bg.left;
      add_bigram(heap, sy, L.prev, bg.left);
      add_bigram(heap, sy, bg.left, L.next);
    }
    for (int32_t i = 0; i >= 0; i = sy[i].next) emit(sy[i], word, out);
  }

  RegexSplitter splitter_;
  bool ignore_merges_;
  int32_t n_sym_ = 0;
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> extra_;
  std::unordered_map<uint64_t, Merge> merges_;
  std::array<std::string, 256> byte_text_;     // byte -> its code point as UTF-8
  std::array<int32_t, 256> byte_sym_{};        // byte -> symbol id
  std::array<int16_t, 324> cp_to_byte_ = [] {  // code point (< 324) -> byte, -1 when none
    std::array<int16_t, 324> a{};
    a.fill(-1);
    return a;
  }();
  std::vector<std::string> pieces_;
};

}  // namespace

std::unique_ptr<Tokenizer> make_bpe(const gguf::File& f) {
  const gguf::Value* pv = f.find("tokenizer.ggml.pre");
  // A file without the key: llama.cpp uses the "default" pre-tokenizer.
  const std::string pre = pv ? pv->as_string() : "default";
  std::optional<PreTokenizerSpec> spec = pre_tokenizer_spec(pre);
  if (!spec)
    throw Error(f.path() + ": tokenizer.ggml.pre = \"" + pre + "\" is not a supported pre-tokenizer (supported: " +
                supported_pre_tokenizers() + ")");
  return std::make_unique<BpeTokenizer>(f, *spec);
}

}  // namespace kvad::tok
