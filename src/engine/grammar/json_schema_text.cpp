// Strings of the JSON Schema compiler as GBNF (see json_schema_text.h; the
// numbers are in json_schema_numbers.cpp). Regex syntax: ECMA-262 (RegExp patterns); formats:
// RFC 3339 section 5.6 (date-time, full-date, full-time), RFC 4122 (uuid),
// RFC 5321 section 4.1.2 dot-atom local parts with RFC 1123 host names
// (email), RFC 2673 section 3.2 dotted quads (ipv4).
#include "engine/grammar/json_schema_text.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <stdexcept>
#include <utility>
#include <vector>

namespace kvad::schema_text {

namespace {

using Ranges = CodeRanges;
constexpr uint32_t kMax = 0x10FFFF;

std::string cp_escape(uint32_t c) {
  char b[16];
  std::snprintf(b, sizeof b, "\\U%08X", c);
  return b;
}

Ranges normalize(Ranges r) {
  std::sort(r.begin(), r.end());
  Ranges m;
  for (auto& p : r) {
    if (!m.empty() && p.first <= m.back().second + 1) m.back().second = std::max(m.back().second, p.second);
    else m.push_back(p);
  }
  return m;
}
Ranges complement(const Ranges& in) {
  Ranges m = normalize(in), c;
  uint32_t next = 0;
  for (auto& p : m) {
    if (p.first > next) c.emplace_back(next, p.first - 1);
    next = p.second + 1;
  }
  if (next <= kMax) c.emplace_back(next, kMax);
  return c;
}
bool contains(const Ranges& r, uint32_t c) {
  for (auto& p : r) if (c >= p.first && c <= p.second) return true;
  return false;
}

// JSON string content matching one character of the set `r` (the raw
// character, or its escape for those JSON requires escaped, plus "\/").
std::string set_expr(const Ranges& in) {
  const Ranges r = normalize(in);
  std::vector<std::string> alts;
  // Raw: the set minus controls, '"' and '\'.
  Ranges raw;
  for (auto p : r) {
    auto add = [&](uint32_t a, uint32_t b) { if (a <= b) raw.emplace_back(a, b); };
    // cut out [0,0x1F], 0x22, 0x5C
    uint32_t a = std::max<uint32_t>(p.first, 0x20), b = p.second;
    if (a > b) continue;
    for (uint32_t cut : {0x22u, 0x5Cu}) {
      if (cut >= a && cut <= b) {
        if (cut > a) add(a, cut - 1);
        a = cut + 1;
      }
    }
    add(a, b);
  }
  if (raw.size() == 1 && raw[0].first == raw[0].second && raw[0].first < 0x7F) {
    alts.push_back(lit(std::string(1, static_cast<char>(raw[0].first))));
  } else if (!raw.empty()) {
    std::string cls = "[";
    for (auto& [a, b] : raw) cls += a == b ? cp_escape(a) : cp_escape(a) + "-" + cp_escape(b);
    alts.push_back(cls + "]");
  }
  if (contains(r, '"')) alts.push_back(lit("\\\""));
  if (contains(r, '\\')) alts.push_back(lit("\\\\"));
  if (contains(r, '/')) alts.push_back(lit("\\/"));
  static const std::pair<uint32_t, char> shorts[] = {{8, 'b'}, {12, 'f'}, {10, 'n'}, {13, 'r'}, {9, 't'}};
  for (uint32_t c = 0; c < 0x20; ++c) {
    if (!contains(r, c)) continue;
    for (auto& [sc, ch] : shorts) if (sc == c) alts.push_back(lit(std::string("\\") + ch));
    auto nib = [](uint32_t v) {
      const char* hx = "0123456789abcdef";
      std::string k(1, hx[v]);
      if (v >= 10) k += static_cast<char>(hx[v] - 32);
      return "[" + k + "]";
    };
    alts.push_back(lit("\\u00") + " " + nib(c >> 4) + " " + nib(c & 15));
  }
  if (alts.empty()) return "[^\\x00-\\U0010FFFF]";  // matches nothing
  if (alts.size() == 1) return alts[0];
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return out + ")";
}

class Regex {
 public:
  explicit Regex(std::string_view p) : p_(p) {}

