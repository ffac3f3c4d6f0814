// What the image-model tests share: the tiny pipelines' folder and a
// tensor's values on the host.
#pragma once
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <vector>

#include "io/tensor_source.h"

#include "tensor/ops.h"
#include "tensor/tensor.h"

namespace kvad::image_test {

/// tests/fixtures/image_pipelines (tools/make_image_pipelines.py and the
/// fixture scripts beside it).
inline std::filesystem::path fixtures() {
  return std::filesystem::path(KVAD_SOURCE_DIR) / "tests" / "fixtures" / "image_pipelines";
}

/// `t`'s elements as f32 on the host, in order.
inline std::vector<float> host(const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.n_elements()));
  ops::to_host(ops::cont(t), v.data());
  return v;
}

/// A reference tensor's values as f32 (its dtype must be F32: the fixture
/// scripts write references in f32).
inline std::vector<float> floats(const SourceTensor& t) {
  std::vector<float> v(t.n_bytes / 4);
  std::memcpy(v.data(), t.data, v.size() * 4);
  return v;
}

/// A reference tensor's values as int32 (token ids, bucket indices).
inline std::vector<int32_t> ints(const SourceTensor& t) {
  std::vector<int32_t> v(t.n_bytes / 4);
  std::memcpy(v.data(), t.data, v.size() * 4);
  return v;
}

}  // namespace kvad::image_test
