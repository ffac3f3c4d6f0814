// WeightLoader: takes an architecture's tensors by GGUF name from a
// TensorSource, checks their shapes, places them on the model's device, and
// makes sure every tensor of the checkpoint was taken (DESIGN.md seams 7, 9).
#pragma once
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>

#include "model/registry.h"
#include "tensor/tensor.h"

namespace kvad {

class TensorSource;

class WeightLoader {
 public:
  /// Weights go to o.device; on the CPU they are used in place from the
  /// mapped file. Throws kvad::Error for a device that cannot run here.
  WeightLoader(std::shared_ptr<const TensorSource> src, const DeviceOptions& o);

  /// The tensor `name`, on the device. `ne` gives the expected dims in ggml
  /// order (trailing 1s may be omitted). Matrices (two or more dims) keep their
  /// format when the device computes with it, else take the format
  /// DeviceOptions says (registry.h); vectors stay as stored. Asking twice
  /// gives the same tensor (a tied head shares the embedding). Throws
  /// kvad::Error naming the checkpoint and tensor when it is missing, has
  /// another shape, or no format the device has fits it.
  Tensor get(const std::string& name, std::initializer_list<int64_t> ne);
  /// As get(), but an absent tensor gives an empty Tensor.
  Tensor get_optional(const std::string& name, std::initializer_list<int64_t> ne);
  bool has(const std::string& name) const;

  /// Throws kvad::Error naming every tensor of the checkpoint nobody took.
  void finish() const;
  /// Bytes of the placed weights, as stored on the device.
  size_t bytes() const { return bytes_; }
  int64_t n_params() const { return n_params_; }
  Device device() const { return dev_; }
  /// The checkpoint's path, for error messages.
  const std::string& path() const;

 private:
  DType device_format(const Tensor& t) const;
  std::shared_ptr<const TensorSource> src_;
  DeviceOptions opts_;
  Device dev_;
  std::map<std::string, Tensor> taken_;
  size_t bytes_ = 0;
  int64_t n_params_ = 0;
};

}  // namespace kvad
