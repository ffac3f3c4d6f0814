// libFuzzer target for the GGUF reader (src/io/gguf.h).
//
// Parses the input as a GGUF file, then walks every metadata value and tensor
// through the public accessors, touching the first and last byte of each
// tensor's data so that AddressSanitizer sees any out-of-bounds pointer.
// kvad::Error (GGUFError included) is the expected outcome for bad input;
// anything else (a crash, a sanitizer report, another exception type) is a bug.
//
// Run (asan preset):  build-asan/fuzz/fuzz_gguf -max_total_time=60 corpus/ tests/fixtures/gguf/
#include <cstddef>
#include <cstdint>

#include "io/gguf.h"

namespace {

volatile uint64_t sink;

void walk_value(const kvad::gguf::Value& v, uint64_t& g_sink) {
  using kvad::gguf::ValueType;
  try { g_sink += static_cast<uint64_t>(v.as_int()); } catch (const kvad::Error&) {}
  try { g_sink += v.as_uint(); } catch (const kvad::Error&) {}
  try { g_sink += static_cast<uint64_t>(v.as_float() != 0); } catch (const kvad::Error&) {}
  try { g_sink += v.as_bool(); } catch (const kvad::Error&) {}
  try { g_sink += v.as_string().size(); } catch (const kvad::Error&) {}
  try { g_sink += v.array_size(); } catch (const kvad::Error&) {}
  try {
    for (const std::string& s : v.as_string_array()) g_sink += s.size();
  } catch (const kvad::Error&) {}
  try { g_sink += v.as_int_array().size(); } catch (const kvad::Error&) {}
  try { g_sink += v.as_float_array().size(); } catch (const kvad::Error&) {}
  (void)kvad::gguf::value_type_name(v.type());
  if (v.type() == ValueType::ARRAY) (void)kvad::gguf::value_type_name(v.array_type());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  uint64_t g_sink = 0;  // keeps the reads from being optimized away
  try {
    auto f = kvad::gguf::File::parse(data, size, "fuzz.gguf");
    for (const kvad::gguf::Value& v : f->metadata()) {
      walk_value(v, g_sink);
      if (f->find(v.key()) == nullptr) __builtin_trap();  // every key is found
    }
    try { g_sink += static_cast<uint64_t>(f->get_int("general.alignment", 0)); } catch (const kvad::Error&) {}
    try { g_sink += f->get_string("general.architecture", "").size(); } catch (const kvad::Error&) {}
    for (const kvad::gguf::TensorInfo& t : f->tensors()) {
      if (f->find_tensor(t.name) == nullptr) __builtin_trap();
      g_sink += static_cast<uint64_t>(t.n_elements());
      g_sink += kvad::row_bytes(t.type, t.ne[0]);
      if (t.n_bytes > 0) g_sink += t.data[0] + t.data[t.n_bytes - 1];
      if (t.data < f->file_data() + f->data_offset() || t.data + t.n_bytes > f->file_data() + f->file_size())
        __builtin_trap();
    }
    g_sink += f->tensor_bytes();
  } catch (const kvad::Error&) {
  }
  sink = g_sink;
  return 0;
}
