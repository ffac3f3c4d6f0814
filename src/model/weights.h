// WeightLoader: takes an architecture's tensors from a GGUF by name, checks
// their shapes, and makes sure every tensor in the file was taken
// (DESIGN.md seam 7).
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <set>
#include <string>

#include "tensor/tensor.h"

namespace kvad {

namespace gguf { class File; }

class WeightLoader {
 public:
  explicit WeightLoader(std::shared_ptr<const gguf::File> f);

  /// The tensor `name`, used in place from the mapped file. `ne` gives the
  /// expected dims in ggml order (trailing 1s may be omitted). Throws
  /// kvad::Error naming the file and tensor when it is missing, has another
  /// shape, or its format has no CPU kernels.
  Tensor get(const std::string& name, std::initializer_list<int64_t> ne);
  /// As get(), but an absent tensor gives an empty Tensor.
  Tensor get_optional(const std::string& name, std::initializer_list<int64_t> ne);
  bool has(const std::string& name) const;

  /// Throws kvad::Error naming every tensor of the file nobody took.
  void finish() const;
  size_t bytes() const { return bytes_; }
  int64_t n_params() const { return n_params_; }

 private:
  std::shared_ptr<const gguf::File> f_;
  std::set<std::string> used_;
  size_t bytes_ = 0;
  int64_t n_params_ = 0;
};

}  // namespace kvad
