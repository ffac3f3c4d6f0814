// tokenizer.json models: BPE, WordPiece, WordLevel, Unigram.
//
// BPE. Source: tokenizers/src/models/bpe/model.rs (merge_word: one symbol
// per character, continuing_subword_prefix / end_of_word_suffix, byte_fallback
// to <0xXX> tokens, unk_token with fuse_unk; ignore_merges) and word.rs
// (merge_all: lowest rank first, leftmost among equal ranks; a queued merge
// is stale when the pair now at its place no longer makes the same token).
// The same order as kvad's GGUF BPE (bpe.cpp), in token-id space: the merges
// of a tokenizer.json name vocabulary tokens only.
//
// WordPiece. Source: models/wordpiece/mod.rs: greedy longest match from the
// left, later pieces with the continuing_subword_prefix; a word with a part
// no piece covers, or longer than max_input_chars_per_word characters, is one
// unk_token.
#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <string>
#include <cmath>
#include <cstdio>

#include "base/error.h"
#include "base/utf8.h"
#include "tokenizer/hf_parts.h"

namespace kvad::tok::hf {

namespace {

void read_vocab(const Ctx& c, const json& j, const std::string& path, VocabMap& vocab, const ModelTables* tables) {
  const json& v = c.object(c.at(j, path, "vocab"), path + ".vocab");
  vocab.reserve(v.size() + (tables ? tables->in_vocab.size() : 0));
  for (auto it = v.begin(); it != v.end(); ++it) {
    const int64_t id = c.integer(it.value(), path + ".vocab[\"" + it.key() + "\"]", 0, kMaxTokenId);
    vocab[it.key()] = static_cast<int32_t>(id);
  }
  if (!tables || tables->in_vocab.empty()) return;
  if (!tables->tokens || tables->tokens->size() != tables->in_vocab.size() ||
      tables->in_vocab.size() > static_cast<size_t>(kMaxTokenId) + 1)
    c.fail(path + ".vocab", "the vocabulary flags do not match the token list");
  for (size_t i = 0; i < tables->in_vocab.size(); ++i)
    if (tables->in_vocab[i] != 0) vocab.emplace((*tables->tokens)[i], static_cast<int32_t>(i));
}

int32_t lookup(const VocabMap& v, std::string_view s) {
  auto it = v.find(s);
  return it == v.end() ? -1 : it->second;
}

class Bpe final : public Model {
 public:
  Bpe(const Ctx& c, const json& j, const std::string& path, const ModelTables* tables, std::vector<int32_t>* merges_out) {
    type_ = "BPE";
    read_vocab(c, j, path, vocab_, tables);
    byte_fallback_ = c.opt_bool(j, path, "byte_fallback", false);
    fuse_unk_ = c.opt_bool(j, path, "fuse_unk", false);
    ignore_merges_ = c.opt_bool(j, path, "ignore_merges", false);
    prefix_ = c.opt_str(j, path, "continuing_subword_prefix", "");
    suffix_ = c.opt_str(j, path, "end_of_word_suffix", "");
    if (const json* u = c.find(j, path, "unk_token")) {
      unk_text_ = c.str(*u, path + ".unk_token");
      has_unk_ = true;
      unk_ = lookup(vocab_, unk_text_);
    }
    if (byte_fallback_) {
      for (int b = 0; b < 256; ++b) {
        char name[8];
        std::snprintf(name, sizeof name, "<0x%02X>", b);
        byte_id_[b] = lookup(vocab_, name);
      }
    }
    // Merges: "a b" strings (lines starting "#version" skipped) or [a, b]
    // pairs; rank = position. A later duplicate wins (tokenizers collects
    // them into a hash map).
    const std::string mp = path + ".merges";
    const json& merges = c.array(c.at(j, path, "merges"), mp);
    merges_.reserve(merges.size() + (tables ? tables->merges.size() / 3 : 0));
    std::string a, b, joined;
    uint32_t rank = 0;
    for (size_t i = 0; i < merges.size(); ++i) {
      const json& m = merges[i];
      const std::string p = mp + "[" + std::to_string(i) + "]";
      if (m.is_string()) {
        const std::string& s = m.get_ref<const std::string&>();
        if (s.rfind("#version", 0) == 0) continue;
        const size_t sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
          c.fail(p, "\"" + s + "\" is not \"left right\"");
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      } else if (m.is_array()) {
        if (m.size() != 2) c.fail(p, "expected [left, right]");
        a = c.str(m[0], p + "[0]");
        b = c.str(m[1], p + "[1]");
      } else {
        c.fail(p, "expected \"left right\" or [left, right]");
      }
      const int32_t ai = lookup(vocab_, a), bi = lookup(vocab_, b);
      if (ai < 0) c.fail(p, "token \"" + a + "\" is not in the vocabulary");
      if (bi < 0) c.fail(p, "token \"" + b + "\" is not in the vocabulary");
      if (!prefix_.empty() && b.size() < prefix_.size()) c.fail(p, "\"" + b + "\" is shorter than continuing_subword_prefix");
      joined.assign(a).append(b, prefix_.size(), std::string::npos);
      const int32_t ji = lookup(vocab_, joined);
      if (ji < 0) c.fail(p, "merged token \"" + joined + "\" is not in the vocabulary");
      merges_.put(key(ai, bi), Merge{rank++, ji});
      if (merges_out) merges_out->insert(merges_out->end(), {ai, bi, ji});
    }
    if (tables && !tables->merges.empty()) {
      // Ids only: each must be one the vocabulary has (an id past it would
      // reach the model's embedding table).
      int64_t max_id = -1;
      for (const auto& [t, id] : vocab_) max_id = std::max<int64_t>(max_id, id);
      const std::vector<int64_t>& m = tables->merges;
      if (m.size() % 3 != 0) c.fail(mp, "the merge table's length is not a multiple of 3");
      for (size_t i = 0; i < m.size(); i += 3) {
        for (size_t k = 0; k < 3; ++k)
          if (m[i + k] < 0 || m[i + k] > max_id)
            c.fail(mp, "merge " + std::to_string(i / 3) + " names token id " + std::to_string(m[i + k]) +
                           ", outside the vocabulary");
        const auto ai = static_cast<int32_t>(m[i]), bi = static_cast<int32_t>(m[i + 1]);
        merges_.put(key(ai, bi), Merge{rank++, static_cast<int32_t>(m[i + 2])});
        if (merges_out) merges_out->insert(merges_out->end(), {ai, bi, static_cast<int32_t>(m[i + 2])});
      }
    }
  }

