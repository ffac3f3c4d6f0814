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

}  // namespace
