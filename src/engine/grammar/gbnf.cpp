// GBNF text -> Grammar (engine/grammar/grammar.h). Syntax from llama.cpp's
// grammars/README.md; the parser, the UTF-8 lowering and the checks are
// written here.
#include <algorithm>
#include <map>
#include <unordered_map>
#include <utility>

#include "engine/grammar/grammar.h"

namespace kvad {

namespace {

constexpr size_t kMaxText = 1u << 20;
constexpr uint32_t kMaxRepeat = 10000;
constexpr size_t kMaxElems = 1u << 20;
constexpr int kMaxNesting = 256;
constexpr uint32_t kMaxCode = 0x10FFFF;

struct Item {
  Grammar::Kind kind;
  uint32_t arg;
};
using Seq = std::vector<Item>;

// Splits [lo, hi] (no surrogates inside, same UTF-8 length) into sequences
// of byte ranges; see the header comment for the source of the method.
void utf8_split(uint32_t lo, uint32_t hi, std::vector<std::vector<std::pair<uint8_t, uint8_t>>>& out) {
  if (lo > hi) return;
  static const uint32_t bounds[] = {0x7F, 0x7FF, 0xFFFF};
  for (uint32_t b : bounds)
    if (lo <= b && hi > b) {
      utf8_split(lo, b, out);
      utf8_split(b + 1, hi, out);
      return;
    }
  const int n = lo <= 0x7F ? 1 : lo <= 0x7FF ? 2 : lo <= 0xFFFF ? 3 : 4;
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_split(lo, lo | m, out);
        utf8_split((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        utf8_split(lo, (hi & ~m) - 1, out);
        utf8_split(hi & ~m, hi, out);
        return;
      }
    }
  }
  auto enc = [n](uint32_t c) {
    std::array<uint8_t, 4> b{};
    if (n == 1) b[0] = static_cast<uint8_t>(c);
    else if (n == 2) { b[0] = 0xC0 | (c >> 6); b[1] = 0x80 | (c & 63); }
    else if (n == 3) { b[0] = 0xE0 | (c >> 12); b[1] = 0x80 | ((c >> 6) & 63); b[2] = 0x80 | (c & 63); }
    else { b[0] = 0xF0 | (c >> 18); b[1] = 0x80 | ((c >> 12) & 63); b[2] = 0x80 | ((c >> 6) & 63); b[3] = 0x80 | (c & 63); }
    return b;
  };
  const auto a = enc(lo), z = enc(hi);
  std::vector<std::pair<uint8_t, uint8_t>> seq;
  for (int i = 0; i < n; ++i) seq.emplace_back(a[i], z[i]);
  out.push_back(std::move(seq));
}

class Parser {
 public:
  Parser(std::string_view src) : s_(src) {}

  std::shared_ptr<const Grammar> run(std::string_view root) {
    if (s_.size() > kMaxText) throw GrammarError("grammar: text is " + std::to_string(s_.size()) + " bytes (limit 1 MiB)");
    skip_space(true);
    while (i_ < s_.size()) {
      const size_t name_at = i_;
      std::string name = parse_name();
      skip_space(false);
      if (s_.compare(i_, 3, "::=") != 0) fail("expected '::=' after rule name '" + name + "'");
      i_ += 3;
      skip_space(true);
      const uint32_t id = rule_id(name);
      if (defined_[id]) fail_at(name_at, "rule '" + name + "' is defined twice");
      defined_[id] = true;
      rules_[id] = parse_alternatives(name, 0);
      if (i_ < s_.size()) {
        if (s_[i_] != '\n' && s_[i_] != '\r') fail("expected end of line after rule '" + name + "'");
      }
      skip_space(true);
    }
    for (size_t r = 0; r < rules_.size(); ++r)
      if (!defined_[r]) throw GrammarError("grammar: undefined rule '" + names_[r] + "'");
    auto it = ids_.find(std::string(root));
    if (it == ids_.end()) throw GrammarError("grammar: no rule named '" + std::string(root) + "' (the start rule)");
    check_left_recursion();
    return flatten(it->second);
  }