  void tokenize(std::string_view w, std::vector<int32_t>& out) const override {
    if (ignore_merges_) {
      if (int32_t id = lookup(vocab_, w); id >= 0) {
        out.push_back(id);
        return;
      }
    }
    thread_local std::vector<Symbol> sy;
    thread_local std::vector<Entry> heap;
    thread_local std::string s;
    sy.clear();
    heap.clear();
    int32_t pending_unk = -1;  // merge_word's `unk`: added before the next known character
    auto add = [&](int32_t id) {
      const auto n = static_cast<int32_t>(sy.size());
      if (n > 0) sy.back().next = n;
      sy.push_back({id, n - 1, -1, true});
    };
    for (size_t i = 0; i < w.size();) {
      const size_t b = i;
      (void)utf8::decode(w, i);
      s.assign(w.substr(b, i - b));
      if (b > 0 && !prefix_.empty()) s.insert(0, prefix_);
      if (i == w.size() && !suffix_.empty()) s += suffix_;
      if (int32_t id = lookup(vocab_, s); id >= 0) {
        if (pending_unk >= 0) add(pending_unk);
        pending_unk = -1;
        add(id);
        continue;
      }
      if (byte_fallback_) {
        bool all = true;
        for (char ch : s) all = all && byte_id_[static_cast<uint8_t>(ch)] >= 0;
        if (all) {
          for (char ch : s) add(byte_id_[static_cast<uint8_t>(ch)]);
          continue;
        }
      }
      if (has_unk_) {
        if (unk_ < 0) throw Error("tokenizer.json: unk_token \"" + unk_text_ + "\" is not in the vocabulary");
        if (pending_unk >= 0 && !fuse_unk_) add(pending_unk);
        pending_unk = unk_;
      }
    }
    if (pending_unk >= 0) add(pending_unk);
    if (sy.empty()) return;

    for (size_t i = 0; i + 1 < sy.size(); ++i) push(heap, sy[i].id, sy[i + 1].id, static_cast<int32_t>(i));
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end());
      const Entry top = heap.back();
      heap.pop_back();
      Symbol& cur = sy[top.pos];
      if (!cur.live || cur.next < 0) continue;
      Symbol& right = sy[cur.next];
      const Merge* mg = merges_.find(key(cur.id, right.id));
      if (!mg || mg->result != top.result) continue;  // stale
      cur.id = top.result;
      right.live = false;
      cur.next = right.next;
      if (right.next >= 0) sy[right.next].prev = top.pos;
      if (cur.prev >= 0) push(heap, sy[cur.prev].id, cur.id, cur.prev);
      if (cur.next >= 0) push(heap, cur.id, sy[cur.next].id, top.pos);
    }
    for (int32_t i = 0; i >= 0; i = sy[i].next) out.push_back(sy[i].id);
  }

