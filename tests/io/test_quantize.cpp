// Tests of the quantizer (src/io/quantize.h) and the GGUF writer's deferred
// tensors it streams through (src/io/gguf_writer.h).
//
// The reference is llama.cpp (tests/fixtures/quantize/smollm2-rmse.json, made
// by tools/make_quantize_reference.py with llama-cpp-python): for every
// --type, the type llama.cpp chose for each 2-D tensor of SmolLM2-135M and
// the RMSE of its dequantized values against the F32 source. Here the same
// F32 values (the store's Q4_1 file dequantized) are quantized by kvad:
// the per-tensor types must equal llama.cpp's for the mixtures, and each
// tensor's RMSE must be within 2% of llama.cpp's where the types agree.
// Tests that need the model skip when the store lacks smollm2-135m.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "../engine/model_path.h"
#include "base/thread_pool.h"
#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "io/quantize.h"
#include "kernels/cpu/kernels.h"
#include "quantize_source.h"

namespace kvad::quant {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// ---------------------------------------------------------------------------
// Rules on tensor lists (no model needed).

std::vector<TensorDesc> llama_like(int64_t n_embd, int64_t n_ff, int64_t n_layer, bool with_output) {
  std::vector<TensorDesc> t;
  t.push_back({"token_embd.weight", {n_embd, 1000}, DType::F16});
  for (int64_t i = 0; i < n_layer; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    t.push_back({p + "attn_norm.weight", {n_embd}, DType::F32});
    t.push_back({p + "attn_q.weight", {n_embd, n_embd}, DType::F16});
    t.push_back({p + "attn_k.weight", {n_embd, n_embd / 4}, DType::F16});
    t.push_back({p + "attn_v.weight", {n_embd, n_embd / 4}, DType::F16});
    t.push_back({p + "attn_output.weight", {n_embd, n_embd}, DType::F16});
    t.push_back({p + "ffn_norm.weight", {n_embd}, DType::F32});
    t.push_back({p + "ffn_gate.weight", {n_embd, n_ff}, DType::F16});
    t.push_back({p + "ffn_up.weight", {n_embd, n_ff}, DType::F16});
    t.push_back({p + "ffn_down.weight", {n_ff, n_embd}, DType::F16});
  }
  t.push_back({"output_norm.weight", {n_embd}, DType::F32});
  if (with_output) t.push_back({"output.weight", {n_embd, 1000}, DType::F16});
  return t;
}

std::map<std::string, DType> plan_map(const std::vector<TensorDesc>& ts, const char* type) {
  const std::vector<TensorChoice> p = plan(ts, find_quant_type(type));
  std::map<std::string, DType> m;
  for (size_t i = 0; i < ts.size(); ++i) m[ts[i].name] = p[i].type;
  return m;
}

std::string L(int i, const char* what) { return "blk." + std::to_string(i) + "." + what + ".weight"; }

TEST(QuantizeRule, TypeNames) {
  EXPECT_EQ(quant_types().size(), 13u);
  EXPECT_EQ(find_quant_type("Q4_K_M").file_type, 15u);
  EXPECT_EQ(find_quant_type("q8_0").file_type, 7u);
  EXPECT_EQ(find_quant_type("tq2_0").file_type, 37u);
  EXPECT_EQ(find_quant_type("iq4_nl").base, DType::IQ4_NL);
  try {
    find_quant_type("q4_k_x");
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("q4_k_x"), std::string::npos) << m;
    EXPECT_NE(m.find(quant_type_names()), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}

TEST(QuantizeRule, WhichTensorsAreQuantized) {
  EXPECT_TRUE(is_quantized_tensor("blk.0.attn_q.weight", {512, 512}));
  EXPECT_TRUE(is_quantized_tensor("token_embd.weight", {512, 1000}));
  EXPECT_FALSE(is_quantized_tensor("blk.0.attn_norm.weight", {512}));
  EXPECT_FALSE(is_quantized_tensor("blk.0.attn_q.bias", {512}));
  EXPECT_FALSE(is_quantized_tensor("blk.0.attn_q.weight", {512, 1, 1}));  // ggml_n_dims 1
  EXPECT_FALSE(is_quantized_tensor("blk.0.attn_q_norm.weight", {64, 8}));
  EXPECT_FALSE(is_quantized_tensor("blk.0.ffn_gate_inp.weight", {512, 8}));
  EXPECT_FALSE(is_quantized_tensor("position_embd.weight", {512, 1024}));
  EXPECT_FALSE(is_quantized_tensor("blk.0.ssm_conv1d.weight", {4, 512}));
  EXPECT_FALSE(is_quantized_tensor("rope_freqs", {32, 2}));
}

TEST(QuantizeRule, SingleTypeIsUniform) {
  const auto ts = llama_like(512, 1536, 4, false);
  for (const char* type : {"q8_0", "q4_0", "q2_k", "q6_k", "tq2_0", "iq4_nl"}) {
    const std::vector<TensorChoice> p = plan(ts, find_quant_type(type));
    for (size_t i = 0; i < ts.size(); ++i) {
      if (ts[i].ne.size() == 1) {
        EXPECT_FALSE(p[i].quantize) << ts[i].name;
        EXPECT_EQ(p[i].type, DType::F32) << ts[i].name;
      } else {
        EXPECT_TRUE(p[i].quantize) << ts[i].name;
        EXPECT_EQ(p[i].type, find_quant_type(type).base) << type << " " << ts[i].name;
        EXPECT_FALSE(p[i].fallback);
      }
    }
  }
}

// llama.cpp's mixture rules on a model whose rows all fit 256 (n_layer 8:
// use_more_bits holds for layers 0, 3, 6, 7).
TEST(QuantizeRule, MixturesOnRowsOf256) {
  const auto tied = llama_like(512, 1536, 8, false);
  const auto untied = llama_like(512, 1536, 8, true);
  const std::set<int> more = {0, 3, 6, 7};
  for (const char* type : {"q4_k_m", "q5_k_m"}) {
    const DType base = find_quant_type(type).base;
    auto m = plan_map(tied, type);
    EXPECT_EQ(m["token_embd.weight"], DType::Q6_K) << type;  // tied: it is the output matrix
    EXPECT_EQ(m["output_norm.weight"], DType::F32);
    for (int i = 0; i < 8; ++i) {
      const DType up = more.count(i) ? DType::Q6_K : base;
      EXPECT_EQ(m[L(i, "attn_v")], up) << type << " layer " << i;
      EXPECT_EQ(m[L(i, "ffn_down")], up) << type << " layer " << i;
      for (const char* w : {"attn_q", "attn_k", "attn_output", "ffn_gate", "ffn_up"})
        EXPECT_EQ(m[L(i, w)], base) << type << " " << w << " layer " << i;
    }
    auto u = plan_map(untied, type);
    EXPECT_EQ(u["token_embd.weight"], base) << type;
    EXPECT_EQ(u["output.weight"], DType::Q6_K) << type;
  }
  auto s = plan_map(tied, "q4_k_s");
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(s[L(i, "attn_v")], i < 4 ? DType::Q5_K : DType::Q4_K) << i;
    EXPECT_EQ(s[L(i, "ffn_down")], i < 1 ? DType::Q5_K : DType::Q4_K) << i;  // i < n/8
    EXPECT_EQ(s[L(i, "attn_output")], DType::Q4_K) << i;
  }
  auto q3 = plan_map(tied, "q3_k_m");
  EXPECT_EQ(q3["token_embd.weight"], DType::Q6_K);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(q3[L(i, "attn_v")], i < 2 ? DType::Q5_K : DType::Q4_K) << i;
    EXPECT_EQ(q3[L(i, "ffn_down")], DType::Q4_K) << i;  // n/16 == 0
    EXPECT_EQ(q3[L(i, "attn_output")], DType::Q4_K) << i;
    EXPECT_EQ(q3[L(i, "attn_q")], DType::Q3_K) << i;
    EXPECT_EQ(q3[L(i, "ffn_up")], DType::Q3_K) << i;
  }
  // n_layer from block_count wins over the number of ffn_down tensors.
  const std::vector<TensorChoice> p = plan(tied, find_quant_type("q3_k_m"), 32);
  for (size_t i = 0; i < tied.size(); ++i)
    if (tied[i].name == L(1, "ffn_down")) {
      EXPECT_EQ(p[i].type, DType::Q5_K);  // 1 < 32/16
    }
}

