// libFuzzer: model output through the tool-call and reasoning parser
// (src/server/tool_calls.h). The first byte picks the format and the flags,
// the second the streaming chunk size; the rest is the reply. Parsing never
// throws, and the streamed result equals the whole one (content, reasoning,
// call names and arguments); anything else aborts.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "server/tool_calls.h"

using namespace kvad::server;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  OutputFormat f;
  const uint8_t flags = data[0];
  f.format = static_cast<ToolFormat>(flags % 7);  // generic .. harmony
  f.tools = (flags & 0x08) == 0;
  f.reasoning = (flags & 0x10) == 0;
  f.think_open = (flags & 0x20) != 0;
  f.parallel = (flags & 0x40) == 0;
  f.stop_after_call = (flags & 0x80) != 0;
  if (flags & 0x04) f.specs.push_back(ToolSpec{"get_weather", "", nlohmann::ordered_json::object()});
  const size_t chunk = 1 + data[1] % 16;
  const std::string text(reinterpret_cast<const char*>(data + 2), size - 2);
  try {
    const ParsedOutput whole = parse_output(text, f);
    OutputStream os(f);
    std::string content, reasoning;
    std::vector<ToolCall> calls;
    auto take = [&](const OutputDelta& d) {
      content += d.content;
      reasoning += d.reasoning;
      for (const auto& [i, c] : d.calls) {
        if (i != static_cast<int>(calls.size())) std::abort();
        calls.push_back(c);
      }
    };
    for (size_t i = 0; i < text.size(); i += chunk) take(os.push(std::string_view(text).substr(i, chunk)));
    take(os.finish());
    if (content != whole.content || reasoning != whole.reasoning || calls.size() != whole.calls.size()) std::abort();
    for (size_t i = 0; i < calls.size(); ++i)
      if (calls[i].name != whole.calls[i].name || calls[i].arguments != whole.calls[i].arguments) std::abort();
  } catch (...) {
    std::abort();
  }
  return 0;
}
