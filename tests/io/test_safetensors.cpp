// Tests of the safetensors reader and its TensorSource (src/io/safetensors.h,
// src/io/tensor_source.h).
//
// Fixtures: tests/fixtures/safetensors, made by
// tools/make_safetensors_fixtures.py. The valid files there were written by
// Hugging Face's own serializer (PyPI safetensors); valid/expected.json holds
// each tensor's dtype, shape, bytes and values as the script wrote them. Each
// broken file (broken/, broken_index/) breaks one rule; its MANIFEST.json
// lists the words kvad's error must contain. More broken inputs are made here
// in memory: every truncation of a valid file, single-byte corruptions, and
// extreme numbers.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "io/tensor_source.h"
#include "tensor/half.h"

namespace kvad {
namespace {

namespace fs = std::filesystem;
namespace st = safetensors;
using Json = nlohmann::json;
using Bytes = std::vector<uint8_t>;

fs::path fixtures() { return fs::path(KVAD_SOURCE_DIR) / "tests/fixtures/safetensors"; }

Json read_json(const fs::path& p) {
  std::ifstream in(p);
  if (!in) throw std::runtime_error("cannot read " + p.string());
  return Json::parse(in);
}

Bytes read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), {});
}

std::string hex(const void* data, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    const uint8_t b = static_cast<const uint8_t*>(data)[i];
    s += d[b >> 4];
    s += d[b & 15];
  }
  return s;
}

// Decodes element i of a tensor's bytes to a double, for the dtypes with a C type.
double value_at(const std::string& dtype, const uint8_t* p, size_t i) {
  auto load = [&](auto v) {
    std::memcpy(&v, p + i * sizeof(v), sizeof(v));
    return v;
  };
  if (dtype == "F32") return load(float{});
  if (dtype == "F16") return f16_to_f32(load(uint16_t{}));
  if (dtype == "BF16") return bf16_to_f32(load(uint16_t{}));
  if (dtype == "I8") return load(int8_t{});
  if (dtype == "U8") return load(uint8_t{});
  if (dtype == "I32") return load(int32_t{});
  ADD_FAILURE() << "no decoder for " << dtype;
  return 0;
}

// Checks a tensor's bytes and values against the script's record.
void expect_tensor(const std::string& name, const std::string& dtype, const std::vector<int64_t>& shape,
                   const void* data, size_t n_bytes, const Json& e) {
  SCOPED_TRACE(name);
  EXPECT_EQ(dtype, e["dtype"].get<std::string>());
  EXPECT_EQ(shape, e["shape"].get<std::vector<int64_t>>());
  EXPECT_EQ(hex(data, n_bytes), e["hex"].get<std::string>());
  if (!e.contains("values")) return;
  const Json& v = e["values"];
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < v.size(); ++i) {
    if (dtype == "I64") {
      int64_t x;
      std::memcpy(&x, p + 8 * i, 8);
      EXPECT_EQ(x, v[i].get<int64_t>()) << "element " << i;
    } else {
      EXPECT_EQ(value_at(dtype, p, i), v[i].get<double>()) << "element " << i;
    }
  }
}

// Runs f, expects a kvad::Error of type E whose message begins with `prefix`
// (when not empty) and contains every part; returns the message.
template <class E = Error, class F>
std::string expect_error(F&& f, const std::string& prefix, const std::vector<std::string>& parts) {
  try {
    f();
  } catch (const E& e) {
    const std::string m = e.what();
    if (!prefix.empty()) {
      EXPECT_EQ(m.rfind(prefix, 0), 0u) << "does not begin with '" << prefix << "': " << m;
    }
    for (const std::string& p : parts) EXPECT_NE(m.find(p), std::string::npos) << "'" << p << "' not in: " << m;
    return m;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
    return "";
  }
  ADD_FAILURE() << "no error; expected one containing " << (parts.empty() ? prefix : parts[0]);
  return "";
}

