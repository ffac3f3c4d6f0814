// libFuzzer target for the architecture loaders and their forward passes
// (src/model/registry.h load_model, src/model/text/*.cpp): the hyper-
// parameters a GGUF or a config.json gives them are outside input, and a
// wrong head count, window, expert count or rope size must be a kvad::Error
// at load, never a division by zero, an out-of-bounds read, a hang or an
// unbounded allocation at load or in the first forward call.
//
// The input edits the metadata of one of the tiny real checkpoints
// (tests/fixtures/hf_tiny/*/llama.cpp-f32.gguf, llama.cpp's conversions: one
// per architecture): byte 0 picks the file; then records of 6 bytes
// [key byte][op byte][int32 value] each replace one integer or float key
// (key byte modulo the file's numeric keys) by: the value, 0, -1, the value
// plus the old one, the old one times 2, or 2^40. The edited model is
// loaded on the CPU and evaluates 3 tokens (ids from the last 3 bytes)
// in a context of 16. kvad::Error is the expected outcome for a bad
// model; anything else (a crash, a sanitizer report, another exception
// type) is a bug.
//
// Run (asan preset):
//   build-asan/fuzz/fuzz_model_hparams -max_total_time=120 corpus/ tests/fixtures/model_hparams
// (KVAD_SOURCE_DIR: the repository root, for the fixtures; default: the
// source tree the target was built from).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "load_and_run.h"
#include "io/gguf.h"
#include "io/tensor_source.h"
#include "model/model.h"
#include "model/registry.h"

namespace {

struct Fixture {
  std::shared_ptr<const kvad::TensorSource> src;
  std::vector<std::string> int_keys, float_keys;
};

const std::vector<Fixture>& fixtures() {
  static const std::vector<Fixture> all = [] {
    std::vector<Fixture> v;
    const char* root = std::getenv("KVAD_SOURCE_DIR");
    const std::filesystem::path dir = std::filesystem::path(root ? root : KVAD_SOURCE_DIR) / "tests/fixtures/hf_tiny";
    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::directory_iterator(dir))
      if (std::filesystem::exists(e.path() / "llama.cpp-f32.gguf")) files.push_back(e.path() / "llama.cpp-f32.gguf");
    std::sort(files.begin(), files.end());  // a stable index per file
    for (const auto& p : files) {
      auto f = std::shared_ptr<const kvad::gguf::File>(kvad::gguf::File::open(p.string()));
      Fixture fx;
      fx.src = kvad::gguf_source(f);
      for (const kvad::gguf::Value& val : f->metadata()) {
        using kvad::gguf::ValueType;
        switch (val.type()) {
          case ValueType::UINT8: case ValueType::INT8: case ValueType::UINT16: case ValueType::INT16:
          case ValueType::UINT32: case ValueType::INT32: case ValueType::UINT64: case ValueType::INT64:
            fx.int_keys.push_back(val.key());
            break;
          case ValueType::FLOAT32: case ValueType::FLOAT64:
            fx.float_keys.push_back(val.key());
            break;
          default:
            break;
        }
      }
      v.push_back(std::move(fx));
    }
    if (v.empty()) std::abort();  // no fixtures: the target would test nothing
    return v;
  }();
  return all;
}

// The base source with some numeric keys replaced.
class Edited final : public kvad::TensorSource {
 public:
  Edited(std::shared_ptr<const kvad::TensorSource> b, std::map<std::string, int64_t, std::less<>> ints,
         std::map<std::string, double, std::less<>> floats)
      : b_(std::move(b)), ints_(std::move(ints)), floats_(std::move(floats)) {}
  const std::string& path() const override { return b_->path(); }
  const std::vector<kvad::SourceTensor>& tensors() const override { return b_->tensors(); }
  const kvad::SourceTensor* find(std::string_view n) const override { return b_->find(n); }
  std::shared_ptr<const void> keepalive() const override { return b_->keepalive(); }
  bool has(std::string_view k) const override { return b_->has(k); }
  int64_t get_int(std::string_view k, int64_t def) const override {
    auto it = ints_.find(k);
    return it != ints_.end() ? it->second : b_->get_int(k, def);
  }
  int64_t require_int(std::string_view k) const override {
    auto it = ints_.find(k);
    return it != ints_.end() ? it->second : b_->require_int(k);
  }
  double get_float(std::string_view k, double def) const override {
    auto it = floats_.find(k);
    return it != floats_.end() ? it->second : b_->get_float(k, def);
  }
  std::string get_string(std::string_view k, const std::string& def) const override { return b_->get_string(k, def); }
  std::vector<bool> get_bool_array(std::string_view k) const override { return b_->get_bool_array(k); }

 private:
  std::shared_ptr<const kvad::TensorSource> b_;
  std::map<std::string, int64_t, std::less<>> ints_;
  std::map<std::string, double, std::less<>> floats_;
};

int64_t edit(int64_t old, uint8_t op, int32_t v) {
  switch (op % 6) {
    case 0: return v;
    case 1: return 0;
    case 2: return -1;
    case 3: return old + v;
    case 4: return old * 2;
    default: return int64_t{1} << 40;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<Fixture>& all = fixtures();
  if (size < 1) return 0;
  const Fixture& fx = all[data[0] % all.size()];
  std::map<std::string, int64_t, std::less<>> ints;
  std::map<std::string, double, std::less<>> floats;
  size_t i = 1;
  for (; i + 6 <= size && i < 1 + 6 * 8; i += 6) {
    int32_t v;
    std::memcpy(&v, data + i + 2, 4);
    const size_t n_keys = fx.int_keys.size() + fx.float_keys.size();
    if (n_keys == 0) break;
    const size_t k = data[i] % n_keys;
    if (k < fx.int_keys.size()) {
      const std::string& key = fx.int_keys[k];
      ints[key] = edit(ints.count(key) ? ints[key] : fx.src->get_int(key, 0), data[i + 1], v);
    } else {
      const std::string& key = fx.float_keys[k - fx.int_keys.size()];
      const double old = floats.count(key) ? floats[key] : fx.src->get_float(key, 0);
      const uint8_t op = data[i + 1] % 6;
      floats[key] = op == 0 ? v / 1024.0 : op == 1 ? 0.0 : op == 2 ? -1.0 : op == 3 ? old + v : op == 4 ? old * 2 : 1e30;
    }
  }
  try {
    kvad::fuzz::load_and_run(std::make_shared<Edited>(fx.src, std::move(ints), std::move(floats)), data, size);
  } catch (const kvad::Error&) {
  }
  return 0;
}
