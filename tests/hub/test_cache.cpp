// resolve_hf over caches laid out as huggingface_hub lays them out, made by
// hand here (tests/hub/test_interop.py checks against the real client).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "base/error.h"
#include "hub/cache.h"

namespace fs = std::filesystem;

namespace kvad::hub {
namespace {

const std::string kCommit = "0123456789abcdef0123456789abcdef01234567";

class FakeCache : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("kvad_test_cache_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  fs::path repo(const std::string& id) { return root_ / repo_folder_name(id); }

  // blobs/<etag> holding `text`, linked from snapshots/<commit>/<file>.
  void add(const std::string& id, const std::string& file, const std::string& text, const std::string& etag) {
    const fs::path r = repo(id);
    fs::create_directories(r / "blobs");
    std::ofstream(r / "blobs" / etag) << text;
    const fs::path pointer = r / "snapshots" / kCommit / file;
    fs::create_directories(pointer.parent_path());
    fs::create_symlink((r / "blobs" / etag).lexically_relative(pointer.parent_path()), pointer);
  }
  void ref(const std::string& id, const std::string& name, const std::string& commit) {
    fs::create_directories((repo(id) / "refs" / name).parent_path());
    std::ofstream(repo(id) / "refs" / name) << commit;
  }

  fs::path root_;
};

TEST_F(FakeCache, GgufRepo) {
  const std::string id = "org/m-GGUF";
  EXPECT_FALSE(resolve_hf(parse_repo_spec(id + ":Q8_0"), root_.string()).has_value());
  add(id, "m-Q8_0.gguf", "gguf bytes", "aaaa");
  add(id, "m-Q6_K-00001-of-00002.gguf", "p1", "bbbb");
  std::string why;
  EXPECT_FALSE(resolve_hf(parse_repo_spec(id + ":Q8_0"), root_.string(), &why).has_value());
  EXPECT_NE(why.find("refs/main"), std::string::npos) << why;
  ref(id, "main", kCommit);
  auto r = resolve_hf(parse_repo_spec(id + ":Q8_0"), root_.string());
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->commit, kCommit);
  EXPECT_EQ(r->path, (repo(id) / "snapshots" / kCommit / "m-Q8_0.gguf").string());
  EXPECT_EQ(r->selection.kind, Selection::Kind::Gguf);
  // By commit, no ref needed; by a ref that is not there, nothing.
  EXPECT_TRUE(resolve_hf(parse_repo_spec(id + "@" + kCommit + ":q8_0"), root_.string()).has_value());
  EXPECT_FALSE(resolve_hf(parse_repo_spec(id + "@v2:Q8_0"), root_.string()).has_value());
  // A split set with a part missing is not resolved; with it, it is.
  EXPECT_FALSE(resolve_hf(parse_repo_spec(id + ":Q6_K"), root_.string(), &why).has_value());
  add(id, "m-Q6_K-00002-of-00002.gguf", "p2", "cccc");
  r = resolve_hf(parse_repo_spec(id + ":Q6_K"), root_.string());
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->selection.files.size(), 2u);
  EXPECT_EQ(fs::path(r->path).filename(), "m-Q6_K-00001-of-00002.gguf");
  // Not cached: a tag the snapshot lacks.
  EXPECT_FALSE(resolve_hf(parse_repo_spec(id + ":Q4_K_M"), root_.string()).has_value());
  // A ref file that is not a commit is an error, not "missing".
  ref(id, "bad", "not a commit");
  EXPECT_THROW(resolve_hf(parse_repo_spec(id + "@bad:Q8_0"), root_.string()), Error);
}

TEST_F(FakeCache, BrokenLinkIsMissing) {
  const std::string id = "org/m";
  add(id, "m-Q8_0.gguf", "x", "dddd");
  ref(id, "main", kCommit);
  fs::remove(repo(id) / "blobs" / "dddd");
  EXPECT_FALSE(resolve_hf(parse_repo_spec(id + ":Q8_0"), root_.string()).has_value());
}

TEST_F(FakeCache, CheckpointNeedsConfigAndIndexedShards) {
  const std::string id = "org/ckpt";
  ref(id, "main", kCommit);
  add(id, "model-00001-of-00002.safetensors", "s1", "e1");
  add(id, "model.safetensors.index.json",
      R"({"metadata":{},"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}})",
      "e2");
  std::string why;
  EXPECT_FALSE(resolve_hf(parse_repo_spec(id), root_.string(), &why).has_value());
  EXPECT_NE(why.find("config.json"), std::string::npos) << why;
  add(id, "config.json", "{}", "e3");
  EXPECT_FALSE(resolve_hf(parse_repo_spec(id), root_.string(), &why).has_value());
  EXPECT_NE(why.find("model-00002-of-00002.safetensors"), std::string::npos) << why;
  add(id, "model-00002-of-00002.safetensors", "s2", "e4");
  auto r = resolve_hf(parse_repo_spec(id), root_.string());
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->selection.kind, Selection::Kind::Checkpoint);
  EXPECT_EQ(r->path, (repo(id) / "snapshots" / kCommit).string());
}

TEST_F(FakeCache, HostileIndexRefused) {
  const std::string id = "org/evil";
  ref(id, "main", kCommit);
  add(id, "config.json", "{}", "f1");
  add(id, "model.safetensors", "s", "f2");
  add(id, "model.safetensors.index.json", R"({"weight_map":{"a":"../../../../etc/passwd"}})", "f3");
  EXPECT_THROW(resolve_hf(parse_repo_spec(id), root_.string()), Error);
}

TEST(CacheDir, EnvironmentOrder) {
  const char* keep[] = {"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME", "HOME"};
  std::vector<std::pair<std::string, std::string>> saved;
  for (const char* k : keep)
    if (const char* v = std::getenv(k)) saved.emplace_back(k, v);
  for (const char* k : keep) ::unsetenv(k);
  ::setenv("HOME", "/home/u", 1);
  EXPECT_EQ(hf_hub_cache_dir(), "/home/u/.cache/huggingface/hub");
  ::setenv("XDG_CACHE_HOME", "/xdg", 1);
  EXPECT_EQ(hf_hub_cache_dir(), "/xdg/huggingface/hub");
  ::setenv("HF_HOME", "~/hf", 1);
  EXPECT_EQ(hf_home(), "/home/u/hf");
  EXPECT_EQ(hf_hub_cache_dir(), "/home/u/hf/hub");
  ::setenv("HUGGINGFACE_HUB_CACHE", "/legacy", 1);
  EXPECT_EQ(hf_hub_cache_dir(), "/legacy");
  ::setenv("HF_HUB_CACHE", "/new", 1);
  EXPECT_EQ(hf_hub_cache_dir(), "/new");
  ::setenv("HF_HUB_OFFLINE", "yes", 1);
  EXPECT_TRUE(env_true("HF_HUB_OFFLINE"));
  ::setenv("HF_HUB_OFFLINE", "0", 1);
  EXPECT_FALSE(env_true("HF_HUB_OFFLINE"));
  ::unsetenv("HF_HUB_OFFLINE");
  for (const char* k : keep) ::unsetenv(k);
  for (const auto& [k, v] : saved) ::setenv(k.c_str(), v.c_str(), 1);
}

}  // namespace
}  // namespace kvad::hub
