// libFuzzer: JSON schemas (engine/grammar/json_schema.h). Compiling must succeed or
// throw SchemaError (which names a keyword or a limit); a compiled grammar
// must parse (its GBNF is checked by the same parser), and a recognizer over
// it must take the schema's own text without crashing. Input that is not
// JSON is skipped (the server answers 400 before compiling).
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <string>

#include "engine/grammar/json_schema.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  nlohmann::ordered_json schema;
  try {
    schema = nlohmann::ordered_json::parse(in);
  } catch (const nlohmann::json::exception&) {
    return 0;
  }
  try {
    auto g = kvad::json_schema_grammar(schema);
    kvad::GrammarLimits lim;
    lim.max_stacks = 256;
    lim.max_nodes = 1u << 16;
    lim.max_states = 1024;
    kvad::GrammarMatcher m(g, lim);
    (void)m.accept(in);
  } catch (const kvad::GrammarError&) {  // SchemaError among them
  } catch (const std::exception&) {
    std::abort();
  }
  return 0;
}