std::unique_ptr<st::File> parse(const Bytes& b) { return st::File::parse(b.data(), b.size(), "mem.safetensors"); }

// A file from header text and data (no padding).
Bytes make_file(const std::string& header, const Bytes& data = {}, std::optional<uint64_t> n = {}) {
  // Sized once and filled in place (vector::insert here trips GCC 12's -Warray-bounds).
  Bytes b(8 + header.size() + data.size());
  const uint64_t len = n ? *n : header.size();
  for (int k = 0; k < 8; ++k) b[k] = static_cast<uint8_t>(len >> (8 * k));
  std::copy(header.begin(), header.end(), b.begin() + 8);
  std::copy(data.begin(), data.end(), b.begin() + 8 + static_cast<std::ptrdiff_t>(header.size()));
  return b;
}

std::string mem_error(const Bytes& b, const std::vector<std::string>& parts) {
  return expect_error<SafetensorsError>([&] { parse(b); }, "mem.safetensors: ", parts);
}

// ---------------------------------------------------------------- valid files

TEST(Safetensors, SingleFileReadsBackWhatTheScriptWrote) {
  const Json exp = read_json(fixtures() / "valid/expected.json")["single.safetensors"];
  const std::string path = (fixtures() / "valid/single.safetensors").string();
  auto f = st::File::open(path);
  EXPECT_EQ(f->path(), path);
  ASSERT_EQ(f->tensors().size(), exp.size());
  EXPECT_EQ(f->data_offset() % 8, 0u);  // Hugging Face's writer pads the header
  uint64_t prev_end = 0;
  for (const st::TensorInfo& t : f->tensors()) {
    ASSERT_TRUE(exp.contains(t.name)) << t.name;
    expect_tensor(t.name, st::dtype_name(t.dtype), t.shape, t.data, t.n_bytes, exp[t.name]);
    EXPECT_EQ(t.begin, prev_end) << t.name << ": tensors are listed in data-offset order";
    prev_end = t.end;
    EXPECT_EQ(t.data, f->file_data() + f->data_offset() + t.begin);
    EXPECT_EQ(t.n_bytes, static_cast<size_t>(t.n_elements) * st::dtype_size(t.dtype));
    EXPECT_EQ(f->find(t.name), &t);
  }
  EXPECT_EQ(f->data_offset() + prev_end, f->file_size());
  EXPECT_EQ(f->find("nope"), nullptr);
  EXPECT_EQ(f->find("scalar")->n_elements, 1);
  EXPECT_TRUE(f->find("scalar")->shape.empty());
  EXPECT_EQ(f->find("empty")->n_elements, 0);
  EXPECT_EQ(f->find("empty")->n_bytes, 0u);
  ASSERT_EQ(f->metadata().size(), 2u);
  EXPECT_EQ(f->metadata().at("format"), "pt");
  EXPECT_EQ(f->metadata().at("note"), "kvad fixture");
}

