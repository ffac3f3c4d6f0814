// libFuzzer target for single-file image checkpoints in the original (ldm)
// layout: the tensor list (outside input: any .safetensors a user points
// kvad at) through layout detection and the name table to diffusers' names
// (model/image/ldm_names.h). A list kvad cannot read must be a kvad::Error,
// never a crash, an out-of-bounds read or a hang. The input is the list as
// text (fuzz/ldm_names_input.h).
//
// Run (asan preset):
//   build-asan/fuzz/fuzz_ldm_names -max_total_time=120 corpus/ tests/fixtures/ldm_names_seeds
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "ldm_names_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    (void)kvad::fuzz::ldm_names_input(std::string_view(reinterpret_cast<const char*>(data), size));
  } catch (const kvad::Error&) {
  }
  return 0;
}
