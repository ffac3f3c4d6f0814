// allOf merging, $ref resolution and oneOf checks of the JSON Schema
// compiler (engine/grammar/json_schema.cpp). Internal to engine/.
#pragma once
#include <set>
#include <unordered_map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <optional>

#include "engine/grammar/json_schema_uri.h"

namespace kvad::schema_merge {

using oj = nlohmann::ordered_json;

/// Keywords that constrain nothing (annotations, containers of definitions).
inline const std::set<std::string> kIgnored = {

    "title", "description", "default", "examples", "$comment", "$schema", "$id", "$anchor", "deprecated",
    "readOnly", "writeOnly", "contentMediaType", "contentEncoding", "contentSchema", "$defs", "definitions"};
inline const std::set<std::string> kTypes = {"null", "boolean", "object", "array", "string", "number", "integer"};
inline constexpr int kMaxDepth = 64;
/// The keywords the compiler enforces (any other, outside kIgnored, is refused).
inline const std::set<std::string> kSupportedKeywords = {
    "type", "enum", "const", "properties", "required", "additionalProperties", "items", "prefixItems", "minItems",
    "maxItems", "uniqueItems", "minLength", "maxLength", "pattern", "format", "minimum", "maximum",
    "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "anyOf", "oneOf", "allOf", "$ref", "not", "if", "then",
    "else", "contains", "minContains", "maxContains", "minProperties", "maxProperties", "dependentRequired",
    "propertyNames", "patternProperties", "unevaluatedProperties", "unevaluatedItems", "dependentSchemas",
    // written by the negation (json_schema_logic.h)
    "x-kvad-notValues", "x-kvad-fraction"};
/// The most values of one enum, properties of one object, and branches of
/// one anyOf / oneOf / allOf the compiler takes (SchemaError beyond).
inline constexpr size_t kMaxEnumValues = 1024;
inline constexpr size_t kMaxProperties = 512;
inline constexpr size_t kMaxBranches = 1024;

/// Merges schemas that must all hold (allOf, $ref next to siblings) into one
/// when the result is expressible keyword by keyword; throws SchemaError
/// naming the keyword otherwise.
class Merger {
 public:
  explicit Merger(const oj& root) : root_(root) {}
  ~Merger();
  /// The target of a reference: "#..." in the root resource (JSON pointer,
  /// RFC 6901, after URI percent-decoding, or a plain-name $anchor), or an
  /// absolute URI naming one of the document's $id resources and a fragment
  /// in it (schema_uri::absolutize wrote them so); `ptr` gets the target's
  /// JSON pointer in the document. Throws SchemaError for a reference
  /// outside the document or one that does not resolve.
  const oj& resolve(const oj& ref, const std::string& path, std::string& ptr) const;
  /// `s` with its $ref replaced by the target merged in.
  oj inline_ref(const oj& s, const std::string& path, int depth) const;
  /// A schema equivalent to allOf [a, b].
  oj merge(const oj& a, const oj& b, const std::string& path, int depth) const;

 private:
  const oj& root_;
  /// The document's $id resources and anchors, built at the first absolute
  /// reference.
  mutable std::optional<schema_uri::Index> uris_;
  /// Member indexes of the large objects a reference passed through
  /// ($defs of many entries): each lookup is then a hash, not a scan.
  mutable std::unordered_map<const oj*, std::unordered_map<std::string, const oj*>> index_;
  const oj* member(const oj& obj, const std::string& key) const;
};

/// `s` with unevaluatedProperties / unevaluatedItems written as what they
/// mean when s has no in-place applicator (allOf, anyOf, oneOf, not, if,
/// $ref, dependentSchemas): additionalProperties / items, or nothing where
/// s already has those (they evaluate every member). Unchanged when s has
/// neither keyword; throws SchemaError naming the keyword when s has an
/// applicator next to it, or contains (annotations the rewriting does not
/// track). Next to patternProperties, unevaluatedProperties is
/// additionalProperties exactly: both take the keys no property or pattern
/// takes.
oj settle_unevaluated(const oj& s, const std::string& path);

/// -1, 0 or 1 as JSON numbers a < b, a == b, a > b, compared by value
/// exactly: integers as int64 / uint64 (not rounded through double, which
/// cannot tell 2^53 + 1 from 2^53), an integer against a double exactly.
int compare_numbers(const oj& a, const oj& b);

/// Refuses a $schema other than the published drafts' metaschemas (a custom
/// one may switch vocabularies off).
void check_metaschema(const oj& v, const std::string& path);
/// Refuses oneOf branches that might both match (see the definition).
void check_disjoint(const std::vector<oj>& branches, const std::string& path);

}  // namespace kvad::schema_merge
