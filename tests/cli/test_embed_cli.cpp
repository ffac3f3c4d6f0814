// `kvad embed` on the store's all-MiniLM-L6-v2, and text-generation commands
// refusing it with one line that names its kind.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "run_kvad.h"

namespace {

using kvad::test::run_kvad;
const char* kModel = "sentence-transformers/all-MiniLM-L6-v2";

bool have_minilm() {
  const char* h = std::getenv("KVAD_HOME");
  const std::string home = h && *h ? h : std::string(std::getenv("HOME") ? std::getenv("HOME") : ".") + "/.cache/kvad";
  return std::filesystem::exists(home + "/models/" + kModel + "/model.safetensors");
}

TEST(EmbedCli, PrintsNormalisedVectorsAsJson) {
  if (!have_minilm()) GTEST_SKIP() << kModel << " is not in the store (run scripts/setup)";
  const auto r = run_kvad(std::string("embed -m ") + kModel + " -t 2 -p 'A man is eating food.' --lines", "Hi\nthere\n");
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["pooling"], "mean");
  EXPECT_EQ(j["dim"], 384);
  ASSERT_EQ(j["data"].size(), 3u);
  EXPECT_EQ(j["data"][1]["text"], "Hi");
  EXPECT_EQ(j["data"][0]["tokens"], 8);  // [CLS] a man is eating food . [SEP]
  double n2 = 0;
  for (double x : j["data"][0]["embedding"]) n2 += x * x;
  EXPECT_NEAR(n2, 1.0, 1e-5);
}

TEST(EmbedCli, TextCommandsNameTheKind) {
  if (!have_minilm()) GTEST_SKIP() << kModel << " is not in the store (run scripts/setup)";
  for (const char* cmd : {"run -p hi", "bench -p 8 -n 8 -r 1"}) {
    const auto r = run_kvad(std::string(cmd) + " -m " + kModel);
    EXPECT_EQ(r.status, 1) << cmd;
    EXPECT_NE(r.err.find("kind embedding"), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  const auto r = run_kvad(std::string("embed -m ") + kModel);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("nothing to embed"), std::string::npos) << r.err;
}

}  // namespace