TEST(Safetensors, SourceOverOneFile) {
  const Json exp = read_json(fixtures() / "valid/expected.json")["single.safetensors"];
  const std::string path = (fixtures() / "valid/single.safetensors").string();
  auto src = safetensors_source(path);
  EXPECT_EQ(src->path(), path);
  ASSERT_EQ(src->tensors().size(), exp.size());
  for (const SourceTensor& t : src->tensors()) {
    ASSERT_TRUE(exp.contains(t.name)) << t.name;
    expect_tensor(t.name, t.stored_dtype, t.shape, t.data, t.n_bytes, exp[t.name]);
    EXPECT_EQ(t.origin, path);
    EXPECT_EQ(src->find(t.name), &t);
    if (!t.supported) continue;
    // ne is the shape reversed; the bytes add up for the kvad type.
    ASSERT_LE(t.shape.size(), 4u);
    EXPECT_EQ(t.n_dims, std::max<int>(1, static_cast<int>(t.shape.size())));
    for (size_t i = 0; i < t.shape.size(); ++i) EXPECT_EQ(t.ne[i], t.shape[t.shape.size() - 1 - i]) << t.name;
    EXPECT_EQ(row_bytes(t.type, t.ne[0]) * t.ne[1] * t.ne[2] * t.ne[3], t.n_bytes) << t.name;
    EXPECT_NO_THROW(require_supported(t));
  }
  const SourceTensor* e = src->find("model.embed_tokens.weight");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->type, DType::BF16);
  EXPECT_EQ(e->n_dims, 3);
  EXPECT_EQ(src->find("f32.matrix")->type, DType::F32);
  EXPECT_EQ((src->find("f32.matrix")->ne), (std::array<int64_t, 4>{3, 2, 1, 1}));
  EXPECT_EQ(src->find("f16.vector")->type, DType::F16);
  EXPECT_EQ(src->find("i8.vector")->type, DType::I8);
  EXPECT_EQ(src->find("i32.matrix")->type, DType::I32);
  EXPECT_EQ(src->find("i64.vector")->type, DType::I64);
  EXPECT_EQ(src->find("scalar")->n_dims, 1);
  EXPECT_EQ(src->find("empty")->ne[1], 0);

  // U8 and F8 have no kvad DType, a 5-d tensor no ne: listed, not computable.
  for (const char* name : {"u8.vector", "f8_e4m3.vector", "f8_e5m2.vector", "rank5"}) {
    const SourceTensor* t = src->find(name);
    ASSERT_TRUE(t) << name;
    EXPECT_FALSE(t->supported) << name;
    expect_error([&] { require_supported(*t); }, path + ": tensor " + name + " is stored as " + t->stored_dtype,
                 {"cannot compute with"});
  }
  EXPECT_EQ(src->find("f8_e4m3.vector")->stored_dtype, "F8_E4M3");
  EXPECT_EQ(src->find("u8.vector")->n_bytes, 3u);
  const SourceTensor* r5 = src->find("rank5");
  EXPECT_EQ(r5->n_dims, 4);
  EXPECT_EQ((r5->ne), (std::array<int64_t, 4>{2, 2, 1, 2}));  // [1, 2, 1, 2, 2]: outer dims folded into ne[3]
  expect_error([&] { require_supported(*r5); }, "", {"F16 [1, 2, 1, 2, 2]", "more than 4 dims"});

  // No metadata: config.json is read elsewhere.
  EXPECT_FALSE(src->has("general.architecture"));
  EXPECT_EQ(src->get_int("llama.block_count", 7), 7);
  EXPECT_EQ(src->get_float("x", 1.5), 1.5);
  EXPECT_EQ(src->get_string("general.architecture", "?"), "?");
  expect_error([&] { src->require_int("llama.block_count"); }, path + ": ", {"llama.block_count", "config.json"});
}