 private:
  struct Merge {
    uint32_t rank;
    int32_t result;
  };
  struct Symbol {
    int32_t id, prev, next;
    bool live;
  };
  struct Entry {
    uint32_t rank;
    int32_t pos, result;
    // Max-heap order: lowest rank, then leftmost, on top.
    bool operator<(const Entry& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };

  static uint64_t key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  void push(std::vector<Entry>& heap, int32_t a, int32_t b, int32_t pos) const {
    const Merge* m = merges_.find(key(a, b));
    if (!m) return;
    heap.push_back({m->rank, pos, m->result});
    std::push_heap(heap.begin(), heap.end());
  }

  // Pair of ids -> merge, open addressing with linear probing: one array,
  // no node per merge (a 262k-token vocabulary has ~500k merges, and building
  // and freeing a node-based map of them was most of a tokenizer's load).
  class MergeTable {
   public:
    void reserve(size_t n) {
      size_t cap = 16;
      while (cap < 2 * n) cap <<= 1;
      slots_.assign(cap, Slot{kEmpty, {}});
    }
    /// Inserts or replaces (a later duplicate wins).
    void put(uint64_t k, Merge m) {
      if (2 * (used_ + 1) > slots_.size()) grow();
      Slot& s = slot(k);
      if (s.key == kEmpty) ++used_;
      s = Slot{k, m};
    }
    const Merge* find(uint64_t k) const {
      if (slots_.empty()) return nullptr;
      const Slot& s = const_cast<MergeTable*>(this)->slot(k);
      return s.key == kEmpty ? nullptr : &s.merge;
    }

   private:
    static constexpr uint64_t kEmpty = ~uint64_t{0};  // ids are < 2^22: no pair is all ones
    struct Slot {
      uint64_t key;
      Merge merge;
    };
    Slot& slot(uint64_t k) {
      const size_t mask = slots_.size() - 1;
      size_t i = static_cast<size_t>((k * 0x9E3779B97F4A7C15ull) >> 20) & mask;
      while (slots_[i].key != kEmpty && slots_[i].key != k) i = (i + 1) & mask;
      return slots_[i];
    }
    void grow() {
      std::vector<Slot> old = std::move(slots_);
      reserve(std::max<size_t>(old.size(), 8));
      used_ = 0;
      for (const Slot& s : old)
        if (s.key != kEmpty) put(s.key, s.merge);
    }
    std::vector<Slot> slots_;
    size_t used_ = 0;
  };