TEST(QuantizeRule, MixtureFallbacksAndSingleTypeRefusal) {
  const auto ts = llama_like(576, 1536, 8, false);  // rows of 576: 576 % 256 != 0
  auto m = plan_map(ts, "q4_k_m");
  EXPECT_EQ(m["token_embd.weight"], DType::Q8_0);
  EXPECT_EQ(m[L(0, "attn_v")], DType::Q8_0);     // Q6_K -> Q8_0
  EXPECT_EQ(m[L(1, "attn_v")], DType::Q5_0);     // Q4_K -> Q5_0
  EXPECT_EQ(m[L(0, "ffn_down")], DType::Q6_K);   // rows of 1536 fit
  EXPECT_EQ(m[L(1, "ffn_down")], DType::Q4_K);
  EXPECT_EQ(plan_map(ts, "q5_k_m")[L(1, "attn_q")], DType::Q5_1);  // Q5_K -> Q5_1
  EXPECT_EQ(plan_map(ts, "q3_k_m")[L(1, "attn_q")], DType::Q4_0);  // Q3_K -> Q4_0
  const std::vector<TensorChoice> p = plan(ts, find_quant_type("q4_k_m"));
  for (size_t i = 0; i < ts.size(); ++i)
    if (ts[i].name == L(1, "attn_q")) {
      EXPECT_TRUE(p[i].fallback);
      EXPECT_EQ(p[i].wanted, DType::Q4_K);
    }
  // Rows that not even 32 divides: F16.
  std::vector<TensorDesc> odd = {{"blk.0.attn_q.weight", {100, 64}, DType::F32}};
  EXPECT_EQ(plan(odd, find_quant_type("q4_k_m"))[0].type, DType::F16);

  for (const char* type : {"q2_k", "q6_k", "tq2_0"}) {
    try {
      plan(ts, find_quant_type(type));
      FAIL() << type << ": no error";
    } catch (const Error& e) {
      const std::string msg = e.what();
      for (const char* part : {"token_embd.weight", "576", "256", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl"})
        EXPECT_NE(msg.find(part), std::string::npos) << part << " not in: " << msg;
    }
  }
  // ... also for a single type (llama-quantize: "must use F16 due to unusual shape").
  const std::vector<TensorChoice> odd_q8 = plan(odd, find_quant_type("q8_0"));
  EXPECT_EQ(odd_q8[0].type, DType::F16);
  EXPECT_EQ(odd_q8[0].wanted, DType::Q8_0);
  EXPECT_TRUE(odd_q8[0].fallback);
}

TEST(QuantizeRule, QuantizedInputIsAnError) {
  std::vector<TensorDesc> ts = {{"blk.0.attn_norm.weight", {256}, DType::F32},
                                {"blk.0.attn_q.weight", {256, 256}, DType::Q4_1}};
  try {
    plan(ts, find_quant_type("q8_0"));
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("blk.0.attn_q.weight"), std::string::npos) << m;
    EXPECT_NE(m.find("q4_1"), std::string::npos) << m;
    EXPECT_NE(m.find("F32, F16 or BF16"), std::string::npos) << m;
  }
  // A quantized tensor that is only copied is fine.
  ts[0].type = DType::Q8_0;
  ts[0].ne = {256};
  ts[1].type = DType::BF16;
  EXPECT_NO_THROW(plan(ts, find_quant_type("q8_0")));
}

// ---------------------------------------------------------------------------
// Writer: deferred tensors.

TEST(WriterDeferred, SameBytesAsHeldTensors) {
  std::vector<float> a(6 * 4);
  for (size_t k = 0; k < a.size(); ++k) a[k] = 0.25f * static_cast<float>(k);
  std::vector<uint8_t> q(row_bytes(DType::Q8_0, 64) * 3);
  for (size_t k = 0; k < q.size(); ++k) q[k] = static_cast<uint8_t>(k * 13);
  std::vector<float> c(5, 1.5f);

  gguf::Writer held, deferred;
  for (gguf::Writer* w : {&held, &deferred}) {
    w->add(gguf::make_string("general.architecture", "llama"));
    w->set_alignment(64);
  }
  held.add_tensor("a", DType::F32, {6, 4}, a.data(), a.size() * 4);
  held.add_tensor("q", DType::Q8_0, {64, 3}, q.data(), q.size());
  held.add_tensor("c", DType::F32, {5}, c.data(), c.size() * 4);
  deferred.add_tensor("a", DType::F32, {6, 4}, a.data(), a.size() * 4);
  deferred.add_tensor_deferred("q", DType::Q8_0, {64, 3});
  deferred.add_tensor_deferred("c", DType::F32, {5});
  EXPECT_EQ(held.size(), deferred.size());
  EXPECT_THROW(deferred.to_bytes(), GGUFError);
  const fs::path p = fs::path(::testing::TempDir()) / "deferred.gguf";
  EXPECT_THROW(deferred.write_file(p.string()), GGUFError);

  std::vector<size_t> calls;
  deferred.write_file(p.string(), [&](size_t i, size_t n, const gguf::Writer::Sink& write) {
    calls.push_back(i);
    if (i == 1) {
      EXPECT_EQ(n, q.size());
      write(q.data(), 100);  // in two pieces
      write(q.data() + 100, q.size() - 100);
    } else {
      EXPECT_EQ(n, c.size() * 4);
      write(c.data(), n);
    }
  });
  EXPECT_EQ(calls, (std::vector<size_t>{1, 2}));
  std::ifstream in(p, std::ios::binary);
  std::vector<uint8_t> got((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(got, held.to_bytes());

  // A source that gives too few or too many bytes is an error naming the tensor.
  for (int delta : {-1, +1}) {
    try {
      deferred.write_file(p.string(), [&](size_t i, size_t n, const gguf::Writer::Sink& write) {
        std::vector<uint8_t> z(n + 1, 0);
        write(z.data(), i == 1 ? n + delta : n);
      });
      FAIL() << "no error for delta " << delta;
    } catch (const GGUFError& e) {
      EXPECT_NE(std::string(e.what()).find("'q'"), std::string::npos) << e.what();
    }
  }
}

// quantize_tensors' row_map: a subset of a tensor's rows (one of the GGUF
// tensors a fused HF tensor is split into), in the map's order, copied or
// quantized; an entry past the data's rows, or a map whose length is not
// the shape's rows, is an error naming the tensor.
TEST(QuantizeTensors, RowMapTakesASubsetOfRows) {
  constexpr int64_t kCols = 32, kRows = 6;
  std::vector<float> a(kCols * kRows);
  for (size_t k = 0; k < a.size(); ++k) a[k] = std::sin(0.37f * static_cast<float>(k));
  const auto* bytes = reinterpret_cast<const uint8_t*>(a.data());
  const std::vector<int64_t> rows = {4, 1, 5};
  const InputTensor copied{"copied", DType::F32, {kCols, 3}, bytes, a.size() * 4, rows, {}};
  const InputTensor quantized{"quantized", DType::F32, {kCols, 3}, bytes, a.size() * 4, rows, {}};
  TensorChoice copy, q8;
  q8.quantize = true;
  q8.type = q8.wanted = DType::Q8_0;
  const fs::path p = fs::path(::testing::TempDir()) / "row_map.gguf";
  const std::vector<gguf::Value> meta = {gguf::make_string("general.architecture", "llama")};
  quantize_tensors(3, meta, {copied, quantized}, {copy, q8}, 7, p.string(), Options{1, {}});
  auto f = gguf::File::open(p.string());
  const gguf::TensorInfo* c = f->find_tensor("copied");
  const gguf::TensorInfo* qt = f->find_tensor("quantized");
  ASSERT_TRUE(c && qt);
  std::vector<float> picked;
  for (int64_t r : rows) picked.insert(picked.end(), a.begin() + r * kCols, a.begin() + (r + 1) * kCols);
  ASSERT_EQ(c->n_bytes, picked.size() * 4);
  EXPECT_EQ(std::memcmp(c->data, picked.data(), picked.size() * 4), 0);
  std::vector<uint8_t> want(row_bytes(DType::Q8_0, kCols) * 3);
  quantize_rows(picked.data(), 3, kCols, DType::Q8_0, want.data());
  ASSERT_EQ(qt->n_bytes, want.size());
  EXPECT_EQ(std::memcmp(qt->data, want.data(), want.size()), 0);

  for (const auto& [map, ne1, what] : {std::tuple{std::vector<int64_t>{0, 6, 1}, int64_t{3}, "past its 6 rows"},
                                       std::tuple{std::vector<int64_t>{0, 1}, int64_t{3}, "row map of 2 rows"}}) {
    const InputTensor bad{"bad", DType::F32, {kCols, ne1}, bytes, a.size() * 4, map, {}};
    try {
      quantize_tensors(3, meta, {bad}, {copy}, 7, p.string(), Options{1, {}});
      ADD_FAILURE() << "no error for " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("'bad'"), std::string::npos) << e.what();
    }
  }
}

TEST(QuantizeRows, ThreadsGiveTheSameBytes) {
  const int64_t n_rows = 37, n = 512;
  std::vector<float> x(static_cast<size_t>(n_rows * n));
  uint32_t s = 1;
  for (float& v : x) {
    s = s * 1664525u + 1013904223u;
    v = (static_cast<float>(s >> 8) / 16777216.0f - 0.5f) * 0.1f;
  }
  ThreadPool pool(3);
  for (DType t : {DType::Q8_0, DType::Q4_K, DType::Q6_K, DType::IQ4_NL, DType::TQ2_0}) {
    const size_t rb = row_bytes(t, n);
    std::vector<uint8_t> a(rb * n_rows), b(rb * n_rows), c(rb * n_rows);
    quantize_rows(x.data(), n_rows, n, t, a.data(), nullptr);
    quantize_rows(x.data(), n_rows, n, t, b.data(), &pool);
    for (int64_t r = 0; r < n_rows; ++r)
      cpu::cpu_kernels(t).from_float_ref(x.data() + r * n, c.data() + r * rb, n);
    EXPECT_EQ(a, b) << dtype_name(t);
    // IQ4_NL: llama.cpp's model quantizer searches 15 more scales than ggml's
    // quantize_row_iq4_nl_ref (kvad's from_float), so its bytes differ.
    if (t == DType::IQ4_NL)
      EXPECT_NE(a, c);
    else
      EXPECT_EQ(a, c) << dtype_name(t);
  }
  x[5 * n + 7] = std::nanf("");
  std::vector<uint8_t> d(row_bytes(DType::Q8_0, n) * n_rows);
  try {
    quantize_rows(x.data(), n_rows, n, DType::Q8_0, d.data(), &pool);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("row 5"), std::string::npos) << e.what();
  }
}

// F16 and BF16 inputs quantize to the same bytes as F32 inputs holding the
// same values; 1-D tensors are copied in their own type.
TEST(QuantizeInput, F16AndBf16AsF32) {
  const int64_t n = 512, rows = 6;
  std::vector<float> x(static_cast<size_t>(n * rows));
  uint32_t s = 7;
  for (float& v : x) {
    s = s * 1664525u + 1013904223u;
    v = (static_cast<float>(s >> 8) / 16777216.0f - 0.5f) * 0.2f;
  }
  const fs::path dir = fs::path(::testing::TempDir());
  for (DType in_type : {DType::F16, DType::BF16}) {
    // The values the input type can hold, as F32 and in the input type.
    std::vector<uint8_t> packed(row_bytes(in_type, n) * rows);
    cpu::cpu_kernels(in_type).from_float(x.data(), packed.data(), n * rows);
    std::vector<float> exact(x.size());
    cpu::cpu_kernels(in_type).to_float(packed.data(), exact.data(), n * rows);
    std::vector<float> norm(n, 1.0f);
    std::vector<std::vector<uint8_t>> got;
    for (bool as_f32 : {true, false}) {
      gguf::Writer w;
      w.add(gguf::make_string("general.architecture", "llama"));
      w.add_tensor("blk.0.attn_norm.weight", DType::F32, {n}, norm.data(), norm.size() * 4);
      if (as_f32)
        w.add_tensor("blk.0.ffn_down.weight", DType::F32, {n, rows}, exact.data(), exact.size() * 4);
      else
        w.add_tensor("blk.0.ffn_down.weight", in_type, {n, rows}, packed.data(), packed.size());
      const std::string in = (dir / "in.gguf").string(), out = (dir / "out.gguf").string();
      w.write_file(in);
      quantize_file(in, out, find_quant_type("q4_k_m"));
      std::unique_ptr<gguf::File> f = gguf::File::open(out);
      ASSERT_EQ(f->tensors().size(), 2u);
      EXPECT_EQ(f->tensors()[0].type, DType::F32);
      EXPECT_EQ(f->tensors()[1].type, DType::Q6_K);  // ffn_down of layer 0 of 1: use_more_bits
      const uint8_t* p = f->tensors()[1].data;
      got.emplace_back(p, p + f->tensors()[1].n_bytes);
    }
    EXPECT_EQ(got[0], got[1]) << dtype_name(in_type);
  }
}

// ---------------------------------------------------------------------------
// SmolLM2 against llama.cpp.

const json& fixture() {
  static const json j = [] {
    std::ifstream in(std::string(KVAD_SOURCE_DIR) + "/tests/fixtures/quantize/smollm2-rmse.json");
    if (!in) throw std::runtime_error("tests/fixtures/quantize/smollm2-rmse.json missing");
    return json::parse(in);
  }();
  return j;
}

bool same_value(const gguf::Value& a, const gguf::Value& b) {
  return a.key_ == b.key_ && a.type_ == b.type_ && a.array_type_ == b.array_type_ && a.u_ == b.u_ &&
         a.i_ == b.i_ && (a.f_ == b.f_ || (std::isnan(a.f_) && std::isnan(b.f_))) && a.s_ == b.s_ &&
         a.strs_ == b.strs_ && a.uarr_ == b.uarr_ && a.iarr_ == b.iarr_ && a.farr_ == b.farr_ && a.n_ == b.n_;
}

// Layers of the test's source: the first, those where the mixtures'
// thresholds change (i < 2, i < 4, n/8 = 3, use_more_bits at 5), the last.
const std::set<int> kLayers = {0, 1, 3, 4, 5, 29};

bool in_test_layers(const std::string& name) {
  if (name.rfind("blk.", 0) != 0) return true;  // token_embd, output_norm
  return kLayers.count(std::stoi(name.substr(4))) > 0;
}

class QuantizeSmolLM2 : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    store_path_ = test::find_model("smollm2-135m");
    if (store_path_.empty()) return;
    store_ = gguf::File::open(store_path_).release();
    dir_ = fs::path(::testing::TempDir()) / "kvad_quantize_test";
    fs::create_directories(dir_);
    // The test's source: F32, the layers above, alignment 64 (kept by the output).
    source_path_ = (dir_ / "smollm2-part-f32.gguf").string();
    test::write_float_gguf(*store_, source_path_, DType::F32, in_test_layers, 64);
    source_ = gguf::File::open(source_path_).release();
    // The ffn_down tensors alone (rows of 1536): the single K-quants fit them.
    ffn_down_path_ = (dir_ / "smollm2-ffn-down-f32.gguf").string();
    test::write_float_gguf(
        *store_, ffn_down_path_, DType::F32,
        [](const std::string& n) { return n.find("ffn_down") != std::string::npos && in_test_layers(n); }, 64);
    two_layers_path_ = (dir_ / "smollm2-two-layers-f32.gguf").string();
    test::write_float_gguf(
        *store_, two_layers_path_, DType::F32,
        [](const std::string& n) { return n.rfind("blk.0.", 0) == 0 || n.rfind("blk.29.", 0) == 0; }, 64);
  }
  static void TearDownTestSuite() {
    delete source_;
    delete store_;
    source_ = store_ = nullptr;
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  void SetUp() override {
    if (store_path_.empty()) GTEST_SKIP() << "model smollm2-135m not installed (run scripts/setup)";
  }

  // The whole model's tensor list, as the F32 file would have it.
  static std::vector<TensorDesc> whole_model() {
    std::vector<TensorDesc> d;
    for (const gguf::TensorInfo& t : store_->tensors()) d.push_back({t.name, t.ne, DType::F32});
    return d;
  }

  // Quantizes `src` with `type` (by the whole model's plan for mixtures),
  // then checks metadata, types, order, alignment and each tensor's RMSE
  // against llama.cpp's.
  void check_type(const std::string& type_name, const gguf::File& src) {
    SCOPED_TRACE(type_name);
    const QuantType& qt = find_quant_type(type_name);
    ASSERT_TRUE(fixture()["types"].contains(type_name));
    const json& ref = fixture()["types"][type_name];
    EXPECT_EQ(ref["file_type_written"].get<uint32_t>(), qt.file_type);

    std::vector<TensorDesc> src_desc;
    for (const gguf::TensorInfo& t : src.tensors()) src_desc.push_back({t.name, t.ne, t.type});
    std::vector<TensorChoice> choices = plan(src_desc, qt);
    if (qt.mixture) {
      // The mixture depends on the whole model (layer count, ranks): take its plan.
      const std::vector<TensorDesc> whole = whole_model();
      const std::vector<TensorChoice> wp = plan(whole, qt, 30);
      std::map<std::string, TensorChoice> by_name;
      for (size_t i = 0; i < whole.size(); ++i) by_name[whole[i].name] = wp[i];
      for (size_t i = 0; i < src_desc.size(); ++i) choices[i] = by_name.at(src_desc[i].name);
    }
    const std::string out_path = (dir_ / ("out-" + type_name + ".gguf")).string();
    const Result res = quantize_gguf(src, choices, qt.file_type, out_path, Options{2, {}});
    EXPECT_EQ(res.n_tensors, src.tensors().size());
    EXPECT_FALSE(fs::exists(out_path + ".tmp"));
    std::unique_ptr<gguf::File> out = gguf::File::open(out_path);

    // Metadata: every key, in order, the same value but file_type and quantization_version.
    ASSERT_EQ(out->metadata().size(), src.metadata().size());
    for (size_t k = 0; k < src.metadata().size(); ++k) {
      const gguf::Value& a = src.metadata()[k];
      const gguf::Value& b = out->metadata()[k];
      EXPECT_EQ(a.key(), b.key());
      if (a.key() == "general.file_type")
        EXPECT_EQ(b.as_uint(), qt.file_type);
      else if (a.key() == "general.quantization_version")
        EXPECT_EQ(b.as_uint(), 2u);
      else
        EXPECT_TRUE(same_value(a, b)) << a.key();
    }
    EXPECT_EQ(out->version(), src.version());
    EXPECT_EQ(out->alignment(), src.alignment());
    EXPECT_EQ(out->alignment(), 64u);

    // Tensors: same order and shapes, the plan's types, RMSE as llama.cpp's.
    ASSERT_EQ(out->tensors().size(), src.tensors().size());
    size_t compared = 0;
    for (size_t i = 0; i < src.tensors().size(); ++i) {
      const gguf::TensorInfo& s = src.tensors()[i];
      const gguf::TensorInfo& o = out->tensors()[i];
      ASSERT_EQ(o.name, s.name);
      EXPECT_EQ(o.ne, s.ne) << s.name;
      EXPECT_EQ(o.offset % 64, 0u) << s.name;
      EXPECT_EQ(o.type, choices[i].type) << s.name;
      EXPECT_EQ(o.n_bytes, row_bytes(o.type, o.ne[0]) * static_cast<size_t>(o.n_elements() / o.ne[0])) << s.name;
      if (!choices[i].quantize) {
        EXPECT_EQ(o.type, s.type);
        EXPECT_EQ(std::memcmp(o.data, s.data, s.n_bytes), 0) << s.name << " not copied byte for byte";
        continue;
      }
      ASSERT_TRUE(ref["tensors"].contains(s.name)) << s.name << " not in the fixture";
      const json& r = ref["tensors"][s.name];
      const std::string ref_type = r[0].get<std::string>();
      if (qt.mixture) {
        EXPECT_EQ(ref_type, dtype_name(o.type)) << s.name << ": llama.cpp chose another type";
      }
      if (ref_type != dtype_name(o.type)) continue;
      const std::vector<float> a = test::tensor_to_f32(s), b = test::tensor_to_f32(o);
      double ss = 0;
      for (size_t k = 0; k < a.size(); ++k) {
        const double d = static_cast<double>(b[k]) - static_cast<double>(a[k]);
        ss += d * d;
      }
      const double rmse = std::sqrt(ss / static_cast<double>(a.size()));
      const double want = r[1].get<double>();
      EXPECT_LE(std::fabs(rmse - want), 0.02 * want + 1e-12)
          << s.name << " " << dtype_name(o.type) << ": kvad RMSE " << rmse << ", llama.cpp " << want;
      ++compared;
    }
    EXPECT_GT(compared, 0u);
    fs::remove(out_path);
  }

  static inline std::string store_path_, source_path_, ffn_down_path_, two_layers_path_;
  static inline fs::path dir_;
  static inline gguf::File* store_ = nullptr;
  static inline gguf::File* source_ = nullptr;
};

