// The data rows of the format table (DESIGN.md seam 1).
//
// Geometry from ggml (ggml/src/ggml-common.h, ggml.c type_traits) and
// gguf-py (gguf/constants.py GGML_QUANT_SIZES).
#include "tensor/dtype.h"

#include <array>
#include <cctype>

#include "base/error.h"

namespace kvad {

namespace {

constexpr DTypeInfo kTable[] = {
    // type          name      elems bytes quant  vec_dot_type  supported
    {DType::F32,    "f32",     1,   4,   false, DType::F32,  true},
    {DType::F16,    "f16",     1,   2,   false, DType::F16,  true},
    {DType::Q4_0,   "q4_0",    32,  18,  true,  DType::Q8_0, true},
    {DType::Q4_1,   "q4_1",    32,  20,  true,  DType::Q8_1, true},
    {DType::Q5_0,   "q5_0",    32,  22,  true,  DType::Q8_0, true},
    {DType::Q5_1,   "q5_1",    32,  24,  true,  DType::Q8_1, true},
    {DType::Q8_0,   "q8_0",    32,  34,  true,  DType::Q8_0, true},
    {DType::Q8_1,   "q8_1",    32,  36,  true,  DType::Q8_1, true},
    {DType::Q2_K,   "q2_K",    256, 84,  true,  DType::Q8_K, true},
    {DType::Q3_K,   "q3_K",    256, 110, true,  DType::Q8_K, true},
    {DType::Q4_K,   "q4_K",    256, 144, true,  DType::Q8_K, true},
    {DType::Q5_K,   "q5_K",    256, 176, true,  DType::Q8_K, true},
    {DType::Q6_K,   "q6_K",    256, 210, true,  DType::Q8_K, true},
    {DType::Q8_K,   "q8_K",    256, 292, true,  DType::Q8_K, true},
    {DType::IQ4_NL, "iq4_nl",  32,  18,  true,  DType::Q8_0, true},
    {DType::I8,     "i8",      1,   1,   false, DType::I8,   false},
    {DType::I16,    "i16",     1,   2,   false, DType::I16,  false},
    {DType::I32,    "i32",     1,   4,   false, DType::I32,  false},
    {DType::I64,    "i64",     1,   8,   false, DType::I64,  false},
    {DType::F64,    "f64",     1,   8,   false, DType::F64,  false},
    {DType::BF16,   "bf16",    1,   2,   false, DType::BF16, true},
    {DType::TQ1_0,  "tq1_0",   256, 54,  true,  DType::Q8_K, true},
    {DType::TQ2_0,  "tq2_0",   256, 66,  true,  DType::Q8_K, true},
    {DType::MXFP4,  "mxfp4",   32,  17,  true,  DType::Q8_0, true},
};

constexpr uint32_t kMaxId = 64;

// Index by type id; built once at compile time.
constexpr std::array<int8_t, kMaxId> make_index() {
  std::array<int8_t, kMaxId> idx{};
  for (auto& v : idx) v = -1;
  for (size_t i = 0; i < std::size(kTable); ++i) {
    idx[static_cast<uint32_t>(kTable[i].type)] = static_cast<int8_t>(i);
  }
  return idx;
}
constexpr std::array<int8_t, kMaxId> kIndex = make_index();

}  // namespace

const DTypeInfo* find_dtype(uint32_t id) {
  if (id >= kMaxId || kIndex[id] < 0) return nullptr;
  return &kTable[kIndex[id]];
}

const DTypeInfo& dtype_info(DType t) {
  const DTypeInfo* i = find_dtype(static_cast<uint32_t>(t));
  if (!i) throw Error("dtype_info: unknown ggml type id " + std::to_string(static_cast<uint32_t>(t)));
  return *i;
}

const DTypeInfo* find_dtype_by_name(std::string_view name) {
  for (const DTypeInfo& i : kTable) {
    std::string_view n = i.name;
    if (n.size() != name.size()) continue;
    bool eq = true;
    for (size_t k = 0; k < n.size() && eq; ++k) {
      eq = std::tolower(static_cast<unsigned char>(n[k])) ==
           std::tolower(static_cast<unsigned char>(name[k]));
    }
    if (eq) return &i;
  }
  return nullptr;
}

}  // namespace kvad
