// tokenizer.json pre-tokenizers. Source: tokenizers/src/pre_tokenizers/*.rs,
// NormalizedString::split (the five SplitDelimiterBehavior cases) and
// pattern.rs (how a regex or a character class becomes match events).
#include <algorithm>

#include "base/scratch.h"
#include "base/utf8.h"
#include "tokenizer/hf_parts.h"
#include "tokenizer/unicode.h"

namespace kvad::tok::hf {

namespace {

enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

struct Event {
  size_t b, e;
  bool match;
};
using Ranges = std::vector<std::pair<size_t, size_t>>;

Behavior parse_behavior(const Ctx& c, const json& j, const std::string& path) {
  const std::string s = c.str(j, path);
  if (s == "Removed") return Behavior::Removed;
  if (s == "Isolated") return Behavior::Isolated;
  if (s == "MergedWithPrevious") return Behavior::MergedWithPrevious;
  if (s == "MergedWithNext") return Behavior::MergedWithNext;
  if (s == "Contiguous") return Behavior::Contiguous;
  c.fail(path, "\"" + s + "\" is not a split behavior (Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous)");
}

// NormalizedString::split: events -> the ranges kept.
void apply(const std::vector<Event>& ev, Behavior bh, Ranges& out) {
  out.clear();
  bool prev = false;
  switch (bh) {
    case Behavior::Isolated:
      for (const Event& e : ev) out.emplace_back(e.b, e.e);
      break;
    case Behavior::Removed:
      for (const Event& e : ev)
        if (!e.match) out.emplace_back(e.b, e.e);
      break;
    case Behavior::Contiguous:
      for (const Event& e : ev) {
        if (e.match == prev && !out.empty()) out.back().second = e.e;
        else out.emplace_back(e.b, e.e);
        prev = e.match;
      }
      break;
    case Behavior::MergedWithPrevious:
      for (const Event& e : ev) {
        if (e.match && !prev && !out.empty()) out.back().second = e.e;
        else out.emplace_back(e.b, e.e);
        prev = e.match;
      }
      break;
    case Behavior::MergedWithNext:
      for (size_t k = ev.size(); k-- > 0;) {
        const Event& e = ev[k];
        if (e.match && !prev && !out.empty()) out.back().first = e.b;
        else out.emplace_back(e.b, e.e);
        prev = e.match;
      }
      std::reverse(out.begin(), out.end());
      break;
  }
}

// Pattern for &Regex: gaps and matches (an empty text is one empty gap).
void regex_events(const Pattern& p, std::string_view text, bool invert, std::vector<Event>& ev) {
  thread_local Ranges m;
  ScratchTrim trim(m);
  ev.clear();
  if (text.empty()) {
    ev.push_back({0, 0, invert});
    return;
  }
  p.find_all(text, m);
  size_t prev = 0;
  for (const auto& [b, e] : m) {
    if (prev != b) ev.push_back({prev, b, invert});
    ev.push_back({b, e, !invert});
    prev = e;
  }
  if (prev != text.size()) ev.push_back({prev, text.size(), invert});
}

// Pattern for Fn(char) -> bool: each matching character is one match.
template <class F>
void char_events(std::string_view text, F is_match, std::vector<Event>& ev) {
  ev.clear();
  if (text.empty()) {
    ev.push_back({0, 0, false});
    return;
  }
  size_t last = 0;
  for (size_t i = 0; i < text.size();) {
    const size_t b = i;
    const uint32_t cp = utf8::decode(text, i);
    if (is_match(cp)) {
      if (last < b) ev.push_back({last, b, false});
      ev.push_back({b, i, true});
      last = i;
    }
  }
  if (last < text.size()) ev.push_back({last, text.size(), false});
}

// Replaces each plain piece by the ranges `split` gives for its text.
template <class F>
void split_pieces(std::vector<Piece>& pieces, F split) {
  std::vector<Piece> out;
  out.reserve(pieces.size());
  thread_local Ranges r;
  ScratchTrim trim(r);
  for (Piece& p : pieces) {
    if (p.id >= 0) {
      out.push_back(std::move(p));
      continue;
    }
    split(p, r);
    for (const auto& [b, e] : r) {
      if (e <= b) continue;
      out.push_back({p.text.substr(b, e - b), -1, p.at_start && b == 0});
    }
  }
  pieces.swap(out);
}

class Sequence final : public PreTokenizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<PreTokenizer>> parts) : parts_(std::move(parts)) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    for (const auto& p : parts_) p->pre_tokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

class Split final : public PreTokenizer {
 public:
  Split(const Ctx& c, const json& j, const std::string& path)
      : pattern_(c, c.at(j, path, "pattern"), path + ".pattern"),
        behavior_(parse_behavior(c, c.at(j, path, "behavior"), path + ".behavior")),
        invert_(c.opt_bool(j, path, "invert", false)) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    split_pieces(pieces, [&](const Piece& p, Ranges& r) {
      thread_local std::vector<Event> ev;
      ScratchTrim trim_ev(ev);
      regex_events(pattern_, p.text, invert_, ev);
      apply(ev, behavior_, r);
    });
  }

