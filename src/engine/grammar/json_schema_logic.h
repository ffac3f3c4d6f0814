// Negation and bound checks of the JSON Schema compiler
// (engine/grammar/json_schema.cpp): `not`, the `else` side of `if`, and
// `oneOf` over overlapping branches are compiled by rewriting ¬S into an
// anyOf of positive schemas, exactly, for the keywords whose violation is
// itself a schema (JSON Schema 2020-12 Validation: each assertion keyword
// constrains only instances of its own type, so ¬(K1 ∧ K2 ∧ ...) is the
// union of the instances of each keyword's type that violate it). Internal
// to engine/.
#pragma once
#include <string>
#include <vector>

#include "engine/grammar/json_schema_merge.h"

namespace kvad::schema_logic {

using oj = nlohmann::ordered_json;

/// Internal keywords the rewriting writes (and the compiler enforces):
/// the instance equals none of the listed values; a number that is not an
/// integer.
inline const char* kNotValues = "x-kvad-notValues";
inline const char* kFraction = "x-kvad-fraction";

/// ¬s as disjuncts (an empty list: ¬s matches nothing), each a schema with
/// no top-level anyOf/oneOf/not/if. Throws SchemaError naming `kw` (the
/// keyword being compiled: "not", "if", "oneOf", "contains") and the
/// keyword of s whose violation cannot be written (pattern, format,
/// multipleOf, items, ...). At most 64 disjuncts.
std::vector<oj> negate(const schema_merge::Merger& mg, const oj& s, const std::string& kw, const std::string& path,
                       int depth);

/// The conjunction of disjunct lists (each an anyOf), distributed into one
/// list by merging; contradictory products (merged to false) are dropped.
/// Throws SchemaError naming `kw` past 64 products.
std::vector<oj> conjoin(const schema_merge::Merger& mg, const std::vector<std::vector<oj>>& parts,
                        const std::string& kw, const std::string& path, int depth);

/// Checks bounds that leave nothing valid, as written anywhere in the
/// document (minimum > maximum, minLength > maxLength, minItems > maxItems,
/// minProperties > maxProperties, minContains > maxContains, an empty
/// enum): SchemaError naming the keyword, before anything is compiled.
void check_bounds(const oj& root);

/// The values a schema allows when they are few and listed (enum, const,
/// boolean, null, integers in a range of at most 64): at most `cap` values,
/// deduplicated as JSON equality sees them; false when not finite or over
/// the cap.
bool finite_values(const schema_merge::Merger& mg, const oj& s, size_t cap, std::vector<oj>& out,
                   const std::string& path);

}  // namespace kvad::schema_logic
