// Test helper: an F32 or F16 GGUF with real weights, made from the store's
// SmolLM2 file (Q4_1, token_embd Q8_0) by dequantizing its tensors with
// cpu_kernels(t).to_float, as tools/make_quantize_reference.py does with
// gguf-py (the two give the same float32 values). Used by test_quantize and
// the kvad quantize CLI test.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "kernels/cpu/kernels.h"

namespace kvad::test {

/// Float32 values of a tensor, [n_elements].
inline std::vector<float> tensor_to_f32(const gguf::TensorInfo& t) {
  std::vector<float> v(static_cast<size_t>(t.n_elements()));
  if (!v.empty()) cpu::cpu_kernels(t.type).to_float(t.data, v.data(), static_cast<int64_t>(v.size()));
  return v;
}

/// Writes `path`: every metadata key of `store` (general.file_type set to 0
/// for F32, 1 for F16), then the tensors `keep` accepts, in the store's
/// order, dequantized: 1-D tensors F32, the others in `type` (F32 or F16).
/// alignment: 0 keeps the store's, else general.alignment is set to it.
inline void write_float_gguf(const gguf::File& store, const std::string& path, DType type,
                             const std::function<bool(const std::string&)>& keep, uint32_t alignment = 0) {
  gguf::Writer w(store.version());
  for (const gguf::Value& v : store.metadata()) {
    if (v.key() == "general.file_type")
      w.add(gguf::make_uint("general.file_type", gguf::ValueType::UINT32, type == DType::F16 ? 1 : 0));
    else
      w.add(v);
  }
  if (alignment) w.set_alignment(alignment);
  std::vector<const gguf::TensorInfo*> kept;
  std::vector<DType> types;
  for (const gguf::TensorInfo& t : store.tensors()) {
    if (!keep(t.name)) continue;
    const DType ty = t.ne.size() >= 2 ? type : DType::F32;
    w.add_tensor_deferred(t.name, ty, t.ne);
    kept.push_back(&t);
    types.push_back(ty);
  }
  w.write_file(path, [&](size_t i, size_t n_bytes, const gguf::Writer::Sink& write) {
    const std::vector<float> f = tensor_to_f32(*kept[i]);
    if (types[i] == DType::F32) {
      write(f.data(), f.size() * sizeof(float));
    } else {
      std::vector<uint8_t> h(n_bytes);
      cpu::cpu_kernels(types[i]).from_float(f.data(), h.data(), static_cast<int64_t>(f.size()));
      write(h.data(), h.size());
    }
  });
}

}  // namespace kvad::test