  MergeTable merges_;
  std::string prefix_, suffix_, unk_text_;
  bool has_unk_ = false, fuse_unk_ = false, ignore_merges_ = false;
  std::array<int32_t, 256> byte_id_{};
};

class WordPiece final : public Model {
 public:
  WordPiece(const Ctx& c, const json& j, const std::string& path, const ModelTables* tables) {
    type_ = "WordPiece";
    read_vocab(c, j, path, vocab_, tables);
    unk_text_ = c.opt_str(j, path, "unk_token", "[UNK]");
    unk_ = lookup(vocab_, unk_text_);
    prefix_ = c.opt_str(j, path, "continuing_subword_prefix", "##");
    if (const json* m = c.find(j, path, "max_input_chars_per_word"))
      max_chars_ = static_cast<size_t>(c.integer(*m, path + ".max_input_chars_per_word", 0, INT64_MAX));
    for (const auto& [t, id] : vocab_) max_len_ = std::max(max_len_, t.size());
  }

  void tokenize(std::string_view w, std::vector<int32_t>& out) const override {
    size_t n_chars = 0;
    for (char ch : w) n_chars += (static_cast<uint8_t>(ch) & 0xC0) != 0x80;
    if (n_chars > max_chars_) return push_unk(out);
    const size_t mark = out.size();
    thread_local std::string sub;
    for (size_t start = 0; start < w.size();) {
      // No piece is longer than the longest token: start the search there
      // (on a character boundary), so that a long word costs O(length x
      // longest token), not O(length^2).
      size_t end = w.size();
      if (end - start > max_len_) {
        end = start + max_len_;
        while (end > start && (static_cast<uint8_t>(w[end]) & 0xC0) == 0x80) --end;
      }
      int32_t found = -1;
      while (start < end) {
        sub.clear();
        if (start > 0) sub = prefix_;
        sub.append(w.substr(start, end - start));
        if ((found = lookup(vocab_, sub)) >= 0) break;
        // Drop the last character.
        --end;
        while (end > start && (static_cast<uint8_t>(w[end]) & 0xC0) == 0x80) --end;
      }
      if (found < 0) {
        out.resize(mark);
        return push_unk(out);
      }
      out.push_back(found);
      start = end;
    }
  }

 private:
  void push_unk(std::vector<int32_t>& out) const {
    if (unk_ < 0) throw Error("tokenizer.json: WordPiece unk_token \"" + unk_text_ + "\" is not in the vocabulary");
    out.push_back(unk_);
  }
  std::string unk_text_, prefix_;
  size_t max_chars_ = 100;
  size_t max_len_ = 0;  // bytes of the longest vocabulary entry
};

class WordLevel final : public Model {
 public:
  WordLevel(const Ctx& c, const json& j, const std::string& path, const ModelTables* tables) {
    type_ = "WordLevel";
    read_vocab(c, j, path, vocab_, tables);
    unk_text_ = c.opt_str(j, path, "unk_token", "<unk>");
    unk_ = lookup(vocab_, unk_text_);
  }
  void tokenize(std::string_view w, std::vector<int32_t>& out) const override {
    if (int32_t id = lookup(vocab_, w); id >= 0) return out.push_back(id);
    if (unk_ < 0) throw Error("tokenizer.json: WordLevel unk_token \"" + unk_text_ + "\" is not in the vocabulary");
    out.push_back(unk_);
  }

