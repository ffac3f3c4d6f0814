// Numbers of the JSON Schema compiler as GBNF (json_schema_text.h): integer
// and decimal ranges compared digit by digit, and multiples of a divisor as
// the automaton of remainders over the decimal digits.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/grammar/json_schema_text.h"

namespace kvad::schema_text {

namespace {
// Equal-length decimal strings lo <= hi: alternatives matching [lo, hi].
std::string same_len(const std::string& lo, const std::string& hi) {
  const size_t n = lo.size();
  if (n == 0) return "";
  if (lo == hi) return lit(lo);
  if (lo[0] == hi[0]) return lit(lo.substr(0, 1)) + " " + same_len(lo.substr(1), hi.substr(1));
  const std::string rest_lo = lo.substr(1), rest_hi = hi.substr(1);
  const bool lo_zero = rest_lo.find_first_not_of('0') == std::string::npos;
  const bool hi_nine = rest_hi.find_first_not_of('9') == std::string::npos;
  auto digits = [](size_t k) { return k == 0 ? std::string() : k == 1 ? std::string(" [0-9]") : " [0-9]{" + std::to_string(k) + "}"; };
  std::vector<std::string> alts;
  char a = lo[0], b = hi[0];
  if (!lo_zero) { alts.push_back(lit(std::string(1, a)) + " " + same_len(rest_lo, std::string(n - 1, '9'))); ++a; }
  if (!hi_nine) --b;
  if (a <= b) alts.push_back("[" + std::string(1, a) + "-" + std::string(1, b) + "]" + digits(n - 1));
  if (!hi_nine) alts.push_back(lit(std::string(1, hi[0])) + " " + same_len(std::string(n - 1, '0'), rest_hi));
  std::string out = "(";
  for (size_t k = 0; k < alts.size(); ++k) out += (k ? " | " : "") + alts[k];
  return out + ")";
}
}  // namespace

std::string nonneg_range(uint64_t lo, std::optional<uint64_t> hi) {
  if (hi && *hi < lo) return "[^\\x00-\\U0010FFFF]";
  auto pow10 = [](size_t n) { uint64_t p = 1; for (size_t k = 0; k < n; ++k) p *= 10; return p; };
  std::vector<std::string> alts;
  const size_t nlo = std::to_string(lo).size();
  const size_t nhi = hi ? std::to_string(*hi).size() : nlo;
  for (size_t n = nlo; n <= nhi; ++n) {
    const uint64_t first = n == 1 ? 0 : pow10(n - 1);
    const uint64_t last = pow10(n) - 1;
    const uint64_t a = std::max(lo, first);
    const uint64_t b = hi ? std::min(*hi, last) : last;
    if (a <= b) alts.push_back(same_len(std::to_string(a), std::to_string(b)));
  }
  // Open above: at most 16 digits, or the lower bound's digits and one more.
  if (!hi) alts.push_back("[1-9] [0-9]{" + std::to_string(nlo) + "," + std::to_string(std::max<size_t>(nlo, 15)) + "}");
  if (alts.empty()) return "[^\\x00-\\U0010FFFF]";
  std::string out = "(";
  for (size_t k = 0; k < alts.size(); ++k) out += (k ? " | " : "") + alts[k];
  return out + ")";
}

std::string int_range(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  std::vector<std::string> alts;
  if (!hi || *hi >= 0) alts.push_back(nonneg_range(lo && *lo > 0 ? static_cast<uint64_t>(*lo) : 0,
                                                   hi ? std::optional<uint64_t>(static_cast<uint64_t>(*hi)) : std::nullopt));
  if (!lo || *lo < 0) {
    const int64_t top = hi ? std::min<int64_t>(*hi, -1) : -1;  // the negatives in [lo, top]
    if (!lo || *lo <= top)
      alts.push_back("\"-\" " + nonneg_range(static_cast<uint64_t>(-top),
                                             lo ? std::optional<uint64_t>(static_cast<uint64_t>(-*lo)) : std::nullopt));
  }
  if (alts.empty()) return "[^\\x00-\\U0010FFFF]";
  std::string out = "(";
  for (size_t k = 0; k < alts.size(); ++k) out += (k ? " | " : "") + alts[k];
  return out + ")";
}

namespace {

const char* kNone = "[^\\x00-\\U0010FFFF]";

// A fraction's digits d (0.d) between bounds: lower `f` (digits, "" = 0;
// strict: 0.d > 0.f), upper `g` (nullopt: none). Returns whether the empty
// string qualifies and GBNF for the non-empty d that do (kNone: none).
struct Frac { bool empty_ok; std::string nonempty; };
Frac frac_between(const std::string& f, bool sl, const std::optional<std::string>& g, bool sh) {
  Frac r;
  const bool zero_ok = f.empty() && !sl;  // the lower bound lets 0 through
  if (g && g->empty()) {                  // at most 0: zeros only
    r.empty_ok = zero_ok && !sh;
    r.nonempty = zero_ok && !sh ? "\"0\"{1,16}" : kNone;
    return r;
  }
  if (f.empty() && !g) {
    r.empty_ok = !sl;
    r.nonempty = sl ? "\"0\"{0,15} [1-9] [0-9]{0,15}" : "[0-9]{1,16}";
    return r;
  }
  r.empty_ok = zero_ok;  // g is above 0 here
  std::vector<std::string> alts;
  const int lf = f.empty() ? 0 : f[0] - '0';
  const int hg = g ? (g->empty() ? 0 : (*g)[0] - '0') : 9;
  for (int c = lf; c <= hg; ++c) {
    const bool lo_tight = c == lf && !(f.empty() && !sl);
    const bool hi_tight = g && c == hg;
    const std::string digit(1, static_cast<char>('0' + c));
    if (!lo_tight && !hi_tight) {
      int e = c;  // a run of free digits
      while (e + 1 <= hg && !(g && e + 1 == hg)) ++e;
      alts.push_back((c == e ? lit(digit) : "[" + digit + "-" + std::string(1, static_cast<char>('0' + e)) + "]") + " [0-9]{0,16}");
      c = e;
      continue;
    }
    const std::string f2 = lo_tight && !f.empty() ? f.substr(1) : "";
    const bool sl2 = lo_tight && sl;
    std::optional<std::string> g2;
    if (hi_tight) g2 = g->empty() ? std::string() : g->substr(1);
    const Frac rest = frac_between(f2, sl2, g2, hi_tight && sh);
    if (rest.nonempty == kNone && !rest.empty_ok) continue;
    if (rest.nonempty == kNone) alts.push_back(lit(digit));
    else if (rest.empty_ok) alts.push_back(lit(digit) + " (" + rest.nonempty + ")?");
    else alts.push_back(lit(digit) + " " + rest.nonempty);
  }
  if (alts.empty()) {
    r.nonempty = kNone;
  } else {
    r.nonempty = "(";
    for (size_t k = 0; k < alts.size(); ++k) r.nonempty += (k ? " | " : "") + alts[k];
    r.nonempty += ")";
  }
  return r;
}

std::string fraction(const Frac& f) {
  if (f.nonempty == kNone) return f.empty_ok ? "" : kNone;
  return f.empty_ok ? "(\".\" " + f.nonempty + ")?" : "\".\" " + f.nonempty;
}

struct Dec { uint64_t i = 0; std::string frac; bool neg = false; };
Dec parse_dec(const std::string& t) {
  Dec d;
  size_t k = 0;
  if (k < t.size() && t[k] == '-') { d.neg = true; ++k; }
  const size_t dot = t.find('.', k);
  const std::string ip = t.substr(k, dot == std::string::npos ? std::string::npos : dot - k);
  if (ip.empty() || ip.size() > 18 || ip.find_first_not_of("0123456789") != std::string::npos)
    throw std::invalid_argument("bound " + t + " is not a plain decimal under 1e18");
  d.i = std::stoull(ip);
  if (dot != std::string::npos) {
    d.frac = t.substr(dot + 1);
    if (d.frac.empty() || d.frac.size() > 40 || d.frac.find_first_not_of("0123456789") != std::string::npos)
      throw std::invalid_argument("bound " + t + " is not a plain decimal");
    while (!d.frac.empty() && d.frac.back() == '0') d.frac.pop_back();
  }
  if (d.i == 0 && d.frac.empty()) d.neg = false;
  return d;
}

// Magnitudes m >= a (strict: >) and <= b (nullopt: none), written
// ("0" | [1-9][0-9]*) ("." [0-9]+)?.
std::string magnitude(const Dec& a, bool a_ex, const std::optional<Dec>& b, bool b_ex) {
  std::vector<std::string> alts;
  if (b && b->i < a.i) return kNone;
  const std::string any_frac = "(\".\" [0-9]{1,16})?";
  if (!b) alts.push_back(nonneg_range(a.i + 1, std::nullopt) + " " + any_frac);
  else if (b->i >= a.i + 2) alts.push_back(nonneg_range(a.i + 1, b->i - 1) + " " + any_frac);
  auto at = [&](uint64_t i, const Frac& f) {
    const std::string fr = fraction(f);
    if (fr == kNone) return;
    alts.push_back(lit(std::to_string(i)) + (fr.empty() ? "" : " " + fr));
  };
  if (b && b->i == a.i) {
    at(a.i, frac_between(a.frac, a_ex, b->frac, b_ex));
  } else {
    at(a.i, frac_between(a.frac, a_ex, std::nullopt, false));
    if (b) at(b->i, frac_between("", false, b->frac, b_ex));
  }
  if (alts.empty()) return kNone;
  std::string out = "(";
  for (size_t k = 0; k < alts.size(); ++k) out += (k ? " | " : "") + alts[k];
  return out + ")";
}

}  // namespace

std::string decimal_range(const std::optional<std::string>& lo, bool lo_ex, const std::optional<std::string>& hi,
                          bool hi_ex) {
  std::optional<Dec> l, h;
  if (lo) l = parse_dec(*lo);
  if (hi) h = parse_dec(*hi);
  std::vector<std::string> alts;
  // x >= 0: m in [max(lo, 0), hi].
  if (!h || !h->neg) {
    Dec a;
    bool a_ex = false;
    if (l && !l->neg) { a = *l; a_ex = lo_ex; }
    const std::string m = magnitude(a, a_ex, h, hi_ex);
    if (m != kNone) alts.push_back(m);
  }
  // x < 0: x = -m, m in (max(-hi, 0), -lo].
  if (!l || l->neg) {
    Dec a;
    bool a_ex = true;  // m > 0
    if (h && h->neg) { a = *h; a.neg = false; a_ex = hi_ex; }
    std::optional<Dec> b;
    if (l) { b = *l; b->neg = false; }
    const std::string m = magnitude(a, a_ex, b, lo_ex);
    if (m != kNone) alts.push_back("\"-\" " + m);
  }
  if (alts.empty()) return kNone;
  std::string out = "(";
  for (size_t k = 0; k < alts.size(); ++k) out += (k ? " | " : "") + alts[k];
  return out + ")";
}

std::string multiple_of(uint32_t k) {
  // A DFA over the value mod k read digit by digit: state r, digit d ->
  // (10 r + d) mod k; accept in state 0. Rule names are local: the caller
  // gets one expression using nested rules written inline as groups is not
  // possible (they recurse), so this returns rule definitions after a '\n'.
  std::string defs;
  const std::string base = "mod" + std::to_string(k) + "-";
  for (uint32_t r = 0; r < k; ++r) {
    std::vector<std::string> alts;
    for (uint32_t t = 0; t < k; ++t) {
      std::string cls;
      for (uint32_t d = 0; d < 10; ++d)
        if ((10 * r + d) % k == t) cls += static_cast<char>('0' + d);
      if (!cls.empty()) alts.push_back("[" + cls + "] " + base + std::to_string(t));
    }
    if (r == 0) alts.push_back("\"\"");
    defs += base + std::to_string(r) + " ::= ";
    for (size_t a = 0; a < alts.size(); ++a) defs += (a ? " | " : "") + alts[a];
    defs += "\n";
  }
  std::vector<std::string> first;
  for (uint32_t t = 0; t < k; ++t) {
    std::string cls;
    for (uint32_t d = 1; d < 10; ++d)
      if (d % k == t) cls += static_cast<char>('0' + d);
    if (!cls.empty()) first.push_back("[" + cls + "] " + base + std::to_string(t));
  }
  std::string expr = "(\"-\"? (\"0\"";
  for (auto& f : first) expr += " | " + f;
  return expr + "))\n" + defs;
}

std::string decimal_multiple_of(uint32_t K, uint32_t d) {
  // A DFA over the digits of x * 10^d mod K: integer digits, then the
  // fraction's first d digits (missing ones count as 0), then only zeros.
  std::vector<uint32_t> p10(d + 1, 1 % K);
  for (uint32_t j = 1; j <= d; ++j) p10[j] = (p10[j - 1] * 10) % K;
  const std::string base = "dmod" + std::to_string(K) + "e" + std::to_string(d) + "-";
  auto I = [&](uint32_t r) { return base + "i" + std::to_string(r); };
  auto E = [&](uint32_t r) { return base + "e" + std::to_string(r); };
  auto F = [&](uint32_t r, uint32_t j) { return base + "f" + std::to_string(r) + "-" + std::to_string(j); };
  auto join = [](const std::vector<std::string>& alts) {
    if (alts.empty()) return std::string(kNone);
    std::string o;
    for (size_t a = 0; a < alts.size(); ++a) o += (a ? " | " : "") + alts[a];
    return o;
  };
  // Digit classes from state r to each next state.
  auto steps = [&](uint32_t r, int first_digit, const std::function<std::string(uint32_t)>& to) {
    std::vector<std::string> alts;
    for (uint32_t t = 0; t < K; ++t) {
      std::string cls;
      for (int c = first_digit; c < 10; ++c)
        if ((10 * r + static_cast<uint32_t>(c)) % K == t) cls += static_cast<char>('0' + c);
      if (!cls.empty()) {
        const std::string next = to(t);
        if (!next.empty()) alts.push_back("[" + cls + "] " + next);
      }
    }
    return alts;
  };
  std::string defs;
  for (uint32_t r = 0; r < K; ++r) {
    auto alts = steps(r, 0, [&](uint32_t t) { return I(t); });
    alts.push_back(E(r));
    defs += I(r) + " ::= " + join(alts) + "\n";
    std::vector<std::string> e;
    if ((r * p10[d]) % K == 0) e.push_back("\"\"");
    e.push_back("\".\" " + F(r, 0));
    defs += E(r) + " ::= " + join(e) + "\n";
    for (uint32_t j = 0; j < d; ++j) {
      auto fa = steps(r, 0, [&](uint32_t t) { return j + 1 < d || t == 0 ? F(t, j + 1) : std::string(); });
      if (j >= 1 && (r * p10[d - j]) % K == 0) fa.push_back("\"\"");
      defs += F(r, j) + " ::= " + join(fa) + "\n";
    }
  }
  defs += F(0, d) + " ::= \"0\"{0,16}\n";
  // Leading digit: "0" or [1-9] (state c mod K).
  std::vector<std::string> first{"\"0\" " + E(0)};
  for (auto& a : steps(0, 1, [&](uint32_t t) { return I(t); })) first.push_back(a);
  return "(\"-\"? (" + join(first) + "))\n" + defs;
}

}  // namespace kvad::schema_text
