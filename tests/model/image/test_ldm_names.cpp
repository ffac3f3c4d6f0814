// The single-file layout detection and name table (model/image/ldm_names.h)
// over fuzz_ldm_names' seed corpus (tests/fixtures/ldm_names_seeds): the tiny
// pipelines' real tensor lists map completely, and each broken list is a
// one-line kvad::Error saying what is wrong.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

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

// The real lists, mutated as a fuzzer would (lines dropped, repeated, cut, a
// digit or a character changed): each is read or refused with a kvad::Error,
// never a crash. KVAD_LDM_MUTATIONS sets the count (default 300 per list).
TEST(LdmNames, MutatedListsAreReadOrRefused) {
  const char* env = std::getenv("KVAD_LDM_MUTATIONS");
  const int n = env ? std::atoi(env) : 300;
  std::mt19937 rng(1234);
  int read_ok = 0, refused = 0;
  for (const char* name : {"sd15.txt", "sdxl.txt"}) {
    std::vector<std::string> lines;
    std::istringstream in(read(seeds() / name));
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    for (int i = 0; i < n; ++i) {
      std::vector<std::string> m = lines;
      for (int k = 0; k < 1 + static_cast<int>(rng() % 3); ++k) {
        const size_t at = rng() % m.size();
        switch (rng() % 5) {
          case 0:
            m.erase(m.begin() + at);
            break;
          case 1:
            m.insert(m.begin() + at, m[rng() % m.size()]);
            break;
          case 2:
            m[at] = m[at].substr(0, rng() % (m[at].size() + 1));
            break;
          case 3:
            for (char& c : m[at])
              if (c >= '0' && c <= '9' && rng() % 4 == 0) c = static_cast<char>('0' + rng() % 10);
            break;
          default:
            if (!m[at].empty()) m[at][rng() % m[at].size()] = static_cast<char>(32 + rng() % 95);
        }
      }
      std::string text;
      for (const std::string& l : m) text += l + "\n";
      try {
        kvad::fuzz::ldm_names_input(text);
        ++read_ok;
      } catch (const kvad::Error&) {
        ++refused;
      }
    }
  }
  EXPECT_EQ(read_ok + refused, 2 * n);
  EXPECT_GT(refused, 0);
}
