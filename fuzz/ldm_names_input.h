// Shared by fuzz_ldm_names and tests/model/image/test_ldm_names: a
// single-file checkpoint's tensor list, given as text, through the layout
// detection and the name table (model/image/ldm_names.h) with kvad's base
// configs of the detected layout, and the view they make (mapped_source).
//
// The text: one tensor a line, "NAME D0 D1 ..." (dims outermost first, as
// safetensors lists them; at most 4, each 1..65536, at most 1<<20 elements);
// lines that do not parse are skipped; at most 8192 tensors. Every tensor is
// f32 with zero bytes (one shared buffer), which is all the table reads.
// Throws what detection, the table and the view throw: kvad::Error is the
// expected outcome for a broken list; anything else is a bug.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"
#include "io/mapped_source.h"
#include "io/tensor_source.h"
#include "model/image/configs.h"
#include "model/image/ldm_names.h"
#include "model/image/pipeline.h"

namespace kvad::fuzz {

class ListedSource final : public TensorSource {
 public:
  explicit ListedSource(std::string_view text) {
    static const std::vector<float> zeros(1 << 20, 0.0f);
    std::istringstream in{std::string(text)};
    std::string line;
    while (std::getline(in, line) && tensors_.size() < 8192) {
      std::istringstream ls(line);
      SourceTensor t;
      if (!(ls >> t.name)) continue;
      int64_t d, n = 1;
      bool ok = true;
      while (ls >> d) {
        if (d < 1 || d > 65536 || t.shape.size() == 4) ok = false;
        t.shape.push_back(d);
        n *= ok ? d : 1;
      }
      if (!ok || n > (1 << 20) || index_.count(t.name)) continue;
      if (t.shape.empty()) t.shape.push_back(1);
      t.n_dims = static_cast<int>(t.shape.size());
      for (int i = 0; i < t.n_dims; ++i) t.ne[i] = t.shape[t.n_dims - 1 - i];
      t.type = DType::F32;
      t.stored_dtype = "F32";
      t.data = zeros.data();
      t.n_bytes = static_cast<size_t>(n) * 4;
      t.origin = path_;
      index_.emplace(t.name, tensors_.size());
      tensors_.push_back(std::move(t));
    }
  }
  const std::string& path() const override { return path_; }
  const std::vector<SourceTensor>& tensors() const override { return tensors_; }
  const SourceTensor* find(std::string_view name) const override {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &tensors_[it->second];
  }
  std::shared_ptr<const void> keepalive() const override { return nullptr; }
  bool has(std::string_view) const override { return false; }
  int64_t get_int(std::string_view, int64_t def) const override { return def; }
  int64_t require_int(std::string_view key) const override { throw Error("missing " + std::string(key)); }
  double get_float(std::string_view, double def) const override { return def; }
  std::string get_string(std::string_view, const std::string& def) const override { return def; }

 private:
  std::string path_ = "listed.safetensors";
  std::vector<SourceTensor> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
};

/// The view's tensor count.
inline size_t ldm_names_input(std::string_view text) {
  auto src = std::make_shared<ListedSource>(text);
  const image::LdmLayout layout = image::detect_ldm_layout(*src);
  const nlohmann::json base = nlohmann::json::parse(image::base_configs(layout));
  const image::UNet2DConditionConfig unet = image::parse_unet_config(base.at("unet"), "unet");
  const image::AutoencoderKLConfig vae = image::parse_vae_config(base.at("vae"), "vae");
  const image::LdmNames names = image::ldm_names(layout, *src, unet, vae);
  return mapped_source(src, names.rules, {}, names.ignored)->tensors().size();
}

}  // namespace kvad::fuzz
