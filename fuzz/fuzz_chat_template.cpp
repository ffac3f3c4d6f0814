// libFuzzer target for the chat-template engine (src/jinja/chat_template.h).
//
// The input is a template's source. It is parsed, then rendered with a small
// conversation (strings, numbers, null, nested lists and dicts, tools) under
// tight limits so each input runs in milliseconds. kvad::ChatTemplateError is
// the expected outcome for bad or hostile templates; anything else (a crash,
// a hang, a sanitizer report, another exception type) is a bug.
//
// Run (asan preset):
//   build-asan/fuzz/fuzz_chat_template -max_total_time=60 corpus/ tests/fixtures/templates/ \
//       ../shared/peer-data/templates/
#include <cstddef>
#include <cstdint>
#include <string>

#include "jinja/chat_template.h"

namespace {

const nlohmann::ordered_json& context() {
  static const nlohmann::ordered_json ctx = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Hi \"there\" é 中 \n"},
      {"role": "assistant", "content": null, "tool_calls": [
        {"id": "call12345", "type": "function", "function": {"name": "f", "arguments": {"a": 1, "b": [1.5, null]}}}]},
      {"role": "tool", "tool_call_id": "call12345", "name": "f", "content": "22"},
      {"role": "assistant", "content": "<think>x</think>ok"}
    ],
    "tools": [{"type": "function", "function": {"name": "f", "description": "d",
               "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}}],
    "documents": null,
    "add_generation_prompt": true,
    "bos_token": "<s>",
    "eos_token": "</s>",
    "n": 3, "f": 2.5, "flag": false
  })");
  return ctx;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kvad::ChatTemplate::Limits limits;
  limits.max_source_bytes = 1 << 16;
  limits.max_output_bytes = 1 << 16;
  limits.max_steps = 20000;
  limits.max_range = 1000;
  try {
    kvad::ChatTemplate t =
        kvad::ChatTemplate::parse(std::string(reinterpret_cast<const char*>(data), size), limits);
    (void)t.render(context());
  } catch (const kvad::ChatTemplateError&) {
  }
  return 0;
}
