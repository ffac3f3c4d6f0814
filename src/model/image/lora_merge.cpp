// Merging image LoRAs into a copy of the weights they change
// (model/image/lora.h), and A1111's <lora:NAME:MULTIPLIER> prompt tags.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>

#include "base/error.h"
#include "io/tensor_source.h"
#include "model/image/lora.h"
#include "tensor/half.h"

namespace kvad::image {

namespace {

using std::string;

// The base's tensors, those the adapters change replaced by f32 buffers of its own.
class MergedSource final : public TensorSource {
 public:
  MergedSource(std::shared_ptr<const TensorSource> base, std::map<string, std::vector<float>> merged)
      : base_(std::move(base)), bufs_(std::make_shared<std::map<string, std::vector<float>>>(std::move(merged))) {
    tensors_ = base_->tensors();
    for (size_t i = 0; i < tensors_.size(); ++i) {
      SourceTensor& t = tensors_[i];
      index_.emplace(t.name, i);
      auto it = bufs_->find(t.name);
      if (it == bufs_->end()) continue;
      t.type = DType::F32;
      t.stored_dtype = "F32";
      t.data = it->second.data();
      t.n_bytes = it->second.size() * 4;
      t.supported = true;
      t.origin += " + LoRA";
    }
    struct Both {
      std::shared_ptr<const void> base;
      std::shared_ptr<const std::map<string, std::vector<float>>> bufs;
    };
    keep_ = std::make_shared<Both>(Both{base_->keepalive(), bufs_});
  }
  const std::string& path() const override { return base_->path(); }
  const std::vector<SourceTensor>& tensors() const override { return tensors_; }
  const SourceTensor* find(std::string_view name) const override {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &tensors_[it->second];
  }
  std::shared_ptr<const void> keepalive() const override { return keep_; }
  bool has(std::string_view key) const override { return base_->has(key); }
  int64_t get_int(std::string_view key, int64_t def) const override { return base_->get_int(key, def); }
  int64_t require_int(std::string_view key) const override { return base_->require_int(key); }
  double get_float(std::string_view key, double def) const override { return base_->get_float(key, def); }
  std::string get_string(std::string_view key, const std::string& def) const override {
    return base_->get_string(key, def);
  }
  std::string tensor_name(std::string_view name) const override { return base_->tensor_name(name); }

 private:
  std::shared_ptr<const TensorSource> base_;
  std::shared_ptr<std::map<string, std::vector<float>>> bufs_;
  std::shared_ptr<const void> keep_;
  std::vector<SourceTensor> tensors_;
  std::map<string, size_t, std::less<>> index_;
};

std::vector<float> base_floats(const SourceTensor& t) {
  const size_t n = static_cast<size_t>(t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3]);
  std::vector<float> v(n);
  const uint8_t* p = static_cast<const uint8_t*>(t.data);
  if (t.type == DType::F32) {
    std::memcpy(v.data(), p, n * 4);
  } else if (t.type == DType::F16 || t.type == DType::BF16) {
    for (size_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      v[i] = t.type == DType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
    }
  } else {
    throw Error(t.origin + ": tensor " + t.name + " is " + t.stored_dtype +
                "; a LoRA merges into f32, f16 or bf16 weights only");
  }
  return v;
}

}  // namespace

std::vector<float> lora_delta(const LoraModule& m) {
  switch (m.kind) {
    case LoraKind::Full:
      return m.f[0].v;
    case LoraKind::LoRA: {
      const LoraFactor &up = m.f[0], &down = m.f[1];
      const int64_t out = up.shape[0], r = up.shape[1], cols = static_cast<int64_t>(down.v.size()) / r;
      std::vector<float> d(static_cast<size_t>(out * cols), 0.0f);
      for (int64_t o = 0; o < out; ++o)
        for (int64_t k = 0; k < r; ++k) {
          const float u = up.v[static_cast<size_t>(o * r + k)];
          const float* dr = down.v.data() + k * cols;
          float* row = d.data() + o * cols;
          for (int64_t c = 0; c < cols; ++c) row[c] += u * dr[c];
        }
      return d;
    }
    case LoraKind::LoHa: {
      std::vector<float> prod[2];
      for (int j = 0; j < 2; ++j) {
        const LoraFactor &a = m.f[2 * j], &b = m.f[2 * j + 1];
        const int64_t out = a.shape[0], r = a.shape[1], cols = static_cast<int64_t>(b.v.size()) / r;
        prod[j].assign(static_cast<size_t>(out * cols), 0.0f);
        for (int64_t o = 0; o < out; ++o)
          for (int64_t k = 0; k < r; ++k) {
            const float u = a.v[static_cast<size_t>(o * r + k)];
            for (int64_t c = 0; c < cols; ++c) prod[j][static_cast<size_t>(o * cols + c)] += u * b.v[static_cast<size_t>(k * cols + c)];
          }
      }
      for (size_t i = 0; i < prod[0].size(); ++i) prod[0][i] *= prod[1][i];
      return prod[0];
    }
    case LoraKind::LoKr: {
      // kron(w1 [o1, i1], w2 [o2, i2 · kk]) as [o1·o2, i1·i2, kk]
      const LoraFactor &w1 = m.f[0], &w2 = m.f[1];
      const int64_t o1 = w1.shape[0], i1 = w1.shape[1], o2 = w2.shape[0], w2c = w2.shape[1];
      // w2's shape is {o2, i2·kk, i2} (the loader records i2 from the target)
      const int64_t i2 = w2.shape[2], kk = w2c / i2;
      const int64_t in = i1 * i2, out = o1 * o2;
      std::vector<float> d(static_cast<size_t>(out * in * kk));
      for (int64_t a = 0; a < o1; ++a)
        for (int64_t b = 0; b < i1; ++b) {
          const float x = w1.v[static_cast<size_t>(a * i1 + b)];
          for (int64_t c = 0; c < o2; ++c)
            for (int64_t e = 0; e < i2; ++e)
              for (int64_t s = 0; s < kk; ++s)
                d[static_cast<size_t>(((a * o2 + c) * in + (b * i2 + e)) * kk + s)] =
                    x * w2.v[static_cast<size_t>(c * w2c + e * kk + s)];
        }
      return d;
    }
  }
  return {};
}