  std::vector<RegexBranch> run() {
    if (p_.size() > 4096) bad("longer than 4096 characters");
    std::vector<RegexBranch> tops;
    for (;;) {
      RegexBranch b;
      if (i_ < p_.size() && p_[i_] == '^') { b.anchored_start = true; ++i_; }
      b.body = concat(0, &b.anchored_end);
      tops.push_back(std::move(b));
      if (i_ >= p_.size()) break;
      if (p_[i_] != '|') bad("unbalanced ')'");
      ++i_;
    }
    return tops;
  }

 private:
  std::string_view p_;
  size_t i_ = 0;

  [[noreturn]] void bad(const std::string& why) const {
    throw std::invalid_argument("pattern: " + why + " (at offset " + std::to_string(i_) + ")");
  }

  uint32_t utf8() {
    const uint8_t c = static_cast<uint8_t>(p_[i_]);
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i_ + n > p_.size()) bad("invalid UTF-8");
    uint32_t v = n == 1 ? c : n == 2 ? (c & 31) : n == 3 ? (c & 15) : (c & 7);
    for (int k = 1; k < n; ++k) v = (v << 6) | (static_cast<uint8_t>(p_[i_ + k]) & 63);
    i_ += n;
    return v;
  }
  uint32_t hexn(int n) {
    uint32_t v = 0;
    for (int k = 0; k < n; ++k) {
      if (i_ >= p_.size()) bad("short escape");
      const char c = p_[i_++];
      int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (d < 0) bad("bad hex digit");
      v = v * 16 + static_cast<uint32_t>(d);
    }
    return v;
  }
  static Ranges digit() { return {{'0', '9'}}; }
  static Ranges word() { return {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}; }
  static Ranges space() { return {{9, 13}, {' ', ' '}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A}, {0x2028, 0x2029},
                                  {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}}; }
  // After '\': a class escape (\d ...) into `out`, or one character.
  bool escape(Ranges& out, uint32_t& ch) {
    if (i_ >= p_.size()) bad("pattern ends with '\\'");
    const char e = p_[i_++];
    switch (e) {
      case 'd': out = digit(); return true;
      case 'D': out = complement(digit()); return true;
      case 'w': out = word(); return true;
      case 'W': out = complement(word()); return true;
      case 's': out = space(); return true;
      case 'S': out = complement(space()); return true;
      case 't': ch = 9; return false;
      case 'n': ch = 10; return false;
      case 'r': ch = 13; return false;
      case 'f': ch = 12; return false;
      case 'v': ch = 11; return false;
      case '0': ch = 0; return false;
      case 'x': ch = hexn(2); return false;
      case 'u':
        if (i_ < p_.size() && p_[i_] == '{') bad("\\u{...} escapes are not supported");
        ch = hexn(4);
        return false;
      default: break;
    }
    if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '1' && e <= '9'))
      bad(std::string("escape '\\") + e + "' is not supported (word boundaries, back-references, properties)");
    --i_;
    ch = utf8();
    return false;
  }
  Ranges parse_class() {  // after '['
    bool neg = false;
    if (i_ < p_.size() && p_[i_] == '^') { neg = true; ++i_; }
    Ranges r;
    bool first = true;
    while (i_ < p_.size() && (p_[i_] != ']' || false)) {
      if (p_[i_] == ']' && !first) break;
      if (p_[i_] == ']' && first) break;  // JS: [] matches nothing, [^] anything
      first = false;
      uint32_t lo;
      Ranges esc;
      if (p_[i_] == '\\') {
        ++i_;
        if (i_ < p_.size() && p_[i_] == 'b') { ++i_; lo = 8; }
        else if (escape(esc, lo)) { r.insert(r.end(), esc.begin(), esc.end()); continue; }
      } else {
        lo = utf8();
      }
      uint32_t hi = lo;
      if (i_ + 1 < p_.size() && p_[i_] == '-' && p_[i_ + 1] != ']') {
        ++i_;
        if (p_[i_] == '\\') {
          ++i_;
          if (escape(esc, hi)) bad("class escape as a range end");
        } else {
          hi = utf8();
        }
        if (hi < lo) bad("range out of order");
      }
      r.emplace_back(lo, hi);
    }
    if (i_ >= p_.size()) bad("unterminated character class");
    ++i_;
    return neg ? complement(r) : r;
  }
  static RegexNode set_node(Ranges r) {
    RegexNode n;
    n.kind = RegexNode::Kind::Set;
    n.set = std::move(r);
    return n;
  }
  // One atom; `empty` is set for a '$' at the end (no node).
  RegexNode atom(int depth, bool* at_end, bool& empty) {
    empty = false;
    const char c = p_[i_];
    if (c == '(') {
      ++i_;
      if (depth > 64) bad("groups nested deeper than 64");
      if (i_ < p_.size() && p_[i_] == '?') {
        if (i_ + 1 < p_.size() && p_[i_ + 1] == ':') {
          i_ += 2;
        } else if (i_ + 2 < p_.size() && p_[i_ + 1] == '<' && p_[i_ + 2] != '=' && p_[i_ + 2] != '!') {
          while (i_ < p_.size() && p_[i_] != '>') ++i_;
          if (i_ >= p_.size()) bad("unterminated group name");
          ++i_;
        } else {
          bad("lookaround assertions are not supported");
        }
      }
      RegexNode g;
      g.kind = RegexNode::Kind::Alt;
      for (;;) {
        g.kids.push_back(concat(depth + 1, nullptr));
        if (i_ < p_.size() && p_[i_] == '|') { ++i_; continue; }
        break;
      }
      if (i_ >= p_.size() || p_[i_] != ')') bad("missing ')'");
      ++i_;
      return g;
    }
    if (c == '[') { ++i_; return set_node(parse_class()); }
    if (c == '.') { ++i_; return set_node(complement({{10, 10}, {13, 13}, {0x2028, 0x2029}})); }
    if (c == '\\') {
      ++i_;
      Ranges r;
      uint32_t ch = 0;
      if (escape(r, ch)) return set_node(r);
      return set_node({{ch, ch}});
    }
    if (c == '$') {
      ++i_;
      if (at_end && (i_ == p_.size() || p_[i_] == '|')) { *at_end = true; empty = true; return {}; }
      bad("'$' inside the pattern is not supported");
    }
    if (c == '^') bad("'^' inside the pattern is not supported");
    if (c == '*' || c == '+' || c == '?') bad("nothing to repeat");
    const uint32_t ch = utf8();
    return set_node({{ch, ch}});
  }
  // {m}, {m,}, {m,n} at i_ (which is at '{'); false if it is a literal '{'.
  bool braces(uint32_t& lo, uint32_t& hi, bool& open) {
    size_t j = i_ + 1;
    auto num = [&](uint32_t& v) {
      const size_t b = j;
      uint64_t x = 0;
      while (j < p_.size() && p_[j] >= '0' && p_[j] <= '9') { x = x * 10 + static_cast<uint64_t>(p_[j] - '0'); if (x > 100000) x = 100000; ++j; }
      v = static_cast<uint32_t>(x);
      return j > b;
    };
    if (!num(lo)) return false;
    open = false;
    hi = lo;
    if (j < p_.size() && p_[j] == ',') {
      ++j;
      if (!num(hi)) open = true;
    }
    if (j >= p_.size() || p_[j] != '}') return false;
    i_ = j + 1;
    if (lo > 10000 || (!open && hi > 10000)) bad("repetition count over 10000");
    if (!open && hi < lo) bad("repetition {m,n} with n < m");
    return true;
  }
  RegexNode concat(int depth, bool* at_end) {
    RegexNode out;
    out.kind = RegexNode::Kind::Cat;
    while (i_ < p_.size() && p_[i_] != '|' && p_[i_] != ')') {
      if (at_end && *at_end) bad("'$' inside the pattern is not supported");
      bool empty = false;
      RegexNode a = atom(depth, at_end, empty);
      if (empty) continue;  // '$'
      if (i_ < p_.size()) {
        const char q = p_[i_];
        RegexNode rep;
        rep.kind = RegexNode::Kind::Rep;
        bool repeated = false;
        if (q == '*' || q == '+' || q == '?') {
          ++i_;
          rep.op = q;
          rep.lo = q == '+' ? 1 : 0;
          rep.hi = q == '?' ? 1 : 0;
          rep.open = q != '?';
          repeated = true;
        } else if (q == '{') {
          repeated = braces(rep.lo, rep.hi, rep.open);
        }
        if (repeated) {
          if (i_ < p_.size() && p_[i_] == '?') ++i_;  // lazy: the same language
          rep.kids.push_back(std::move(a));
          a = std::move(rep);
        }
      }
      out.kids.push_back(std::move(a));
    }
    return out;
  }
};

