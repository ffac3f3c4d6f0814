// prefixed_source (mapped_source.h): several TensorSources under name
// prefixes, as one.
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "io/mapped_source.h"

namespace kvad {

namespace {

class PrefixedSource final : public TensorSource {
 public:
  PrefixedSource(std::vector<std::pair<std::string, std::shared_ptr<const TensorSource>>> parts, std::string path)
      : parts_(std::move(parts)), path_(std::move(path)) {
    for (const auto& [prefix, src] : parts_)
      for (const SourceTensor& t : src->tensors()) {
        SourceTensor c = t;
        c.name = prefix + t.name;
        if (!index_.emplace(c.name, tensors_.size()).second) throw Error(path_ + ": tensor " + c.name + " named twice");
        own_.emplace(c.name, src->tensor_name(t.name) + " in " + src->path());
        tensors_.push_back(std::move(c));
      }
  }
  const std::string& path() const override { return path_; }
  const std::vector<SourceTensor>& tensors() const override { return tensors_; }
  const SourceTensor* find(std::string_view name) const override {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &tensors_[it->second];
  }
  std::shared_ptr<const void> keepalive() const override { return keep_; }
  bool has(std::string_view) const override { return false; }
  int64_t get_int(std::string_view, int64_t def) const override { return def; }
  int64_t require_int(std::string_view key) const override { throw Error(path_ + ": missing " + std::string(key)); }
  double get_float(std::string_view, double def) const override { return def; }
  std::string get_string(std::string_view, const std::string& def) const override { return def; }
  std::string tensor_name(std::string_view name) const override {
    auto it = own_.find(name);
    return it == own_.end() ? std::string(name) : std::string(name) + " (" + it->second + ")";
  }

 private:
  std::vector<std::pair<std::string, std::shared_ptr<const TensorSource>>> parts_;
  std::string path_;
  std::vector<SourceTensor> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, std::string, std::less<>> own_;
  // Every part's bytes stay alive while a tensor of the whole is used.
  std::shared_ptr<const void> keep_ = std::make_shared<std::vector<std::shared_ptr<const void>>>([this] {
    std::vector<std::shared_ptr<const void>> k;
    for (const auto& p : parts_) k.push_back(p.second->keepalive());
    return k;
  }());
};

}  // namespace

std::shared_ptr<const TensorSource> prefixed_source(
    std::vector<std::pair<std::string, std::shared_ptr<const TensorSource>>> parts, std::string path) {
  return std::make_shared<PrefixedSource>(std::move(parts), std::move(path));
}

}  // namespace kvad