 private:
  std::string_view s_;
  size_t i_ = 0;
  std::vector<std::vector<Seq>> rules_;
  std::vector<std::string> names_;
  std::vector<bool> defined_;
  std::unordered_map<std::string, uint32_t> ids_;
  std::map<Grammar::ByteSet, uint32_t> set_ids_;
  std::vector<Grammar::ByteSet> sets_;
  size_t n_items_ = 0;

  [[noreturn]] void fail_at(size_t at, const std::string& msg) const {
    size_t line = 1, col = 1;
    for (size_t k = 0; k < at && k < s_.size(); ++k) {
      if (s_[k] == '\n') { ++line; col = 1; } else { ++col; }
    }
    throw GrammarError("grammar: line " + std::to_string(line) + ", column " + std::to_string(col) + ": " + msg);
  }
  [[noreturn]] void fail(const std::string& msg) const { fail_at(i_, msg); }

  void count(size_t n) {
    n_items_ += n;
    if (n_items_ > kMaxElems) throw GrammarError("grammar: more than 1048576 elements after expanding repetitions");
  }

  uint32_t rule_id(const std::string& name) {
    auto [it, fresh] = ids_.emplace(name, static_cast<uint32_t>(rules_.size()));
    if (fresh) {
      rules_.emplace_back();
      names_.push_back(name);
      defined_.push_back(false);
    }
    return it->second;
  }
  uint32_t new_rule(const std::string& base, std::vector<Seq> alts) {
    const uint32_t id = static_cast<uint32_t>(rules_.size());
    rules_.push_back(std::move(alts));
    names_.push_back(base + "-" + std::to_string(id));
    defined_.push_back(true);
    return id;
  }
  uint32_t set_id(const Grammar::ByteSet& s) {
    auto [it, fresh] = set_ids_.emplace(s, static_cast<uint32_t>(sets_.size()));
    if (fresh) sets_.push_back(s);
    return it->second;
  }
  Item byte_range(uint8_t lo, uint8_t hi) {
    Grammar::ByteSet s{};
    for (unsigned b = lo; b <= hi; ++b) s[b >> 6] |= uint64_t{1} << (b & 63);
    return {Grammar::kBytes, set_id(s)};
  }

