// The data rows of the format table (tensor/dtype.h). (The CPU kernels rows
// are checked in tests/kernels/cpu/test_formats.cpp.)
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/kernels.h"
#include "tensor/dtype.h"

using namespace kvad;

namespace {
const DType kAll[] = {DType::F32,  DType::F16,  DType::Q4_0, DType::Q4_1, DType::Q5_0,  DType::Q5_1,
                      DType::Q8_0, DType::Q8_1, DType::Q2_K, DType::Q3_K, DType::Q4_K,  DType::Q5_K,
                      DType::Q6_K, DType::Q8_K, DType::IQ4_NL, DType::I8, DType::I16,   DType::I32,
                      DType::I64,  DType::F64,  DType::BF16, DType::TQ1_0, DType::TQ2_0};
}  // namespace

TEST(DType, EveryEnumValueHasARow) {
  std::set<std::string> names;
  for (DType t : kAll) {
    const DTypeInfo* i = find_dtype(static_cast<uint32_t>(t));
    ASSERT_NE(i, nullptr) << static_cast<uint32_t>(t);
    EXPECT_EQ(i->type, t);
    EXPECT_EQ(&dtype_info(t), i);
    EXPECT_GT(i->block_elems, 0);
    EXPECT_GT(i->block_bytes, 0u);
    EXPECT_TRUE(names.insert(i->name).second) << "duplicate name " << i->name;
    // The activation format has a row and pairs with itself.
    const DTypeInfo& a = dtype_info(i->vec_dot_type);
    EXPECT_EQ(a.vec_dot_type, a.type) << i->name;
    EXPECT_EQ(a.block_elems, i->block_elems) << i->name;
  }
  EXPECT_EQ(names.size(), std::size(kAll));
}

TEST(DType, GgmlGeometry) {
  struct G { DType t; int64_t elems; size_t bytes; DType dot; bool quantized; };
  const G g[] = {
      {DType::F32, 1, 4, DType::F32, false},      {DType::F16, 1, 2, DType::F16, false},
      {DType::BF16, 1, 2, DType::BF16, false},    {DType::Q4_0, 32, 18, DType::Q8_0, true},
      {DType::Q4_1, 32, 20, DType::Q8_1, true},   {DType::Q5_0, 32, 22, DType::Q8_0, true},
      {DType::Q5_1, 32, 24, DType::Q8_1, true},   {DType::Q8_0, 32, 34, DType::Q8_0, true},
      {DType::Q8_1, 32, 36, DType::Q8_1, true},   {DType::Q2_K, 256, 84, DType::Q8_K, true},
      {DType::Q3_K, 256, 110, DType::Q8_K, true}, {DType::Q4_K, 256, 144, DType::Q8_K, true},
      {DType::Q5_K, 256, 176, DType::Q8_K, true}, {DType::Q6_K, 256, 210, DType::Q8_K, true},
      {DType::Q8_K, 256, 292, DType::Q8_K, true}, {DType::IQ4_NL, 32, 18, DType::Q8_0, true},
      {DType::I8, 1, 1, DType::I8, false},        {DType::I16, 1, 2, DType::I16, false},
      {DType::I32, 1, 4, DType::I32, false},      {DType::I64, 1, 8, DType::I64, false},
      {DType::F64, 1, 8, DType::F64, false},      {DType::TQ1_0, 256, 54, DType::Q8_K, true},
      {DType::TQ2_0, 256, 66, DType::Q8_K, true},
  };
  for (const G& x : g) {
    const DTypeInfo& i = dtype_info(x.t);
    EXPECT_EQ(i.block_elems, x.elems) << i.name;
    EXPECT_EQ(i.block_bytes, x.bytes) << i.name;
    EXPECT_EQ(i.vec_dot_type, x.dot) << i.name;
    EXPECT_EQ(i.quantized, x.quantized) << i.name;
  }
  EXPECT_EQ(dtype_info(DType::Q4_0).block_bytes, sizeof(cpu::block_q4_0));
  EXPECT_EQ(dtype_info(DType::Q4_1).block_bytes, sizeof(cpu::block_q4_1));
  EXPECT_EQ(dtype_info(DType::Q5_0).block_bytes, sizeof(cpu::block_q5_0));
  EXPECT_EQ(dtype_info(DType::Q5_1).block_bytes, sizeof(cpu::block_q5_1));
  EXPECT_EQ(dtype_info(DType::Q8_0).block_bytes, sizeof(cpu::block_q8_0));
  EXPECT_EQ(dtype_info(DType::Q8_1).block_bytes, sizeof(cpu::block_q8_1));
  EXPECT_EQ(dtype_info(DType::Q2_K).block_bytes, sizeof(cpu::block_q2_K));
  EXPECT_EQ(dtype_info(DType::Q3_K).block_bytes, sizeof(cpu::block_q3_K));
  EXPECT_EQ(dtype_info(DType::Q4_K).block_bytes, sizeof(cpu::block_q4_K));
  EXPECT_EQ(dtype_info(DType::Q5_K).block_bytes, sizeof(cpu::block_q5_K));
  EXPECT_EQ(dtype_info(DType::Q6_K).block_bytes, sizeof(cpu::block_q6_K));
  EXPECT_EQ(dtype_info(DType::Q8_K).block_bytes, sizeof(cpu::block_q8_K));
  EXPECT_EQ(dtype_info(DType::IQ4_NL).block_bytes, sizeof(cpu::block_iq4_nl));
  EXPECT_EQ(dtype_info(DType::TQ1_0).block_bytes, sizeof(cpu::block_tq1_0));
  EXPECT_EQ(dtype_info(DType::TQ2_0).block_bytes, sizeof(cpu::block_tq2_0));
  EXPECT_EQ(row_bytes(DType::Q4_1, 576), 18u * 20u);
  EXPECT_EQ(row_bytes(DType::F16, 7), 14u);
}

