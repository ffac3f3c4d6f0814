// libFuzzer target for the HF side of the architecture loaders: config.json
// (src/model/hf.h open_hf_checkpoint and each architecture's hf_config) is
// outside input, and a wrong, missing or mistyped field must be a
// kvad::Error, never a crash, an out-of-bounds read, a hang or an unbounded
// allocation, at load or in the first forward call.
//
// The input edits the config.json of one of the tiny transformers
// checkpoints (tests/fixtures/hf_tiny/*/ with model.safetensors): byte 0
// picks the checkpoint; then records of 6 bytes [field byte][op byte][int32
// value] each change one field of the config (top level or text_config;
// field byte modulo their number) to: the value, 0, -1, the value / 1024 as
// a float, null, a string, removed, or 2^40. The edited config is written
// beside a link to the checkpoint's weights in a scratch directory, opened,
// loaded on the CPU and run on 3 tokens (ids from the last 3 bytes) in a
// context of 16. kvad::Error is the expected outcome for a bad config;
// anything else is a bug.
//
// Run (asan preset):
//   build-asan/fuzz/fuzz_hf_config -max_total_time=120 corpus/ tests/fixtures/hf_config_seeds
// (KVAD_SOURCE_DIR: the repository root, for the fixtures.)
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "load_and_run.h"
#include "model/hf.h"
#include "model/model.h"
#include "model/registry.h"

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace {

struct Checkpoint {
  fs::path weights;
  json config;
};

const std::vector<Checkpoint>& checkpoints() {
  static const std::vector<Checkpoint> all = [] {
    std::vector<Checkpoint> v;
    const char* root = std::getenv("KVAD_SOURCE_DIR");
    const fs::path dir = fs::path(root ? root : KVAD_SOURCE_DIR) / "tests/fixtures/hf_tiny";
    std::vector<fs::path> dirs;
    for (const auto& e : fs::directory_iterator(dir))
      if (fs::exists(e.path() / "model.safetensors") && fs::exists(e.path() / "config.json")) dirs.push_back(e.path());
    std::sort(dirs.begin(), dirs.end());  // a stable index per checkpoint
    for (const fs::path& d : dirs) {
      std::ifstream in(d / "config.json");
      v.push_back({fs::absolute(d / "model.safetensors"), json::parse(in)});
    }
    if (v.empty()) std::abort();  // no fixtures: the target would test nothing
    return v;
  }();
  return all;
}

const fs::path& scratch() {
  static const fs::path d = [] {
    fs::path p = fs::temp_directory_path() / ("kvad-fuzz-hf-config-" + std::to_string(::getpid()));
    fs::create_directories(p);
    return p;
  }();
  return d;
}

// The fields an edit may touch: the top level's and text_config's.
std::vector<json*> fields(json& cfg) {
  std::vector<json*> out;
  for (auto& [k, v] : cfg.items()) {
    (void)k;
    out.push_back(&v);
  }
  if (cfg.contains("text_config") && cfg["text_config"].is_object())
    for (auto& [k, v] : cfg["text_config"].items()) {
      (void)k;
      out.push_back(&v);
    }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<Checkpoint>& all = checkpoints();
  if (size < 1) return 0;
  const Checkpoint& ck = all[data[0] % all.size()];
  json cfg = ck.config;
  for (size_t i = 1; i + 6 <= size && i < 1 + 6 * 8; i += 6) {
    int32_t v;
    std::memcpy(&v, data + i + 2, 4);
    std::vector<json*> fs_ = fields(cfg);
    if (fs_.empty()) break;
    json& f = *fs_[data[i] % fs_.size()];
    switch (data[i + 1] % 8) {
      case 0: f = v; break;
      case 1: f = 0; break;
      case 2: f = -1; break;
      case 3: f = v / 1024.0; break;
      case 4: f = nullptr; break;
      case 5: f = "x"; break;
      case 6: f = json::array({v, v}); break;
      default: f = int64_t{1} << 40; break;
    }
  }
  const fs::path& d = scratch();
  std::error_code ec;
  fs::remove(d / "model.safetensors", ec);
  fs::create_symlink(ck.weights, d / "model.safetensors");
  std::ofstream(d / "config.json") << cfg.dump();
  try {
    kvad::fuzz::load_and_run(kvad::open_hf_checkpoint(d.string()), data, size);
  } catch (const kvad::Error&) {
  }
  return 0;
}
