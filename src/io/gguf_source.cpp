#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "base/error.h"

#include "io/gguf.h"
#include "io/tensor_source.h"

namespace kvad {
namespace {

class GgufSource final : public TensorSource {
 public:
  explicit GgufSource(std::shared_ptr<const gguf::File> f) : GgufSource(std::vector<std::shared_ptr<const gguf::File>>{f}) {}
  // A split model: metadata from the first part, tensors from all of them.
  explicit GgufSource(std::vector<std::shared_ptr<const gguf::File>> parts) : f_(parts.at(0)), parts_(std::move(parts)) {
    for (const auto& part : parts_) add_tensors(*part);
    for (size_t i = 0; i < tensors_.size(); ++i)
      if (!index_.emplace(tensors_[i].name, i).second)
        throw Error(tensors_[i].origin + ": tensor " + tensors_[i].name + " is in two parts of the split model");
  }
  void add_tensors(const gguf::File& file) {
    for (const gguf::TensorInfo& ti : file.tensors()) {
      SourceTensor t;
      t.name = ti.name;
      t.type = ti.type;
      t.n_dims = static_cast<int>(ti.ne.size());
      for (size_t i = 0; i < ti.ne.size() && i < 4; ++i) t.ne[i] = ti.ne[i];
      t.data = ti.data;
      t.n_bytes = ti.n_bytes;
      t.origin = file.path();
      t.stored_dtype = dtype_name(ti.type);
      t.shape.assign(ti.ne.rbegin(), ti.ne.rend());
      tensors_.push_back(std::move(t));
    }
  }
  const std::string& path() const override { return f_->path(); }
  const std::vector<SourceTensor>& tensors() const override { return tensors_; }
  const SourceTensor* find(std::string_view name) const override {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &tensors_[it->second];
  }
  std::shared_ptr<const void> keepalive() const override {
    if (parts_.size() == 1) return f_;
    return std::make_shared<std::vector<std::shared_ptr<const gguf::File>>>(parts_);
  }
  bool has(std::string_view key) const override { return f_->find(key) != nullptr; }
  int64_t get_int(std::string_view key, int64_t def) const override { return f_->get_int(key, def); }
  int64_t require_int(std::string_view key) const override { return f_->get(key).as_int(); }
  double get_float(std::string_view key, double def) const override { return f_->get_float(key, def); }
  std::string get_string(std::string_view key, const std::string& def) const override {
    return f_->get_string(key, def);
  }
  std::vector<bool> get_bool_array(std::string_view key) const override {
    const gguf::Value* v = f_->find(key);
    if (!v) return {};
    std::vector<bool> out;
    for (const int64_t x : v->as_int_array()) out.push_back(x != 0);
    return out;
  }
  bool is_array(std::string_view key) const override {
    const gguf::Value* v = f_->find(key);
    return v && v->type() == gguf::ValueType::ARRAY;
  }
  const std::shared_ptr<const gguf::File>& file() const { return f_; }

 private:
  std::shared_ptr<const gguf::File> f_;
  std::vector<std::shared_ptr<const gguf::File>> parts_;
  std::vector<SourceTensor> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
};

}  // namespace

std::shared_ptr<const TensorSource> gguf_source(std::shared_ptr<const gguf::File> f) {
  return std::make_shared<GgufSource>(std::move(f));
}

bool gguf_split_name(const std::string& path, std::string* prefix, int* n) {
  // NAME-00001-of-00003.gguf (llama.cpp's gguf-split and gguf-py's writer).
  static const std::string tail = ".gguf";
  if (path.size() < 20 || path.compare(path.size() - tail.size(), tail.size(), tail) != 0) return false;
  const std::string stem = path.substr(0, path.size() - tail.size());
  const size_t k = stem.size() - 15;  // "-00001-of-00003"
  auto digits = [&](size_t at) {
    for (size_t i = at; i < at + 5; ++i)
      if (stem[i] < '0' || stem[i] > '9') return false;
    return true;
  };
  if (stem[k] != '-' || !digits(k + 1) || stem.compare(k + 6, 4, "-of-") != 0 || !digits(k + 10)) return false;
  if (prefix) *prefix = stem.substr(0, k);
  if (n) *n = std::stoi(stem.substr(k + 10, 5));
  return std::stoi(stem.substr(k + 1, 5)) >= 1 && std::stoi(stem.substr(k + 10, 5)) >= 1;
}

std::shared_ptr<const TensorSource> gguf_split_source(const std::string& any_part) {
  std::string prefix;
  int n = 0;
  if (!gguf_split_name(any_part, &prefix, &n)) return gguf_source(gguf::File::open(any_part));
  if (n > 1000) throw Error(any_part + ": split.count " + std::to_string(n) + " is not plausible");
  std::vector<std::shared_ptr<const gguf::File>> parts;
  for (int i = 1; i <= n; ++i) {
    char num[32];
    std::snprintf(num, sizeof num, "-%05d-of-%05d.gguf", i, n);
    std::shared_ptr<const gguf::File> f = gguf::File::open(prefix + num);
    if (f->get_int("split.count", n) != n || f->get_int("split.no", i - 1) != i - 1)
      throw Error(f->path() + ": split.count/split.no do not match its name (part " + std::to_string(i) + " of " +
                  std::to_string(n) + ")");
    parts.push_back(std::move(f));
  }
  const int64_t want = parts[0]->get_int("split.tensors.count", -1);
  size_t have = 0;
  for (const auto& p : parts) have += p->tensors().size();
  if (want >= 0 && static_cast<size_t>(want) != have)
    throw Error(parts[0]->path() + ": split.tensors.count is " + std::to_string(want) + " but the " +
                std::to_string(n) + " parts hold " + std::to_string(have));
  return std::make_shared<GgufSource>(std::move(parts));
}

std::shared_ptr<const gguf::File> gguf_file(const TensorSource& s) {
  const auto* g = dynamic_cast<const GgufSource*>(&s);
  return g ? g->file() : nullptr;
}

}  // namespace kvad
