// libFuzzer target for the safetensors reader (src/io/safetensors.h).
//
// Each input is parsed twice: as a safetensors file (File::parse), then as
// the JSON text of a model.safetensors.index.json (parse_index). For a file
// that parses, every tensor is checked to lie inside the data section, to
// tile it (each begins where the one before ended), to have
// n_bytes == n_elements * dtype_size, and to be found by name; its first and
// last bytes are read so that AddressSanitizer sees any bad pointer. For an
// index that parses, every shard name must be a plain file name and every
// weight_map value one of the listed shards.
// kvad::Error (SafetensorsError included) is the expected outcome for bad
// input; anything else (a crash, a sanitizer report, another exception type,
// a __builtin_trap) is a bug.
//
// Run (asan preset):
//   build-asan/fuzz/fuzz_safetensors -max_total_time=60 corpus/ \
//     tests/fixtures/safetensors/valid tests/fixtures/safetensors/broken
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "io/safetensors.h"

namespace {

volatile uint64_t sink;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace st = kvad::safetensors;
  uint64_t g_sink = 0;  // keeps the reads from being optimized away
  try {
    auto f = st::File::parse(data, size, "fuzz.safetensors");
    const uint8_t* begin = f->file_data() + f->data_offset();
    const uint8_t* pos = begin;
    for (const st::TensorInfo& t : f->tensors()) {
      if (f->find(t.name) != &t) __builtin_trap();
      if (t.data != pos || t.data + t.n_bytes > data + size) __builtin_trap();
      if (t.n_bytes != static_cast<size_t>(t.n_elements) * st::dtype_size(t.dtype)) __builtin_trap();
      if (t.end - t.begin != t.n_bytes || begin + t.begin != t.data) __builtin_trap();
      if (t.n_bytes > 0) g_sink += t.data[0] + t.data[t.n_bytes - 1];
      g_sink += t.shape.size() + std::string_view(st::dtype_name(t.dtype)).size();
      pos = t.data + t.n_bytes;
    }
    if (pos != data + size) __builtin_trap();  // the data is tiled to the end
    for (const auto& [k, v] : f->metadata()) g_sink += k.size() + v.size();
  } catch (const kvad::Error&) {
  }
  try {
    const st::Index idx =
        st::parse_index(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.index.json");
    for (const std::string& s : idx.shards)
      if (!st::is_plain_file_name(s)) __builtin_trap();
    for (const auto& [tensor, shard] : idx.weight_map) {
      if (!std::binary_search(idx.shards.begin(), idx.shards.end(), shard)) __builtin_trap();
      g_sink += tensor.size();
    }
  } catch (const kvad::Error&) {
  }
  sink = g_sink;
  return 0;
}
