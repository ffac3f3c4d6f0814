// Speculative decoding from the command line (cli/speculation.h): bad
// values are usage errors (exit 2) before any model is read; a draft with
// another vocabulary is refused naming the difference; `kvad run
// --spec-ngram` at temperature 0 prints plain decoding's text and the
// stats line reports proposed and accepted tokens.
#include <gtest/gtest.h>

#include <string>

#include "model_path.h"
#include "run_kvad.h"

namespace {

using kvad::test::Out;
using kvad::test::run_kvad;
using kvad::test::one_error_line;

TEST(SpecCli, BadValuesAreUsageErrors) {
  struct Case {
    std::string flags, expect;
  };
  for (const Case& c : {Case{"--spec-ngram 3 --draft-max 0", "--draft-max"},
                        Case{"--spec-ngram 3 --draft-max 1000000", "--draft-max"},
                        Case{"--spec-ngram 3 --draft-min -1", "--draft-min"},
                        Case{"--spec-ngram 3 --draft-max 4 --draft-min 5", "--draft-min"},
                        Case{"--spec-ngram 65", "--spec-ngram"},
                        Case{"--spec-ngram 2 --model-draft /nonexistent/draft.gguf", "choose one"}}) {
    for (const char* cmd : {"run -p hi", "bench", "chat"}) {
      Out r = run_kvad(std::string(cmd) + " -m /nonexistent/model.gguf " + c.flags);
      EXPECT_EQ(r.status, 2) << cmd << " " << c.flags << ": " << r.err;
      EXPECT_TRUE(one_error_line(r.err)) << r.err;
      EXPECT_NE(r.err.find(c.expect), std::string::npos) << cmd << " " << c.flags << ": " << r.err;
    }
  }
}

TEST(SpecCli, DraftWithAnotherVocabularyIsRefused) {
  const std::string target = kvad::test::find_model("smollm2-135m"), draft = kvad::test::find_model("gemma3-270m");
  if (target.empty() || draft.empty()) GTEST_SKIP() << "smollm2-135m or gemma3-270m not installed (run scripts/setup)";
  Out r = run_kvad("run -m " + target + " --model-draft " + draft + " -p hi -n 4 --temp 0");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("cannot propose for"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("kvad: error: "), std::string::npos) << r.err;
}

TEST(SpecCli, NgramRunPrintsPlainDecodingsText) {
  const std::string model = kvad::test::find_model("smollm2-135m");
  if (model.empty()) GTEST_SKIP() << "smollm2-135m not installed (run scripts/setup)";
  const std::string args = "run -m " + model + " --raw -n 48 --temp 0 -t 2 -p 'one two three four, one two three four, one two'";
  Out plain = run_kvad(args);
  ASSERT_EQ(plain.status, 0) << plain.err;
  Out spec = run_kvad(args + " --spec-ngram 3 --draft-max 4");
  ASSERT_EQ(spec.status, 0) << spec.err;
  EXPECT_EQ(spec.out, plain.out);
  EXPECT_NE(spec.err.find("speculation: proposed "), std::string::npos) << spec.err;
  EXPECT_EQ(plain.err.find("speculation:"), std::string::npos) << plain.err;
}

// --spec-mtp on the tiny checkpoints with an MTP layer: plain decoding's
// text, with the stats line's counts; a model without the layer is refused
// in one line by run and by serve (before it listens).
TEST(SpecCli, MtpRunPrintsPlainDecodingsText) {
  const std::string tiny = std::string(KVAD_SOURCE_DIR) + "/tests/fixtures/hf_tiny/";
  for (const std::string& model : {tiny + "qwen3next/llama.cpp-mtp-f32.gguf", tiny + "deepseek_v3_mtp"}) {
    SCOPED_TRACE(model);
    const std::string args = "run -m " + model + " --raw -n 32 --temp 0 -t 2 -p 'abc abc hello'";
    Out plain = run_kvad(args);
    ASSERT_EQ(plain.status, 0) << plain.err;
    for (const char* k : {"1", "3"}) {
      Out spec = run_kvad(args + " --spec-mtp --draft-fixed --draft-max " + k);
      ASSERT_EQ(spec.status, 0) << spec.err;
      EXPECT_EQ(spec.out, plain.out) << "--draft-max " << k;
      const size_t at = spec.err.find("speculation: proposed ");
      ASSERT_NE(at, std::string::npos) << spec.err;
      std::printf("[spec cli] %s --draft-max %s:%s", model.c_str(), k, spec.err.substr(at - 2).c_str());
    }
  }
  for (const char* cmd : {"run -p hi", "serve --port 0"}) {
    Out r = run_kvad(std::string(cmd) + " -m " + tiny + "qwen3next/llama.cpp-f32.gguf --spec-mtp");
    EXPECT_EQ(r.status, 1) << cmd << ": " << r.err;
    EXPECT_TRUE(one_error_line(r.err)) << r.err;
    EXPECT_NE(r.err.find("--spec-mtp: "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("has no multi-token prediction layer"), std::string::npos) << r.err;
  }
}

}  // namespace
