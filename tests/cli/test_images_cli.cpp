// `kvad images make`: output names (cli/image_output.h), the progress lines,
// bad input as usage errors (status 2, one line) before any model is read,
// and -- with the tiny random SD 1.5 pipeline -- a real run writing a PNG
// whose size and A1111 `parameters` chunk are the request's, never over an
// existing file.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "base/error.h"
#include "cli/image_output.h"
#include "run_kvad.h"

namespace fs = std::filesystem;
using kvad::test::one_error_line;
using kvad::test::run_kvad;
using kvad::test::slurp;

namespace {

const std::string kSd15 = std::string(KVAD_SOURCE_DIR) + "/tests/fixtures/image_pipelines/sd15";

fs::path fresh_dir(const std::string& name) {
  const fs::path d = fs::path(::testing::TempDir()) / ("kvad_images_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// A PNG's chunks, read by their layout (PNG 1.2 section 5): the IHDR size and the tEXt/iTXt texts.
struct PngInfo {
  uint32_t width = 0, height = 0;
  std::string parameters, description;
  bool ok = false;
};
PngInfo png_info(const std::string& bytes) {
  PngInfo info;
  if (bytes.size() < 8 || bytes.compare(0, 8, "\x89PNG\r\n\x1a\n") != 0) return info;
  auto be32 = [&](size_t at) {
    return (uint32_t(uint8_t(bytes[at])) << 24) | (uint32_t(uint8_t(bytes[at + 1])) << 16) |
           (uint32_t(uint8_t(bytes[at + 2])) << 8) | uint32_t(uint8_t(bytes[at + 3]));
  };
  for (size_t at = 8; at + 12 <= bytes.size();) {
    const uint32_t len = be32(at);
    const std::string type = bytes.substr(at + 4, 4);
    if (at + 12 + len > bytes.size()) return info;
    const std::string data = bytes.substr(at + 8, len);
    if (type == "IHDR" && len >= 8) info.width = be32(at + 8), info.height = be32(at + 12);
    if (type == "tEXt" && data.rfind(std::string("parameters\0", 11), 0) == 0) info.parameters = data.substr(11);
    if (type == "tEXt" && data.rfind(std::string("Description\0", 12), 0) == 0) info.description = data.substr(12);
    if (type == "IEND") info.ok = true;
    at += 12 + len;
  }
  return info;
}

TEST(ImageOutput, StemFromPromptAndSeed) {
  EXPECT_EQ(kvad::cli::image_stem("a photo of a Cat, 8k", 42), "a-photo-of-a-cat-8k-42");
  EXPECT_EQ(kvad::cli::image_stem("one two three four five six seven", 1), "one-two-three-four-five-six-1");
  EXPECT_EQ(kvad::cli::image_stem("", 7), "image-7");
  EXPECT_EQ(kvad::cli::image_stem("日本語 ../..//", 3), "image-3");
  EXPECT_EQ(kvad::cli::image_stem("(masterpiece:1.2), Ünïcode  cat", 18446744073709551615ull),
            "masterpiece-1-2-n-code-cat-18446744073709551615");
  const std::string long_word(80, 'x');
  EXPECT_EQ(kvad::cli::image_stem("red " + long_word + " fox", 0), "red-0");
  EXPECT_LE(kvad::cli::image_stem(std::string(30, 'a') + " " + std::string(29, 'b') + " c", 5).size(), 62u);
}

TEST(ImageOutput, ReserveNeverReplaces) {
  const fs::path d = fresh_dir("reserve");
  const std::string want = (d / "cat-1.png").string();
  EXPECT_EQ(kvad::cli::reserve_image_path(want), want);
  EXPECT_EQ(kvad::cli::reserve_image_path(want), (d / "cat-1-1.png").string());
  EXPECT_EQ(kvad::cli::reserve_image_path(want), (d / "cat-1-2.png").string());
  EXPECT_TRUE(fs::exists(d / "cat-1-2.png"));
  EXPECT_EQ(kvad::cli::reserve_image_path((d / "noext").string()), (d / "noext.png").string());
  EXPECT_THROW(kvad::cli::reserve_image_path((d / "missing" / "a.png").string()), kvad::Error);
  fs::remove_all(d);
}

TEST(ImageOutput, PlainProgressLines) {
  const fs::path d = fresh_dir("progress");
  const std::string log = (d / "log.txt").string();
  FILE* f = std::fopen(log.c_str(), "w");
  ASSERT_TRUE(f);
  kvad::cli::StepProgress p(f);  // not a terminal: a line at each quarter
  for (int i = 1; i <= 8; ++i) p.on_step(i, 8, 0.5, 0.5 * i);
  p.finish();
  std::fclose(f);
  EXPECT_EQ(slurp(log),
            "kvad: step 2/8, 0.50 s/step, ETA 0:03\n"
            "kvad: step 4/8, 0.50 s/step, ETA 0:02\n"
            "kvad: step 6/8, 0.50 s/step, ETA 0:01\n"
            "kvad: step 8/8, 0.50 s/step, done in 0:04\n");
  fs::remove_all(d);
}

TEST(ImagesCli, BadInputIsAUsageError) {
  for (const char* args :
       {"--width 100", "--height 60", "--steps 0", "--steps 1000000", "-n 0", "-n 17", "--cfg -1", "--rng cuda",
        "--scheduler heun", "--width abc", "-o out.jpg", "--seed -2", "--preview p.jpg", "--preview-every 0",
        "--quant q4_k", "--quant Q8"}) {
    SCOPED_TRACE(args);
    const auto r = run_kvad("images make 'a cat' --model " + kSd15 + " " + std::string(args));
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_TRUE(one_error_line(r.err)) << r.err;
    EXPECT_EQ(r.out, "");
  }
  const auto none = run_kvad("images make 'a cat'");
  EXPECT_EQ(none.status, 2);
  EXPECT_NE(none.err.find("--model"), std::string::npos) << none.err;
  const auto missing = run_kvad("images make 'a cat' --model /nonexistent/pipeline");
  EXPECT_EQ(missing.status, 1);
  EXPECT_TRUE(one_error_line(missing.err)) << missing.err;
  EXPECT_NE(missing.err.find("not found"), std::string::npos) << missing.err;
}

TEST(ImagesCli, MakesAPngAndNeverOverwrites) {
  const fs::path d = fresh_dir("make");
  const std::string args = "images make 'A Red FOX in fresh snow' --model " + kSd15 +
                           " --steps 3 --scheduler 'Euler a' --negative-prompt blurry --width 96 -t 2";
  const std::string preview = (d / "preview.png").string();
  const auto first =
      run_kvad(args + " --seed 42 -o " + (d / "fox.png").string() + " --preview " + preview + " --preview-every 2");
  ASSERT_EQ(first.status, 0) << first.err;
  const PngInfo look = png_info(slurp(preview));  // after steps 2 and 3: the last one stays
  ASSERT_TRUE(look.ok);
  EXPECT_EQ(look.width, 96u);
  EXPECT_EQ(look.height, 64u);
  EXPECT_EQ(look.description, "kvad preview after step 3 of 3 (latent colours, not the decoded picture)");
  EXPECT_EQ(first.out, (d / "fox.png").string() + "\n");
  EXPECT_NE(first.err.find("step 3/3"), std::string::npos) << first.err;
  const PngInfo info = png_info(slurp((d / "fox.png").string()));
  ASSERT_TRUE(info.ok);
  EXPECT_EQ(info.width, 96u);
  EXPECT_EQ(info.height, 64u);  // the tiny UNet's sample_size 8 times the VAE's 8
  EXPECT_EQ(info.parameters,
            "A Red FOX in fresh snow\nNegative prompt: blurry\nSteps: 3, Sampler: Euler a, CFG scale: 7.5, Seed: 42, "
            "Size: 96x64, Model: sd15");
  const auto second = run_kvad(args + " --seed 42 -o " + (d / "fox.png").string());
  ASSERT_EQ(second.status, 0) << second.err;
  EXPECT_EQ(second.out, (d / "fox-1.png").string() + "\n");
  EXPECT_EQ(slurp((d / "fox.png").string()), slurp((d / "fox-1.png").string()));  // the same seed, the same picture

  // The single file with the folder's configs and tokenizers paints the same picture.
  const std::string single = "images make 'A Red FOX in fresh snow' --model " + kSd15 + ".safetensors --config " + kSd15 +
                             " --steps 3 --scheduler 'Euler a' --negative-prompt blurry --width 96 -t 2 --seed 42";
  const auto third = run_kvad(single + " -o " + (d / "single.png").string());
  ASSERT_EQ(third.status, 0) << third.err;
  EXPECT_EQ(slurp((d / "single.png").string()), slurp((d / "fox.png").string()));  // pixels and metadata ("Model: sd15")

  // Without -o: the prompt's first words and the seed, in the current folder, one file per picture.
  const std::string out = (d / "out.txt").string(), err = (d / "err.txt").string();
  const std::string cmd = "cd " + d.string() + " && " + KVAD_BINARY + " " + args + " -n 2 --seed 7 >" + out +
                          " 2>" + err;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << slurp(err);
  EXPECT_EQ(slurp(out), "a-red-fox-in-fresh-snow-7.png\na-red-fox-in-fresh-snow-7-1.png\n");
  EXPECT_EQ(png_info(slurp((d / "a-red-fox-in-fresh-snow-7-1.png").string())).width, 96u);
  fs::remove_all(d);
}

// --quant q8_0 converts once into $KVAD_HOME/cache and maps the entry on the next run;
// --vae-tiling decodes in tiles (the tiny VAE's 8 latents: a 128-pixel-wide picture has two).
TEST(ImagesCli, QuantAndVaeTiling) {
  const fs::path d = fresh_dir("quant");
  const std::string env = "KVAD_HOME=" + (d / "home").string() + " ";
  const std::string args = " images make 'a cat' --model " + kSd15 + " --steps 2 --seed 3 -t 2 --quant q8_0 -o ";
  const std::string out = (d / "out.txt").string(), err = (d / "err.txt").string();
  auto run = [&](const std::string& extra, const std::string& png) {
    const std::string cmd = env + KVAD_BINARY + args + (d / png).string() + extra + " >" + out + " 2>" + err;
    return std::system(cmd.c_str());
  };
  ASSERT_EQ(run("", "a.png"), 0) << slurp(err);
  EXPECT_NE(slurp(err).find("kvad: quantized to q8_0 once"), std::string::npos) << slurp(err);
  EXPECT_NE(slurp(err).find((d / "home" / "cache").string() + "/sd15--"), std::string::npos) << slurp(err);
  ASSERT_EQ(run("", "b.png"), 0) << slurp(err);
  EXPECT_NE(slurp(err).find("kvad: q8_0 from the quantize-once cache: "), std::string::npos) << slurp(err);
  EXPECT_EQ(slurp((d / "a.png").string()), slurp((d / "b.png").string()));
  ASSERT_EQ(run(" --width 128 --vae-tiling", "t.png"), 0) << slurp(err);
  EXPECT_NE(slurp(err).find("(tiled)"), std::string::npos) << slurp(err);
  ASSERT_EQ(run(" --width 128", "u.png"), 0) << slurp(err);
  EXPECT_EQ(slurp(err).find("(tiled)"), std::string::npos) << slurp(err);
  EXPECT_NE(slurp((d / "t.png").string()), slurp((d / "u.png").string()));
  fs::remove_all(d);
}

// ORG/NAME of a pipeline: from the store ($KVAD_HOME/models/ORG/NAME) and from the HF cache
// (offline: the snapshot a pull leaves, here with the files copied in).
TEST(ImagesCli, RepoNamesResolve) {
  const fs::path d = fresh_dir("repo");
  fs::create_directories(d / "home" / "models" / "tiny");
  fs::copy(kSd15, d / "home" / "models" / "tiny" / "sd15", fs::copy_options::recursive);
  const std::string commit(40, 'a');
  const fs::path repo = d / "hub" / "models--tiny--sd15-hub";
  fs::create_directories(repo / "refs");
  std::ofstream(repo / "refs" / "main") << commit;
  fs::create_directories(repo / "snapshots");
  fs::copy(kSd15, repo / "snapshots" / commit, fs::copy_options::recursive);
  const std::string env = "KVAD_HOME=" + (d / "home").string() + " HF_HUB_CACHE=" + (d / "hub").string() +
                          " HF_HUB_OFFLINE=1 ";
  for (const std::string name : {"tiny/sd15", "tiny/sd15-hub"}) {
    SCOPED_TRACE(name);
    const std::string out = (d / "out.txt").string(), err = (d / "err.txt").string();
    const std::string png = (d / (name.substr(5) + ".png")).string();
    const std::string cmd = env + KVAD_BINARY + " images make 'a cat' --model " + name + " --steps 1 --seed 1 -o " +
                            png + " >" + out + " 2>" + err;
    ASSERT_EQ(std::system(cmd.c_str()), 0) << slurp(err);
    EXPECT_EQ(slurp(out), png + "\n");
    const std::string params = png_info(slurp(png)).parameters;
    EXPECT_NE(params.find("Model: " + name), std::string::npos) << params;
  }
  const std::string err = (d / "err.txt").string();
  const std::string cmd = env + KVAD_BINARY + " images make 'a cat' --model tiny/none 2>" + err;
  EXPECT_NE(std::system(cmd.c_str()), 0);
  EXPECT_TRUE(one_error_line(slurp(err))) << slurp(err);
  EXPECT_NE(slurp(err).find("HF_HUB_OFFLINE"), std::string::npos) << slurp(err);
  fs::remove_all(d);
}

}  // namespace