std::string ipv4() {
  const std::string oct = "(\"25\" [0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9] [0-9] | [1-9] [0-9] | [0-9])";
  return "(" + oct + " \".\" " + oct + " \".\" " + oct + " \".\" " + oct + ")";
}

// RFC 3986 section 3.2.2 IPv6address.
std::string ipv6() {
  const std::string h = "[0-9a-fA-F]{1,4}";
  const std::string ls32 = "(" + h + " \":\" " + h + " | " + ipv4() + ")";
  auto hc = [&](int n) { return n == 0 ? std::string() : "(" + h + " \":\"){" + std::to_string(n) + "} "; };
  auto opt = [&](int n) {  // [ *n( h16 ":" ) h16 ]
    return "(" + (n > 0 ? "(" + h + " \":\"){0," + std::to_string(n) + "} " : std::string()) + h + ")? ";
  };
  std::vector<std::string> alts = {
      hc(6) + ls32,
      "\"::\" " + hc(5) + ls32,
      opt(0) + "\"::\" " + hc(4) + ls32,
      opt(1) + "\"::\" " + hc(3) + ls32,
      opt(2) + "\"::\" " + hc(2) + ls32,
      opt(3) + "\"::\" " + hc(1) + ls32,
      opt(4) + "\"::\" " + ls32,
      opt(5) + "\"::\" " + h,
      opt(6) + "\"::\"",
  };
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return out + ")";
}

}  // namespace