TEST(DType, Supported) {
  for (DType t : kAll) {
    // Everything but the plain integer and f64 types.
    const bool expect = !(t == DType::I8 || t == DType::I16 || t == DType::I32 || t == DType::I64 ||
                          t == DType::F64);
    EXPECT_EQ(dtype_info(t).supported, expect) << dtype_name(t);
    // A supported format has a CPU kernels row.
    if (expect) {
      EXPECT_NO_THROW(cpu::cpu_kernels(t)) << dtype_name(t);
    }
  }
}

TEST(DType, Lookup) {
  EXPECT_EQ(find_dtype(4), nullptr);  // removed Q4_2
  EXPECT_EQ(find_dtype(5), nullptr);
  EXPECT_EQ(find_dtype(1000), nullptr);
  EXPECT_EQ(find_dtype(0xFFFFFFFFu), nullptr);
  EXPECT_STREQ(dtype_name(DType::Q4_K), "q4_K");
  EXPECT_STREQ(dtype_name(DType::IQ4_NL), "iq4_nl");
  ASSERT_NE(find_dtype_by_name("Q4_K"), nullptr);
  EXPECT_EQ(find_dtype_by_name("Q4_K")->type, DType::Q4_K);
  EXPECT_EQ(find_dtype_by_name("q4_k")->type, DType::Q4_K);
  EXPECT_EQ(find_dtype_by_name("BF16")->type, DType::BF16);
  EXPECT_EQ(find_dtype_by_name("q8_0")->type, DType::Q8_0);
  EXPECT_EQ(find_dtype_by_name("q4"), nullptr);
  EXPECT_EQ(find_dtype_by_name(""), nullptr);
  EXPECT_EQ(find_dtype_by_name("q4_0x"), nullptr);
  for (DType t : kAll) EXPECT_EQ(find_dtype_by_name(dtype_name(t))->type, t);
}