  void skip_space(bool newlines) {
    while (i_ < s_.size()) {
      const char c = s_[i_];
      if (c == ' ' || c == '\t' || (newlines && (c == '\n' || c == '\r'))) {
        ++i_;
      } else if (c == '#') {
        while (i_ < s_.size() && s_[i_] != '\n' && s_[i_] != '\r') ++i_;
      } else {
        break;
      }
    }
  }
  static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  }
  std::string parse_name() {
    const size_t b = i_;
    while (i_ < s_.size() && name_char(s_[i_])) ++i_;
    if (i_ == b) fail("expected a rule name");
    return std::string(s_.substr(b, i_ - b));
  }
  uint32_t hex(int n) {
    uint32_t v = 0;
    for (int k = 0; k < n; ++k) {
      if (i_ >= s_.size()) fail("unfinished escape");
      const char c = s_[i_++];
      int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (d < 0) fail("bad hex digit in escape");
      v = v * 16 + static_cast<uint32_t>(d);
    }
    return v;
  }
  // One code point of a literal or class (UTF-8 decoded, or an escape).
  uint32_t parse_char() {
    if (i_ >= s_.size()) fail("unexpected end of grammar");
    const uint8_t c = static_cast<uint8_t>(s_[i_]);
    if (c == '\\') {
      ++i_;
      if (i_ >= s_.size()) fail("unfinished escape");
      const char e = s_[i_++];
      switch (e) {
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case '\\': case '"': case '[': case ']': case '-': case '^': case '/': case '\'': return static_cast<uint8_t>(e);
        case 'x': return hex(2);
        case 'u': { uint32_t v = hex(4); if (v >= 0xD800 && v <= 0xDFFF) fail("surrogate code point in escape"); return v; }
        case 'U': { uint32_t v = hex(8); if (v > kMaxCode || (v >= 0xD800 && v <= 0xDFFF)) fail("code point out of range"); return v; }
        default: fail(std::string("unknown escape '\\") + e + "'");
      }
    }
    // UTF-8 decode.
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i_ + n > s_.size()) fail("invalid UTF-8 in grammar");
    uint32_t v = n == 1 ? c : n == 2 ? (c & 31) : n == 3 ? (c & 15) : (c & 7);
    for (int k = 1; k < n; ++k) {
      const uint8_t d = static_cast<uint8_t>(s_[i_ + k]);
      if ((d >> 6) != 2) fail("invalid UTF-8 in grammar");
      v = (v << 6) | (d & 63);
    }
    const uint32_t min_v[] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < min_v[n] || v > kMaxCode || (v >= 0xD800 && v <= 0xDFFF)) fail("invalid UTF-8 in grammar");
    i_ += n;
    return v;
  }

  // Code-point ranges -> one item (a byte set, or a rule of byte sequences).
  Item lower_class(std::vector<std::pair<uint32_t, uint32_t>> r, bool negate) {
    std::sort(r.begin(), r.end());
    std::vector<std::pair<uint32_t, uint32_t>> m;
    for (auto& p : r) {
      if (!m.empty() && p.first <= m.back().second + 1) m.back().second = std::max(m.back().second, p.second);
      else m.push_back(p);
    }
    if (negate) {
      std::vector<std::pair<uint32_t, uint32_t>> c;
      uint32_t next = 0;
      for (auto& p : m) {
        if (p.first > next) c.emplace_back(next, p.first - 1);
        next = p.second + 1;
      }
      if (next <= kMaxCode) c.emplace_back(next, kMaxCode);
      m = std::move(c);
    }
    std::vector<std::vector<std::pair<uint8_t, uint8_t>>> seqs;
    for (auto& p : m) {  // without the surrogates
      if (p.first < 0xD800 && p.second >= 0xD800) {
        utf8_split(p.first, 0xD7FF, seqs);
        if (p.second > 0xDFFF) utf8_split(0xE000, p.second, seqs);
      } else if (p.first >= 0xD800 && p.first <= 0xDFFF) {
        if (p.second > 0xDFFF) utf8_split(0xE000, p.second, seqs);
      } else {
        utf8_split(p.first, p.second, seqs);
      }
    }
    Grammar::ByteSet ascii{};
    bool any_ascii = false;
    std::vector<Seq> alts;
    for (auto& q : seqs) {
      if (q.size() == 1) {
        for (unsigned b = q[0].first; b <= q[0].second; ++b) ascii[b >> 6] |= uint64_t{1} << (b & 63);
        any_ascii = true;
        continue;
      }
      Seq s;
      for (auto& [lo, hi] : q) s.push_back(byte_range(lo, hi));
      count(s.size());
      alts.push_back(std::move(s));
    }
    if (any_ascii && alts.empty()) return {Grammar::kBytes, set_id(ascii)};
    if (any_ascii) alts.insert(alts.begin(), Seq{{Grammar::kBytes, set_id(ascii)}});
    // No alternative at all: the class matches nothing (a rule without
    // alternatives is a dead end for the recognizer).
    return {Grammar::kRule, new_rule("class", std::move(alts))};
  }

  std::vector<Seq> parse_alternatives(const std::string& name, int depth) {
    if (depth > kMaxNesting) fail("groups nested deeper than 256");
    std::vector<Seq> alts;
    alts.push_back(parse_sequence(name, depth));
    while (i_ < s_.size() && s_[i_] == '|') {
      ++i_;
      skip_space(true);
      alts.push_back(parse_sequence(name, depth));
    }
    return alts;
  }

  Seq parse_sequence(const std::string& name, int depth) {
    Seq seq;
    const bool nested = depth > 0;
    while (i_ < s_.size()) {
      const char c = s_[i_];
      Seq atom;  // the last term, as items
      if (c == '"') {
        ++i_;
        while (i_ < s_.size() && s_[i_] != '"') {
          if (s_[i_] == '\n' || s_[i_] == '\r') fail("newline inside a string literal");
          const uint32_t cp = parse_char();
          std::vector<std::vector<std::pair<uint8_t, uint8_t>>> q;
          utf8_split(cp, cp, q);
          for (auto& [lo, hi] : q[0]) atom.push_back(byte_range(lo, hi));
        }
        if (i_ >= s_.size()) fail("unterminated string literal");
        ++i_;
      } else if (c == '[') {
        ++i_;
        bool neg = false;
        if (i_ < s_.size() && s_[i_] == '^') { neg = true; ++i_; }
        std::vector<std::pair<uint32_t, uint32_t>> ranges;
        while (i_ < s_.size() && s_[i_] != ']') {
          const uint32_t lo = parse_char();
          uint32_t hi = lo;
          if (i_ + 1 < s_.size() && s_[i_] == '-' && s_[i_ + 1] != ']') {
            ++i_;
            hi = parse_char();
            if (hi < lo) fail("character range out of order");
          }
          ranges.emplace_back(lo, hi);
        }
        if (i_ >= s_.size()) fail("unterminated character class");
        ++i_;
        atom.push_back(lower_class(std::move(ranges), neg));
      } else if (c == '.') {
        ++i_;
        atom.push_back(lower_class({{0, kMaxCode}}, false));
      } else if (c == '(') {
        ++i_;
        skip_space(true);
        std::vector<Seq> alts = parse_alternatives(name, depth + 1);
        if (i_ >= s_.size() || s_[i_] != ')') fail("expected ')'");
        ++i_;
        if (alts.size() == 1) atom = std::move(alts[0]);
        else atom.push_back({Grammar::kRule, new_rule(name, std::move(alts))});
      } else if (name_char(c)) {
        const size_t at = i_;
        std::string ref = parse_name();
        skip_space(false);
        if (s_.compare(i_, 3, "::=") == 0) { i_ = at; break; }  // the next rule (missing newline is fine)
        i_ = at + ref.size();
        atom.push_back({Grammar::kRule, rule_id(ref)});
      } else {
        break;
      }
      skip_space(nested);
      // Postfix repetition.
      if (i_ < s_.size() && (s_[i_] == '*' || s_[i_] == '+' || s_[i_] == '?' || s_[i_] == '{')) {
        uint32_t lo = 0, hi = 0;
        bool unbounded = false;
        const char op = s_[i_++];
        if (op == '*') unbounded = true;
        else if (op == '+') { lo = 1; unbounded = true; }
        else if (op == '?') hi = 1;
        else {
          skip_space(false);
          lo = parse_count();
          skip_space(false);
          if (i_ < s_.size() && s_[i_] == ',') {
            ++i_;
            skip_space(false);
            if (i_ < s_.size() && s_[i_] == '}') unbounded = true;
            else hi = parse_count();
          } else {
            hi = lo;
          }
          skip_space(false);
          if (i_ >= s_.size() || s_[i_] != '}') fail("expected '}' after repetition count");
          ++i_;
          if (!unbounded && hi < lo) fail("repetition {m,n} with n < m");
        }
        atom = repeat(name, std::move(atom), lo, hi, unbounded);
        skip_space(nested);
      }
      count(atom.size());
      seq.insert(seq.end(), atom.begin(), atom.end());
    }
    return seq;
  }

  uint32_t parse_count() {
    const size_t b = i_;
    uint64_t v = 0;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
      v = v * 10 + static_cast<uint64_t>(s_[i_++] - '0');
      if (v > kMaxRepeat) fail("repetition count over 10000");
    }
    if (i_ == b) fail("expected a repetition count");
    return static_cast<uint32_t>(v);
  }

  // x{lo,hi} / x{lo,}: lo copies, then a right-nested optional chain (or a
  // right-recursive star), so a parse never holds more than one stack per
  // repetition.
  Seq repeat(const std::string& name, Seq atom, uint32_t lo, uint32_t hi, bool unbounded) {
    Item x = atom.size() == 1 ? atom[0] : Item{Grammar::kRule, new_rule(name, {atom})};
    Seq out;
    count(lo);
    for (uint32_t k = 0; k < lo; ++k) out.push_back(x);
    if (unbounded) {
      const uint32_t star = new_rule(name, {});
      rules_[star] = {Seq{x, {Grammar::kRule, star}}, Seq{}};
      out.push_back({Grammar::kRule, star});
    } else if (hi > lo) {
      uint32_t tail = new_rule(name, {Seq{x}, Seq{}});
      count(hi - lo);
      for (uint32_t k = lo + 1; k < hi; ++k) tail = new_rule(name, {Seq{x, {Grammar::kRule, tail}}, Seq{}});
      out.push_back({Grammar::kRule, tail});
    }
    return out;
  }

  void check_left_recursion() {
    const size_t n = rules_.size();
    std::vector<bool> nullable(n, false);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; ++r) {
        if (nullable[r]) continue;
        for (const Seq& a : rules_[r]) {
          bool all = true;
          for (const Item& it : a)
            if (it.kind != Grammar::kRule || !nullable[it.arg]) { all = false; break; }
          if (all) { nullable[r] = true; changed = true; break; }
        }
      }
    }
    // Edges r -> s when s can start r after nullable items only; a cycle is
    // left recursion (the recognizer would expand it forever).
    std::vector<std::vector<uint32_t>> first(n);
    for (size_t r = 0; r < n; ++r)
      for (const Seq& a : rules_[r])
        for (const Item& it : a) {
          if (it.kind != Grammar::kRule) break;
          first[r].push_back(it.arg);
          if (!nullable[it.arg]) break;
        }
    std::vector<uint8_t> color(n, 0);
    for (size_t start = 0; start < n; ++start) {
      if (color[start]) continue;
      std::vector<std::pair<uint32_t, size_t>> st{{static_cast<uint32_t>(start), 0}};
      color[start] = 1;
      while (!st.empty()) {
        auto& [r, k] = st.back();
        if (k < first[r].size()) {
          const uint32_t s = first[r][k++];
          if (color[s] == 1) throw GrammarError("grammar: rule '" + names_[s] + "' is left recursive");
          if (color[s] == 0) { color[s] = 1; st.emplace_back(s, 0); }
        } else {
          color[r] = 2;
          st.pop_back();
        }
      }
    }
  }

  std::shared_ptr<const Grammar> flatten(uint32_t root) {
    auto g = std::make_shared<Grammar>();
    g->sets = sets_;
    g->names = names_;
    g->root = root;
    g->alts.resize(rules_.size());
    for (size_t r = 0; r < rules_.size(); ++r)
      for (const Seq& a : rules_[r]) {
        g->alts[r].push_back(static_cast<uint32_t>(g->elems.size()));
        for (const Item& it : a) g->elems.push_back({it.kind, it.arg});
        g->elems.push_back({Grammar::kEnd, 0});
      }
    if (g->elems.size() > kMaxElems) throw GrammarError("grammar: more than 1048576 elements");
    return g;
  }
};

}  // namespace

std::shared_ptr<const Grammar> Grammar::parse(std::string_view gbnf, std::string_view root) {
  return Parser(gbnf).run(root);
}

}  // namespace kvad