 private:
  std::string unk_text_;
};

// The double serde_json (without its float_roundtrip feature, as tokenizers
// builds it) reads for the number whose shortest text is that of `v`: the
// decimal digits as a u64 significand, then one multiplication or division
// by 10^|exp| (serde_json de.rs f64_from_parts). That can differ from the
// correctly rounded value nlohmann reads by an ulp, and Unigram's Viterbi
// breaks exact ties on those bits, so the scores are read the same way.
double serde_f64(double v) {
  if (!std::isfinite(v) || v == 0.0) return v;
  static const std::vector<double> pow10 = [] {
    std::vector<double> p(309);
    for (int i = 0; i <= 308; ++i) p[static_cast<size_t>(i)] = std::strtod(("1e" + std::to_string(i)).c_str(), nullptr);
    return p;
  }();
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);  // the shortest text that reads back as v
  const std::string_view t(buf, static_cast<size_t>(r.ptr - buf));
  size_t i = 0;
  const bool neg = t[i] == '-';
  if (neg) ++i;
  uint64_t sig = 0;
  int exp = 0;
  bool frac = false;
  for (; i < t.size() && t[i] != 'e'; ++i) {
    if (t[i] == '.') {
      frac = true;
      continue;
    }
    if (sig > (UINT64_MAX - 9) / 10) return v;  // beyond what a shortest text holds
    sig = sig * 10 + static_cast<uint64_t>(t[i] - '0');
    if (frac) --exp;
  }
  if (i < t.size()) exp += std::atoi(std::string(t.substr(i + 1)).c_str());
  double f = static_cast<double>(sig);
  const int a = exp < 0 ? -exp : exp;
  if (a > 308) return v;  // serde's loop over 1e308 steps: not reached by scores
  f = exp >= 0 ? f * pow10[static_cast<size_t>(a)] : f / pow10[static_cast<size_t>(a)];
  return neg ? -f : f;
}

// Unigram (Kudo 2018, "Subword Regularization"). Source:
// tokenizers/src/models/unigram/model.rs (encode_optimized): Viterbi over
// the word's characters; at each start, every vocabulary piece that is a
// prefix of the rest, shortest first, replaces the best path to its end
// only when its score is strictly higher; a character no one-character
// piece covers is unk with score min_score - 10. Consecutive unks are fused
// (Unigram always fuses), and a fused unk's text becomes <0xXX> byte tokens
// when byte_fallback is on and every byte has one, else unk_id.
class Unigram final : public Model {
 public:
  Unigram(const Ctx& c, const json& j, const std::string& path) {
    type_ = "Unigram";
    byte_fallback_ = c.opt_bool(j, path, "byte_fallback", false);
    const std::string vp = path + ".vocab";
    const json& v = c.array(c.at(j, path, "vocab"), vp);
    if (v.size() > static_cast<size_t>(kMaxTokenId) + 1) c.fail(vp, "more than " + std::to_string(kMaxTokenId + 1) + " pieces");
    scores_.reserve(v.size());
    vocab_.reserve(v.size());
    min_score_ = 0.0;
    for (size_t i = 0; i < v.size(); ++i) {
      const std::string ip = vp + "[" + std::to_string(i) + "]";
      const json& e = c.array(v[i], ip);
      if (e.size() != 2 || !e[1].is_number()) c.fail(ip, "expected [piece, score]");
      const std::string piece = c.str(e[0], ip + "[0]");
      if (piece.empty()) c.fail(ip + "[0]", "an empty piece");
      const double score = serde_f64(e[1].get<double>());
      if (!std::isfinite(score)) c.fail(ip + "[1]", "the score is not a finite number");
      vocab_[piece] = static_cast<int32_t>(i);  // a later duplicate wins, as tokenizers' map does
      scores_.push_back(score);
      max_len_ = std::max(max_len_, piece.size());
      min_score_ = i == 0 ? score : std::min(min_score_, score);
    }
    if (const json* u = c.find(j, path, "unk_id")) {
      unk_ = static_cast<int32_t>(c.integer(*u, path + ".unk_id", 0, static_cast<int64_t>(v.size()) - 1));
    }
    if (byte_fallback_) {
      for (int b = 0; b < 256; ++b) {
        char name[8];
        std::snprintf(name, sizeof name, "<0x%02X>", b);
        byte_id_[b] = lookup(vocab_, name);
      }
    }
  }

