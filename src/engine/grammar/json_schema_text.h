// Pieces of the JSON Schema compiler (engine/grammar/json_schema.cpp) that turn
// string and number constraints into GBNF expressions. Internal to engine/.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvad::schema_text {

/// A GBNF string literal matching exactly `bytes` (UTF-8).
std::string lit(std::string_view bytes);

/// Code point ranges [first, second], inclusive.
using CodeRanges = std::vector<std::pair<uint32_t, uint32_t>>;

/// A parsed ECMA-262 pattern of the subset regex_to_gbnf takes: character
/// sets (literals, classes, escapes, '.'), sequences, groups of
/// alternatives and repetitions ('*' '+' '?' and {m}, {m,}, {m,n}).
struct RegexNode {
  enum class Kind { Set, Cat, Alt, Rep } kind = Kind::Cat;
  CodeRanges set;               ///< Set: the characters it matches
  std::vector<RegexNode> kids;  ///< Cat: in order; Alt: the alternatives; Rep: the one repeated
  uint32_t lo = 0, hi = 0;      ///< Rep: {lo, hi}
  bool open = false;            ///< Rep: no upper bound
  char op = 0;                  ///< Rep: '*', '+' or '?' as written, 0 for braces
};
/// One top-level alternative of a pattern, with its anchors (^ at the
/// start, $ at the end; unanchored ends match anywhere, as RegExp.test does).
struct RegexBranch {
  bool anchored_start = false, anchored_end = false;
  RegexNode body;
};
/// GBNF for one character of a JSON string's content whose (decoded) code
/// point is in `set`: the character itself, or each escape JSON allows for
/// it (\" \\ \/ \b \f \n \r \t, \u00XX in either case for controls).
std::string json_char_set(const CodeRanges& set);

/// Parses `pattern`. Throws std::invalid_argument, as regex_to_gbnf does.
std::vector<RegexBranch> parse_regex(std::string_view pattern);

/// GBNF for the content (between the quotes) of a JSON string that matches
/// the ECMA-262 regex `pattern` (unanchored unless ^ / $ at its ends).
/// `jchar` is the rule name of one JSON string character. Throws
/// std::invalid_argument with the reason for a construct outside the subset.
std::string regex_to_gbnf(std::string_view pattern, const std::string& jchar);

/// GBNF for the content of a string of `format` (date-time, date, time,
/// duration, uuid, email, ipv4, ipv6, hostname, uri, uri-reference, iri,
/// iri-reference, uri-template, json-pointer, relative-json-pointer per RFC
/// 3339, RFC 4122, RFC 5321 dot-atoms, RFC 2673 dotted quads, RFC 4291 as
/// RFC 3986 writes it, RFC 1123 (at most 8 labels of 30), RFC 3986, RFC
/// 3987, RFC 6570, RFC 6901; "/" and "~" written plainly); nullopt for
/// another format. Uses the rule `frac`
/// (an optional fraction of a second: ( "." [0-9]+ )?).
std::optional<std::string> format_to_gbnf(std::string_view format);

/// GBNF for decimal integers (JSON number syntax, no leading zeros) in
/// [lo, hi]; nullopt bounds are open. |bounds| < 1e18.
std::string int_range(std::optional<int64_t> lo, std::optional<int64_t> hi);

/// GBNF for non-negative decimal integers in [lo, hi] (hi nullopt: open
/// above, up to 16 digits or one more than lo has).
std::string nonneg_range(uint64_t lo, std::optional<uint64_t> hi);

/// GBNF for JSON numbers without an exponent in the range from `lo` to
/// `hi` (decimal text as JSON writes it, e.g. "-2.0001"; nullopt: open;
/// `*_ex`: exclusive). Throws std::invalid_argument for a bound with an
/// exponent or 18 or more integer digits.
std::string decimal_range(const std::optional<std::string>& lo, bool lo_ex, const std::optional<std::string>& hi,
                          bool hi_ex);

/// GBNF for decimal integers divisible by k (2 <= k <= 1000), optional sign.
std::string multiple_of(uint32_t k);

/// GBNF for JSON numbers without an exponent that are multiples of
/// K / 10^d (K <= 1000, K * (d + 1) <= 4000), optional sign; the expression,
/// then '\n' and the rule definitions it uses (names "dmodKeD-...").
std::string decimal_multiple_of(uint32_t K, uint32_t d);

}  // namespace kvad::schema_text
