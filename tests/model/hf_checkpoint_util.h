// Shared by the tests of the HF view and of each architecture
// (tests/model/test_hf_checkpoint.cpp, test_quantize_once.cpp, text/): the
// tiny checkpoints that tools/make_tiny_hf.py saved with transformers'
// save_pretrained (f32 safetensors + config.json) under
// tests/fixtures/hf_tiny, transformers' logits at every position, and the
// checks against them.
//
// kvad reads a checkpoint through its architecture's HF name table and must
// match, in one prefill and token by token, on cpu and on sim, to 1e-4
// relative (max |diff| / max |logit|) with an f32 KV cache
// (--cache-type-k/-v f32; transformers runs in f32 throughout), and to 1e-3
// with the default f16 cache (llama.cpp's default), whose rounding of K and
// V alone moves the logits by up to ~6e-4. Measured, f32 / f16 cache:
// 1.5e-6 / 3.7e-4 llama, 1.9e-6 / 5.8e-4 Gemma 3, 1.4e-6 / 1.6e-4 qwen2,
// 1.7e-6 / 4.0e-4 qwen3, 1.6e-6 / 3.5e-4 llama3, 1.8e-6 / 2.0e-4 mistral,
// 1.6e-6 / 3.2e-4 qwen2_yarn, 1.5e-6 / 2.3e-5 gpt2, 1.9e-6 / 3.8e-4 phi3,
// 1.8e-6 / 5.3e-4 phi3_long, 1.8e-6 / 4.4e-4 qwen3moe, 1.5e-6 / 2.9e-4
// qwen3moe_sparse; dropping the rope scaling of llama3, mistral or
// qwen2_yarn moves transformers' own logits by 4e-2-0.7.
#pragma once
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"
#include "io/tensor_source.h"
#include "model/cache.h"

