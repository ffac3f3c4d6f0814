// libFuzzer target for the SentencePiece ModelProto reader
// (tok::parse_spiece_model, src/tokenizer/spiece_model.cpp) and the T5
// tokenizer built from what it reads (t5_tokenizer_from_spiece: the
// precompiled charsmap's trie walks, the Unigram model).
//
// The input is the bytes of a spiece.model. When it parses and a tokenizer
// is built, a few strings are encoded, padded as FLUX does and decoded, and
// every id must be inside the vocabulary. kvad::Error is the expected
// outcome for bad input; anything else (a crash, a hang, a sanitizer report,
// another exception type, an allocation past libFuzzer's -rss_limit_mb) is
// a bug.
//
// Run (asan preset):
//   build-asan/fuzz/fuzz_spiece_model -max_total_time=60 -max_len=400000 corpus/ \
//       tests/fixtures/t5_tokenizer/broken/
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "base/error.h"
#include "tokenizer/spiece_model.h"
#include "tokenizer/t5.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  try {
    const kvad::tok::SpieceModel m = kvad::tok::parse_spiece_model(in, "fuzz.model");
    if (m.pieces.size() > 200000) return 0;  // a real vocabulary: the JSON round trip is slow, not wrong
    const std::unique_ptr<kvad::Tokenizer> tok = kvad::t5_tokenizer_from_spiece(m, "fuzz.model", 3);
    static const char* const kTexts[] = {"", "Hello world", " a  b\t\nc\r\n", "</s><extra_id_0><pad>x",
                                         "caf\xC3\xA9 e\xCC\x81 \xEF\xBD\xB6\xEF\xBE\x9E \xE4\xB8\xAD\xF0\x9F\xA6\x99",
                                         "\xFF\xC3(\xED\xA0\x80", "\xEF\xAC\x81\xCC\x81 \xE2\x91\xA0 \xEF\xBC\xA1"};
    for (const char* t : kTexts) {
      for (int32_t id : tok->encode(t, true, true))
        if (id < 0 || id >= tok->n_vocab()) __builtin_trap();
      const auto ids = kvad::t5_prompt_ids(*tok, t, 8);
      if (ids.size() != 8) __builtin_trap();
      (void)tok->decode(ids, false);
    }
  } catch (const kvad::Error&) {
  }
  return 0;
}
