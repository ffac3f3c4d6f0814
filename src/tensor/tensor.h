// Tensor: a typed, shaped, contiguous view of a Storage (ggml dimension order).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "tensor/device.h"
#include "tensor/dtype.h"
#include "tensor/storage.h"

namespace kvad {

/// A tensor of up to 4 dimensions in ggml order: ne[0] is the row length
/// (innermost, contiguous), ne[1] the number of rows, and so on. Rows are
/// stored back to back in the tensor's format (`type`), row_bytes(type, ne[0])
/// bytes each, starting `offset` bytes into `storage`.
///
/// `data` is the host address of the first byte for a tensor the host may
/// read: on the CPU (weights mapped from a file in place, activations from
/// the CPU allocator, or caller memory with no storage at all). On any other
/// device it is nullptr: such bytes are reached only through the op layer
/// (tensor/ops.h), which is what lets the `sim` device count every transfer.
struct Tensor {
  std::string name;
  DType type = DType::F32;
  std::array<int64_t, 4> ne{1, 1, 1, 1};
  const void* data = nullptr;
  std::shared_ptr<Storage> storage;
  size_t offset = 0;  ///< bytes from storage->ptr() to the first element

  Device device() const { return storage ? storage->device() : Device::cpu(); }
  /// Device address of the first element (for the op table's rows).
  void* raw() const {
    return storage ? static_cast<uint8_t*>(storage->ptr()) + offset : const_cast<void*>(data);
  }
  int64_t n_rows() const { return ne[1] * ne[2] * ne[3]; }
  int64_t n_elements() const { return ne[0] * n_rows(); }
  size_t row_size() const { return row_bytes(type, ne[0]); }
  size_t n_bytes() const { return row_size() * static_cast<size_t>(n_rows()); }
  const uint8_t* row(int64_t i) const {
    return static_cast<const uint8_t*>(data) + static_cast<size_t>(i) * row_size();
  }
  const float* f32() const { return static_cast<const float*>(data); }
  /// Writable host floats (CPU tensors the caller owns, e.g. op outputs).
  float* f32_mut() const { return static_cast<float*>(const_cast<void*>(data)); }
  explicit operator bool() const { return data != nullptr || storage != nullptr; }

  /// Rows [r0, r1) of the tensor seen as 2-D [n_rows, ne[0]]: a view sharing
  /// the storage, shape [ne[0], r1 - r0]. Throws kvad::Error when out of range.
  Tensor rows(int64_t r0, int64_t r1) const;
  /// The same bytes with another shape of the same element count (ne[0] a
  /// whole number of the format's blocks). Throws kvad::Error otherwise.
  Tensor view(std::array<int64_t, 4> shape) const;
};

/// "[a, b, c]" of the dims in use (trailing 1s dropped).
std::string shape_str(const Tensor& t);

}  // namespace kvad
