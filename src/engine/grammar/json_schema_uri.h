// Base URIs of a JSON Schema document: the schema resources its "$id"s
// declare and the references that depend on them (JSON Schema 2020-12 Core
// §8.2 "Base URI, Anchors, and Dereferencing"; URI resolution per RFC 3986
// §5.2). Internal to the JSON Schema compiler (engine/grammar/).
//
// The compiler resolves every "$ref" against the whole document only: a
// reference outside it (another file, a URL, a metaschema) is refused. Here
// the references whose meaning depends on a base URI -- those inside a
// subschema with its own "$id", and those that are not a bare fragment
// "#..." -- are rewritten to absolute URIs once, so that resolving one never
// needs to know where it was written (allOf merging moves subschemas).
#pragma once
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>

#include <nlohmann/json.hpp>

namespace kvad::schema_uri {

using oj = nlohmann::ordered_json;

/// The base URI of a document without a root "$id" (RFC 3986 §5.1.4: an
/// application-defined default).
inline constexpr const char* kDefaultBase = "https://kvad.invalid/schema.json";

/// `ref` resolved against the absolute URI `base` (RFC 3986 §5.2.2, with
/// remove_dot_segments); a `ref` with a scheme is returned as it is (dot
/// segments removed).
std::string resolve(const std::string& base, const std::string& ref);

/// A subschema: where it is in the document.
struct Place {
  const oj* node = nullptr;
  std::string ptr;  ///< its JSON pointer in the document ("" for the root)
};

/// The schema resources of a document and their anchors.
struct Index {
  /// Absolute URI without fragment -> the subschema whose "$id" it is (the
  /// root under its "$id" or kDefaultBase).
  std::unordered_map<std::string, Place> resources;
  /// (resource URI, anchor name) -> the subschema with that "$anchor" (or
  /// "$dynamicAnchor", which a plain "$ref" reaches like an anchor).
  std::map<std::pair<std::string, std::string>, Place> anchors;
};
/// Walks `root` (not into enum, const, default or examples, which hold
/// values, not schemas). Throws SchemaError for an anchor defined twice in
/// one resource.
Index index(const oj& root);

/// `root` with its base-dependent "$ref"s (see above) made absolute, or
/// nullopt when it has none (the document is used as it is).
std::optional<oj> absolutize(const oj& root);

}  // namespace kvad::schema_uri
