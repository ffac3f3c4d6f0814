// Counting automata of the JSON Schema compiler (engine/grammar/json_schema.cpp),
// written as GBNF rules: objects with minProperties / maxProperties /
// dependentRequired, arrays with contains / minContains / maxContains, and
// arrays with uniqueItems over finite value sets. Each state of the
// automaton is one rule; states from which the value cannot be completed
// are left out, so a grammar never leads generation into a dead end.
// Internal to engine/.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kvad::schema_struct {

/// Where rules go (the compiler): reserve a name, define it later, or make
/// a rule from a body at once (deduplicated). Bodies may be "never".
class RuleSink {
 public:
  virtual ~RuleSink() = default;
  virtual std::string reserve(const std::string& hint) = 0;
  virtual void define(const std::string& name, const std::string& body) = 0;
  virtual std::string rule(const std::string& hint, const std::string& body) = 0;
};

/// The name of the rule matching nothing.
inline const char* kNever = "never";

/// One declared member of an object: `kv` the GBNF of `"name" ws ":" ws value`.
struct Member {
  std::string kv;
  bool req;
};

/// Members `ms` (each at most once; in their order, or in any order when
/// `any_order` and at most 6) and any number of `ex` members (none when
/// empty), between lo and hi (-1: no bound) members in all, and for each
/// (a, bs) of `deps`: member a present => every member of bs present
/// (indexes into ms). Returns the object's GBNF ("{" ... "}") or kNever.
/// Throws SchemaError naming `kw` past 4096 states.
std::string counted_members(RuleSink& out, const std::vector<Member>& ms, const std::string& ex, bool any_order,
                            int64_t lo, int64_t hi, const std::vector<std::pair<size_t, std::vector<size_t>>>& deps,
                            const std::string& kw, const std::string& path);

/// An array of `any` items, between lo and hi (-1: no bound) of them, of
/// which between n and m (-1: no bound) match the contains schema: `yes` is
/// an item that matches it, `no` one that does not (nullopt: not
/// expressible; then m must be -1 and the grammar is ambiguous but exact).
/// Returns GBNF or kNever. Throws SchemaError naming contains past 4096
/// states.
std::string contains_items(RuleSink& out, const std::string& yes, const std::optional<std::string>& no,
                           const std::string& any, int64_t n, int64_t m, int64_t lo, int64_t hi);

/// An array of pairwise distinct values: item i is one of domains[i]
/// (value ids into `lits`, the GBNF of each distinct value), at least lo
/// items, at most domains.size(). Returns GBNF or kNever. Throws SchemaError
/// naming uniqueItems past 4096 states.
std::string unique_items(RuleSink& out, const std::vector<std::vector<size_t>>& domains,
                         const std::vector<std::string>& lits, int64_t lo, const std::string& path);

}  // namespace kvad::schema_struct