TEST(Safetensors, ShardedDirectoryAndIndexPath) {
  const Json exp = read_json(fixtures() / "valid/expected.json")["sharded"];
  const fs::path dir = fixtures() / "valid/sharded";
  for (const std::string& path : {dir.string(), (dir / "model.safetensors.index.json").string()}) {
    SCOPED_TRACE(path);
    std::shared_ptr<const void> keep;
    std::vector<std::pair<const void*, std::string>> ptrs;
    {
      auto src = safetensors_source(path);
      EXPECT_EQ(src->path(), path);
      ASSERT_EQ(src->tensors().size(), exp.size());
      // Shard by shard (sorted names), data-offset order inside each.
      for (size_t i = 1; i < src->tensors().size(); ++i) {
        const SourceTensor& a = src->tensors()[i - 1];
        const SourceTensor& b = src->tensors()[i];
        EXPECT_LE(a.origin, b.origin);
        if (a.origin == b.origin) {
          EXPECT_EQ(static_cast<const uint8_t*>(a.data) + a.n_bytes, b.data);
        }
      }
      for (const SourceTensor& t : src->tensors()) {
        expect_tensor(t.name, t.stored_dtype, t.shape, t.data, t.n_bytes, exp[t.name]);
        const bool first = t.name.rfind("model.embed", 0) == 0 || t.name.rfind("model.layers", 0) == 0;
        EXPECT_EQ(fs::path(t.origin).filename(),
                  first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors");
        EXPECT_TRUE(t.supported);
        ptrs.emplace_back(t.data, t.name);
      }
      EXPECT_EQ(src->find("lm_head.weight")->type, DType::F16);
      EXPECT_EQ((src->find("lm_head.weight")->ne), (std::array<int64_t, 4>{3, 4, 1, 1}));
      keep = src->keepalive();
    }
    // The mappings outlive the source while keepalive() is held.
    for (const auto& [p, name] : ptrs) {
      const Json& e = exp[name];
      EXPECT_EQ(hex(p, e["hex"].get<std::string>().size() / 2), e["hex"].get<std::string>()) << name;
    }
  }
}

TEST(Safetensors, DirectoryWithModelSafetensors) {
  const Json exp = read_json(fixtures() / "valid/expected.json")["dir"];
  // "both" also holds an index naming a missing shard: model.safetensors
  // wins, as in transformers, so the index is never read.
  for (const char* d : {"valid/dir", "valid/both"}) {
    auto src = safetensors_source((fixtures() / d).string());
    ASSERT_EQ(src->tensors().size(), exp.size()) << d;
    for (const SourceTensor& t : src->tensors())
      expect_tensor(t.name, t.stored_dtype, t.shape, t.data, t.n_bytes, exp[t.name]);
    EXPECT_EQ(fs::path(src->tensors()[0].origin).filename(), "model.safetensors");
  }
  expect_error([&] { safetensors_source((fixtures() / "broken").string()); }, (fixtures() / "broken").string(),
               {"neither model.safetensors nor model.safetensors.index.json"});
  expect_error([&] { safetensors_source((fixtures() / "no-such.safetensors").string()); }, "", {"cannot open"});
}

// ---------------------------------------------------------------- broken corpus

TEST(Safetensors, EveryBrokenFileIsAnErrorNamingTheField) {
  const fs::path dir = fixtures() / "broken";
  const Json manifest = read_json(dir / "MANIFEST.json");
  std::set<std::string> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".safetensors") files.insert(e.path().filename().string());
  EXPECT_EQ(files.size(), manifest.size()) << "every broken file is in MANIFEST.json";
  EXPECT_GE(files.size(), 40u);
  for (const auto& [name, parts] : manifest.items()) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(files.count(name));
    const std::string path = (dir / name).string();
    const auto want = parts.get<std::vector<std::string>>();
    expect_error<SafetensorsError>([&] { st::File::open(path); }, path + ": ", want);
    expect_error<SafetensorsError>([&] { safetensors_source(path); }, path + ": ", want);
    // The same bytes parsed from memory.
    const Bytes b = read_bytes(dir / name);
    expect_error<SafetensorsError>([&] { st::File::parse(b.data(), b.size(), "m"); }, "m: ", want);
  }
}

TEST(Safetensors, EveryBrokenIndexIsAnError) {
  const fs::path dir = fixtures() / "broken_index";
  const Json manifest = read_json(dir / "MANIFEST.json");
  size_t n_dirs = 0;
  for (const auto& e : fs::directory_iterator(dir)) n_dirs += e.is_directory();
  EXPECT_EQ(n_dirs, manifest.size());
  for (const auto& [name, c] : manifest.items()) {
    SCOPED_TRACE(name);
    const fs::path d = dir / name;
    const std::string named = (d / c["names"].get<std::string>()).string();
    expect_error([&] { safetensors_source(d.string()); }, named + ": ", c["expect"].get<std::vector<std::string>>());
  }
  // The file a traversal would reach is a valid checkpoint: refusing it is the check, not a missing file.
  EXPECT_EQ(safetensors_source((dir / "outside.safetensors").string())->tensors().size(), 1u);
}

