// The CPU kernels rows of the format table (DESIGN.md seams 1 and 2): one
// row per format, built on first use; the dispatched entries are the AVX2
// versions when cpu_features().has_avx2_fma() (KVAD_NO_SIMD=1 turns it off),
// the scalar references otherwise; a gemm with an AVX512-VNNI build takes
// that one when cpu_features().has_avx512_vnni().
#include <array>
#include <string>

#include "base/cpu_features.h"
#include "base/error.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/quants.h"

namespace kvad::cpu {

namespace {

constexpr size_t kMaxId = 64;

namespace ref = quants::ref;
namespace avx2 = quants::avx2;

// One format's kernels: the scalar references (the definition) and the
// AVX2 versions, nullptr where the reference is used.
struct Row {
  DType type;
  ToFloatFn to_float_ref;
  FromFloatFn from_float_ref;
  VecDotFn vec_dot_ref;  ///< nullptr: an activation-only format
  ToFloatFn to_float_avx2 = nullptr;
  FromFloatFn from_float_avx2 = nullptr;
  VecDotFn vec_dot_avx2 = nullptr;
};

constexpr Row kRows[] = {
    {.type = DType::F32,
     .to_float_ref = ref::to_float_f32, .from_float_ref = ref::from_float_f32, .vec_dot_ref = ref::vec_dot_f32,
     .to_float_avx2 = avx2::to_float_f32, .from_float_avx2 = avx2::from_float_f32, .vec_dot_avx2 = avx2::vec_dot_f32},
    {.type = DType::F16,
     .to_float_ref = ref::to_float_f16, .from_float_ref = ref::from_float_f16, .vec_dot_ref = ref::vec_dot_f16,
     .to_float_avx2 = avx2::to_float_f16, .from_float_avx2 = avx2::from_float_f16, .vec_dot_avx2 = avx2::vec_dot_f16},
    {.type = DType::BF16,
     .to_float_ref = ref::to_float_bf16, .from_float_ref = ref::from_float_bf16, .vec_dot_ref = ref::vec_dot_bf16,
     .to_float_avx2 = avx2::to_float_bf16, .from_float_avx2 = avx2::from_float_bf16,
     .vec_dot_avx2 = avx2::vec_dot_bf16},
    {.type = DType::Q4_0,
     .to_float_ref = ref::to_float_q4_0, .from_float_ref = ref::from_float_q4_0,
     .vec_dot_ref = ref::vec_dot_q4_0_q8_0,
     .to_float_avx2 = avx2::to_float_q4_0, .from_float_avx2 = avx2::from_float_q4_0,
     .vec_dot_avx2 = avx2::vec_dot_q4_0_q8_0},
    {.type = DType::Q4_1,
     .to_float_ref = ref::to_float_q4_1, .from_float_ref = ref::from_float_q4_1,
     .vec_dot_ref = ref::vec_dot_q4_1_q8_1,
     .to_float_avx2 = avx2::to_float_q4_1, .from_float_avx2 = avx2::from_float_q4_1,
     .vec_dot_avx2 = avx2::vec_dot_q4_1_q8_1},
    {.type = DType::Q5_0,
     .to_float_ref = ref::to_float_q5_0, .from_float_ref = ref::from_float_q5_0,
     .vec_dot_ref = ref::vec_dot_q5_0_q8_0,
     .to_float_avx2 = avx2::to_float_q5_0, .from_float_avx2 = avx2::from_float_q5_0,
     .vec_dot_avx2 = avx2::vec_dot_q5_0_q8_0},
    {.type = DType::Q5_1,
     .to_float_ref = ref::to_float_q5_1, .from_float_ref = ref::from_float_q5_1,
     .vec_dot_ref = ref::vec_dot_q5_1_q8_1,
     .to_float_avx2 = avx2::to_float_q5_1, .from_float_avx2 = avx2::from_float_q5_1,
     .vec_dot_avx2 = avx2::vec_dot_q5_1_q8_1},
    {.type = DType::Q8_0,
     .to_float_ref = ref::to_float_q8_0, .from_float_ref = ref::from_float_q8_0,
     .vec_dot_ref = ref::vec_dot_q8_0_q8_0,
     .to_float_avx2 = avx2::to_float_q8_0, .from_float_avx2 = avx2::from_float_q8_0,
     .vec_dot_avx2 = avx2::vec_dot_q8_0_q8_0},
    // Q8_1: an activation format only, no weight dot.
    {.type = DType::Q8_1,
     .to_float_ref = ref::to_float_q8_1, .from_float_ref = ref::from_float_q8_1, .vec_dot_ref = nullptr,
     .to_float_avx2 = avx2::to_float_q8_1, .from_float_avx2 = avx2::from_float_q8_1, .vec_dot_avx2 = nullptr},
    // K-quants: AVX2 dots; AVX2 to_float for the embedding-table formats.
    {.type = DType::Q2_K,
     .to_float_ref = ref::to_float_q2_K, .from_float_ref = ref::from_float_q2_K,
     .vec_dot_ref = ref::vec_dot_q2_K_q8_K,
     .vec_dot_avx2 = avx2::vec_dot_q2_K_q8_K},
    {.type = DType::Q3_K,
     .to_float_ref = ref::to_float_q3_K, .from_float_ref = ref::from_float_q3_K,
     .vec_dot_ref = ref::vec_dot_q3_K_q8_K,
     .vec_dot_avx2 = avx2::vec_dot_q3_K_q8_K},
    {.type = DType::Q4_K,
     .to_float_ref = ref::to_float_q4_K, .from_float_ref = ref::from_float_q4_K,
     .vec_dot_ref = ref::vec_dot_q4_K_q8_K,
     .to_float_avx2 = avx2::to_float_q4_K, .vec_dot_avx2 = avx2::vec_dot_q4_K_q8_K},
    {.type = DType::Q5_K,
     .to_float_ref = ref::to_float_q5_K, .from_float_ref = ref::from_float_q5_K,
     .vec_dot_ref = ref::vec_dot_q5_K_q8_K,
     .to_float_avx2 = avx2::to_float_q5_K, .vec_dot_avx2 = avx2::vec_dot_q5_K_q8_K},
    {.type = DType::Q6_K,
     .to_float_ref = ref::to_float_q6_K, .from_float_ref = ref::from_float_q6_K,
     .vec_dot_ref = ref::vec_dot_q6_K_q8_K,
     .to_float_avx2 = avx2::to_float_q6_K, .vec_dot_avx2 = avx2::vec_dot_q6_K_q8_K},
    // Q8_K: the K-quants' and TQ's activation format (no weight dot).
    {.type = DType::Q8_K,
     .to_float_ref = ref::to_float_q8_K, .from_float_ref = ref::from_float_q8_K, .vec_dot_ref = nullptr,
     .to_float_avx2 = avx2::to_float_q8_K, .from_float_avx2 = avx2::from_float_q8_K},
    {.type = DType::IQ4_NL,
     .to_float_ref = ref::to_float_iq4_nl, .from_float_ref = ref::from_float_iq4_nl,
     .vec_dot_ref = ref::vec_dot_iq4_nl_q8_0,
     .vec_dot_avx2 = avx2::vec_dot_iq4_nl_q8_0},
    {.type = DType::TQ1_0,
     .to_float_ref = ref::to_float_tq1_0, .from_float_ref = ref::from_float_tq1_0,
     .vec_dot_ref = ref::vec_dot_tq1_0_q8_K,
     .vec_dot_avx2 = avx2::vec_dot_tq1_0_q8_K},
    {.type = DType::TQ2_0,
     .to_float_ref = ref::to_float_tq2_0, .from_float_ref = ref::from_float_tq2_0,
     .vec_dot_ref = ref::vec_dot_tq2_0_q8_K,
     .vec_dot_avx2 = avx2::vec_dot_tq2_0_q8_K},
    {.type = DType::MXFP4,
     .to_float_ref = ref::to_float_mxfp4, .from_float_ref = ref::from_float_mxfp4,
     .vec_dot_ref = ref::vec_dot_mxfp4_q8_0,
     .vec_dot_avx2 = avx2::vec_dot_mxfp4_q8_0},
};

// Formats with a tiled gemm: the AVX2 kernel, its activation packer, the
// reference (a loop of reference vec_dots, gemm.h), and the AVX512-VNNI
// build of the AVX2 kernel where there is one (same packer, same bits).
struct GemmRow {
  DType type;
  GemmFn simd;
  GemmPackFn pack;
  size_t (*packed_bytes)(int64_t n);
  GemmFn ref;
  GemmFn avx512_vnni = nullptr;
};

constexpr GemmRow kGemms[] = {
    {.type = DType::F32, .simd = gemm::avx2::gemm_f32, .pack = nullptr, .packed_bytes = nullptr,
     .ref = gemm::gemm_ref<ref::vec_dot_f32>},
    {.type = DType::F16, .simd = gemm::avx2::gemm_f16, .pack = gemm::avx2::pack_f16_f32,
     .packed_bytes = gemm::packed_bytes_f32, .ref = gemm::gemm_ref<ref::vec_dot_f16>},
    {.type = DType::Q4_0, .simd = gemm::avx2::gemm_q4_0, .pack = gemm::avx2::pack_q8_0x4,
     .packed_bytes = gemm::packed_bytes_q8_0x4, .ref = gemm::gemm_ref<ref::vec_dot_q4_0_q8_0>},
    {.type = DType::Q4_1, .simd = gemm::avx2::gemm_q4_1, .pack = gemm::avx2::pack_q8_1x4,
     .packed_bytes = gemm::packed_bytes_q8_1x4, .ref = gemm::gemm_ref<ref::vec_dot_q4_1_q8_1>},
    {.type = DType::Q5_0, .simd = gemm::avx2::gemm_q5_0, .pack = gemm::avx2::pack_q8_0x4,
     .packed_bytes = gemm::packed_bytes_q8_0x4, .ref = gemm::gemm_ref<ref::vec_dot_q5_0_q8_0>},
    {.type = DType::Q8_0, .simd = gemm::avx2::gemm_q8_0, .pack = gemm::avx2::pack_q8_0x4,
     .packed_bytes = gemm::packed_bytes_q8_0x4, .ref = gemm::gemm_ref<ref::vec_dot_q8_0_q8_0>},
    {.type = DType::Q4_K, .simd = gemm::avx2::gemm_q4_K, .pack = gemm::avx2::pack_q8_Kx,
     .packed_bytes = gemm::packed_bytes_q8_Kx, .ref = gemm::gemm_ref<ref::vec_dot_q4_K_q8_K>,
     .avx512_vnni = gemm::avx512vnni::gemm_q4_K},
    {.type = DType::Q6_K, .simd = gemm::avx2::gemm_q6_K, .pack = gemm::avx2::pack_q8_Kx,
     .packed_bytes = gemm::packed_bytes_q8_Kx, .ref = gemm::gemm_ref<ref::vec_dot_q6_K_q8_K>,
     .avx512_vnni = gemm::avx512vnni::gemm_q6_K},
};

struct Table {
  std::array<CpuKernels, kMaxId> rows{};
  std::array<bool, kMaxId> present{};
};

Table build() {
  const bool simd = cpu_features().has_avx2_fma();
  Table t;
  for (const Row& r : kRows) {
    CpuKernels k;
    k.to_float_ref = r.to_float_ref;
    k.from_float_ref = r.from_float_ref;
    k.vec_dot_ref = r.vec_dot_ref;
    k.to_float = simd && r.to_float_avx2 ? r.to_float_avx2 : r.to_float_ref;
    k.from_float = simd && r.from_float_avx2 ? r.from_float_avx2 : r.from_float_ref;
    k.vec_dot = simd && r.vec_dot_avx2 ? r.vec_dot_avx2 : r.vec_dot_ref;
    const auto id = static_cast<uint32_t>(r.type);
    t.rows[id] = k;
    t.present[id] = true;
  }
  // Without SIMD the gemm entry stays empty: matmul's vec_dot loop is then
  // the reference loop itself.
  const bool avx512_vnni = cpu_features().has_avx512_vnni();
  for (const GemmRow& g : kGemms) {
    CpuKernels& k = t.rows[static_cast<uint32_t>(g.type)];
    k.gemm_ref = g.ref;
    if (simd) {
      k.gemm = avx512_vnni && g.avx512_vnni ? g.avx512_vnni : g.simd;
      k.gemm_pack = g.pack;
      k.gemm_packed_bytes = g.packed_bytes;
    }
  }
  return t;
}

const Table& table() {
  static const Table t = build();
  return t;
}

}  // namespace

const CpuKernels& cpu_kernels(DType t) {
  const auto id = static_cast<uint32_t>(t);
  const Table& tab = table();
  if (id >= kMaxId || !tab.present[id]) {
    const DTypeInfo* info = find_dtype(id);
    throw Error(std::string("kvad has no CPU kernels for format ") +
                (info ? info->name : ("#" + std::to_string(id)).c_str()));
  }
  return tab.rows[id];
}

bool has_cpu_kernels(DType t) {
  const auto id = static_cast<uint32_t>(t);
  if (id >= kMaxId || !table().present[id]) return false;
  const CpuKernels& k = table().rows[id];
  return k.to_float && k.vec_dot;
}

}  // namespace kvad::cpu