// The whole model's plan, tensor by tensor, equals the types llama.cpp chose
// (mixtures, and single types that fit); the single K-quants that do not fit
// rows of 576 are refused (llama.cpp falls back instead).
TEST_F(QuantizeSmolLM2, PlanEqualsLlamaCppTypes) {
  const std::vector<TensorDesc> whole = whole_model();
  for (const QuantType& qt : quant_types()) {
    SCOPED_TRACE(qt.name);
    ASSERT_TRUE(fixture()["types"].contains(qt.name));
    const json& ref = fixture()["types"][qt.name]["tensors"];
    if (!qt.mixture && dtype_info(qt.base).block_elems == 256) {
      EXPECT_THROW(plan(whole, qt, 30), Error);
      continue;
    }
    const std::vector<TensorChoice> p = plan(whole, qt, 30);
    size_t n = 0;
    for (size_t i = 0; i < whole.size(); ++i) {
      if (!p[i].quantize) {
        EXPECT_FALSE(ref.contains(whole[i].name)) << whole[i].name;
        continue;
      }
      ++n;
      ASSERT_TRUE(ref.contains(whole[i].name)) << whole[i].name;
      EXPECT_EQ(ref[whole[i].name][0].get<std::string>(), dtype_name(p[i].type)) << whole[i].name;
    }
    EXPECT_EQ(n, ref.size());
  }
}