  void tokenize(std::string_view w, std::vector<int32_t>& out) const override {
    constexpr double kUnkPenalty = 10.0;
    constexpr int32_t kUnkNode = -1;  // an unknown character (no piece covers it)
    const double unk_score = min_score_ - kUnkPenalty;
    struct Node {
      int32_t id = -1;       // -1: unk
      size_t start = 0;
      double score = 0.0;
      bool set = false;
    };
    std::vector<Node> best(w.size() + 1);
    best[0].set = true;
    size_t pos = 0;
    while (pos < w.size()) {
      // A byte that starts no sequence counts as one character (never 0: the loop advances).
      const size_t lead = static_cast<size_t>(utf8::seq_len(static_cast<uint8_t>(w[pos])));
      const size_t mblen = std::min(std::max<size_t>(lead, 1), w.size() - pos);
      const double here = best[pos].score;
      bool single = false;
      for (size_t len = 1; len <= std::min(max_len_, w.size() - pos); ++len) {
        auto it = vocab_.find(w.substr(pos, len));
        if (it == vocab_.end()) continue;
        Node& t = best[pos + len];
        const double cand = here + scores_[static_cast<size_t>(it->second)];
        if (!t.set || cand > t.score) t = {it->second, pos, cand, true};
        if (len == mblen) single = true;
      }
      if (!single) {
        Node& t = best[pos + mblen];
        const double cand = here + unk_score;
        if (!t.set || cand > t.score) t = {kUnkNode, pos, cand, true};
      }
      pos += mblen;
    }
    // Back from the end; fuse runs of unk.
    struct Piece {
      int32_t id;
      size_t b, e;
    };
    // tokenizers fuses by id: a vocabulary piece whose id is unk_id (the
    // text "<unk>" read as plain text) fuses with unknown characters too.
    auto is_unk = [&](int32_t id) { return id == kUnkNode || (unk_ >= 0 && id == unk_); };
    std::vector<Piece> rev;
    for (size_t end = w.size(); end > 0;) {
      const Node& n = best[end];
      if (is_unk(n.id) && !rev.empty() && is_unk(rev.back().id)) {
        rev.back().b = n.start;
        rev.back().id = kUnkNode;
      } else {
        rev.push_back({n.id, n.start, end});
      }
      end = n.start;
    }
    for (auto it = rev.rbegin(); it != rev.rend(); ++it) {
      if (it->id != kUnkNode) {
        out.push_back(it->id);
        continue;
      }
      const std::string_view text = w.substr(it->b, it->e - it->b);
      if (int32_t id = lookup(vocab_, text); id >= 0) {  // tokenizers looks the fused text up first
        out.push_back(id);
        continue;
      }
      if (byte_fallback_) {
        bool all = true;
        for (unsigned char ch : text) all = all && byte_id_[ch] >= 0;
        if (all) {
          for (unsigned char ch : text) out.push_back(byte_id_[ch]);
          continue;
        }
      }
      if (unk_ < 0) throw Error("tokenizer.json: Unigram met an unknown character but has no unk_id");
      out.push_back(unk_);
    }
  }

 private:
  std::vector<double> scores_;
  double min_score_ = 0.0;
  size_t max_len_ = 0;
  int32_t byte_id_[256] = {};
};

}  // namespace

std::unique_ptr<Model> make_model(const Ctx& c, const json& j, const std::string& path, const ModelTables* tables,
                                  std::vector<int32_t>* merges_out) {
  c.object(j, path);
  // Old files have no "type": tokenizers then tries each model in turn.
  std::string t;
  if (c.find(j, path, "type")) t = c.type(j, path);
  else if (j.contains("merges")) t = "BPE";
  else if (j.contains("vocab") && j["vocab"].is_array()) t = "Unigram";
  else if (j.contains("continuing_subword_prefix") || j.contains("max_input_chars_per_word")) t = "WordPiece";
  else t = "WordLevel";
  if (t == "BPE") return std::make_unique<Bpe>(c, j, path, tables, merges_out);
  if (t == "WordPiece") return std::make_unique<WordPiece>(c, j, path, tables);
  if (t == "WordLevel") return std::make_unique<WordLevel>(c, j, path, tables);
  if (t == "Unigram") return std::make_unique<Unigram>(c, j, path);
  c.fail(path + ".type", "model \"" + t + "\" is not supported (supported: BPE, WordPiece, WordLevel, Unigram)");
}

}  // namespace kvad::tok::hf
