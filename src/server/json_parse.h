// Request JSON parsed in time linear in its size, key order kept.
//
// nlohmann's ordered_json keeps an object's members in a vector and its
// parser inserts each member through ordered_map::emplace, which scans the
// members before it for a duplicate key: an object of n keys costs n^2 / 2
// key comparisons (a 1 MB object of 80k keys took 15.6 s, 10^6 keys did not
// finish in 300 s). Templates and schemas need the order (tool parameters'
// properties, tool-call arguments), so an unordered parse is not an answer;
// this one builds the same ordered_json through nlohmann's SAX interface
// and finds duplicate keys with a hash index while an object is open.
#pragma once
#include <string_view>

#include <nlohmann/json.hpp>

namespace kvad::server {

/// `text` as one JSON value, objects' members in document order; a key
/// repeated in one object keeps its first position and its last value
/// (nlohmann's ordered_json parser does the same). Costs time and memory
/// linear in text.size() (an object of more than 16 members has an index of
/// at most 16 bytes a member while it is open). Nesting is not bounded here:
/// check json_depth_over() first.
/// Throws nlohmann::json::parse_error (and out_of_range for a number beyond
/// double, e.g. 1e400) with the parser's message, as json::parse does.
nlohmann::ordered_json parse_json_ordered(std::string_view text);

/// As parse_json_ordered, but a value of type discarded instead of throwing.
nlohmann::ordered_json parse_json_ordered_or_discarded(std::string_view text);

}  // namespace kvad::server