namespace kvad::hf_test {

namespace fs = std::filesystem;

/// tests/fixtures/hf_tiny.
extern const fs::path kDir;

/// Both KV cache formats f32.
inline const kvad::KVTypes kF32Kv{kvad::DType::F32, kvad::DType::F32};

/// A scratch checkpoint: a tiny fixture's safetensors (llama's by default)
/// with an edited config, removed with the object.
struct Scratch {
  fs::path dir = fs::temp_directory_path() / ("kvad-hf-" + std::to_string(::getpid()));
  explicit Scratch(const std::string& config, const char* from = "llama") {
    fs::create_directories(dir);
    fs::copy_file(kDir / from / "model.safetensors", dir / "model.safetensors", fs::copy_options::overwrite_existing);
    std::ofstream(dir / "config.json") << config;
  }
  ~Scratch() { fs::remove_all(dir); }
};

/// A fixture's reference logits: `tokens`, and logits[i] after tokens 0..i.
struct Reference {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;
};

/// dir/file: {"tokens": [...], "logits": [[...], ...]} (tools/make_tiny_hf.py).
Reference read_reference(const fs::path& dir, const char* file = "logits.json");

/// max |want - got| / max |want| over want.size() values.
double rel_err(const std::vector<float>& want, const float* got);

/// kvad on `src` against transformers' logits of fixture `name`, at the
/// first n_check positions (all when 0), in one prefill and token by token.
/// against = "llama.cpp": against llama.cpp's logits on the converter's GGUF
/// instead; n_ctx: the sessions' context (which picks LongRoPE's factors).
/// kv: the KV cache's formats.
double check_source(const char* name, const char* label, std::shared_ptr<const kvad::TensorSource> src,
                    const char* device, int n_check = 0, double tol = 1e-3, const char* against = "transformers",
                    int32_t n_ctx = 64, kvad::KVTypes kv = {});

/// The HF checkpoint at --quant none against transformers (f32 throughout):
/// with an f32 KV cache to 1e-4 (`tol32`, looser where noted),
/// and with the default f16 cache, whose rounding of K and V alone moves the
/// logits by up to ~9e-4 (transformers with K/V rounded to f16 gives 8.6e-4 on
/// phi3_long), to 1e-3.
void check(const char* name, const char* device, double tol32 = 1e-4);

/// The GGUF llama.cpp's convert_hf_to_gguf.py made of the same checkpoint
/// (tools/convert_tiny_gguf.py): llama.cpp's tensor names and keys.
std::shared_ptr<const kvad::TensorSource> llama_cpp_gguf(const char* name);

/// The kvad::Error that loading fixture `from`'s safetensors under config.json
/// text `config` throws on cpu; "" when it loads.
std::string error_of(const std::string& config, const char* from = "llama");

/// `src` with some tensors or metadata keys left out: a file that lacks them.
class Without final : public kvad::TensorSource {
 public:
  Without(std::shared_ptr<const kvad::TensorSource> src, std::vector<std::string> names)
      : src_(std::move(src)), names_(std::move(names)) {
    for (const kvad::SourceTensor& t : src_->tensors())
      if (!gone(t.name)) tensors_.push_back(t);
  }
  const std::string& path() const override { return src_->path(); }
  const std::vector<kvad::SourceTensor>& tensors() const override { return tensors_; }
  const kvad::SourceTensor* find(std::string_view name) const override {
    return gone(name) ? nullptr : src_->find(name);
  }
  std::shared_ptr<const void> keepalive() const override { return src_->keepalive(); }
  bool has(std::string_view key) const override { return !gone(key) && src_->has(key); }
  int64_t get_int(std::string_view key, int64_t def) const override {
    return gone(key) ? def : src_->get_int(key, def);
  }
  int64_t require_int(std::string_view key) const override {
    if (gone(key)) throw kvad::Error(path() + ": missing key " + std::string(key));
    return src_->require_int(key);
  }
  double get_float(std::string_view key, double def) const override {
    return gone(key) ? def : src_->get_float(key, def);
  }
  std::string get_string(std::string_view key, const std::string& def) const override {
    return gone(key) ? def : src_->get_string(key, def);
  }
  std::vector<bool> get_bool_array(std::string_view key) const override {
    return gone(key) ? std::vector<bool>{} : src_->get_bool_array(key);
  }

 private:
  bool gone(std::string_view name) const { return std::find(names_.begin(), names_.end(), name) != names_.end(); }
  std::shared_ptr<const kvad::TensorSource> src_;
  std::vector<std::string> names_;
  std::vector<kvad::SourceTensor> tensors_;
};

/// `src` with one integer key replaced: a file that says otherwise.
class WithInt final : public kvad::TensorSource {
 public:
  WithInt(std::shared_ptr<const kvad::TensorSource> src, std::string key, int64_t value)
      : src_(std::move(src)), key_(std::move(key)), value_(value) {}
  const std::string& path() const override { return src_->path(); }
  const std::vector<kvad::SourceTensor>& tensors() const override { return src_->tensors(); }
  const kvad::SourceTensor* find(std::string_view name) const override { return src_->find(name); }
  std::shared_ptr<const void> keepalive() const override { return src_->keepalive(); }
  bool has(std::string_view key) const override { return key == key_ || src_->has(key); }
  int64_t get_int(std::string_view key, int64_t def) const override {
    return key == key_ ? value_ : src_->get_int(key, def);
  }
  int64_t require_int(std::string_view key) const override { return key == key_ ? value_ : src_->require_int(key); }
  double get_float(std::string_view key, double def) const override { return src_->get_float(key, def); }
  std::string get_string(std::string_view key, const std::string& def) const override {
    return src_->get_string(key, def);
  }
  std::vector<bool> get_bool_array(std::string_view key) const override { return src_->get_bool_array(key); }

 private:
  std::shared_ptr<const kvad::TensorSource> src_;
  std::string key_;
  int64_t value_;
};

}  // namespace kvad::hf_test
