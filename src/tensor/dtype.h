// Weight and activation formats, by their ggml/GGUF names and type ids.
//
// Formats are rows of tables (DESIGN.md seam 1). This header holds the data
// row (block geometry, the activation format a dot product pairs with); the
// CPU kernels row for the same format lives in kernels/cpu/kernels.h
// (`cpu_kernels(DType)`), and a GPU backend adds its own row. Nothing else in
// the program switches on formats.
//
// Block layouts follow the ggml specification (ggml/src/ggml-common.h,
// docs in gguf-py's `quants.py`).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace kvad {

/// ggml type ids as stored in GGUF tensor infos.
enum class DType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ4_NL = 20,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
  MXFP4 = 39,
};

/// The data row of a format.
struct DTypeInfo {
  DType type;
  const char* name;       ///< ggml name: "f32", "q4_0", "q4_K", ...
  int64_t block_elems;    ///< elements per block (1 for plain types)
  size_t block_bytes;     ///< bytes per block
  bool quantized;         ///< block-quantized (has scales)
  DType vec_dot_type;     ///< activation format the dot kernel consumes
  bool supported;         ///< kvad has kernels for it (load time check)
};

/// Info for a type id read from a file; nullptr when the id is not a ggml type.
const DTypeInfo* find_dtype(uint32_t id);
/// Info for a known DType. Never null.
const DTypeInfo& dtype_info(DType t);
/// ggml name of a type ("q4_1").
inline const char* dtype_name(DType t) { return dtype_info(t).name; }
/// Looks a type up by ggml name, case-insensitive ("Q4_K" and "q4_k" both work);
/// nullptr when unknown.
const DTypeInfo* find_dtype_by_name(std::string_view name);

/// f32, f16 or bf16: the unquantized float storage formats (weights kept as
/// stored, inputs kvad quantizes from, tensors the loaders convert or transpose).
inline bool is_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

/// Bytes of a row of `n` elements. Precondition: n % block_elems == 0
/// (callers check; io/gguf validates it for every tensor it reads).
inline size_t row_bytes(DType t, int64_t n) {
  const DTypeInfo& i = dtype_info(t);
  return static_cast<size_t>(n / i.block_elems) * i.block_bytes;
}

}  // namespace kvad
