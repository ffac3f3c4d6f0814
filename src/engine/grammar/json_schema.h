// JSON Schema (draft 2020-12) -> GBNF grammar (engine/grammar/grammar.h), for
// OpenAI's response_format json_schema and for tool-call arguments.
//
// The grammar accepts JSON text of values valid under the schema: compact,
// or (JsonSchemaOptions::whitespace) with one space or one newline and a
// bounded indent around structural characters; no whitespace before or
// after the whole value; numbers with at most 16 digits before and after
// the point unless the schema's bounds need more; strings as
// Python's json.dumps writes them (no \u escapes but for control
// characters, in the keys of additional properties). Keys of an object come
// as JsonSchemaOptions::key_order says. Numbers with bounds are written
// without an exponent. Supported keywords (semantics from the JSON Schema 2020-12 Core and
// Validation specifications, json-schema.org):
//   type, enum, const, properties, required, additionalProperties, items,
//   prefixItems, minItems, maxItems, uniqueItems: false, minLength,
//   maxLength, pattern (an ECMA-262 regex subset: literals, escapes, classes,
//   \d \w \s, ., groups, |, * + ? {m} {m,} {m,n}, ^ and $ at the ends),
//   format (date-time, date, time, duration, uuid, email, ipv4, ipv6,
//   hostname, uri, uri-reference, iri, iri-reference, uri-template,
//   json-pointer, relative-json-pointer), minimum, maximum,
//   exclusiveMinimum, exclusiveMaximum (integers, and numbers with integer
//   bounds), multipleOf (integer divisors of integers), anyOf, oneOf
//   (branches of disjoint types or values), allOf (when the branches merge),
//   $ref to "#" and JSON pointers into the document ($defs, definitions,
//   recursion included), boolean schemas; annotations (title, description,
//   default, examples, $comment, $schema, $id, $anchor, deprecated,
//   readOnly, writeOnly, content*) are ignored. Any other keyword, or a
//   supported one in a form the grammar cannot enforce, throws SchemaError
//   naming it: a schema is never silently weakened.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "engine/grammar/grammar.h"

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

struct JsonSchemaOptions {
  /// Keys of an object with `properties`: in the schema's order (as OpenAI's
  /// structured outputs write them; a "reasoning" key before an "answer" key
  /// stays first), or in any order (each key once; objects of at most 6
  /// declared properties, more fall back to the schema's order).
  /// Additional properties may come anywhere either way.
  enum class KeyOrder { kSchema, kAny };
  KeyOrder key_order = KeyOrder::kSchema;
  /// Prepended to every rule name (the start rule is prefix + "root"), so
  /// that several schemas can live in one grammar, e.g. tool calls:
  ///   root ::= "<tool_call>" call-root "</tool_call>"   + the rules of
  ///   json_schema_to_gbnf(tool_call_schema(tools), {.prefix = "call-"}).
  /// Letters, digits, '-' and '_', starting with a letter.
  std::string prefix;
  /// Whitespace outside strings: none (compact, as OpenAI's structured
  /// outputs look), or one space or one newline with an indent of at most
  /// 20 spaces or tabs at each place JSON allows whitespace (pretty, what
  /// json.dumps(indent=...) and json.dumps with separators ", " ": " write).
  enum class Whitespace { kCompact, kPretty };
  Whitespace whitespace = Whitespace::kCompact;
  /// Strings whose schema gives no maxLength (and no pattern, format or
  /// enum), and keys of additional properties: at most this many
  /// characters, raised to the schema's minLength (0: unbounded).
  uint32_t max_string_length = 0;
  /// Arrays whose schema gives no maxItems: at most this many items (after
  /// prefixItems' own), raised to the schema's minItems (0: unbounded).
  /// Arrays inside values the schema leaves free (no schema) are not bounded.
  uint32_t max_items = 0;
};

/// GBNF text (start rule opt.prefix + "root") for JSON values valid under
/// `schema`. Limits: schemas nested at most 64 deep, at most 4096 rules,
/// counts (minLength, maxItems, ...) at most 10000, enum at most 1024
/// values. Throws SchemaError.
std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema, const JsonSchemaOptions& opt = {});

/// The same, parsed: the grammar for the sampler (GenParams::grammar).
/// Throws SchemaError (also for recursion that consumes nothing, e.g.
/// {"$ref": "#"}, and for a grammar over Grammar::parse's limits).
std::shared_ptr<const Grammar> json_schema_grammar(const nlohmann::ordered_json& schema,
                                                   const JsonSchemaOptions& opt = {});

/// A schema for one call of one of OpenAI `tools`
/// ([{"type": "function", "function": {"name", "parameters"}}]): an object
/// {name_key: <the tool's name>, args_key: <valid under its parameters>},
/// keys in that order, nothing else (anyOf over the tools). For
/// tool_choice "required" (all tools) or a named function (a one-element
/// array). Llama 3.x writes args_key "parameters". Throws SchemaError for a
/// tool that is not a function with a string name.
nlohmann::ordered_json tool_call_schema(const nlohmann::ordered_json& tools, const std::string& name_key = "name",
                                        const std::string& args_key = "arguments");

/// GBNF for any JSON value (`object_only`: any JSON object, OpenAI's
/// response_format {"type": "json_object"}), with opt's whitespace, digit
/// and string bounds.
std::string json_any_gbnf(bool object_only, const JsonSchemaOptions& opt = {});

}  // namespace kvad
