// Repo ids, revisions, file names and ETags as huggingface_hub validates
// them (utils/_validators.py, _local_folder.py, file_download.py), quant
// tags as llama.cpp's -hf picks them, and the helpers under them.
#include <gtest/gtest.h>

#include <algorithm>

#include "base/error.h"
#include "hub/http.h"
#include "hub/repo_spec.h"
#include "hub/select.h"
#include "hub/sha256.h"

namespace kvad::hub {
namespace {

TEST(RepoSpec, Parses) {
  RepoSpec s = parse_repo_spec("Qwen/Qwen2.5-0.5B-Instruct");
  EXPECT_EQ(s.repo, "Qwen/Qwen2.5-0.5B-Instruct");
  EXPECT_EQ(s.revision, "main");
  EXPECT_EQ(s.selector, "");
  s = parse_repo_spec("bartowski/SmolLM2-135M-Instruct-GGUF:Q4_K_M");
  EXPECT_EQ(s.repo, "bartowski/SmolLM2-135M-Instruct-GGUF");
  EXPECT_EQ(s.selector, "Q4_K_M");
  s = parse_repo_spec("org/name@v1.0:sub/model.gguf");
  EXPECT_EQ(s.revision, "v1.0");
  EXPECT_EQ(s.selector, "sub/model.gguf");
  EXPECT_EQ(s.str(), "org/name@v1.0:sub/model.gguf");
  s = parse_repo_spec("gpt2");
  EXPECT_EQ(s.repo, "gpt2");
  EXPECT_EQ(parse_repo_spec("org/name@refs/pr/1").revision, "refs/pr/1");
}

TEST(RepoSpec, RefusesBadIds) {
  for (const char* bad : {"", "a/b/c", "../x", "a/..", "a/b..c", "a--b/c", "-a/b", "a/b-", ".a/b", "a/b.git",
                          "a b/c", "/abs", "a/", "/a", "a/b:", "org/na\xc3\xa9"})
    EXPECT_THROW(parse_repo_spec(bad), Error) << bad;
  EXPECT_THROW(parse_repo_spec(std::string("a/") + std::string(97, 'x')), Error);
  EXPECT_NO_THROW(parse_repo_spec(std::string("a/") + std::string(96, 'x')));
}

TEST(RepoSpec, RefusesBadRevisionsAndSelectors) {
  for (const char* bad : {"org/name@", "org/name@../x", "org/name@/abs", "org/name@a//b", "org/name@.hidden",
                          "org/name@a\\b", "org/name:../x.gguf", "org/name:/etc/passwd.gguf", "org/name:a/./b.gguf"})
    EXPECT_THROW(parse_repo_spec(bad), Error) << bad;
}

TEST(RepoSpec, LooksLikeRepoSpec) {
  EXPECT_TRUE(looks_like_repo_spec("org/name"));
  EXPECT_TRUE(looks_like_repo_spec("org/name:Q4_K_M"));
  EXPECT_TRUE(looks_like_repo_spec("org/name@rev/x:f.gguf"));
  EXPECT_FALSE(looks_like_repo_spec("smollm2-135m"));
  EXPECT_FALSE(looks_like_repo_spec("./org/name"));
  EXPECT_FALSE(looks_like_repo_spec("/models/x.gguf"));
  EXPECT_FALSE(looks_like_repo_spec("models/x.gguf"));
  EXPECT_FALSE(looks_like_repo_spec("a/b/c.gguf"));
  EXPECT_FALSE(looks_like_repo_spec("~/x"));
}

TEST(RepoFilename, HostileNamesRefused) {
  for (const char* bad : {"", "/etc/passwd", "../x", "a/../../x", "a/..", "..", "a//b", "./a", "a/.", "a\\b",
                          "C:x", "c:\\w", "a\nb", "a/"})
    EXPECT_THROW(validate_repo_filename(bad, "file name"), Error) << bad;
  for (const char* ok : {"config.json", "sub/dir/model-00001-of-00002.safetensors", "..a", "a..b", ".gitattributes"})
    EXPECT_NO_THROW(validate_repo_filename(ok, "file name")) << ok;
}

TEST(Etag, WeakAndQuotedForms) {
  // huggingface_hub tests/test_file_download.py TestNormalizeEtag.
  EXPECT_EQ(normalize_etag("\"a16a55fda99d2f2e7b69cce5cf93ff4ad3049930\""), "a16a55fda99d2f2e7b69cce5cf93ff4ad3049930");
  EXPECT_EQ(normalize_etag("W/\"a16a55fda99d2f2e7b69cce5cf93ff4ad3049930\""),
            "a16a55fda99d2f2e7b69cce5cf93ff4ad3049930");
  EXPECT_EQ(normalize_etag("abc123"), "abc123");
  for (const char* bad : {"", "\"\"", "W/\"../x\"", "\"a/b\"", "\"a b\""}) EXPECT_THROW(normalize_etag(bad), Error) << bad;
}

TEST(Names, CommitShaFolder) {
  EXPECT_TRUE(is_commit_hash("a16a55fda99d2f2e7b69cce5cf93ff4ad3049930"));
  EXPECT_FALSE(is_commit_hash("A16A55FDA99D2F2E7B69CCE5CF93FF4AD3049930"));
  EXPECT_FALSE(is_commit_hash("main"));
  EXPECT_TRUE(is_sha256_hex(std::string(64, 'f')));
  EXPECT_FALSE(is_sha256_hex(std::string(40, 'f')));
  EXPECT_EQ(repo_folder_name("julien-c/EsperBERTo-small"), "models--julien-c--EsperBERTo-small");
  EXPECT_EQ(repo_folder_name("gpt2"), "models--gpt2");
}

TEST(Sha256, KnownVectors) {
  // FIPS 180-4 examples.
  Sha256 h;
  EXPECT_EQ(h.hex_digest(), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  h.update("abc", 3);
  EXPECT_EQ(h.hex_digest(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::string m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  h.update(m.data(), 10);
  h.update(m.data() + 10, m.size() - 10);
  EXPECT_EQ(h.hex_digest(), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(Url, OriginJoinEscape) {
  EXPECT_EQ(url_origin("https://huggingface.co/api/models"), "https://huggingface.co:443");
  EXPECT_EQ(url_origin("http://127.0.0.1:8080/x"), "http://127.0.0.1:8080");
  EXPECT_EQ(url_origin("HTTP://Example.COM/x"), "http://example.com:80");
  EXPECT_NE(url_origin("http://127.0.0.1:8080/"), url_origin("http://127.0.0.1:8081/"));
  EXPECT_EQ(url_join("http://h:1/a/b/c", "/x/y"), "http://h:1/x/y");
  EXPECT_EQ(url_join("http://h:1/a/b/c", "d"), "http://h:1/a/b/d");
  EXPECT_EQ(url_join("http://h:1/a", "https://cdn:2/blob?sig=1"), "https://cdn:2/blob?sig=1");
  EXPECT_THROW(url_join("http://h:1/a", "file:///etc/passwd"), Error);
  EXPECT_EQ(url_escape("refs/pr/1"), "refs%2Fpr%2F1");
  EXPECT_EQ(url_escape("a b+c"), "a%20b%2Bc");
}

TEST(Select, QuantTags) {
  EXPECT_EQ(gguf_quant_tag("SmolLM2-135M-Instruct-Q4_K_M.gguf"), "Q4_K_M");
  EXPECT_EQ(gguf_quant_tag("phi-2.Q8_0.gguf"), "Q8_0");
  EXPECT_EQ(gguf_quant_tag("model-iq2_xxs.gguf"), "IQ2_XXS");
  EXPECT_EQ(gguf_quant_tag("Qwen3-30B-A3B-UD-Q4_K_XL.gguf"), "UD-Q4_K_XL");
  EXPECT_EQ(gguf_quant_tag("Q4_K_M/Big-Q4_K_M-00001-of-00003.gguf"), "Q4_K_M");
  EXPECT_EQ(gguf_quant_tag("gemma-3-270m-it-BF16.gguf"), "BF16");
  EXPECT_EQ(gguf_quant_tag("Qwen2.5-7B.gguf"), "");
}

TEST(Select, Splits) {
  GgufSplit sp;
  ASSERT_TRUE(parse_gguf_split("d/Big-Q4_K_M-00002-of-00003.gguf", sp));
  EXPECT_EQ(sp.prefix, "d/Big-Q4_K_M");
  EXPECT_EQ(sp.index, 2);
  EXPECT_EQ(sp.count, 3);
  EXPECT_FALSE(parse_gguf_split("Big-00000-of-00003.gguf", sp));
  EXPECT_FALSE(parse_gguf_split("Big-00004-of-00003.gguf", sp));
  EXPECT_FALSE(parse_gguf_split("Big-Q4_K_M.gguf", sp));
  EXPECT_EQ(gguf_split_names("x", 2), (std::vector<std::string>{"x-00001-of-00002.gguf", "x-00002-of-00002.gguf"}));
}

const std::vector<std::string> kGgufRepo = {
    ".gitattributes", "README.md", "m-Q4_K_M.gguf", "m-Q4_K_S.gguf", "m-Q8_0.gguf", "mmproj-m-Q8_0.gguf",
    "m-Q6_K-00001-of-00002.gguf", "m-Q6_K-00002-of-00002.gguf", "m-IQ4_XS-00001-of-00002.gguf"};

TEST(Select, GgufByTag) {
  Selection s = select_model_files(kGgufRepo, "q4_k_m", "o/m");
  EXPECT_EQ(s.kind, Selection::Kind::Gguf);
  EXPECT_EQ(s.files, std::vector<std::string>{"m-Q4_K_M.gguf"});
  EXPECT_EQ(s.entry, "m-Q4_K_M.gguf");
  s = select_model_files(kGgufRepo, "Q6_K", "o/m");
  EXPECT_EQ(s.files, (std::vector<std::string>{"m-Q6_K-00001-of-00002.gguf", "m-Q6_K-00002-of-00002.gguf"}));
  EXPECT_EQ(s.entry, "m-Q6_K-00001-of-00002.gguf");
  s = select_model_files(kGgufRepo, "Q8_0", "o/m");  // not the mmproj
  EXPECT_EQ(s.files, std::vector<std::string>{"m-Q8_0.gguf"});
  s = select_model_files(kGgufRepo, "", "o/m");  // the default: Q4_K_M
  EXPECT_EQ(s.files, std::vector<std::string>{"m-Q4_K_M.gguf"});
  s = select_model_files(kGgufRepo, "m-Q6_K-00002-of-00002.gguf", "o/m");  // a part names its set
  EXPECT_EQ(s.files.size(), 2u);
  EXPECT_THROW(select_model_files(kGgufRepo, "Q4_K", "o/m"), Error);    // a token, not a prefix
  EXPECT_THROW(select_model_files(kGgufRepo, "IQ4_XS", "o/m"), Error);  // a part is missing
  try {
    select_model_files(kGgufRepo, "Q2_K", "o/m");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Q4_K_S"), std::string::npos) << e.what();
  }
  EXPECT_THROW(select_model_files({"a-Q8_0.gguf", "b-Q8_0.gguf"}, "", "o/m"), Error);
  EXPECT_EQ(select_model_files({"a-Q8_0.gguf"}, "", "o/m").files, std::vector<std::string>{"a-Q8_0.gguf"});
}

TEST(Select, Checkpoint) {
  const std::vector<std::string> files = {".gitattributes", "README.md", "config.json", "generation_config.json",
                                          "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                                          "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                                          "model.safetensors.index.json", "consolidated.safetensors",
                                          "pytorch_model.bin", "onnx/model.onnx", "original/params.json"};
  const Selection s = select_model_files(files, "", "o/m");
  EXPECT_EQ(s.kind, Selection::Kind::Checkpoint);
  EXPECT_EQ(s.entry, "");
  EXPECT_EQ(s.files, (std::vector<std::string>{"config.json", "generation_config.json",
                                               "model-00001-of-00002.safetensors",
                                               "model-00002-of-00002.safetensors", "model.safetensors.index.json",
                                               "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json"}));
  EXPECT_EQ(select_model_files(files, "README.md", "o/m").files, std::vector<std::string>{"README.md"});
  EXPECT_THROW(select_model_files(files, "nope.json", "o/m"), Error);
  EXPECT_THROW(select_model_files({"README.md", "pytorch_model.bin"}, "", "o/m"), Error);
}

// A diffusers pipeline repo: model_index.json and the component folders kvad
// reads, each with its config, tokenizer files and one weights choice.
TEST(Select, DiffusersPipeline) {
  const std::vector<std::string> files = {
      "model_index.json", "README.md", "v1-5-pruned-emaonly.safetensors",
      "unet/config.json", "unet/diffusion_pytorch_model.safetensors", "unet/diffusion_pytorch_model.fp16.safetensors",
      "unet/diffusion_pytorch_model.bin", "unet/diffusion_flax_model.msgpack",
      "vae/config.json", "vae/diffusion_pytorch_model.safetensors.index.json",
      "vae/diffusion_pytorch_model-00001-of-00002.safetensors", "vae/diffusion_pytorch_model-00002-of-00002.safetensors",
      "text_encoder/config.json", "text_encoder/model.fp16.safetensors",
      "tokenizer/vocab.json", "tokenizer/merges.txt", "tokenizer/tokenizer_config.json",
      "scheduler/scheduler_config.json", "safety_checker/config.json", "safety_checker/model.safetensors",
      "feature_extractor/preprocessor_config.json", "vae_decoder/model.onnx"};
  const Selection s = select_model_files(files, "", "o/sd");
  EXPECT_EQ(s.kind, Selection::Kind::Pipeline);
  const std::vector<std::string> common = {"model_index.json", "scheduler/scheduler_config.json",
                                           "text_encoder/config.json", "text_encoder/model.fp16.safetensors",
                                           "tokenizer/merges.txt", "tokenizer/tokenizer_config.json",
                                           "tokenizer/vocab.json", "unet/config.json"};
  std::vector<std::string> want = common;
  for (const char* f : {"unet/diffusion_pytorch_model.safetensors", "vae/config.json",
                        "vae/diffusion_pytorch_model-00001-of-00002.safetensors",
                        "vae/diffusion_pytorch_model-00002-of-00002.safetensors",
                        "vae/diffusion_pytorch_model.safetensors.index.json"})
    want.push_back(f);
  std::sort(want.begin(), want.end());
  EXPECT_EQ(s.files, want);
  const Selection f16 = select_model_files(files, "fp16", "o/sd");
  EXPECT_NE(std::find(f16.files.begin(), f16.files.end(), "unet/diffusion_pytorch_model.fp16.safetensors"),
            f16.files.end());
  EXPECT_EQ(std::find(f16.files.begin(), f16.files.end(), "unet/diffusion_pytorch_model.safetensors"), f16.files.end());
  EXPECT_THROW(select_model_files(files, "bf16", "o/sd"), Error);
  // A file of the repo is still a file.
  EXPECT_EQ(select_model_files(files, "v1-5-pruned-emaonly.safetensors", "o/sd").kind, Selection::Kind::File);
  EXPECT_EQ(pick_component_weights({"a.safetensors", "b.safetensors"}, "").size(), 2u);
  EXPECT_TRUE(pick_component_weights({"model.bin"}, "").empty());
}

}  // namespace
}  // namespace kvad::hub