std::shared_ptr<const TensorSource> merged_source(std::shared_ptr<const TensorSource> base,
                                                  const std::vector<ImageLoraUse>& uses) {
  std::map<string, std::vector<float>> merged;
  for (const ImageLoraUse& u : uses) {
    if (!std::isfinite(u.strength)) throw Error(u.lora->path + ": the LoRA's strength is not a finite number");
    if (u.strength == 0) continue;
    for (const LoraModule& m : u.lora->modules) {
      const SourceTensor* t = base->find(m.target);
      if (!t) throw Error(u.lora->path + ": the pipeline has no weight " + m.target);
      auto it = merged.find(m.target);
      if (it == merged.end()) it = merged.emplace(m.target, base_floats(*t)).first;
      const std::vector<float> d = lora_delta(m);
      if (d.size() != it->second.size())
        throw Error(u.lora->path + ": the delta for " + m.target + " has " + std::to_string(d.size()) +
                    " values, the weight " + std::to_string(it->second.size()));
      const float s = u.strength * m.scale;
      for (size_t i = 0; i < d.size(); ++i) it->second[i] += s * d[i];
    }
  }
  return std::make_shared<MergedSource>(std::move(base), std::move(merged));
}

std::pair<std::string, std::vector<LoraTag>> extract_lora_tags(const std::string& prompt) {
  std::pair<std::string, std::vector<LoraTag>> out;
  size_t i = 0;
  while (i < prompt.size()) {
    const size_t at = prompt.find("<lora:", i);
    if (at == string::npos) break;
    const size_t end = prompt.find('>', at);
    if (end == string::npos) break;  // an unclosed "<lora:" stays text
    out.first += prompt.substr(i, at - i);
    const string body = prompt.substr(at + 6, end - at - 6);
    LoraTag tag;
    const size_t colon = body.find(':');
    tag.name = body.substr(0, colon);
    if (tag.name.empty()) throw Error("<lora:" + body + ">: the tag names no LoRA");
    if (colon != string::npos) {
      const string m = body.substr(colon + 1);
      char* e = nullptr;
      const double v = std::strtod(m.c_str(), &e);
      if (m.empty() || *e != '\0' || !std::isfinite(v) || std::fabs(v) > 1e6)
        throw Error("<lora:" + body + ">: the multiplier '" + m + "' is not a finite number");
      tag.strength = static_cast<float>(v);
    }
    if (out.second.size() == 32) throw Error("the prompt has more than 32 <lora:...> tags");
    out.second.push_back(std::move(tag));
    i = end + 1;
  }
  if (i < prompt.size()) out.first += prompt.substr(i);
  return out;
}

std::string resolve_lora_name(const std::string& dir, const std::string& name) {
  namespace fs = std::filesystem;
  if (name.find('/') != string::npos || name.find('\\') != string::npos || name == "." || name == "..")
    throw Error("LoRA name '" + name + "' must be a file name in the LoRA folder " + dir + ", not a path");
  const fs::path p = fs::path(dir) / (name.ends_with(".safetensors") ? name : name + ".safetensors");
  std::error_code ec;
  if (!fs::is_regular_file(p, ec)) throw Error("LoRA '" + name + "' not found: no " + p.string());
  return p.string();
}

std::vector<std::string> list_lora_names(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<string> out;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".safetensors" && e.is_regular_file(ec)) out.push_back(e.path().stem().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::pair<std::string, float> parse_image_lora_arg(const std::string& arg) {
  const size_t at = arg.find_last_of("@:");
  if (at != string::npos && at + 1 < arg.size()) {
    const string m = arg.substr(at + 1);
    char* e = nullptr;
    const double v = std::strtod(m.c_str(), &e);
    if (*e == '\0') {
      if (!std::isfinite(v) || std::fabs(v) > 1e6)
        throw Error("--lora " + arg + ": the strength '" + m + "' is not a finite number");
      return {arg.substr(0, at), static_cast<float>(v)};
    }
    if (arg[at] == '@') throw Error("--lora " + arg + ": the strength '" + m + "' is not a number");
  }
  return {arg, 1.0f};
}

}  // namespace kvad::image
