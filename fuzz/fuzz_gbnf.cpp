// libFuzzer: GBNF grammars (engine/grammar/grammar.h). The input is a grammar, then
// optionally a NUL byte and text to feed the recognizer. Parsing must
// succeed or throw GrammarError; feeding must return or throw GrammarError
// (a cap); any other exception, a crash, a hang or a sanitizer report is a bug.
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <string>

#include "engine/grammar/grammar.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  const std::string gbnf = in.substr(0, nul);
  const std::string text = nul == std::string::npos ? std::string() : in.substr(nul + 1);
  try {
    auto g = kvad::Grammar::parse(gbnf);
    kvad::GrammarLimits lim;
    lim.max_stacks = 256;
    lim.max_nodes = 1u << 16;
    lim.max_states = 1024;
    kvad::GrammarMatcher m(g, lim);
    for (size_t i = 0; i < text.size(); ++i)
      if (!m.accept(text.substr(i, 1))) break;
    (void)m.accepting();
    (void)m.finished();
  } catch (const kvad::GrammarError&) {
  } catch (const std::exception&) {
    std::abort();
  }
  return 0;
}