 private:
  Pattern pattern_;
  Behavior behavior_;
  bool invert_;
};

// Splits on a character class with a behavior.
template <class F>
class CharSplit final : public PreTokenizer {
 public:
  CharSplit(F f, Behavior b) : f_(f), behavior_(b) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    split_pieces(pieces, [&](const Piece& p, Ranges& r) {
      thread_local std::vector<Event> ev;
      ScratchTrim trim_ev(ev);
      char_events(p.text, f_, ev);
      apply(ev, behavior_, r);
    });
  }

 private:
  F f_;
  Behavior behavior_;
};
template <class F>
std::unique_ptr<PreTokenizer> char_split(F f, Behavior b) {
  return std::make_unique<CharSplit<F>>(f, b);
}

class ByteLevel final : public PreTokenizer {
 public:
  ByteLevel(bool add_prefix_space, bool use_regex) : add_prefix_space_(add_prefix_space) {
    if (use_regex) {
      // pre_tokenizers/byte_level.rs RE.
      const json j = {{"Regex", R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)"}};
      regex_ = std::make_unique<Pattern>(Ctx("ByteLevel"), j, "");
    }
  }
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    if (add_prefix_space_)
      for (Piece& p : pieces)
        if (p.id < 0 && !p.text.empty() && p.text[0] != ' ') p.text.insert(0, 1, ' ');
    if (regex_) {
      split_pieces(pieces, [&](const Piece& p, Ranges& r) {
        thread_local std::vector<Event> ev;
        ScratchTrim trim_ev(ev);
        regex_events(*regex_, p.text, false, ev);
        apply(ev, Behavior::Isolated, r);
      });
    }
    const auto& chars = byte_level_chars();
    for (Piece& p : pieces) {
      if (p.id >= 0) continue;
      std::string out;
      out.reserve(p.text.size() * 2);
      for (char ch : p.text) out += chars[static_cast<uint8_t>(ch)];
      p.text.swap(out);
    }
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Pattern> regex_;
};

class Metaspace final : public PreTokenizer {
 public:
  enum class Scheme { Always, First, Never };
  Metaspace(std::string rep, Scheme s, bool split) : rep_(std::move(rep)), scheme_(s), split_(split) {
    size_t i = 0;
    rep_cp_ = utf8::decode(rep_, i);
  }
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    for (Piece& p : pieces) {
      if (p.id >= 0) continue;
      std::string out;
      out.reserve(p.text.size() + rep_.size());
      for (char ch : p.text) {
        if (ch == ' ') out += rep_;
        else out += ch;
      }
      const bool starts = out.compare(0, rep_.size(), rep_) == 0;
      if (!out.empty() && !starts && (scheme_ == Scheme::Always || (scheme_ == Scheme::First && p.at_start)))
        out.insert(0, rep_);
      p.text.swap(out);
    }
    if (split_) {
      const uint32_t rc = rep_cp_;
      split_pieces(pieces, [&](const Piece& p, Ranges& r) {
        thread_local std::vector<Event> ev;
        ScratchTrim trim_ev(ev);
        char_events(p.text, [rc](uint32_t cp) { return cp == rc; }, ev);
        apply(ev, Behavior::MergedWithNext, r);
      });
    }
  }

 private:
  std::string rep_;
  uint32_t rep_cp_ = 0;
  Scheme scheme_;
  bool split_;
};

// Whitespace: the pieces of \w+|[^\w\s]+ (Rust regex classes), whitespace dropped.
class Whitespace final : public PreTokenizer {
 public:
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    split_pieces(pieces, [&](const Piece& p, Ranges& r) {
      r.clear();
      const std::string& t = p.text;
      int run = 0;  // 0 none, 1 word, 2 other
      size_t start = 0;
      for (size_t i = 0; i < t.size();) {
        const size_t b = i;
        const uint8_t pr = uni::props(utf8::decode(t, i));
        const int kind = (pr & uni::kWord) ? 1 : (pr & uni::kWhitespace) ? 0 : 2;
        if (kind != run) {
          if (run != 0) r.emplace_back(start, b);
          start = b;
          run = kind;
        }
      }
      if (run != 0) r.emplace_back(start, t.size());
    });
  }
};

