// kvad's formats against gguf-py (llama.cpp's Python package), whose
// quants.py reproduces ggml's reference quantizers bit for bit. The fixtures
// were written by tools/make_quant_fixtures.py: source floats, gguf-py's
// quantized bytes and gguf-py's dequantized floats, per format.
//
// Expected: to_float equals gguf-py's dequantize bit for bit (same roundings:
// f16 scale to f32, d*q [+ m] as two float32 roundings), and from_float
// produces gguf-py's bytes exactly (both implement ggml's *_ref math in
// float32, ties included: roundf, and trunc(x + 0.5) on nonnegatives).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cpu/kernels.h"
#include "tensor/dtype.h"

using namespace kvad;

namespace {

std::string fixture_dir() {
  const char* env = std::getenv("KVAD_SOURCE_DIR");
  std::string root = env && *env ? env : KVAD_SOURCE_DIR;
  return root + "/tests/fixtures/quants/";
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + path);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

std::vector<float> as_floats(const std::vector<uint8_t>& b) {
  std::vector<float> v(b.size() / 4);
  std::memcpy(v.data(), b.data(), v.size() * 4);
  return v;
}

struct Entry {
  std::string name;
  uint32_t id;
  int64_t rows, cols;
  size_t row_bytes;
};

std::vector<Entry> manifest() {
  std::ifstream f(fixture_dir() + "manifest.txt");
  std::vector<Entry> out;
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream is(line);
    Entry e;
    is >> e.name >> e.id >> e.rows >> e.cols >> e.row_bytes;
    if (is) out.push_back(e);
  }
  return out;
}

}  // namespace

TEST(GgufPy, Fixtures) {
  const std::vector<Entry> entries = manifest();
  ASSERT_EQ(entries.size(), 7u) << "missing " << fixture_dir() << "manifest.txt";
  const std::vector<float> input = as_floats(read_file(fixture_dir() + "input.f32"));
  for (const Entry& e : entries) {
    SCOPED_TRACE(e.name);
    const DTypeInfo* info = find_dtype(e.id);
    ASSERT_NE(info, nullptr);
    ASSERT_STREQ(info->name, e.name.c_str());
    ASSERT_EQ(row_bytes(info->type, e.cols), e.row_bytes);
    const std::vector<uint8_t> quant = read_file(fixture_dir() + e.name + ".quant");
    const std::vector<float> deq = as_floats(read_file(fixture_dir() + e.name + ".dequant.f32"));
    ASSERT_EQ(quant.size(), e.row_bytes * static_cast<size_t>(e.rows));
    ASSERT_EQ(deq.size(), static_cast<size_t>(e.rows * e.cols));
    ASSERT_EQ(input.size(), deq.size());

    const cpu::CpuKernels& k = cpu::cpu_kernels(info->type);
    for (bool ref : {true, false}) {
      double max_abs = 0.0;
      size_t bit_diffs = 0, byte_diffs = 0;
      double max_requant = 0.0;
      for (int64_t r = 0; r < e.rows; ++r) {
        const uint8_t* qrow = quant.data() + r * e.row_bytes;
        const float* want = deq.data() + r * e.cols;
        std::vector<float> got(static_cast<size_t>(e.cols));
        (ref ? k.to_float_ref : k.to_float)(qrow, got.data(), e.cols);
        for (int64_t j = 0; j < e.cols; ++j) {
          max_abs = std::max(max_abs, std::fabs(static_cast<double>(got[j]) - want[j]));
          bit_diffs += std::memcmp(&got[j], &want[j], 4) != 0;
        }
        std::vector<uint8_t> q(e.row_bytes);
        (ref ? k.from_float_ref : k.from_float)(input.data() + r * e.cols, q.data(), e.cols);
        for (size_t b = 0; b < e.row_bytes; ++b) byte_diffs += q[b] != qrow[b];
        // Where bytes differ, how far apart are the dequantized values?
        std::vector<float> back(static_cast<size_t>(e.cols));
        k.to_float_ref(q.data(), back.data(), e.cols);
        for (int64_t j = 0; j < e.cols; ++j) {
          max_requant = std::max(max_requant, std::fabs(static_cast<double>(back[j]) - want[j]));
        }
      }
      std::printf("%-4s %-5s vs gguf-py: dequant max|err| %.3g (%zu values differ in bits), "
                  "quant %zu bytes differ (max|deq diff| %.3g)\n",
                  ref ? "ref" : "simd", e.name.c_str(), max_abs, bit_diffs, byte_diffs, max_requant);
      EXPECT_EQ(bit_diffs, 0u) << (ref ? "ref" : "simd") << " to_float";
      EXPECT_EQ(byte_diffs, 0u) << (ref ? "ref" : "simd") << " from_float";
    }
  }
}
