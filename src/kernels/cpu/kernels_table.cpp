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

struct Row {
  DType type;
  CpuKernels ref;   // to_float/from_float/vec_dot hold the references
  CpuKernels simd;  // AVX2 entries; nullptr where the reference is used
};

#define KVAD_ROW(T, fmt, dot)                                                          \
  Row{DType::T,                                                                        \
      {quants::ref::to_float_##fmt, quants::ref::from_float_##fmt, dot(ref), nullptr, \
       nullptr, nullptr},                                                              \
      {quants::avx2::to_float_##fmt, quants::avx2::from_float_##fmt, dot(avx2), nullptr, \
       nullptr, nullptr}}

#define DOT_F32(ns) quants::ns::vec_dot_f32
#define DOT_F16(ns) quants::ns::vec_dot_f16
#define DOT_BF16(ns) quants::ns::vec_dot_bf16
#define DOT_Q4_0(ns) quants::ns::vec_dot_q4_0_q8_0
#define DOT_Q4_1(ns) quants::ns::vec_dot_q4_1_q8_1
#define DOT_Q5_0(ns) quants::ns::vec_dot_q5_0_q8_0
#define DOT_Q5_1(ns) quants::ns::vec_dot_q5_1_q8_1
#define DOT_Q8_0(ns) quants::ns::vec_dot_q8_0_q8_0
#define DOT_NONE(ns) nullptr

// Rows whose AVX2 side covers only some entries (the rest use the reference).
CpuKernels entries(ToFloatFn to_float, FromFloatFn from_float, VecDotFn vec_dot) {
  CpuKernels k;
  k.to_float = to_float;
  k.from_float = from_float;
  k.vec_dot = vec_dot;
  return k;
}

#define KVAD_REF(fmt, dot) \
  entries(quants::ref::to_float_##fmt, quants::ref::from_float_##fmt, quants::ref::vec_dot_##dot)

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

const GemmRow kGemms[] = {
    {DType::F32, gemm::avx2::gemm_f32, nullptr, nullptr, gemm::gemm_ref<quants::ref::vec_dot_f32>},
    {DType::Q4_0, gemm::avx2::gemm_q4_0, gemm::avx2::pack_q8_0x4, gemm::packed_bytes_q8_0x4,
     gemm::gemm_ref<quants::ref::vec_dot_q4_0_q8_0>},
    {DType::Q4_1, gemm::avx2::gemm_q4_1, gemm::avx2::pack_q8_1x4, gemm::packed_bytes_q8_1x4,
     gemm::gemm_ref<quants::ref::vec_dot_q4_1_q8_1>},
    {DType::Q5_0, gemm::avx2::gemm_q5_0, gemm::avx2::pack_q8_0x4, gemm::packed_bytes_q8_0x4,
     gemm::gemm_ref<quants::ref::vec_dot_q5_0_q8_0>},
    {DType::Q8_0, gemm::avx2::gemm_q8_0, gemm::avx2::pack_q8_0x4, gemm::packed_bytes_q8_0x4,
     gemm::gemm_ref<quants::ref::vec_dot_q8_0_q8_0>},
    {DType::Q4_K, gemm::avx2::gemm_q4_K, gemm::avx2::pack_q8_Kx, gemm::packed_bytes_q8_Kx,
     gemm::gemm_ref<quants::ref::vec_dot_q4_K_q8_K>, gemm::avx512vnni::gemm_q4_K},
    {DType::Q6_K, gemm::avx2::gemm_q6_K, gemm::avx2::pack_q8_Kx, gemm::packed_bytes_q8_Kx,
     gemm::gemm_ref<quants::ref::vec_dot_q6_K_q8_K>, gemm::avx512vnni::gemm_q6_K},
};

struct Table {
  std::array<CpuKernels, kMaxId> rows{};
  std::array<bool, kMaxId> present{};
};

Table build() {
  const Row rows[] = {
      KVAD_ROW(F32, f32, DOT_F32),    KVAD_ROW(F16, f16, DOT_F16),
      KVAD_ROW(BF16, bf16, DOT_BF16), KVAD_ROW(Q4_0, q4_0, DOT_Q4_0),
      KVAD_ROW(Q4_1, q4_1, DOT_Q4_1), KVAD_ROW(Q5_0, q5_0, DOT_Q5_0),
      KVAD_ROW(Q5_1, q5_1, DOT_Q5_1), KVAD_ROW(Q8_0, q8_0, DOT_Q8_0),
      KVAD_ROW(Q8_1, q8_1, DOT_NONE),  // activation format only: no weight dot
      // K-quants: AVX2 dots; AVX2 to_float for the embedding-table formats.
      Row{DType::Q2_K, KVAD_REF(q2_K, q2_K_q8_K), entries(nullptr, nullptr, quants::avx2::vec_dot_q2_K_q8_K)},
      Row{DType::Q3_K, KVAD_REF(q3_K, q3_K_q8_K), entries(nullptr, nullptr, quants::avx2::vec_dot_q3_K_q8_K)},
      Row{DType::Q4_K, KVAD_REF(q4_K, q4_K_q8_K),
          entries(quants::avx2::to_float_q4_K, nullptr, quants::avx2::vec_dot_q4_K_q8_K)},
      Row{DType::Q5_K, KVAD_REF(q5_K, q5_K_q8_K),
          entries(quants::avx2::to_float_q5_K, nullptr, quants::avx2::vec_dot_q5_K_q8_K)},
      Row{DType::Q6_K, KVAD_REF(q6_K, q6_K_q8_K),
          entries(quants::avx2::to_float_q6_K, nullptr, quants::avx2::vec_dot_q6_K_q8_K)},
      // Q8_K: the K-quants' and TQ's activation format (no weight dot).
      Row{DType::Q8_K,
          entries(quants::ref::to_float_q8_K, quants::ref::from_float_q8_K, nullptr),
          entries(quants::avx2::to_float_q8_K, quants::avx2::from_float_q8_K, nullptr)},
      Row{DType::IQ4_NL, KVAD_REF(iq4_nl, iq4_nl_q8_0), entries(nullptr, nullptr, quants::avx2::vec_dot_iq4_nl_q8_0)},
      Row{DType::TQ1_0, KVAD_REF(tq1_0, tq1_0_q8_K), entries(nullptr, nullptr, quants::avx2::vec_dot_tq1_0_q8_K)},
      Row{DType::TQ2_0, KVAD_REF(tq2_0, tq2_0_q8_K), entries(nullptr, nullptr, quants::avx2::vec_dot_tq2_0_q8_K)},
      Row{DType::MXFP4, KVAD_REF(mxfp4, mxfp4_q8_0), entries(nullptr, nullptr, quants::avx2::vec_dot_mxfp4_q8_0)},
  };
  const bool simd = cpu_features().has_avx2_fma();
  Table t;
  for (const Row& r : rows) {
    CpuKernels k;
    k.to_float_ref = r.ref.to_float;
    k.from_float_ref = r.ref.from_float;
    k.vec_dot_ref = r.ref.vec_dot;
    k.to_float = simd && r.simd.to_float ? r.simd.to_float : r.ref.to_float;
    k.from_float = simd && r.simd.from_float ? r.simd.from_float : r.ref.from_float;
    k.vec_dot = simd && r.simd.vec_dot ? r.simd.vec_dot : r.ref.vec_dot;
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
