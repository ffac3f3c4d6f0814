#include <map>

#include "io/gguf.h"
#include "io/tensor_source.h"

namespace kvad {
namespace {

class GgufSource final : public TensorSource {
 public:
  explicit GgufSource(std::shared_ptr<const gguf::File> f) : f_(std::move(f)) {
    tensors_.reserve(f_->tensors().size());
    for (const gguf::TensorInfo& ti : f_->tensors()) {
      SourceTensor t;
      t.name = ti.name;
      t.type = ti.type;
      t.n_dims = static_cast<int>(ti.ne.size());
      for (size_t i = 0; i < ti.ne.size() && i < 4; ++i) t.ne[i] = ti.ne[i];
      t.data = ti.data;
      t.n_bytes = ti.n_bytes;
      t.origin = f_->path();
      t.stored_dtype = dtype_name(ti.type);
      t.shape.assign(ti.ne.rbegin(), ti.ne.rend());
      tensors_.push_back(std::move(t));
    }
    for (size_t i = 0; i < tensors_.size(); ++i) index_.emplace(tensors_[i].name, i);
  }
  const std::string& path() const override { return f_->path(); }
  const std::vector<SourceTensor>& tensors() const override { return tensors_; }
  const SourceTensor* find(std::string_view name) const override {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &tensors_[it->second];
  }
  std::shared_ptr<const void> keepalive() const override { return f_; }
  bool has(std::string_view key) const override { return f_->find(key) != nullptr; }
  int64_t get_int(std::string_view key, int64_t def) const override { return f_->get_int(key, def); }
  int64_t require_int(std::string_view key) const override { return f_->get(key).as_int(); }
  double get_float(std::string_view key, double def) const override { return f_->get_float(key, def); }
  std::string get_string(std::string_view key, const std::string& def) const override {
    return f_->get_string(key, def);
  }
  const std::shared_ptr<const gguf::File>& file() const { return f_; }

 private:
  std::shared_ptr<const gguf::File> f_;
  std::vector<SourceTensor> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
};

}  // namespace

std::shared_ptr<const TensorSource> gguf_source(std::shared_ptr<const gguf::File> f) {
  return std::make_shared<GgufSource>(std::move(f));
}

std::shared_ptr<const gguf::File> gguf_file(const TensorSource& s) {
  const auto* g = dynamic_cast<const GgufSource*>(&s);
  return g ? g->file() : nullptr;
}

}  // namespace kvad
