// libFuzzer target for image LoRA files (model/image/lora.h): a .safetensors
// a user points `kvad images make --lora` (or a <lora:NAME> tag) at is
// outside input. Its bytes go through the safetensors parser, the key
// spelling parser and the shape checks against the tiny SD 1.5 pipeline
// (tests/fixtures/image_pipelines/sd15), then every delta it places is
// computed, and the prompt-tag parser reads the bytes as a prompt. A file
// kvad cannot use must be a kvad::Error, never a crash, an out-of-bounds
// read, a hang or an unbounded allocation.
//
// Run (asan preset):
//   build-asan/fuzz/fuzz_image_lora -max_total_time=120 corpus/ tests/fixtures/image_lora_seeds
// (KVAD_SOURCE_DIR: the repository root, for the pipeline.)
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "base/error.h"
#include "model/image/lora.h"
#include "model/image/pipeline.h"

namespace {

const kvad::image::LoraTargets& targets() {
  static const std::unique_ptr<kvad::image::LoraTargets> t = [] {
    const char* root = std::getenv("KVAD_SOURCE_DIR");
    const std::filesystem::path dir = std::filesystem::path(root ? root : KVAD_SOURCE_DIR) /
                                      "tests/fixtures/image_pipelines/sd15";
    return std::make_unique<kvad::image::LoraTargets>(kvad::image::open_pipeline(dir.string()));
  }();
  return *t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  for (bool partial : {false, true}) {
    try {
      kvad::image::LoraLoadOptions o;
      o.allow_partial = partial;
      const auto lora = kvad::image::parse_image_lora(data, size, "fuzz.safetensors", targets(), o);
      for (const kvad::image::LoraModule& m : lora->modules) (void)kvad::image::lora_delta(m);
    } catch (const kvad::Error&) {
    }
  }
  try {
    (void)kvad::image::extract_lora_tags(std::string(reinterpret_cast<const char*>(data), size));
  } catch (const kvad::Error&) {
  }
  return 0;
}
