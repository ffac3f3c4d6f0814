// `kvad quantize` end to end: an F16 SmolLM2 (the store's file dequantized),
// quantized by the kvad binary, then run by it. Errors are one line and leave
// no output file. Skips when the store lacks smollm2-135m.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "../io/quantize_source.h"
#include "io/gguf.h"
#include "model_path.h"
#include "run_kvad.h"

namespace {

namespace fs = std::filesystem;

using kvad::test::Out;
using kvad::test::one_error_line;

Out run_kvad(const std::string& args) { return kvad::test::run_kvad(args); }


class QuantizeCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    store_ = kvad::test::find_model("smollm2-135m");
    if (store_.empty()) return;
    dir_ = fs::path(::testing::TempDir()) / "kvad_quantize_cli";
    fs::create_directories(dir_);
    f16_ = (dir_ / "smollm2-f16.gguf").string();
    std::unique_ptr<kvad::gguf::File> store = kvad::gguf::File::open(store_);
    kvad::test::write_float_gguf(*store, f16_, kvad::DType::F16, [](const std::string&) { return true; });
  }
  static void TearDownTestSuite() {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  void SetUp() override {
    if (store_.empty()) GTEST_SKIP() << "model smollm2-135m not installed (run scripts/setup)";
  }
  static inline std::string store_, f16_;
  static inline fs::path dir_;
};

TEST_F(QuantizeCli, Q4KMFromF16RunsAndSaysParis) {
  const std::string out = (dir_ / "smollm2-q4_k_m.gguf").string();
  Out q = run_kvad("quantize " + f16_ + " " + out + " --type q4_k_m -t 2");
  ASSERT_EQ(q.status, 0) << q.err;
  EXPECT_TRUE(q.out.empty()) << q.out;
  // One progress line per tensor, then the summary.
  size_t lines = 0;
  std::istringstream in(q.err);
  for (std::string l; std::getline(in, l);) lines += l.rfind("[", 0) == 0 ? 1 : 0;
  EXPECT_EQ(lines, 272u) << q.err.substr(0, 2000);
  EXPECT_NE(q.err.find("[  1/272] token_embd.weight"), std::string::npos) << q.err.substr(0, 2000);
  EXPECT_NE(q.err.find("576x49152"), std::string::npos);
  EXPECT_NE(q.err.find("f16 -> q8_0"), std::string::npos);  // tied embeddings, rows of 576: Q8_0
  EXPECT_NE(q.err.find("f16 -> q6_K"), std::string::npos);  // ffn_down, use_more_bits layers
  EXPECT_NE(q.err.find("f16 -> q5_0 (fallback for q4_K"), std::string::npos);
  EXPECT_NE(q.err.find("f32 (copied)"), std::string::npos);
  EXPECT_NE(q.err.find(" ms\n"), std::string::npos);
  EXPECT_TRUE(fs::exists(out));
  EXPECT_FALSE(fs::exists(out + ".tmp"));

  std::unique_ptr<kvad::gguf::File> f = kvad::gguf::File::open(out);
  EXPECT_EQ(f->get("general.file_type").as_uint(), 15u);
  EXPECT_EQ(f->get("general.quantization_version").as_uint(), 2u);
  EXPECT_EQ(f->tensors().size(), 272u);

  Out r = run_kvad("run --model " + out + " --prompt \"The capital of France is\" -n 8 --temp 0 --raw -t 2");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("Paris"), std::string::npos) << r.out;
}

TEST_F(QuantizeCli, ErrorsAreOneLineAndLeaveNoFile) {
  const std::string out = (dir_ / "never.gguf").string();
  struct Case {
    std::string args;
    std::vector<std::string> parts;
  };
  const std::vector<Case> cases = {
      {"quantize " + f16_ + " " + out + " --type q4_k_x", {"q4_k_x", "q8_0, q4_0", "tq2_0"}},
      {"quantize " + f16_ + " " + out + " --type q6_k", {"token_embd.weight", "576", "256", "q8_0", "iq4_nl"}},
      {"quantize " + f16_ + " " + out + " --type tq2_0", {"token_embd.weight", "q4_0"}},
      {"quantize " + store_ + " " + out + " --type q4_0", {"token_embd.weight", "q8_0", "F32, F16 or BF16"}},
      {"quantize " + (dir_ / "missing.gguf").string() + " " + out + " --type q8_0", {"missing.gguf"}},
      {"quantize " + f16_ + " " + (dir_ / "no" / "dir" / "x.gguf").string() + " --type q8_0",
       {"cannot write", "no/dir/x.gguf"}},
  };
  for (const Case& c : cases) {
    Out r = run_kvad(c.args);
    EXPECT_EQ(r.status, 1) << c.args;
    EXPECT_TRUE(one_error_line(r.err)) << c.args << "\n" << r.err;
    for (const std::string& p : c.parts) EXPECT_NE(r.err.find(p), std::string::npos) << p << " not in " << r.err;
    EXPECT_FALSE(fs::exists(out)) << c.args;
    EXPECT_FALSE(fs::exists(out + ".tmp")) << c.args;
  }
}

}  // namespace