TEST_F(QuantizeSmolLM2, SingleTypesMatchLlamaCpp) {
  for (const char* t : {"q8_0", "q4_0", "q4_1", "q5_0", "q5_1"}) check_type(t, *source_);
  // IQ4_NL's scale search is slow: two layers are enough.
  std::unique_ptr<gguf::File> f = gguf::File::open(two_layers_path_);
  check_type("iq4_nl", *f);
}

TEST_F(QuantizeSmolLM2, MixturesMatchLlamaCpp) {
  for (const char* t : {"q3_k_m", "q4_k_s", "q4_k_m", "q5_k_m"}) check_type(t, *source_);
}

TEST_F(QuantizeSmolLM2, SingleKQuantsMatchLlamaCppOnRowsOf256) {
  std::unique_ptr<gguf::File> f = gguf::File::open(ffn_down_path_);
  for (const char* t : {"q2_k", "q6_k", "tq2_0"}) check_type(t, *f);
}

TEST_F(QuantizeSmolLM2, RefusesBeforeAnyOutputExists) {
  const std::string out = (dir_ / "refused.gguf").string();
  for (const char* t : {"q2_k", "q6_k", "tq2_0"}) {
    try {
      quantize_file(source_path_, out, find_quant_type(t));
      FAIL() << t << ": no error";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("token_embd.weight"), std::string::npos) << m;
      EXPECT_NE(m.find("q8_0"), std::string::npos) << m;
    }
    EXPECT_FALSE(fs::exists(out)) << t;
    EXPECT_FALSE(fs::exists(out + ".tmp")) << t;
  }
}

