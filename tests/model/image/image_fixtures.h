// What the image-model tests share: the tiny pipelines' folder and a
// tensor's values on the host.
#pragma once
#include <filesystem>
#include <vector>

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

}  // namespace kvad::image_test
