// kvad's formats against gguf-py (llama.cpp's Python package) and ggml. The
// fixtures were written by tools/make_quant_fixtures.py: source floats, the
// quantized bytes and the dequantized floats, per format. The bytes come from
// gguf-py's quants.quantize where gguf-py implements it (f16 ... q8_0, tq1_0,
// tq2_0; it reproduces ggml's quantize_row_*_ref bit for bit) and from ggml's
// own quantize_row_*_ref otherwise (the K-quants, q8_K, iq4_nl); the
// dequantized floats from gguf-py's quants.dequantize (ggml's
// dequantize_row_q8_K for q8_K, which gguf-py lacks).
//
// Expected: to_float equals the reference dequantization bit for bit (same
// roundings: f16 scale to f32, sub-block scale d*sc, then scale*q [- min],
// each a float32 rounding), and from_float produces the reference bytes
// exactly (all implement ggml's *_ref math in float32, ties included: roundf,
// trunc(x + 0.5) on nonnegatives, nearest_int's ties to even).
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
  std::string source;  // who made the quantized bytes: "gguf-py" or "ggml"
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
    if (!is) continue;
    if (!(is >> e.source)) e.source = "gguf-py";
    out.push_back(e);
  }
  return out;
}

}  // namespace

TEST(GgufPy, Fixtures) {
  const std::vector<Entry> entries = manifest();
  ASSERT_EQ(entries.size(), 17u) << "missing " << fixture_dir() << "manifest.txt";
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
      size_t bit_diffs = 0, byte_diffs = 0, dont_care = 0;
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
        for (size_t b = 0; b < e.row_bytes; ++b) {
          if (info->type == DType::IQ4_NL) {
            // ggml's quantize_row_iq4_nl_ref leaves the indices of an all-zero
            // block unwritten (stale stack bytes); kvad writes zeros. With
            // d = 0 they carry nothing, so only d is compared there.
            const size_t blk = b - b % info->block_bytes;
            const bool zero_d = !q[blk] && !q[blk + 1] && !qrow[blk] && !qrow[blk + 1];
            if (zero_d && b - blk >= 2) {
              ++dont_care;
              continue;
            }
          }
          byte_diffs += q[b] != qrow[b];
        }
        // Where bytes differ, how far apart are the dequantized values?
        std::vector<float> back(static_cast<size_t>(e.cols));
        k.to_float_ref(q.data(), back.data(), e.cols);
        for (int64_t j = 0; j < e.cols; ++j) {
          max_requant = std::max(max_requant, std::fabs(static_cast<double>(back[j]) - want[j]));
        }
      }
      std::printf("%-4s %-6s vs %-7s: dequant max|err| %.3g (%zu values differ in bits), "
                  "quant %zu bytes differ (max|deq diff| %.3g)%s\n",
                  ref ? "ref" : "simd", e.name.c_str(), e.source.c_str(), max_abs, bit_diffs, byte_diffs,
                  max_requant, dont_care ? " (indices of d = 0 blocks not compared)" : "");
      EXPECT_EQ(bit_diffs, 0u) << (ref ? "ref" : "simd") << " to_float";
      EXPECT_EQ(byte_diffs, 0u) << (ref ? "ref" : "simd") << " from_float";
    }
  }
}