// ---------------------------------------------------------------- index names

TEST(Safetensors, ShardNamesMustBePlainFileNames) {
  for (const char* ok : {"model.safetensors", "model-00001-of-00002.safetensors", "a..b", ".hidden", "x y"})
    EXPECT_TRUE(st::is_plain_file_name(ok)) << ok;
  for (const std::string& bad : std::vector<std::string>{"", ".", "..", "../model.safetensors", "/etc/passwd", "a/b", "sub/", "..\\x", "a\\b",
                          std::string("a\0b", 3)}) {
    EXPECT_FALSE(st::is_plain_file_name(bad)) << bad;
    const Json idx = {{"weight_map", {{"w", bad}}}};
    expect_error<SafetensorsError>([&] { st::parse_index(idx.dump(), "i.json"); }, "i.json: ",
                                   {"weight_map[\"w\"]", "not a plain file name"});
  }
  const st::Index i = st::parse_index(
      R"({"metadata": {"total_size": 1}, "weight_map": {"b": "s2", "a": "s1", "c": "s1"}})", "i.json");
  EXPECT_EQ(i.shards, (std::vector<std::string>{"s1", "s2"}));
  EXPECT_EQ(i.weight_map.at("b"), "s2");
  EXPECT_EQ(st::parse_index(R"({"weight_map": {}})", "i.json").shards.size(), 0u);
}

// ---------------------------------------------------------------- in memory

TEST(Safetensors, EveryTruncationIsAnError) {
  for (const char* name : {"valid/single.safetensors", "valid/sharded/model-00001-of-00002.safetensors"}) {
    const Bytes full = read_bytes(fixtures() / name);
    ASSERT_NO_THROW(parse(full));
    for (size_t n = 0; n < full.size(); ++n) {
      Bytes cut(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n));
      EXPECT_THROW(parse(cut), SafetensorsError) << name << " cut to " << n << " bytes";
    }
  }
}

TEST(Safetensors, CorruptedBytesNeverCrash) {
  // Every header byte of a valid file set to a few values: each result either
  // parses (into tensors inside the buffer) or is a SafetensorsError.
  const Bytes full = read_bytes(fixtures() / "valid/single.safetensors");
  const size_t header_end = 8 + parse(full)->header_bytes();
  size_t n_ok = 0, n_err = 0;
  for (size_t i = 0; i < header_end; ++i) {
    for (uint8_t v : {0x00, 0x22, 0x30, 0x39, 0x5b, 0x7d, 0xff}) {
      Bytes b = full;
      if (b[i] == v) continue;
      b[i] = v;
      try {
        auto f = parse(b);
        for (const st::TensorInfo& t : f->tensors()) {
          EXPECT_GE(t.data, b.data() + f->data_offset());
          EXPECT_LE(t.data + t.n_bytes, b.data() + b.size());
        }
        ++n_ok;
      } catch (const SafetensorsError&) {
        ++n_err;
      }
    }
  }
  EXPECT_GT(n_err, 0u);
  EXPECT_GT(n_ok + n_err, 1000u);
}

TEST(Safetensors, HugeHeaderLength) {
  const std::string h = R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})";
  mem_error(make_file(h, {1}, UINT64_MAX), {"header length 18446744073709551615 at offset 0", "limit"});
  mem_error(make_file(h, {1}, st::kMaxHeaderBytes + 1), {"exceeds the limit of 100000000 bytes"});
  mem_error(make_file(h, {1}, h.size() + 2), {"header length", "runs past the end of the file"});
  // At the cap but past the end: the length is compared with the file, nothing is allocated.
  mem_error(make_file(h, {1}, st::kMaxHeaderBytes), {"runs past the end of the file"});
  EXPECT_EQ(parse(make_file(h, {1}))->tensors().size(), 1u);
}