std::string lit(std::string_view bytes) {
  std::string out = "\"";
  for (char ch : bytes) {
    const uint8_t c = static_cast<uint8_t>(ch);
    if (c == '"') out += "\\\"";
    else if (c == '\\') out += "\\\\";
    else if (c < 0x20 || c == 0x7F) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02X", c);
      out += b;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

namespace {
std::string gbnf(const RegexNode& n) {
  switch (n.kind) {
    case RegexNode::Kind::Set: return set_expr(n.set);
    case RegexNode::Kind::Cat: {
      std::string out;
      for (const RegexNode& k : n.kids) out += (out.empty() ? "" : " ") + gbnf(k);
      return out;
    }
    case RegexNode::Kind::Alt: {
      std::string out = "(";
      for (size_t k = 0; k < n.kids.size(); ++k) {
        const std::string a = gbnf(n.kids[k]);
        out += (k ? " | " : "") + (a.empty() ? std::string("\"\"") : a);
      }
      return out + ")";
    }
    case RegexNode::Kind::Rep: {
      const std::string rep = n.op ? std::string(1, n.op)
                                   : "{" + std::to_string(n.lo) +
                                         (n.open ? "," : n.hi != n.lo ? "," + std::to_string(n.hi) : "") + "}";
      return "(" + gbnf(n.kids[0]) + ")" + rep;
    }
  }
  return "";
}
}  // namespace

std::vector<RegexBranch> parse_regex(std::string_view pattern) { return Regex(pattern).run(); }

std::string json_char_set(const CodeRanges& set) { return set_expr(set); }

std::string regex_to_gbnf(std::string_view pattern, const std::string& jchar) {
  std::string out = "(";
  const std::vector<RegexBranch> tops = parse_regex(pattern);
  for (size_t k = 0; k < tops.size(); ++k) {
    const RegexBranch& b = tops[k];
    const std::string alt = (b.anchored_start ? "" : jchar + "* ") + gbnf(b.body) + (b.anchored_end ? "" : " " + jchar + "*");
    out += (k ? " | " : "") + ("(" + alt + ")");
  }
  return out + ")";
}

std::optional<std::string> format_to_gbnf(std::string_view f) {
  const std::string d2 = "[0-9] [0-9]";
  const std::string leap2 = "(\"0\" [048] | [2468] [048] | [13579] [26])";
  const std::string date =
      "(" + d2 + " " + d2 + " \"-\" ((\"0\" [13578] | \"1\" [02]) \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" [01])"
      " | (\"0\" [469] | \"11\") \"-\" (\"0\" [1-9] | [12] [0-9] | \"30\")"
      " | \"02-\" (\"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8]))"
      " | (" + d2 + " (\"0\" [48] | [2468] [048] | [13579] [26]) | " + leap2 + " \"00\") \"-02-29\")";
  // Second 60 (a leap second) only where the time is 23:59 in UTC: the
  // local time L (minutes) with offset L + 1 or L - 1439 (RFC 3339 5.7).
  std::string leap = "(\"23:59:60\" frac ([Zz] | \"+00:00\" | \"-00:00\")";
  for (int L = 0; L < 1439; ++L) {
    char b[64];
    const int pos = L + 1, neg = 1439 - L;
    std::snprintf(b, sizeof b, " | \"%02d:%02d:60\" frac (\"+%02d:%02d\" | \"-%02d:%02d\")", L / 60, L % 60, pos / 60,
                  pos % 60, neg / 60, neg % 60);
    leap += b;
  }
  leap += ")";
  const std::string time =
      "((([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] frac"
      " ([Zz] | [+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])) | " + leap + ")";
  if (f == "date") return date;
  if (f == "time") return time;
  if (f == "date-time") return "(" + date + " [Tt] " + time + ")";
  if (f == "uuid") {
    const std::string h = "[0-9a-fA-F]";
    auto n = [&](int k) { return "(" + h + "){" + std::to_string(k) + "}"; };
    return "(" + n(8) + " \"-\" " + n(4) + " \"-\" " + n(4) + " \"-\" " + n(4) + " \"-\" " + n(12) + ")";
  }
  if (f == "ipv4") return ipv4();
  if (f == "ipv6") return ipv6();
  if (f == "hostname") {
    // RFC 1123 labels; at most 8 labels of at most 30 characters, so that
    // the name stays within the 253 characters DNS allows (a subset).
    const std::string label = "([A-Za-z0-9] ([A-Za-z0-9-]{0,28} [A-Za-z0-9])?)";
    return "(" + label + " (\".\" " + label + "){0,7})";
  }
  if (f == "json-pointer" || f == "relative-json-pointer") {
    // RFC 6901: "/"-separated tokens, "~" only as ~0 or ~1; "/" and "~"
    // written plainly (no \u escapes but for control characters).
    const std::string tok = "([^\"\\\\\\x00-\\x1F/~] | \"\\\\\" [\"\\\\bfnrt] | \"\\\\u00\" [01] [0-9a-fA-F] | \"~\" [01])";
    const std::string ptr = "(\"/\" " + tok + "*)*";
    if (f == "json-pointer") return "(" + ptr + ")";
    // draft-handrews-relative-json-pointer-01: a non-negative integer, then "#" or a pointer.
    return "((\"0\" | [1-9] [0-9]{0,15}) (\"#\" | " + ptr + "))";
  }
  if (f == "duration") {
    // RFC 3339 appendix A (ISO 8601 durations).
    const std::string n = "[0-9]{1,9}";
    const std::string sec = "(" + n + " \"S\")";
    const std::string min = "(" + n + " \"M\" " + sec + "?)";
    const std::string hour = "(" + n + " \"H\" " + min + "?)";
    const std::string time = "(\"T\" (" + hour + " | " + min + " | " + sec + "))";
    const std::string day = "(" + n + " \"D\")";
    const std::string month = "(" + n + " \"M\" " + day + "?)";
    const std::string year = "(" + n + " \"Y\" " + month + "?)";
    return "(\"P\" ((" + day + " | " + month + " | " + year + ") " + time + "? | " + time + " | " + n + " \"W\"))";
  }
  if (f == "uri" || f == "uri-reference" || f == "iri" || f == "iri-reference") {
    // RFC 3986 section 3 and 4.1 (RFC 3987 for IRIs: non-ASCII characters
    // of ucschar where URIs have unreserved ones); "/" written plainly.
    const bool iri = f[0] == 'i';
    const std::string unreserved = std::string("([A-Za-z0-9._~-]") + (iri ? " | [\\U000000A0-\\U0000D7FF\\U0000F900-\\U0000FDCF\\U0000FDF0-\\U0000FFEF\\U00010000-\\U000EFFFD]" : "") + ")";
    const std::string pct = "(\"%\" [0-9A-Fa-f] [0-9A-Fa-f])";
    const std::string sub = "[!$&'()*+,;=]";
    const std::string pchar = "(" + unreserved + " | " + pct + " | " + sub + " | [:@])";
    const std::string seg = "(" + pchar + "*)", seg_nz = "(" + pchar + "+)";
    const std::string seg_nc = "((" + unreserved + " | " + pct + " | " + sub + " | \"@\")+)";
    const std::string abempty = "((\"/\" " + seg + ")*)";
    const std::string absolute = "(\"/\" (" + seg_nz + " (\"/\" " + seg + ")*)?)";
    const std::string rootless = "(" + seg_nz + " (\"/\" " + seg + ")*)";
    const std::string noscheme = "(" + seg_nc + " (\"/\" " + seg + ")*)";
    const std::string userinfo = "((" + unreserved + " | " + pct + " | " + sub + " | \":\")* \"@\")";
    const std::string host = "(\"[\" " + ipv6() + " \"]\" | " + ipv4() + " | (" + unreserved + " | " + pct + " | " + sub + ")*)";
    const std::string authority = "(" + userinfo + "? " + host + " (\":\" [0-9]{0,5})?)";
    const std::string tail = "((\"?\" (" + pchar + " | [/?])*)? (\"#\" (" + pchar + " | [/?])*)?)";
    const std::string scheme = "([A-Za-z] [A-Za-z0-9+.-]*)";
    const std::string absolute_uri = "(" + scheme + " \":\" (\"//\" " + authority + " " + abempty + " | " + absolute + " | " +
                                     rootless + " | \"\") " + tail + ")";
    if (f == "uri" || f == "iri") return absolute_uri;
    const std::string relative = "((\"//\" " + authority + " " + abempty + " | " + absolute + " | " + noscheme + " | \"\") " +
                                 tail + ")";
    return "(" + absolute_uri + " | " + relative + ")";
  }
  if (f == "uri-template") {
    // RFC 6570 level 4: literals and {operator? varspec, ...} expressions.
    const std::string pct = "(\"%\" [0-9A-Fa-f] [0-9A-Fa-f])";
    const std::string literal = "([!#$&(-;=?-\\x5B\\x5D_a-z~] | [\\U000000A0-\\U0000D7FF\\U0000F900-\\U0000FDCF\\U0000FDF0-\\U0000FFEF\\U00010000-\\U000EFFFD] | " + pct + ")";
    const std::string varchar = "([A-Za-z0-9_] | " + pct + ")";
    const std::string varspec = "(" + varchar + " (\".\"? " + varchar + ")* (\":\" [1-9] [0-9]{0,3} | \"*\")?)";
    const std::string expr = "(\"{\" [-+#./;?&=,!@|]? " + varspec + " (\",\" " + varspec + ")* \"}\")";
    return "((" + literal + " | " + expr + ")*)";
  }
  if (f == "email") {
    // dot-atom or quoted-string local part (RFC 5321 4.1.2; in JSON text the
    // quotes and backslashes are escaped), host name or address literal.
    const std::string atext = "[A-Za-z0-9!#$%&'*+=?^_`{|}~/-]";
    const std::string label = "([A-Za-z0-9] ([A-Za-z0-9-]{0,61} [A-Za-z0-9])?)";
    const std::string q = R"("\\\"")";  // a quote, escaped in JSON text
    const std::string bs = R"("\\\\")";  // a backslash, escaped in JSON text
    const std::string qtext = R"([ !#-\x5B\x5D-~])";
    const std::string qchar = "(" + qtext + " | " + bs + " (" + qtext + " | " + q + " | " + bs + "))";
    const std::string qlocal = "(" + q + " " + qchar + "{0,64} " + q + ")";
    // Bounded (a subset): atoms of at most 64 characters, at most 8 dots,
    // a quoted local part of at most 64 characters.
    return "(((" + atext + "){1,64} (\".\" (" + atext + "){1,64}){0,8} | " + qlocal + ") \"@\" (" + label +
           " (\".\" " + label + "){0,8} | \"[\" " + ipv4() + " \"]\" | \"[IPv6:\" " + ipv6() + " \"]\"))";
  }
  return std::nullopt;
}

}  // namespace kvad::schema_text