TEST_F(QuantizeSmolLM2, ErrorsLeaveNoFile) {
  const std::string out = (dir_ / "err.gguf").string();
  // A quantized input: the store file itself.
  try {
    quantize_file(store_path_, out, find_quant_type("q4_0"));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("F32, F16 or BF16"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(out + ".tmp"));
  // An unreadable input.
  EXPECT_THROW(quantize_file((dir_ / "missing.gguf").string(), out, find_quant_type("q8_0")), GGUFError);
  // An output that cannot be made.
  const std::string bad = (dir_ / "no" / "such" / "dir" / "x.gguf").string();
  try {
    quantize_file(ffn_down_path_, bad, find_quant_type("q8_0"));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot write " + bad), std::string::npos) << e.what();
  }
  // A failure half way (a non-finite value in the second tensor) leaves
  // neither file, and an existing output as it was.
  gguf::Writer w;
  w.add(gguf::make_string("general.architecture", "llama"));
  std::vector<float> ok(256 * 2, 0.5f), inf(256 * 2, 0.5f);
  inf[300] = std::numeric_limits<float>::infinity();
  w.add_tensor("blk.0.attn_q.weight", DType::F32, {256, 2}, ok.data(), ok.size() * 4);
  w.add_tensor("blk.0.attn_k.weight", DType::F32, {256, 2}, inf.data(), inf.size() * 4);
  const std::string in_path = (dir_ / "inf.gguf").string();
  w.write_file(in_path);
  for (bool existing : {false, true}) {
    if (existing) std::ofstream(out) << "old";
    try {
      quantize_file(in_path, out, find_quant_type("q8_0"));
      FAIL() << "no error";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("blk.0.attn_k.weight"), std::string::npos) << m;
      EXPECT_NE(m.find("row 1"), std::string::npos) << m;
    }
    EXPECT_FALSE(fs::exists(out + ".tmp"));
    EXPECT_EQ(fs::exists(out), existing);
    if (existing) {
      std::ifstream f(out);
      std::string s;
      f >> s;
      EXPECT_EQ(s, "old");
    }
  }
}

TEST_F(QuantizeSmolLM2, ProgressOncePerTensorInOrder) {
  const std::string out = (dir_ / "progress.gguf").string();
  std::vector<size_t> seen;
  Options o;
  o.threads = 2;
  o.progress = [&](const Progress& p) {
    EXPECT_EQ(p.count, 6u);
    EXPECT_GE(p.ms, 0.0);
    seen.push_back(p.index);
  };
  const Result r = quantize_file(ffn_down_path_, out, find_quant_type("q4_k_m"), o);
  EXPECT_EQ(seen.size(), 6u);  // the file's six ffn_down tensors
  for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], i);
  EXPECT_EQ(r.n_quantized, 6u);
  fs::remove(out);
}

}  // namespace
}  // namespace kvad::quant
