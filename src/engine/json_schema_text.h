// Pieces of the JSON Schema compiler (engine/json_schema.cpp) that turn
// string and number constraints into GBNF expressions. Internal to engine/.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kvad::schema_text {

/// A GBNF string literal matching exactly `bytes` (UTF-8).
std::string lit(std::string_view bytes);

/// GBNF for the content (between the quotes) of a JSON string that matches
/// the ECMA-262 regex `pattern` (unanchored unless ^ / $ at its ends).
/// `jchar` is the rule name of one JSON string character. Throws
/// std::invalid_argument with the reason for a construct outside the subset.
std::string regex_to_gbnf(std::string_view pattern, const std::string& jchar);

/// GBNF for the content of a string of `format` (date-time, date, time,
/// uuid, email, ipv4 per RFC 3339, RFC 4122, RFC 5321 dot-atoms, RFC 2673
/// dotted quads); nullopt for another format. Uses the rule `frac`
/// (an optional fraction of a second: ( "." [0-9]+ )?).
std::optional<std::string> format_to_gbnf(std::string_view format);

/// GBNF for decimal integers (JSON number syntax, no leading zeros) in
/// [lo, hi]; nullopt bounds are open. |bounds| < 1e18.
std::string int_range(std::optional<int64_t> lo, std::optional<int64_t> hi);

/// GBNF for non-negative decimal integers in [lo, hi] (hi nullopt: open).
std::string nonneg_range(uint64_t lo, std::optional<uint64_t> hi);

/// GBNF for decimal integers divisible by k (2 <= k <= 1000), optional sign.
std::string multiple_of(uint32_t k);

}  // namespace kvad::schema_text
