// SentencePiece BPE (`tokenizer.ggml.model = "llama"`).
//
// Source: SentencePiece's bpe_model.cc (merge the adjacent pair whose joined
// text is the vocabulary piece with the highest score, leftmost first among
// equal scores; characters no piece covers become <0xXX> byte tokens when the
// model has them, else the unknown token) and llama.cpp's
// llm_tokenizer_spm_session, whose conventions kvad follows: spaces become
// U+2581, and a space is put before each run of plain text that starts the
// input or follows a special token when `tokenizer.ggml.add_space_prefix`.
#include <algorithm>
#include <array>
#include <cstdio>

#include "base/error.h"
#include "io/gguf.h"
#include "tokenizer/vocab.h"

namespace kvad::tok {

namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK

// Bytes in the UTF-8 sequence a byte starts (llama.cpp's unicode_len_utf8:
// a stray continuation byte counts as one, 0xF8..0xFF as four).
inline size_t char_len(uint8_t c) {
  static constexpr std::array<uint8_t, 16> lut = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return lut[c >> 4];
}

class SpmTokenizer final : public Vocab {
 public:
  explicit SpmTokenizer(const gguf::File& f) {
    model_ = "llama";
    pre_ = f.get_string("tokenizer.ggml.pre", "default");
    VocabDefaults d;  // llama.cpp's defaults for SentencePiece vocabularies
    d.add_bos = true;
    d.add_eos = false;
    d.add_space_prefix = true;
    d.bos = 1;
    d.eos = 2;
    d.unk = 0;
    load_vocab(f, d);
    const size_t n = tokens_.size();

    scores_.assign(n, 0.0f);
    if (const gguf::Value* sv = f.find("tokenizer.ggml.scores")) {
      scores_ = sv->as_float_array();
      if (scores_.size() != n)
        throw Error(where_ + "tokenizer.ggml.scores has " + std::to_string(scores_.size()) +
                    " entries, tokenizer.ggml.tokens has " + std::to_string(n));
    }

    // Byte fallback: <0xXX>, else the byte itself as a token, else unknown.
    for (int b = 0; b < 256; ++b) {
      char name[7];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      auto it = token_to_id_.find(std::string_view(name, 6));
      if (it == token_to_id_.end()) it = token_to_id_.find(std::string_view(reinterpret_cast<const char*>(&b), 1));
      byte_tok_[b] = it != token_to_id_.end() ? it->second : -1;
      if (it != token_to_id_.end() && types_[it->second] == TokenType::BYTE) has_byte_tokens_ = true;
    }

    pieces_.resize(n);
    for (size_t i = 0; i < n; ++i) {
      const std::string& t = tokens_[i];
      switch (types_[i]) {
        case TokenType::NORMAL: {
          std::string& p = pieces_[i];
          for (size_t k = 0; k < t.size();) {
            if (t.compare(k, kSpace.size(), kSpace) == 0) {
              p += ' ';
              k += kSpace.size();
            } else {
              p += t[k++];
            }
          }
          break;
        }
        case TokenType::USER_DEFINED: pieces_[i] = t; break;
        case TokenType::BYTE: {
          int b = parse_byte_token(t);
          if (b >= 0) pieces_[i] = std::string(1, static_cast<char>(b));
          break;
        }
        default: break;
      }
    }
  }

  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const override {
    std::vector<int32_t> out;
    out.reserve(text.size() / 3 + 4);
    if (add_special && add_bos_ && bos_ >= 0) out.push_back(bos_);
    bool prev_special = true;  // the start of the input counts as after a special token
    std::string buf;
    for (const Fragment& fr : split_special(text, parse_special)) {
      if (fr.id >= 0) {
        out.push_back(fr.id);
        prev_special = true;
        continue;
      }
      buf.clear();
      if (add_space_prefix_ && prev_special) buf += kSpace;
      for (char c : fr.text) {
        if (c == ' ') buf += kSpace;
        else buf += c;
      }
      encode_text(buf, out);
      prev_special = false;
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
  struct Symbol {
    int32_t prev, next;
    uint32_t start, len;  // bytes in the escaped text; len 0 once merged away
  };
  struct Bigram {
    float score;
    int32_t left, right;
    uint32_t size;
    // Priority queue order: highest score first, then leftmost.
    bool operator<(const Bigram& o) const { return score != o.score ? score < o.score : left > o.left; }
  };

  void add_bigram(std::vector<Bigram>& heap, const std::vector<Symbol>& sy, std::string_view text, int32_t l,
                  int32_t r) const {
    if (l < 0 || r < 0) return;
    std::string_view joined = text.substr(sy[l].start, sy[l].len + sy[r].len);
    auto it = token_to_id_.find(joined);
    if (it == token_to_id_.end()) return;
    heap.push_back({scores_[it->second], l, r, static_cast<uint32_t>(joined.size())});
    std::push_heap(heap.begin(), heap.end());
  }

  void encode_text(std::string_view text, std::vector<int32_t>& out) const {
    thread_local std::vector<Symbol> sy;
    thread_local std::vector<Bigram> heap;
    sy.clear();
    heap.clear();
    for (size_t off = 0; off < text.size();) {
      size_t len = std::min(char_len(static_cast<uint8_t>(text[off])), text.size() - off);
      const auto idx = static_cast<int32_t>(sy.size());
      sy.push_back({idx - 1, off + len < text.size() ? idx + 1 : -1, static_cast<uint32_t>(off),
                    static_cast<uint32_t>(len)});
      off += len;
    }
    for (size_t i = 1; i < sy.size(); ++i)
      add_bigram(heap, sy, text, static_cast<int32_t>(i - 1), static_cast<int32_t>(i));
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end());
      const Bigram bg = heap.back();
      heap.pop_back();
      Symbol& L = sy[bg.left];
      Symbol& R = sy[bg.right];
      if (L.len == 0 || R.len == 0 || L.len + R.len != bg.size) continue;  // stale
      L.len += R.len;
      R.len = 0;
      L.next = R.next;
      if (R.next >= 0) sy[R.next].prev = bg.left;
      add_bigram(heap, sy, text, L.prev, bg.left);
      add_bigram(heap, sy, text, bg.left, L.next);
    }
    if (sy.empty()) return;
    for (int32_t i = 0; i >= 0; i = sy[i].next) {
      std::string_view piece = text.substr(sy[i].start, sy[i].len);
      auto it = token_to_id_.find(piece);
      if (it != token_to_id_.end()) {
        out.push_back(it->second);
        continue;
      }
      // No piece covers it: its bytes' tokens, or one unknown token.
      bool all_bytes = has_byte_tokens_;
      for (char c : piece) all_bytes = all_bytes && byte_tok_[static_cast<uint8_t>(c)] >= 0;
      if (all_bytes) {
        for (char c : piece) out.push_back(byte_tok_[static_cast<uint8_t>(c)]);
      } else if (unk_ >= 0) {
        out.push_back(unk_);
      }
    }
  }

  std::vector<float> scores_;
  std::array<int32_t, 256> byte_tok_{};
  bool has_byte_tokens_ = false;
  std::vector<std::string> pieces_;
};

}  // namespace

std::unique_ptr<Tokenizer> make_spm(const gguf::File& f) { return std::make_unique<SpmTokenizer>(f); }

}  // namespace kvad::tok
