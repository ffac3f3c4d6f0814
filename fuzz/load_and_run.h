// Shared by fuzz_model_hparams and fuzz_hf_config: load a model from a
// (bad) source on the CPU and evaluate 3 tokens in a context of 16, ids
// from the input's last 3 bytes. Throws what the loader or the forward
// pass throws (kvad::Error is the expected outcome for a bad model).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "engine/session.h"
#include "model/model.h"
#include "model/registry.h"

namespace kvad::fuzz {

inline void load_and_run(std::shared_ptr<const TensorSource> src, const uint8_t* data, size_t size) {
  std::shared_ptr<Model> model = load_model(std::move(src), DeviceOptions{});
  Session s(model, 16, 1, 1);
  Batch b;
  const int32_t nv = static_cast<int32_t>(model->hparams().n_vocab);
  for (int32_t t = 0; t < 3; ++t) {
    const uint8_t byte = size > 3 ? data[size - 3 + t] : 0;
    b.add(nv > 0 ? byte % nv : 0, t, 0, t == 2);
  }
  (void)s.forward(b);
}

}  // namespace kvad::fuzz
