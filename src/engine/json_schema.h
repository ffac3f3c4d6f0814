// JSON Schema (draft 2020-12) -> GBNF grammar (engine/grammar.h), for
// OpenAI's response_format json_schema and for tool-call arguments.
//
// The grammar accepts JSON text of values valid under the schema: compact,
// or with up to 20 whitespace characters ([ \t\n\r]) around structural
// characters; no whitespace before or after the whole value. Keys of an
// object come in the order of the schema's `properties` (required ones
// mandatory), with additional properties (when allowed) anywhere between
// them. Supported keywords (semantics from the JSON Schema 2020-12 Core and
// Validation specifications, json-schema.org):
//   type, enum, const, properties, required, additionalProperties, items,
//   prefixItems, minItems, maxItems, uniqueItems: false, minLength,
//   maxLength, pattern (an ECMA-262 regex subset: literals, escapes, classes,
//   \d \w \s, ., groups, |, * + ? {m} {m,} {m,n}, ^ and $ at the ends),
//   format (date-time, date, time, uuid, email, ipv4), minimum, maximum,
//   exclusiveMinimum, exclusiveMaximum (integers, and numbers bounded by
//   integers), multipleOf (integer divisors of integers), anyOf, oneOf
//   (branches of disjoint types or values), allOf (when the branches merge),
//   $ref to "#" and JSON pointers into the document ($defs, definitions,
//   recursion included), boolean schemas; annotations (title, description,
//   default, examples, $comment, $schema, $id, $anchor, deprecated,
//   readOnly, writeOnly, content*) are ignored. Any other keyword, or a
//   supported one in a form the grammar cannot enforce, throws SchemaError
//   naming it: a schema is never silently weakened.
#pragma once
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "engine/grammar.h"

namespace kvad {

/// A schema the compiler cannot enforce (or that is not a schema);
/// `keyword` names the keyword, `path` is the JSON pointer of the subschema.
class SchemaError : public GrammarError {
 public:
  SchemaError(std::string keyword, std::string path, const std::string& why)
      : GrammarError("json schema: " + (keyword.empty() ? std::string() : "keyword '" + keyword + "' ") + "at '" +
                     (path.empty() ? std::string("#") : path) + "': " + why),
        keyword(std::move(keyword)), path(std::move(path)) {}
  std::string keyword;
  std::string path;
};

/// GBNF text (start rule "root") for JSON values valid under `schema`.
/// Limits: schemas nested at most 64 deep, at most 4096 rules, counts
/// (minLength, maxItems, ...) at most 10000. Throws SchemaError.
std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema);

/// The same, parsed: the grammar for the sampler. Throws SchemaError (also
/// for recursion that consumes nothing, e.g. {"$ref": "#"}).
std::shared_ptr<const Grammar> json_schema_grammar(const nlohmann::ordered_json& schema);

/// GBNF for any JSON value (`object_only`: any JSON object, OpenAI's
/// response_format {"type": "json_object"}).
std::string json_any_gbnf(bool object_only);

}  // namespace kvad
