// The single-file layout detection and name table (model/image/ldm_names.h)
// over fuzz_ldm_names' seed corpus (tests/fixtures/ldm_names_seeds): the tiny
// pipelines' real tensor lists map completely, and each broken list is a
// one-line kvad::Error saying what is wrong.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "ldm_names_input.h"

namespace fs = std::filesystem;

namespace {

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

fs::path seeds() { return fs::path(KVAD_SOURCE_DIR) / "tests" / "fixtures" / "ldm_names_seeds"; }

}  // namespace

TEST(LdmNames, RealListsMapCompletely) {
  for (const char* name : {"sd15.txt", "sdxl.txt"}) {
    const std::string text = read(seeds() / name);
    size_t lines = 0;
    for (char c : text) lines += c == '\n';
    // Every tensor but the ignored position_ids buffers (none in these) is in
    // the view; OpenCLIP's fused in_proj tensors become three each.
    const size_t n = kvad::fuzz::ldm_names_input(text);
    EXPECT_GE(n, lines) << name;
  }
}

// Each broken seed and the error it must give.
TEST(LdmNames, BrokenSeeds) {
  const std::map<std::string, std::string> want = {
      {"empty.txt",
       "not a Stable Diffusion checkpoint kvad knows (no model.diffusion_model.input_blocks.0.0.*; 0 tensors)"},
      {"llama.txt", "not a Stable Diffusion checkpoint kvad knows"},
      {"sd2.txt", "a Stable Diffusion 2.x checkpoint"},
      {"sdxl_refiner.txt", "an SDXL refiner checkpoint"},
      {"unet_only.txt", "a UNet without the text encoders"},
      {"extra_block.txt",
       "tensor model.diffusion_model.input_blocks.12.0.in_layers.0.weight is not part of the SD 1.5"},
      {"bad_resnet_part.txt", "tensor model.diffusion_model.input_blocks.1.0.in_layers.1.weight is not part of"},
      {"unknown_prefix.txt", "tensor lora_unet_down.weight is not part of the SD 1.5 pipeline"},
      {"bad_in_proj.txt", "cannot be cut into 3 equal parts"},
      {"bad_openclip.txt",
       "tensor conditioner.embedders.1.model.transformer.resblocks.x.ln_1.weight is not part of the SDXL"},
  };
  for (const auto& [file, message] : want) {
    SCOPED_TRACE(file);
    std::string got = "(no error)";
    try {
      kvad::fuzz::ldm_names_input(read(seeds() / file));
    } catch (const kvad::Error& e) {
      got = e.what();
    }
    EXPECT_NE(got.find(message), std::string::npos) << got;
    EXPECT_EQ(got.find('\n'), std::string::npos) << got;
  }
  // Every seed is either read or refused with a kvad::Error.
  for (const auto& e : fs::directory_iterator(seeds())) {
    try {
      kvad::fuzz::ldm_names_input(read(e.path()));
    } catch (const kvad::Error&) {
    }
  }
}