bool is_ws(uint32_t cp) { return uni::is_whitespace(cp); }
bool is_punct(uint32_t cp) { return uni::props(cp) & uni::kPunct; }
bool is_numeric(uint32_t cp) { return uni::props(cp) & uni::kNumeric; }

class BertPre final : public PreTokenizer {
 public:
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    ws_->pre_tokenize(pieces);
    punct_->pre_tokenize(pieces);
  }

 private:
  std::unique_ptr<PreTokenizer> ws_ = char_split(is_ws, Behavior::Removed);
  std::unique_ptr<PreTokenizer> punct_ = char_split(is_punct, Behavior::Isolated);
};

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const Ctx& c, const json& j, const std::string& path) {
  const std::string t = c.type(j, path);
  if (t == "Sequence") {
    const json& arr = c.array(c.at(j, path, "pretokenizers"), path + ".pretokenizers");
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (size_t i = 0; i < arr.size(); ++i) {
      if (arr[i].is_null()) continue;
      parts.push_back(make_pre_tokenizer(c, arr[i], path + ".pretokenizers[" + std::to_string(i) + "]"));
    }
    return std::make_unique<Sequence>(std::move(parts));
  }
  if (t == "ByteLevel")
    return std::make_unique<ByteLevel>(c.opt_bool(j, path, "add_prefix_space", true), c.opt_bool(j, path, "use_regex", true));
  if (t == "Split") return std::make_unique<Split>(c, j, path);
  if (t == "Digits")
    return char_split(is_numeric, c.opt_bool(j, path, "individual_digits", false) ? Behavior::Isolated : Behavior::Contiguous);
  if (t == "Metaspace") {
    const std::string rep = c.str(c.at(j, path, "replacement"), path + ".replacement");
    size_t n = 0;
    if (!rep.empty()) {
      (void)utf8::decode(rep, n);
    }
    if (rep.empty() || n != rep.size()) c.fail(path + ".replacement", "expected one character");
    Metaspace::Scheme scheme = Metaspace::Scheme::Always;
    if (const json* ps = c.find(j, path, "prepend_scheme")) {
      const std::string s = c.str(*ps, path + ".prepend_scheme");
      if (s == "always") scheme = Metaspace::Scheme::Always;
      else if (s == "first") scheme = Metaspace::Scheme::First;
      else if (s == "never") scheme = Metaspace::Scheme::Never;
      else c.fail(path + ".prepend_scheme", "\"" + s + "\" is not one of always, first, never");
    }
    if (const json* ap = c.find(j, path, "add_prefix_space")) {
      if (!c.boolean(*ap, path + ".add_prefix_space")) {
        if (c.find(j, path, "prepend_scheme") && scheme != Metaspace::Scheme::Never)
          c.fail(path + ".add_prefix_space", "false does not match prepend_scheme");
        scheme = Metaspace::Scheme::Never;
      }
    }
    return std::make_unique<Metaspace>(rep, scheme, c.opt_bool(j, path, "split", true));
  }
  if (t == "Whitespace") return std::make_unique<Whitespace>();
  if (t == "WhitespaceSplit") return char_split(is_ws, Behavior::Removed);
  if (t == "BertPreTokenizer") return std::make_unique<BertPre>();
  if (t == "Punctuation") {
    Behavior b = Behavior::Isolated;
    if (const json* bj = c.find(j, path, "behavior")) b = parse_behavior(c, *bj, path + ".behavior");
    return char_split(is_punct, b);
  }
  if (t == "CharDelimiterSplit") {
    const std::string d = c.str(c.at(j, path, "delimiter"), path + ".delimiter");
    size_t n = 0;
    const uint32_t cp = d.empty() ? 0 : utf8::decode(d, n);
    if (d.empty() || n != d.size()) c.fail(path + ".delimiter", "expected one character");
    return char_split([cp](uint32_t x) { return x == cp; }, Behavior::Removed);
  }
  c.fail(path + ".type", "pre-tokenizer \"" + t +
                             "\" is not supported (supported: Sequence, ByteLevel, Split, Digits, Metaspace, Whitespace, "
                             "WhitespaceSplit, BertPreTokenizer, Punctuation, CharDelimiterSplit)");
}

}  // namespace kvad::tok::hf
