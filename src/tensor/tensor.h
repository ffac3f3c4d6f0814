// Tensor: a typed, shaped, strided view of a Storage (ggml's ne/nb).
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
/// (innermost), ne[1] the number of rows, and so on. nb[i] is the byte
/// stride of dimension i (ggml's nb): element (i0, i1, i2, i3) starts
/// i0/block_elems·nb[0] + i1·nb[1] + i2·nb[2] + i3·nb[3] bytes past the first
/// element, which lies `offset` bytes into `storage`. A tensor is contiguous
/// (is_contiguous) when the strides are those of rows stored back to back,
/// row_bytes(type, ne[0]) bytes each: nb[0] the format's block bytes, nb[1]
/// the row's bytes, nb[2] = nb[1]·ne[1], nb[3] = nb[2]·ne[2]; every tensor the
/// op layer allocates is. Views (ops.h permute, transpose, view) change
/// ne/nb/offset and move no bytes; ops::cont copies one into a contiguous
/// tensor. Which ops take strided inputs is said per op in ops.h; the others
/// refuse them. Whoever sets ne or type by hand calls set_contiguous_strides().
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
  std::array<size_t, 4> nb{4, 4, 4, 4};  ///< byte strides (contiguous f32 [1, 1, 1, 1] by default)
  const void* data = nullptr;
  std::shared_ptr<Storage> storage;
  size_t offset = 0;  ///< bytes from storage->ptr() to the first element

  Device device() const { return storage ? storage->device() : Device::cpu(); }
  /// Device address of the first element (for the op table's rows).
  void* raw() const {
    return storage ? static_cast<uint8_t*>(storage->ptr()) + offset : const_cast<void*>(data);
  }
  int64_t n_rows() const { return ne[1] * ne[2] * ne[3]; }
  /// True when the strides are the contiguous ones of ne and type
  /// (dimensions of size 1 may have any stride).
  bool is_contiguous() const;
  /// Sets nb to the contiguous strides of ne and type.
  void set_contiguous_strides();
  int64_t n_elements() const { return ne[0] * n_rows(); }
  size_t row_size() const { return row_bytes(type, ne[0]); }
  /// Bytes of the tensor laid out contiguously (its whole extent when it is).
  size_t n_bytes() const { return row_size() * static_cast<size_t>(n_rows()); }
  /// Row i of a contiguous tensor seen as 2-D [n_rows, ne[0]] (host tensors).
  const uint8_t* row(int64_t i) const {
    return static_cast<const uint8_t*>(data) + static_cast<size_t>(i) * row_size();
  }
  const float* f32() const { return static_cast<const float*>(data); }
  /// Writable host floats (CPU tensors the caller owns, e.g. op outputs).
  float* f32_mut() const { return static_cast<float*>(const_cast<void*>(data)); }
  explicit operator bool() const { return data != nullptr || storage != nullptr; }

  /// Rows [r0, r1) of the tensor seen as 2-D [n_rows, ne[0]]: a view sharing
  /// the storage, shape [ne[0], r1 - r0], with the row stride kept (a strided
  /// tensor qualifies when its rows are evenly spaced: dims 1..3 merge).
  /// Throws kvad::Error when out of range or the rows are not evenly spaced.
  Tensor rows(int64_t r0, int64_t r1) const;
  /// The same bytes with another shape of the same element count (ne[0] a
  /// whole number of the format's blocks), contiguous strides: a reshape.
  /// Throws kvad::Error otherwise, and for a strided tensor (ops::cont first,
  /// or ops::view with explicit strides).
  Tensor view(std::array<int64_t, 4> shape) const;
};

/// The contiguous byte strides of a tensor of format t and shape ne.
std::array<size_t, 4> contiguous_strides(DType t, const std::array<int64_t, 4>& ne);

/// "[a, b, c]" of the dims in use (trailing 1s dropped); a strided tensor's
/// gets its strides in bytes: "[a, b] nb [4, 512]".
std::string shape_str(const Tensor& t);

}  // namespace kvad
