// The keys of an object under patternProperties (JSON Schema 2020-12
// Core §10.3.2.2): a deterministic automaton over a key's characters that
// knows, in every state, which of the patterns match the key read so far and
// whether it is one of the declared property names. The compiler turns each
// state into a grammar rule, so that an additional member's value follows
// exactly the schemas of the patterns its key matches (all of them), or
// additionalProperties when it matches none, and a declared name never
// passes as an additional key. Internal to the JSON Schema compiler.
//
// Patterns are ECMA-262 regexes of the subset json_schema_text.h parses,
// matched as RegExp.test does (anywhere in the key unless anchored).
// Construction: Thompson's NFA per pattern, then the subset construction
// over all of them at once and the names' trie (Aho, Lam, Sethi & Ullman,
// "Compilers", §3.7), on the character classes the patterns and names
// distinguish.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/grammar/json_schema_text.h"

namespace kvad::schema_keys {

struct KeyAutomaton {
  /// A partition of the code points into the classes the automaton tells
  /// apart.
  std::vector<schema_text::CodeRanges> classes;
  struct State {
    std::vector<int> next;  ///< per class: the next state
    uint32_t matched = 0;   ///< bit i: pattern i matches the key read so far
    int name = -1;          ///< the declared name the key read so far is, or -1
  };
  std::vector<State> states;  ///< states[0] is the start (the empty key)
};

/// Builds the automaton of `patterns` (at most 16) and `names` (UTF-8).
/// Throws std::invalid_argument naming the problem for a pattern outside
/// the subset, or an automaton over `max_states` states, `max_nfa` NFA
/// states, 512 character classes or 5e7 steps of construction (so the work
/// and memory stay bounded whatever the schema).
KeyAutomaton build_key_automaton(const std::vector<std::string>& patterns, const std::vector<std::string>& names,
                                 size_t max_states = 1000, size_t max_nfa = 4096);

/// The patterns (bits) that match `key` (UTF-8), by running the automaton.
uint32_t patterns_matching(const KeyAutomaton& a, const std::string& key);

}  // namespace kvad::schema_keys