TEST(Safetensors, OverlapsAndHoles) {
  const Bytes d(16, 0);
  mem_error(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                      R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},)"
                      R"("c":{"dtype":"I32","shape":[2],"data_offsets":[4,12]}})", d),
            {"tensor \"c\" (data_offsets [4, 12]) overlaps tensor \"a\" (data_offsets [0, 8])"});
  mem_error(make_file(R"({"a":{"dtype":"I64","shape":[2],"data_offsets":[0,16]},)"
                      R"("b":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}})", d),
            {"overlaps tensor"});
  mem_error(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", d),
            {"data bytes [0, 8)", "belong to no tensor"});
  // Empty tensors may sit at any tensor boundary.
  auto f = parse(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("z":{"dtype":"F16","shape":[0,5],"data_offsets":[8,8]},)"
                           R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},)"
                           R"("e":{"dtype":"BF16","shape":[3,0],"data_offsets":[16,16]}})", d));
  ASSERT_EQ(f->tensors().size(), 4u);
  EXPECT_EQ(f->tensors()[0].name, "a");
  EXPECT_EQ(f->tensors()[1].name, "z");
  EXPECT_EQ(f->tensors()[3].name, "e");
}

TEST(Safetensors, ShapeOverflow) {
  auto file = [](const std::string& dtype, const std::string& shape) {
    return make_file(R"({"w":{"dtype":")" + dtype + R"(","shape":)" + shape + R"(,"data_offsets":[0,4]}})",
                     Bytes(4, 0));
  };
  mem_error(file("F32", "[4294967296,4294967296,2]"), {"tensor \"w\"", "more elements than 2^64"});
  mem_error(file("U8", "[18446744073709551615]"), {"shape[0] = 18446744073709551615 is too large"});
  mem_error(file("F32", "[4611686018427387904]"), {"more than 2^63 bytes"});
  mem_error(file("F32", "[18446744073709551616]"), {"shape[0] is", "not a non-negative integer"});  // a float in JSON
  // A product that overflows but has a 0 dim is 0 elements, as the spec's empty tensors.
  auto f = parse(make_file(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,0],"data_offsets":[0,0]}})"));
  EXPECT_EQ(f->tensors()[0].n_elements, 0);
  EXPECT_EQ(f->tensors()[0].n_bytes, 0u);
}

TEST(Safetensors, ErrorMessagesStayShort) {
  // A 1 MB tensor name and a 1 MB shape value end in errors of bounded length.
  const std::string name(1 << 20, 'n');
  std::string m = mem_error(make_file(R"({")" + name + R"(":{"dtype":"Q4"}})"), {"dtype \"Q4\""});
  EXPECT_LT(m.size(), 600u);
  m = mem_error(make_file(R"({"w":{"dtype":"F32","shape":[")" + name + R"("],"data_offsets":[0,0]}})"),
                {"shape[0] is"});
  EXPECT_LT(m.size(), 600u);
  m = mem_error(make_file(R"({"w": ")" + name), {"header is not valid JSON"});  // unterminated: nlohmann quotes it
  EXPECT_LT(m.size(), 600u);
}

TEST(Safetensors, ManyTensors) {
  // 200,000 entries (a few MB of header): parsing stays near-linear (a
  // quadratic step would not finish), and every tensor is found by name.
  constexpr int n = 200000;
  std::string h = "{";
  for (int i = 0; i < n; ++i) {
    h += (i ? "," : "");
    h += "\"t" + std::to_string(i) + R"(":{"dtype":"U8","shape":[1],"data_offsets":[)" + std::to_string(i) + "," +
         std::to_string(i + 1) + "]}";
  }
  h += "}";
  auto f = parse(make_file(h, Bytes(n, 7)));
  ASSERT_EQ(f->tensors().size(), static_cast<size_t>(n));
  EXPECT_EQ(f->find("t123456")->begin, 123456u);
  EXPECT_EQ(f->tensors().back().name, "t199999");
}

}  // namespace
}  // namespace kvad
