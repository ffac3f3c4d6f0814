// An HF checkpoint's generation_config.json sets the sampling defaults of
// `kvad run` (as vLLM's `--generation-config auto` does); a flag given on
// the command line wins. Uses the real SmolLM2 checkpoint scripts/setup puts
// in $KVAD_HOME/hf-cache, linked into a temporary directory with a
// generation_config.json of the test's own.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "base/error.h"
#include "io/generation_config.h"
#include "model_path.h"
#include "run_kvad.h"

namespace fs = std::filesystem;
using kvad::test::Out;
using kvad::test::run_kvad;

namespace {

using kvad::test::kvad_home;

class GenerationConfigCli : public ::testing::Test {
 protected:
  void SetUp() override {
    const fs::path snap = fs::path(kvad_home()) / "hf-cache" / "models--HuggingFaceTB--SmolLM2-135M-Instruct" /
                          "snapshots" / "445506d8557cf6aae3c041117e8d4135ec426989";
    if (!fs::exists(snap / "model.safetensors")) GTEST_SKIP() << snap << " is missing (scripts/setup makes it)";
    dir_ = fs::temp_directory_path() / ("kvad-gencfg-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    for (const auto& e : fs::directory_iterator(snap))
      if (e.path().filename() != "generation_config.json")
        fs::create_symlink(fs::canonical(e.path()), dir_ / e.path().filename());
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  void write_config(const std::string& text) { std::ofstream(dir_ / "generation_config.json") << text; }
  Out run(const std::string& flags) {
    return run_kvad("run -m " + dir_.string() + " -p \"Name three colours.\" -n 12 -t 2 " + flags);
  }
  fs::path dir_;
};

TEST_F(GenerationConfigCli, TopKOneFromTheConfigIsGreedy) {
  write_config(R"({"eos_token_id": 2, "temperature": 1.5, "top_k": 1})");
  const Out cfg = run("--seed 7");
  ASSERT_EQ(cfg.status, 0) << cfg.err;
  EXPECT_NE(cfg.err.find("sampling defaults from generation_config.json: temperature 1.5, top_k 1"), std::string::npos)
      << cfg.err;
  const Out greedy = run("--temp 0 --top-k 1");
  ASSERT_EQ(greedy.status, 0) << greedy.err;
  EXPECT_EQ(cfg.out, greedy.out);
  EXPECT_FALSE(cfg.out.empty());
}

TEST_F(GenerationConfigCli, FlagsWin) {
  write_config(R"({"temperature": 1.5, "top_k": 1, "do_sample": true})");
  const Out r = run("--top-k 5 --seed 1");
  ASSERT_EQ(r.status, 0) << r.err;
  // top_k came from the flag; do_sample true changes nothing and is not listed.
  EXPECT_NE(r.err.find("sampling defaults from generation_config.json: temperature 1.5\n"), std::string::npos) << r.err;
  const Out all = run("--top-k 5 --temp 0.5 --seed 1");
  EXPECT_EQ(all.err.find("sampling defaults"), std::string::npos) << all.err;
}

TEST_F(GenerationConfigCli, DoSampleFalseIsGreedy) {
  write_config(R"({"do_sample": false, "temperature": 0.9})");
  const Out cfg = run("--seed 11");
  const Out greedy = run("--temp 0");
  ASSERT_EQ(cfg.status, 0) << cfg.err;
  EXPECT_EQ(cfg.out, greedy.out);
}

TEST_F(GenerationConfigCli, BadConfigIsAClearError) {
  write_config(R"({"top_p": 7})");
  const Out r = run("");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("kvad: error: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("generation_config.json: top_p = 7 is out of range"), std::string::npos) << r.err;
}

TEST(GenerationConfig, Parse) {
  const kvad::GenerationConfig c = kvad::parse_generation_config(
      R"({"eos_token_id": [1, 106], "top_k": 64, "top_p": 0.95, "repetition_penalty": 1.05, "min_p": null})", "g");
  EXPECT_EQ(c.eos_token_id, (std::vector<int32_t>{1, 106}));
  EXPECT_EQ(c.top_k, 64);
  EXPECT_FLOAT_EQ(*c.top_p, 0.95f);
  EXPECT_FALSE(c.min_p.has_value());
  EXPECT_FALSE(c.temperature.has_value());
  EXPECT_EQ(c.sampling_summary(), "top_k 64, top_p 0.95, repetition_penalty 1.05");
  EXPECT_FALSE(kvad::parse_generation_config("{}", "g").has_sampling());
  for (const char* bad : {"[", "[]", R"({"top_k": -1})", R"({"top_k": 1.5})", R"({"temperature": "hot"})",
                          R"({"eos_token_id": "x"})", R"({"eos_token_id": [-3]})", R"({"do_sample": 1})",
                          R"({"repetition_penalty": 0})"})
    EXPECT_THROW(kvad::parse_generation_config(bad, "g"), kvad::Error) << bad;
}

}  // namespace
