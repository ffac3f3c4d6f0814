// libFuzzer target for the tokenizer.json / tokenizer_config.json reader
// (Tokenizer::from_tokenizer_json_text, src/tokenizer/hf_*.cpp).
//
// The input is a tokenizer.json, optionally followed by the line
// "\n--config--\n" and a tokenizer_config.json. When it loads, a few strings
// (special-token text, invalid UTF-8, long runs) are encoded with every flag
// combination and decoded back, and every id must be inside the vocabulary.
// kvad::Error is the expected outcome for bad input; anything else (a crash, a
// hang, a sanitizer report, another exception type) is a bug.
//
// An input that starts with the GGUF magic is read as a GGUF instead and
// its tokenizer built by Tokenizer::from_gguf (tokenizer.ggml.* keys, or the
// kvad.tokenizer.* keys the quantize-once cache writes from a tokenizer.json;
// seed: tests/fixtures/hf_tokenizer/seeds-gguf, by tools/make_tokenizer_gguf_seed.py).
//
// Run (asan preset):
//   build-asan/fuzz/fuzz_tokenizer_json -max_total_time=60 -max_len=65536 corpus/ \
//       tests/fixtures/hf_tokenizer/seeds/ tests/fixtures/hf_tokenizer/broken/
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "base/error.h"
#include "io/gguf.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  constexpr std::string_view kSep = "\n--config--\n";
  const size_t sep = in.find(kSep);
  const std::string_view tj = in.substr(0, sep);
  const std::string_view cfg = sep == std::string_view::npos ? std::string_view() : in.substr(sep + kSep.size());
  try {
    std::unique_ptr<kvad::Tokenizer> tok;
    if (in.substr(0, 4) == "GGUF") {
      auto f = kvad::gguf::File::parse(data, size, "fuzz.gguf");
      tok = kvad::Tokenizer::from_gguf(*f);
    } else {
      tok = kvad::Tokenizer::from_tokenizer_json_text(tj, "fuzz.json", cfg, "fuzz_config.json");
    }
    static const char* const kTexts[] = {"", "Hello world", " a  b\t\nc", "<s>x</s>[CLS]<|endoftext|>",
                                         "caf\xC3\xA9 \xE4\xB8\xAD\xF0\x9F\xA6\x99", "\xFF\xC3(\xED\xA0\x80",
                                         "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"};
    for (const char* t : kTexts) {
      for (int f = 0; f < 4; ++f) {
        const auto ids = tok->encode(t, f & 1, f & 2);
        for (int32_t id : ids)
          if (id < 0 || id >= tok->n_vocab()) __builtin_trap();
        (void)tok->decode(ids, true);
        (void)tok->decode(ids, false);
        kvad::StreamDecoder sd(*tok);
        for (int32_t id : ids) (void)sd.push(id);
        (void)sd.flush();
      }
    }
  } catch (const kvad::Error&) {
  }
  return 0;
}
