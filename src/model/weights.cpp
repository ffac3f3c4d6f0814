#include "model/weights.h"

#include <string>
#include <vector>

#include "base/error.h"
#include "io/gguf.h"
#include "kernels/cpu/kernels.h"

namespace kvad {

WeightLoader::WeightLoader(std::shared_ptr<const gguf::File> f) : f_(std::move(f)) {}

bool WeightLoader::has(const std::string& name) const { return f_->find_tensor(name) != nullptr; }

static std::string dims_str(const int64_t* ne, size_t n) {
  std::string s = "[";
  for (size_t i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

Tensor WeightLoader::get_optional(const std::string& name, std::initializer_list<int64_t> ne) {
  const gguf::TensorInfo* ti = f_->find_tensor(name);
  if (!ti) return {};
  std::vector<int64_t> want(ne);
  std::vector<int64_t> have = ti->ne;
  while (want.size() < 4) want.push_back(1);
  while (have.size() < 4) have.push_back(1);
  if (want != have)
    throw Error(f_->path() + ": tensor " + name + " has shape " + dims_str(ti->ne.data(), ti->ne.size()) +
                ", expected " + dims_str(ne.begin(), ne.size()));
  if (!cpu::has_cpu_kernels(ti->type))
    throw Error(f_->path() + ": tensor " + name + " is " + dtype_name(ti->type) +
                ", a format kvad cannot compute with yet");
  Tensor t;
  t.name = name;
  t.type = ti->type;
  for (int i = 0; i < 4; ++i) t.ne[i] = have[i];
  t.data = ti->data;
  if (used_.insert(name).second) {
    bytes_ += ti->n_bytes;
    n_params_ += t.n_elements();
  }
  return t;
}

Tensor WeightLoader::get(const std::string& name, std::initializer_list<int64_t> ne) {
  Tensor t = get_optional(name, ne);
  if (!t) throw Error(f_->path() + ": missing tensor " + name);
  return t;
}

void WeightLoader::finish() const {
  std::string unused;
  int n = 0;
  for (const auto& ti : f_->tensors()) {
    if (used_.count(ti.name)) continue;
    if (n < 8) unused += (n ? ", " : "") + ti.name;
    ++n;
  }
  if (n)
    throw Error(f_->path() + ": " + std::to_string(n) + " tensor(s) not used by architecture " +
                f_->get_string("general.architecture", "?") + ": " + unused + (n > 8 ? ", ..." : ""));
}

}  // namespace kvad
