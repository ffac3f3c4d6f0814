// Tensor: a typed, shaped view of bytes (ggml dimension order).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "tensor/dtype.h"

namespace kvad {

/// A tensor of up to 4 dimensions in ggml order: ne[0] is the row length
/// (innermost, contiguous), ne[1] the number of rows, and so on. Rows are
/// stored back to back in the tensor's format (`type`), row_bytes(type, ne[0])
/// bytes each. `data` either points into a mapped model file (weights used in
/// place) or into memory that `owner` keeps alive.
struct Tensor {
  std::string name;
  DType type = DType::F32;
  std::array<int64_t, 4> ne{1, 1, 1, 1};
  const void* data = nullptr;
  std::shared_ptr<const void> owner;

  int64_t n_rows() const { return ne[1] * ne[2] * ne[3]; }
  int64_t n_elements() const { return ne[0] * n_rows(); }
  size_t row_size() const { return row_bytes(type, ne[0]); }
  size_t n_bytes() const { return row_size() * static_cast<size_t>(n_rows()); }
  const uint8_t* row(int64_t i) const {
    return static_cast<const uint8_t*>(data) + static_cast<size_t>(i) * row_size();
  }
  const float* f32() const { return static_cast<const float*>(data); }
  explicit operator bool() const { return data != nullptr; }
};

}  // namespace kvad
