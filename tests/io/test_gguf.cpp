// Tests of the GGUF reader and writer (src/io/gguf.h, src/io/gguf_writer.h).
//
// Valid files are built with the writer and read back; corrupt files are
// built with the writer's raw entry points or by patching bytes at offsets
// the writer's Layout reports. Every malformed input must be a GGUFError
// whose message names the file, the key or tensor, and the byte offset.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "io/gguf.h"
#include "io/gguf_writer.h"

namespace kvad::gguf {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;
constexpr const char* kName = "corrupt.gguf";

void put_u32(Bytes& b, size_t off, uint32_t v) {
  ASSERT_LE(off + 4, b.size());
  for (int k = 0; k < 4; ++k) b[off + k] = static_cast<uint8_t>(v >> (8 * k));
}
void put_u64(Bytes& b, size_t off, uint64_t v) {
  ASSERT_LE(off + 8, b.size());
  for (int k = 0; k < 8; ++k) b[off + k] = static_cast<uint8_t>(v >> (8 * k));
}

std::unique_ptr<File> parse(const Bytes& b, const std::string& name = kName) {
  return File::parse(b.data(), b.size(), name);
}

// Parses b, expects a GGUFError naming the file and containing every part.
std::string expect_error(const Bytes& b, std::vector<std::string> parts) {
  try {
    parse(b);
  } catch (const GGUFError& e) {
    std::string m = e.what();
    EXPECT_EQ(m.rfind(std::string(kName) + ": ", 0), 0u) << m;
    for (const std::string& p : parts) EXPECT_NE(m.find(p), std::string::npos) << "'" << p << "' not in: " << m;
    return m;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
    return "";
  }
  ADD_FAILURE() << "no error; expected one containing " << (parts.empty() ? "" : parts[0]);
  return "";
}

std::string at(size_t off) { return "at offset " + std::to_string(off); }

Bytes f32_bytes(const std::vector<float>& v) {
  Bytes b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// A small valid file: a few metadata pairs and three tensors.
Writer small_writer(uint32_t version = 3) {
  Writer w(version);
  w.add(make_string("general.architecture", "llama"));
  w.add(make_uint("llama.block_count", ValueType::UINT32, 2));
  w.add(make_string_array("tokenizer.ggml.tokens", {"<s>", "a", "bc"}));
  w.add(make_float_array("tokenizer.ggml.scores", ValueType::FLOAT32, {0, -1.5, 2}));
  Bytes a = f32_bytes({1, 2, 3, 4, 5, 6});
  w.add_tensor("a.weight", DType::F32, {3, 2}, a.data(), a.size());
  Bytes q(18 * 2, 0x11);  // Q4_0: 18 bytes per 32 elements
  w.add_tensor("q.weight", DType::Q4_0, {32, 2}, q.data(), q.size());
  Bytes h(2 * 16, 0x22);  // F16, 16 elements = 32 bytes (ends on the alignment)
  w.add_tensor("h.weight", DType::F16, {16}, h.data(), h.size());
  return w;
}

// ---------------------------------------------------------------- round trip

class RoundTrip : public ::testing::TestWithParam<std::tuple<uint32_t, uint32_t>> {};

TEST_P(RoundTrip, EveryValueTypeAndTensors) {
  auto [version, alignment] = GetParam();
  Writer w(version);
  if (alignment != 32) w.set_alignment(alignment);
  w.add(make_uint("u8", ValueType::UINT8, 255));
  w.add(make_int("i8", ValueType::INT8, -128));
  w.add(make_uint("u16", ValueType::UINT16, 65535));
  w.add(make_int("i16", ValueType::INT16, -32768));
  w.add(make_uint("u32", ValueType::UINT32, 4000000000u));
  w.add(make_int("i32", ValueType::INT32, -2000000000));
  w.add(make_float("f32", ValueType::FLOAT32, 0.1));
  w.add(make_bool("bool", true));
  w.add(make_string("str", std::string("h\xc3\xa9llo\0x", 8)));
  w.add(make_uint("u64", ValueType::UINT64, std::numeric_limits<uint64_t>::max()));
  w.add(make_int("i64", ValueType::INT64, std::numeric_limits<int64_t>::min()));
  w.add(make_float("f64", ValueType::FLOAT64, 1e300));
  w.add(make_uint_array("a.u8", ValueType::UINT8, {0, 1, 255}));
  w.add(make_int_array("a.i8", ValueType::INT8, {-128, 0, 127}));
  w.add(make_uint_array("a.u16", ValueType::UINT16, {65535}));
  w.add(make_int_array("a.i16", ValueType::INT16, {-32768, 32767}));
  w.add(make_uint_array("a.u32", ValueType::UINT32, {1, 2, 3}));
  w.add(make_int_array("a.i32", ValueType::INT32, {-1, -2}));
  w.add(make_float_array("a.f32", ValueType::FLOAT32, {0.5, -0.25}));
  w.add(make_uint_array("a.bool", ValueType::BOOL, {1, 0, 1}));
  w.add(make_string_array("a.str", {"x", "", "yz"}));
  w.add(make_uint_array("a.u64", ValueType::UINT64, {std::numeric_limits<uint64_t>::max()}));
  w.add(make_int_array("a.i64", ValueType::INT64, {std::numeric_limits<int64_t>::min(), 7}));
  w.add(make_float_array("a.f64", ValueType::FLOAT64, {3.141592653589793}));
  w.add(make_uint_array("a.empty", ValueType::UINT32, {}));
  Value nested;  // ARRAY of ARRAY: written as empty UINT8 arrays
  nested.key_ = "a.nested";
  nested.type_ = ValueType::ARRAY;
  nested.array_type_ = ValueType::ARRAY;
  nested.n_ = 2;
  w.add(nested);

  Bytes t1 = f32_bytes({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  w.add_tensor("t1", DType::F32, {3, 2, 2}, t1.data(), t1.size());
  Bytes t2(34 * 3 * 2);
  for (size_t k = 0; k < t2.size(); ++k) t2[k] = static_cast<uint8_t>(k * 7);
  w.add_tensor("t2", DType::Q8_0, {32, 3, 1, 2}, t2.data(), t2.size());
  Bytes t3(84);  // one Q2_K block
  t3[0] = 9;
  w.add_tensor("t3", DType::Q2_K, {256}, t3.data(), t3.size());
  w.add_tensor("empty", DType::F32, {0, 4}, nullptr, 0);

  Bytes b = w.to_bytes();
  ASSERT_EQ(b.size(), w.size());
  auto f = parse(b, "rt.gguf");
  EXPECT_EQ(f->version(), version);
  EXPECT_EQ(f->alignment(), alignment);
  EXPECT_EQ(f->file_size(), b.size());
  EXPECT_EQ(f->data_offset(), w.layout().data);
  EXPECT_EQ(f->data_offset() % alignment, 0u);
  EXPECT_EQ(f->metadata().size(), 26u + (alignment != 32 ? 1 : 0));

  EXPECT_EQ(f->get("u8").as_uint(), 255u);
  EXPECT_EQ(f->get("u8").type(), ValueType::UINT8);
  EXPECT_EQ(f->get("i8").as_int(), -128);
  EXPECT_EQ(f->get("u16").as_int(), 65535);
  EXPECT_EQ(f->get("i16").as_int(), -32768);
  EXPECT_EQ(f->get("u32").as_uint(), 4000000000u);
  EXPECT_EQ(f->get("i32").as_int(), -2000000000);
  EXPECT_EQ(f->get("f32").as_float(), static_cast<double>(0.1f));
  EXPECT_TRUE(f->get("bool").as_bool());
  EXPECT_EQ(f->get("str").as_string(), std::string("h\xc3\xa9llo\0x", 8));
  EXPECT_EQ(f->get("u64").as_uint(), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(f->get("i64").as_int(), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(f->get("f64").as_float(), 1e300);
  EXPECT_EQ(f->get("i32").as_float(), -2e9);

  EXPECT_EQ(f->get("a.u8").as_int_array(), (std::vector<int64_t>{0, 1, 255}));
  EXPECT_EQ(f->get("a.i8").as_int_array(), (std::vector<int64_t>{-128, 0, 127}));
  EXPECT_EQ(f->get("a.u16").as_int_array(), (std::vector<int64_t>{65535}));
  EXPECT_EQ(f->get("a.i16").as_int_array(), (std::vector<int64_t>{-32768, 32767}));
  EXPECT_EQ(f->get("a.u32").as_int_array(), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(f->get("a.u32").as_float_array(), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(f->get("a.i32").as_int_array(), (std::vector<int64_t>{-1, -2}));
  EXPECT_EQ(f->get("a.f32").as_float_array(), (std::vector<float>{0.5f, -0.25f}));
  EXPECT_EQ(f->get("a.bool").array_type(), ValueType::BOOL);
  EXPECT_EQ(f->get("a.bool").uarr_, (std::vector<uint64_t>{1, 0, 1}));
  EXPECT_EQ(f->get("a.str").as_string_array(), (std::vector<std::string>{"x", "", "yz"}));
  EXPECT_EQ(f->get("a.str").array_size(), 3u);
  EXPECT_EQ(f->get("a.i64").as_int_array(), (std::vector<int64_t>{std::numeric_limits<int64_t>::min(), 7}));
  EXPECT_EQ(f->get("a.f64").as_float_array(), (std::vector<float>{3.14159265f}));
  EXPECT_EQ(f->get("a.empty").array_size(), 0u);
  EXPECT_EQ(f->get("a.nested").array_type(), ValueType::ARRAY);
  EXPECT_EQ(f->get("a.nested").array_size(), 2u);
  EXPECT_THROW(f->get("a.u64").as_int_array(), GGUFError);  // above INT64_MAX

  ASSERT_EQ(f->tensors().size(), 4u);
  const TensorInfo* a = f->find_tensor("t1");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->ne, (std::vector<int64_t>{3, 2, 2}));
  EXPECT_EQ(a->type, DType::F32);
  EXPECT_EQ(a->n_elements(), 12);
  EXPECT_EQ(a->n_bytes, 48u);
  EXPECT_EQ(std::memcmp(a->data, t1.data(), t1.size()), 0);
  const TensorInfo* q = f->find_tensor("t2");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->type, DType::Q8_0);
  EXPECT_EQ(q->ne, (std::vector<int64_t>{32, 3, 1, 2}));
  EXPECT_EQ(q->n_bytes, t2.size());
  EXPECT_EQ(std::memcmp(q->data, t2.data(), t2.size()), 0);
  EXPECT_EQ(q->offset % alignment, 0u);
  EXPECT_EQ(static_cast<size_t>(q->data - f->file_data()), f->data_offset() + q->offset);
  const TensorInfo* k = f->find_tensor("t3");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->n_bytes, 84u);
  EXPECT_EQ(k->data[0], 9);
  EXPECT_EQ(f->find_tensor("empty")->n_bytes, 0u);
  EXPECT_EQ(f->find_tensor("nope"), nullptr);
  EXPECT_EQ(f->tensor_bytes(), 48u + t2.size() + 84u);
  EXPECT_EQ(f->tensors()[0].name, "t1");  // file order
  EXPECT_EQ(f->tensors()[3].name, "empty");
}

INSTANTIATE_TEST_SUITE_P(Versions, RoundTrip,
                         ::testing::Combine(::testing::Values(2u, 3u), ::testing::Values(32u, 1u, 8u, 64u, 4096u)));

TEST(GGUF, WriteFileAndOpen) {
  Writer w = small_writer();
  fs::path p = fs::path(::testing::TempDir()) / "kvad_test_small.gguf";
  w.write_file(p.string());
  auto f = File::open(p.string());
  EXPECT_EQ(f->path(), p.string());
  EXPECT_EQ(f->file_size(), w.size());
  EXPECT_EQ(f->get_string("general.architecture", ""), "llama");
  EXPECT_EQ(f->get_int("llama.block_count", 0), 2);
  EXPECT_EQ(f->get("tokenizer.ggml.tokens").as_string_array().size(), 3u);
  EXPECT_EQ(f->tensors().size(), 3u);
  const float* x = reinterpret_cast<const float*>(f->find_tensor("a.weight")->data);
  EXPECT_EQ(x[5], 6.0f);
  fs::remove(p);
}

TEST(GGUF, OpenMissingOrEmptyFile) {
  fs::path p = fs::path(::testing::TempDir()) / "kvad_test_missing.gguf";
  fs::remove(p);
  try {
    File::open(p.string());
    FAIL();
  } catch (const GGUFError& e) {
    EXPECT_NE(std::string(e.what()).find(p.string()), std::string::npos);
  }
  std::ofstream(p.string()).close();
  try {
    File::open(p.string());
    FAIL();
  } catch (const GGUFError& e) {
    EXPECT_NE(std::string(e.what()).find(p.string()), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos);
  }
  fs::remove(p);
}

TEST(GGUF, AccessorsAndDefaults) {
  auto f = parse(small_writer().to_bytes(), "acc.gguf");
  EXPECT_EQ(f->get_int("missing", -7), -7);
  EXPECT_EQ(f->get_float("missing", 2.5), 2.5);
  EXPECT_EQ(f->get_bool("missing", true), true);
  EXPECT_EQ(f->get_string("missing", "d"), "d");
  EXPECT_EQ(f->find("missing"), nullptr);
  EXPECT_EQ(f->get_float("llama.block_count", 0), 2.0);  // integers read as floats
  try {
    f->get("missing.key");
    FAIL();
  } catch (const GGUFError& e) {
    EXPECT_NE(std::string(e.what()).find("missing.key"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("acc.gguf"), std::string::npos);
  }
  // Type mismatches name the file, the key and the pair's offset.
  const Value& arch = f->get("general.architecture");
  for (auto fn : std::vector<std::function<void()>>{
           [&] { arch.as_int(); }, [&] { arch.as_uint(); }, [&] { arch.as_float(); },
           [&] { arch.as_bool(); }, [&] { arch.array_size(); }, [&] { arch.as_string_array(); },
           [&] { arch.as_int_array(); }, [&] { arch.as_float_array(); },
           [&] { f->get_int("general.architecture", 0); }}) {
    try {
      fn();
      ADD_FAILURE() << "no error";
    } catch (const GGUFError& e) {
      std::string m = e.what();
      EXPECT_NE(m.find("acc.gguf"), std::string::npos) << m;
      EXPECT_NE(m.find("general.architecture"), std::string::npos) << m;
      EXPECT_NE(m.find("offset 24"), std::string::npos) << m;
      EXPECT_NE(m.find("STRING"), std::string::npos) << m;
    }
  }
  EXPECT_THROW(f->get("llama.block_count").as_string(), GGUFError);
  EXPECT_THROW(f->get("tokenizer.ggml.tokens").as_int_array(), GGUFError);
  EXPECT_THROW(f->get("tokenizer.ggml.scores").as_string_array(), GGUFError);
  // Signedness checks.
  Writer w;
  w.add(make_int("neg", ValueType::INT32, -1));
  w.add(make_uint("big", ValueType::UINT64, uint64_t{1} << 63));
  auto g = parse(w.to_bytes());
  EXPECT_THROW(g->get("neg").as_uint(), GGUFError);
  EXPECT_THROW(g->get("big").as_int(), GGUFError);
  EXPECT_EQ(g->get("big").as_uint(), uint64_t{1} << 63);
}

TEST(GGUF, WriterRejectsBadInput) {
  Writer w;
  w.add(make_string("k", "v"));
  EXPECT_THROW(w.add(make_string("k", "w")), GGUFError);
  EXPECT_THROW(Writer(1), GGUFError);
  EXPECT_THROW(w.set_alignment(0), GGUFError);
  EXPECT_THROW(w.set_alignment(48), GGUFError);
  EXPECT_THROW(make_uint("x", ValueType::UINT8, 256), GGUFError);
  EXPECT_THROW(make_int("x", ValueType::INT16, 40000), GGUFError);
  EXPECT_THROW(make_uint("x", ValueType::INT32, 1), GGUFError);
  EXPECT_THROW(make_float("x", ValueType::UINT32, 1), GGUFError);
  EXPECT_THROW(make_uint_array("x", ValueType::BOOL, {2}), GGUFError);
  EXPECT_THROW(w.add(make_uint("general.alignment", ValueType::UINT32, 3)), GGUFError);
  EXPECT_THROW(w.add(make_uint("general.alignment", ValueType::UINT64, 64)), GGUFError);
  float x[3] = {};
  EXPECT_THROW(w.add_tensor("t", DType::F32, {4}, x, 12), GGUFError);     // size mismatch
  EXPECT_THROW(w.add_tensor("t", DType::Q4_0, {16}, x, 9), GGUFError);    // partial block
  EXPECT_THROW(w.add_tensor("t", DType::F32, {1, 1, 1, 1, 1}, x, 4), GGUFError);  // 5 dims
  w.add_tensor("t", DType::F32, {3}, x, 12);
  EXPECT_THROW(w.add_tensor("t", DType::F32, {3}, x, 12), GGUFError);  // duplicate
  EXPECT_THROW(w.set_alignment(64), GGUFError);                      // after tensors
  // general.alignment added as metadata sets the layout alignment.
  Writer v;
  v.add(make_uint("general.alignment", ValueType::UINT32, 128));
  v.add_tensor("t", DType::F32, {3}, x, 12);
  EXPECT_EQ(v.alignment(), 128u);
  EXPECT_EQ(parse(v.to_bytes())->data_offset() % 128, 0u);
}

// ---------------------------------------------------------------- corruption

TEST(GGUFCorrupt, WrongMagic) {
  Bytes b = small_writer().to_bytes();
  b[0] = 'g';
  expect_error(b, {"header", "magic", at(0)});
  expect_error(Bytes{'G', 'G'}, {"header", "truncated", "magic", at(0)});
}

TEST(GGUFCorrupt, UnsupportedVersion) {
  Bytes b = small_writer().to_bytes();
  for (uint32_t v : {0u, 1u, 4u, 0xffffffffu}) {
    put_u32(b, 4, v);
    expect_error(b, {"header", "version " + std::to_string(v), at(4)});
  }
  put_u32(b, 4, 3u << 16);  // a big-endian file
  expect_error(b, {"header", "big-endian", at(4)});
}

TEST(GGUFCorrupt, TruncatedHeader) {
  Bytes b = small_writer().to_bytes();
  expect_error(Bytes(b.begin(), b.begin() + 6), {"header", "truncated", "version", at(4)});
  expect_error(Bytes(b.begin(), b.begin() + 20), {"header", "truncated", "metadata count", at(16)});
}

TEST(GGUFCorrupt, AbsurdCounts) {
  Bytes b = small_writer().to_bytes();
  Bytes c = b;
  put_u64(c, 8, uint64_t{1} << 60);  // tensor count
  expect_error(c, {"header", "tensor count 1152921504606846976", "cannot fit", at(8)});
  c = b;
  put_u64(c, 16, ~uint64_t{0});  // metadata count
  expect_error(c, {"header", "metadata count 18446744073709551615", "cannot fit", at(16)});
  c = b;
  // A tensor count that fits the file but not what is left after the
  // metadata fails as a truncated tensor info.
  put_u64(c, 8, (b.size() - 24) / 32);
  expect_error(c, {"tensor '"});
}

TEST(GGUFCorrupt, AbsurdStringLengths) {
  Writer w = small_writer();
  Writer::Layout l = w.layout();
  Bytes b = w.to_bytes();
  Bytes c = b;
  put_u64(c, l.kv[0], uint64_t{1} << 62);  // key length of the first pair
  expect_error(c, {"metadata pair #0", "key: length 4611686018427387904", "exceeds", at(l.kv[0])});
  c = b;
  size_t val = l.kv[0] + 8 + std::strlen("general.architecture") + 4;  // string value length
  put_u64(c, val, ~uint64_t{0} - 3);
  expect_error(c, {"key 'general.architecture'", "string: length", "exceeds", at(val)});
  c = b;
  put_u64(c, l.tensor[1], 1000000000);  // tensor name length
  expect_error(c, {"tensor #1", "tensor name: length 1000000000", at(l.tensor[1])});
}

TEST(GGUFCorrupt, AbsurdArrayCount) {
  Writer w = small_writer();
  Writer::Layout l = w.layout();
  Bytes b = w.to_bytes();
  // tokenizer.ggml.tokens: key, type, element type, count
  size_t cnt = l.kv[2] + 8 + std::strlen("tokenizer.ggml.tokens") + 4 + 4;
  put_u64(b, cnt, uint64_t{1} << 61);
  expect_error(b, {"key 'tokenizer.ggml.tokens'", "array of 2305843009213693952 STRING elements",
                   "cannot fit", at(cnt)});
  // A raw array claiming more elements than it holds, at the end of a file.
  Writer r;
  Value v = make_uint_array("short", ValueType::UINT32, {1, 2});
  v.n_ = 3;
  r.add_raw(v);
  Bytes c = r.to_bytes();  // 8 bytes of elements + 3 of padding left after the count
  expect_error(c, {"key 'short'", "array of 3 UINT32 elements", "cannot fit", at(r.layout().kv[0] + 8 + 5 + 4 + 4)});
}

TEST(GGUFCorrupt, KvadLimits) {
  // Counts that the file's bytes could hold but that no real file comes near.
  Bytes b = {'G', 'G', 'U', 'F', 3, 0, 0, 0};
  auto u32 = [&](uint32_t v) { for (int k = 0; k < 4; ++k) b.push_back(static_cast<uint8_t>(v >> (8 * k))); };
  auto u64 = [&](uint64_t v) { for (int k = 0; k < 8; ++k) b.push_back(static_cast<uint8_t>(v >> (8 * k))); };
  u64(0);
  u64(1);
  u64(1);
  b.push_back('a');
  u32(9);  // ARRAY
  u32(0);  // of UINT8
  const size_t count_at = b.size();
  u64((uint64_t{1} << 25) + 1);
  b.resize(b.size() + (size_t{1} << 25) + 1, 0);
  expect_error(b, {"key 'a'", "exceeds kvad's limit", at(count_at)});
  Bytes k(24 + 14 * ((size_t{1} << 20) + 1), 0);
  std::memcpy(k.data(), "GGUF", 4);
  put_u32(k, 4, 3);
  put_u64(k, 16, (uint64_t{1} << 20) + 1);
  expect_error(k, {"header", "metadata count", "exceeds kvad's limit", at(16)});
}

TEST(GGUFCorrupt, UnknownValueTypes) {
  Writer w = small_writer();
  Writer::Layout l = w.layout();
  Bytes b = w.to_bytes();
  size_t type_at = l.kv[1] + 8 + std::strlen("llama.block_count");
  Bytes c = b;
  put_u32(c, type_at, 13);
  expect_error(c, {"key 'llama.block_count'", "unknown value type 13", at(type_at)});
  c = b;
  size_t et = l.kv[3] + 8 + std::strlen("tokenizer.ggml.scores") + 4;
  put_u32(c, et, 0x40000000);
  expect_error(c, {"key 'tokenizer.ggml.scores'", "unknown array element type 1073741824", at(et)});
}

TEST(GGUFCorrupt, NestedArrays) {
  // A valid array of arrays is skipped; nesting beyond the limit is an error.
  auto nested = [](int depth) {
    Bytes b = {'G', 'G', 'U', 'F', 3, 0, 0, 0};
    auto u32 = [&](uint32_t v) { for (int k = 0; k < 4; ++k) b.push_back(static_cast<uint8_t>(v >> (8 * k))); };
    auto u64 = [&](uint64_t v) { for (int k = 0; k < 8; ++k) b.push_back(static_cast<uint8_t>(v >> (8 * k))); };
    u64(0);
    u64(1);
    u64(1);
    b.push_back('n');
    u32(9);  // ARRAY
    for (int d = 0; d < depth; ++d) {
      u32(9);  // of ARRAY
      u64(1);
    }
    u32(8);  // innermost: STRING
    u64(1);
    u64(2);
    b.push_back('h');
    b.push_back('i');
    return b;
  };
  auto f = parse(nested(3));
  EXPECT_EQ(f->get("n").array_type(), ValueType::ARRAY);
  EXPECT_EQ(f->get("n").array_size(), 1u);
  expect_error(nested(100), {"key 'n'", "nested deeper"});
  Bytes t = nested(3);
  t.pop_back();
  expect_error(t, {"key 'n'", "truncated or corrupt string in nested array: length 2 exceeds"});
}

TEST(GGUFCorrupt, DuplicateMetadataKey) {
  Writer w = small_writer();
  w.add_raw(make_uint("llama.block_count", ValueType::UINT64, 3));
  Writer::Layout l = w.layout();
  expect_error(w.to_bytes(), {"key 'llama.block_count'", "duplicate metadata key",
                              "first defined at offset " + std::to_string(l.kv[1]), at(l.kv[4])});
}

TEST(GGUFCorrupt, BadAlignment) {
  for (uint32_t a : {0u, 3u, 48u, 0x80000001u}) {
    Writer w;
    w.add_raw(make_uint("general.alignment", ValueType::UINT32, a));
    expect_error(w.to_bytes(), {"key 'general.alignment'", "alignment " + std::to_string(a),
                                "power of two", at(24)});
  }
  Writer w;
  w.add(make_string("x", "y"));
  w.add_raw(make_uint("general.alignment", ValueType::UINT64, 32));
  expect_error(w.to_bytes(), {"key 'general.alignment'", "must be UINT32", at(w.layout().kv[1])});
  // A huge alignment puts the data section past the end of the file.
  Writer h;
  h.add_raw(make_uint("general.alignment", ValueType::UINT32, 1u << 31));
  h.add_tensor_info_raw("t", 0, {4}, 0);
  h.append_data_raw("0123456789abcdef", 16);
  expect_error(h.to_bytes(), {"data section", "past the end"});
}

TEST(GGUFCorrupt, TensorDims) {
  auto one = [](const std::vector<uint64_t>& ne, uint32_t type = 0) {
    Writer w;
    w.add(make_string("k", "v"));
    w.add_tensor_info_raw("bad.weight", type, ne, 0);
    Bytes zero(4096, 0);
    w.append_data_raw(zero.data(), zero.size());
    return std::make_pair(w.to_bytes(), w.layout());
  };
  auto [b0, l0] = one({});
  expect_error(b0, {"tensor 'bad.weight'", "n_dims 0", at(l0.tensor[0] + 8 + 10)});
  auto [b5, l5] = one({1, 1, 1, 1, 1});
  expect_error(b5, {"tensor 'bad.weight'", "n_dims 5", at(l5.tensor[0] + 8 + 10)});
  auto [bm, lm] = one({1, ~uint64_t{0}});
  expect_error(bm, {"tensor 'bad.weight'", "dimension 1", "INT64_MAX", at(lm.tensor[0] + 8 + 10 + 4 + 8)});
  auto [bo, lo] = one({uint64_t{1} << 40, uint64_t{1} << 40});
  expect_error(bo, {"tensor 'bad.weight'", "element count overflows", at(lo.tensor[0])});
  // Element count fits int64 but the byte size does not fit size_t.
  auto [bs, ls] = one({uint64_t{1} << 31, uint64_t{1} << 31});  // 2^62 f32 = 2^64 bytes
  expect_error(bs, {"tensor 'bad.weight'", "byte size overflows", at(ls.tensor[0])});
  auto [bb, lb] = one({33, 2}, static_cast<uint32_t>(DType::Q4_0));
  expect_error(bb, {"tensor 'bad.weight'", "row length 33", "q4_0 block size 32", at(lb.tensor[0])});
  auto [bk, lk] = one({128}, static_cast<uint32_t>(DType::Q4_K));
  expect_error(bk, {"tensor 'bad.weight'", "row length 128", "256", at(lk.tensor[0])});
}

TEST(GGUFCorrupt, UnknownGgmlType) {
  for (uint32_t id : {4u, 5u, 99u, 0xffffffffu}) {
    Writer w;
    w.add_tensor_info_raw("odd", id, {32}, 0);
    w.append_data_raw(std::string(256, 'x').data(), 256);
    Writer::Layout l = w.layout();
    expect_error(w.to_bytes(), {"tensor 'odd'", "unknown ggml type id " + std::to_string(id),
                                at(l.tensor[0] + 8 + 3 + 4 + 8)});
  }
}

TEST(GGUFCorrupt, TensorDataPastEnd) {
  Writer w = small_writer();
  Writer::Layout l = w.layout();
  Bytes b = w.to_bytes();
  Bytes c(b.begin(), b.end() - 1);
  expect_error(c, {"tensor 'h.weight'", "runs past the end", at(l.tensor[2])});
  // Offset far beyond the file (would overflow offset + size if added naively).
  Bytes d = b;
  size_t off_at = l.tensor[0] + 8 + 8 + 4 + 16 + 4;
  put_u64(d, off_at, ~uint64_t{0} - 31);
  expect_error(d, {"tensor 'a.weight'", "runs past the end", at(l.tensor[0])});
}

TEST(GGUFCorrupt, MisalignedOffset) {
  Writer w = small_writer();
  Writer::Layout l = w.layout();
  Bytes b = w.to_bytes();
  size_t off_at = l.tensor[1] + 8 + 8 + 4 + 16 + 4;
  put_u64(b, off_at, 33);
  expect_error(b, {"tensor 'q.weight'", "data offset 33", "alignment 32", at(l.tensor[1])});
}

TEST(GGUFCorrupt, OverlappingData) {
  Writer w;
  w.add_tensor_info_raw("first", 0, {16}, 64);   // [64, 128)
  w.add_tensor_info_raw("second", 0, {16}, 0);   // [0, 64)
  w.add_tensor_info_raw("third", 0, {24}, 32);   // [32, 128): overlaps both
  Bytes zero(256, 0);
  w.append_data_raw(zero.data(), zero.size());
  Writer::Layout l = w.layout();
  expect_error(w.to_bytes(), {"tensor 'third'", "overlaps tensor 'second'", at(l.tensor[2])});
  // Same offset twice.
  Writer s;
  s.add_tensor_info_raw("x", 0, {8}, 0);
  s.add_tensor_info_raw("y", 0, {8}, 0);
  s.append_data_raw(zero.data(), zero.size());
  expect_error(s.to_bytes(), {"tensor 'y'", "overlaps tensor 'x'", at(s.layout().tensor[1])});
  // Empty tensors may share an offset with anything.
  Writer e;
  e.add_tensor_info_raw("x", 0, {8}, 0);
  e.add_tensor_info_raw("empty", 0, {0}, 0);
  e.append_data_raw(zero.data(), zero.size());
  EXPECT_EQ(parse(e.to_bytes())->tensors().size(), 2u);
}

TEST(GGUFCorrupt, DuplicateTensorName) {
  Writer w;
  w.add_tensor_info_raw("w", 0, {8}, 0);
  w.add_tensor_info_raw("w", 0, {8}, 32);
  Bytes zero(64, 0);
  w.append_data_raw(zero.data(), zero.size());
  Writer::Layout l = w.layout();
  expect_error(w.to_bytes(), {"tensor 'w'", "duplicate tensor name",
                              "first defined at offset " + std::to_string(l.tensor[0]), at(l.tensor[1])});
}

TEST(GGUFCorrupt, ControlCharactersInNamesAreEscaped) {
  Writer w;
  w.add_raw(make_string("bad\nkey", "x"));
  w.add_raw(make_string("bad\nkey", "y"));
  std::string m = expect_error(w.to_bytes(), {"key 'bad\\x0akey'", "duplicate"});
  EXPECT_EQ(m.find('\n'), std::string::npos);
}

// Every proper prefix of a valid file that cuts into the header, metadata,
// tensor infos or tensor data is a clean GGUFError; prefixes that only drop
// trailing padding still parse.
void truncate_everywhere(const Bytes& b, size_t must_fail_below) {
  for (size_t n = 0; n < b.size(); ++n) {
    Bytes c(b.begin(), b.begin() + n);
    if (n < must_fail_below) {
      SCOPED_TRACE("prefix of " + std::to_string(n) + " bytes");
      try {
        parse(c);
        ADD_FAILURE() << "prefix of " << n << " bytes parsed";
      } catch (const GGUFError& e) {
        std::string m = e.what();
        EXPECT_EQ(m.rfind(std::string(kName) + ": ", 0), 0u) << m;
        EXPECT_NE(m.find(" at offset "), std::string::npos) << m;
      }
    } else {
      EXPECT_NO_THROW(parse(c)) << "prefix of " << n << " bytes";
    }
  }
}

TEST(GGUFCorrupt, TruncationAtEveryOffset) {
  for (uint32_t version : {2u, 3u}) {
    Writer w = small_writer(version);
    Bytes b = w.to_bytes();
    auto f = parse(b);
    size_t end = 0;
    for (const TensorInfo& t : f->tensors()) end = std::max(end, f->data_offset() + t.offset + t.n_bytes);
    ASSERT_EQ(end, b.size());
    truncate_everywhere(b, end);
  }
  // Metadata only (as in a vocab-only file): everything up to the end of the
  // last pair is required.
  Writer m;
  m.add(make_string("tokenizer.ggml.model", "gpt2"));
  m.add(make_string_array("tokenizer.ggml.tokens", {"a", "b"}));
  m.add(make_int_array("tokenizer.ggml.token_type", ValueType::INT32, {1, 1}));
  m.add(make_bool("b", false));
  Bytes b = m.to_bytes();
  size_t end = m.layout().kv.back() + 8 + 1 + 4 + 1;
  truncate_everywhere(b, end);
}

// A tiny deterministic fuzz: flip bytes of a valid file; never crash, and
// either parse or throw GGUFError.
TEST(GGUFCorrupt, ByteFlips) {
  Bytes b = small_writer().to_bytes();
  uint64_t s = 0x9E3779B97F4A7C15ull;
  auto rnd = [&] {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  };
  int errors = 0;
  for (int it = 0; it < 20000; ++it) {
    Bytes c = b;
    int flips = 1 + static_cast<int>(rnd() % 4);
    for (int k = 0; k < flips; ++k) c[rnd() % c.size()] = static_cast<uint8_t>(rnd());
    try {
      auto f = parse(c);
      for (const Value& v : f->metadata()) (void)v.key();
    } catch (const GGUFError&) {
      ++errors;
    }
  }
  EXPECT_GT(errors, 0);
}

// ---------------------------------------------------------------- fixtures

fs::path fixture_dir() { return fs::path(KVAD_SOURCE_DIR) / "tests" / "fixtures" / "gguf"; }

// The broken-file corpus (also the fuzzer's seed corpus). Regenerate with
// KVAD_WRITE_GGUF_FIXTURES=1 ./test_gguf --gtest_filter='GGUFFixtures.*'.
struct Fixture {
  std::string name;
  Bytes bytes;
  std::vector<std::string> expect;  // parts of the error message; empty for good_ files
};

std::vector<Fixture> make_fixtures() {
  std::vector<Fixture> out;
  Writer w = small_writer();
  Writer::Layout l = w.layout();
  Bytes b = w.to_bytes();
  // Field offsets inside small_writer()'s layout.
  const size_t tokens_count = l.kv[2] + 8 + 21 + 4 + 4;
  const size_t arch_len = l.kv[0] + 8 + 20 + 4;
  const size_t bc_type = l.kv[1] + 8 + 17;
  auto ti = [&](size_t i, size_t name_len) { return l.tensor[i] + 8 + name_len; };  // at n_dims
  out.push_back({"good_small.gguf", b, {}});
  out.push_back({"good_small_v2.gguf", small_writer(2).to_bytes(), {}});
  Bytes c = b;
  c[1] = 'X';
  out.push_back({"bad_magic.gguf", c, {"header", "magic is 'GXUF'", at(0)}});
  c = b;
  put_u32(c, 4, 1);
  out.push_back({"bad_version1.gguf", c, {"header", "version 1", at(4)}});
  out.push_back({"bad_truncated_header.gguf", Bytes(b.begin(), b.begin() + 13),
                 {"header", "truncated tensor count", at(8)}});
  out.push_back({"bad_truncated_kv.gguf", Bytes(b.begin(), b.begin() + l.kv[2] + 20),
                 {"metadata pair #2", "truncated or corrupt key", at(l.kv[2])}});
  // Cut inside the third token's bytes ("<s>", "a", "bc").
  out.push_back({"bad_truncated_array.gguf", Bytes(b.begin(), b.begin() + tokens_count + 8 + 11 + 9 + 8 + 1),
                 {"key 'tokenizer.ggml.tokens'", "truncated or corrupt string array element",
                  at(tokens_count + 8 + 11 + 9)}});
  out.push_back({"bad_truncated_tensor_info.gguf", Bytes(b.begin(), b.begin() + ti(1, 8) + 10),
                 {"tensor 'q.weight'", "truncated dimension", at(ti(1, 8) + 4)}});
  out.push_back({"bad_truncated_data.gguf", Bytes(b.begin(), b.end() - 5),
                 {"tensor 'h.weight'", "runs past the end", at(l.tensor[2])}});
  c = b;
  put_u64(c, 16, ~uint64_t{0});
  out.push_back({"bad_kv_count.gguf", c, {"header", "metadata count", "cannot fit", at(16)}});
  c = b;
  put_u64(c, 8, uint64_t{1} << 40);
  out.push_back({"bad_tensor_count.gguf", c, {"header", "tensor count", "cannot fit", at(8)}});
  c = b;
  put_u64(c, tokens_count, uint64_t{1} << 58);
  out.push_back({"bad_array_count.gguf", c, {"key 'tokenizer.ggml.tokens'", "cannot fit", at(tokens_count)}});
  c = b;
  put_u64(c, arch_len, uint64_t{1} << 50);
  out.push_back({"bad_string_length.gguf", c, {"key 'general.architecture'", "string: length", at(arch_len)}});
  c = b;
  put_u32(c, bc_type, 77);
  out.push_back({"bad_value_type.gguf", c, {"key 'llama.block_count'", "unknown value type 77", at(bc_type)}});
  c = b;
  put_u32(c, ti(0, 8) + 4 + 16, 19);
  out.push_back({"bad_ggml_type.gguf", c, {"tensor 'a.weight'", "unknown ggml type id 19", at(ti(0, 8) + 4 + 16)}});
  c = b;
  put_u32(c, ti(0, 8), 5);
  out.push_back({"bad_n_dims.gguf", c, {"tensor 'a.weight'", "n_dims 5", at(ti(0, 8))}});
  c = b;
  put_u64(c, ti(1, 8) + 4, 33);
  out.push_back({"bad_block_multiple.gguf", c, {"tensor 'q.weight'", "row length 33", at(l.tensor[1])}});
  c = b;
  put_u64(c, ti(0, 8) + 4, uint64_t{1} << 62);
  put_u64(c, ti(0, 8) + 4 + 8, uint64_t{1} << 62);
  out.push_back({"bad_dim_overflow.gguf", c, {"tensor 'a.weight'", "overflows", at(l.tensor[0])}});
  c = b;
  put_u64(c, ti(1, 8) + 4 + 16 + 4, 8);
  out.push_back({"bad_misaligned_offset.gguf", c, {"tensor 'q.weight'", "not a multiple of the alignment", at(l.tensor[1])}});
  c = b;
  put_u64(c, ti(1, 8) + 4 + 16 + 4, 0);
  out.push_back({"bad_overlap.gguf", c, {"tensor 'q.weight'", "overlaps tensor 'a.weight'", at(l.tensor[1])}});
  c = b;
  put_u64(c, ti(2, 8) + 4 + 8 + 4, 1 << 20);
  out.push_back({"bad_data_past_end.gguf", c, {"tensor 'h.weight'", "runs past the end", at(l.tensor[2])}});
  c = b;
  c[l.tensor[1] + 8] = 'a';  // "q.weight" -> "a.weight"
  out.push_back({"bad_duplicate_tensor.gguf", c, {"tensor 'a.weight'", "duplicate tensor name", at(l.tensor[1])}});
  {
    Writer d = small_writer();
    d.add_raw(make_string("general.architecture", "again"));
    out.push_back({"bad_duplicate_key.gguf", d.to_bytes(),
                   {"key 'general.architecture'", "duplicate metadata key", at(d.layout().kv[4])}});
  }
  {
    Writer a;
    a.add_raw(make_uint("general.alignment", ValueType::UINT32, 24));
    out.push_back({"bad_alignment.gguf", a.to_bytes(), {"key 'general.alignment'", "alignment 24", at(24)}});
  }
  return out;
}

TEST(GGUFFixtures, CorpusMatchesExpectations) {
  const std::vector<Fixture> fixtures = make_fixtures();
  if (std::getenv("KVAD_WRITE_GGUF_FIXTURES")) {
    fs::create_directories(fixture_dir());
    for (const Fixture& fx : fixtures) {
      std::ofstream o(fixture_dir() / fx.name, std::ios::binary);
      o.write(reinterpret_cast<const char*>(fx.bytes.data()), static_cast<std::streamsize>(fx.bytes.size()));
    }
  }
  // The in-memory fixtures fail the way their names say.
  for (const Fixture& fx : fixtures) {
    SCOPED_TRACE(fx.name);
    if (fx.expect.empty()) {
      EXPECT_NO_THROW(parse(fx.bytes));
    } else {
      expect_error(fx.bytes, fx.expect);
    }
  }
  // The files on disk (including any a fuzzer run added): good_* parse,
  // bad_* fail with the file's path and an offset, anything else must not crash.
  if (!fs::exists(fixture_dir())) GTEST_SKIP() << "no fixtures at " << fixture_dir();
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(fixture_dir())) {
    std::string name = e.path().filename().string();
    if (!e.is_regular_file() || name == "README.md") continue;
    ++n;
    SCOPED_TRACE(name);
    if (name.rfind("good_", 0) == 0) {
      EXPECT_NO_THROW(File::open(e.path().string()));
      continue;
    }
    try {
      File::open(e.path().string());
      EXPECT_NE(name.rfind("bad_", 0), 0u) << name << " parsed";
    } catch (const GGUFError& err) {
      std::string m = err.what();
      EXPECT_EQ(m.rfind(e.path().string() + ": ", 0), 0u) << m;
      EXPECT_NE(m.find(" at offset "), std::string::npos) << m;
      for (const Fixture& fx : fixtures) {
        if (fx.name != name) continue;
        for (const std::string& part : fx.expect) EXPECT_NE(m.find(part), std::string::npos) << m;
      }
    }
  }
  EXPECT_GE(n, fixtures.size());
}

// ---------------------------------------------------------------- real files

TEST(GGUFReal, SmolLM2) {
  std::string path;
  if (const char* p = std::getenv("KVAD_MODEL_SMOLLM2")) path = p;
  if (path.empty()) {
    const char* home = std::getenv("HOME");
    fs::path d = fs::path(home ? home : "") / ".cache/kvad/models/smollm2-135m.gguf";
    if (home && fs::exists(d)) path = d.string();
  }
  if (path.empty())
    GTEST_SKIP() << "set KVAD_MODEL_SMOLLM2 to a SmolLM2-135M GGUF (or put it at "
                    "~/.cache/kvad/models/smollm2-135m.gguf)";
  auto f = File::open(path);
  EXPECT_EQ(f->tensors().size(), 272u);
  EXPECT_EQ(f->get_string("general.architecture", ""), "llama");
  EXPECT_EQ(f->get_int("llama.block_count", 0), 30);
  EXPECT_EQ(f->get("tokenizer.ggml.tokens").as_string_array().size(), 49152u);
  const TensorInfo* emb = f->find_tensor("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->ne, (std::vector<int64_t>{576, 49152}));
  EXPECT_LE(f->data_offset() + f->tensor_bytes(), f->file_size());
  for (const TensorInfo& t : f->tensors()) {
    EXPECT_GE(t.data, f->file_data() + f->data_offset());
    EXPECT_LE(t.data + t.n_bytes, f->file_data() + f->file_size());
  }
}

TEST(GGUFReal, PeerVocabFiles) {
  fs::path dir = fs::path(KVAD_PEER_DATA) / "tokenizer";
  if (!fs::exists(dir)) GTEST_SKIP() << "no vocab files at " << dir;
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".gguf") continue;
    ++n;
    SCOPED_TRACE(e.path().string());
    auto f = File::open(e.path().string());
    EXPECT_TRUE(f->version() == 2 || f->version() == 3);
    const Value* tokens = f->find("tokenizer.ggml.tokens");
    ASSERT_NE(tokens, nullptr);
    EXPECT_GT(tokens->as_string_array().size(), 1000u);
    EXPECT_FALSE(f->get_string("tokenizer.ggml.model", "").empty());
    if (const Value* tt = f->find("tokenizer.ggml.token_type")) {
      EXPECT_EQ(tt->as_int_array().size(), tokens->array_size());
    }
  }
  EXPECT_GT(n, 0u);
}

}  // namespace
}  // namespace kvad::gguf
