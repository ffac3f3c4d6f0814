// Hub answers that are broken or hostile: each is one clear kvad::Error,
// never a crash, a path outside the cache or an unbounded read. The corpus
// is written out here, one case a line.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/error.h"
#include "hub/client.h"

namespace kvad::hub {
namespace {

const std::string kSha = "0123456789abcdef0123456789abcdef01234567";
const std::string kUrl = "http://127.0.0.1:1/api/models/o/m/revision/main";

TEST(RepoInfoBody, Good) {
  const RepoInfo r = parse_repo_info(
      R"({"id":"o/m","sha":")" + kSha + R"(","siblings":[{"rfilename":"config.json"},{"rfilename":"a/b.gguf"}]})",
      kUrl, "file name");
  EXPECT_EQ(r.commit, kSha);
  EXPECT_EQ(r.files, (std::vector<std::string>{"config.json", "a/b.gguf"}));
  EXPECT_TRUE(parse_repo_info(R"({"sha":")" + kSha + R"("})", kUrl, "f").files.empty());
}

TEST(RepoInfoBody, BrokenOrHostileRefused) {
  const std::string sha = R"("sha":")" + kSha + R"(")";
  const std::vector<std::string> corpus = {
      "",
      "<html>proxy login</html>",
      "[]",
      "null",
      R"({"sha":1})",
      R"({"sha":"main"})",
      R"({"sha":"0123456789ABCDEF0123456789ABCDEF01234567"})",
      R"({"siblings":[]})",
      "{" + sha + R"(,"siblings":{}})",
      "{" + sha + R"(,"siblings":[1]})",
      "{" + sha + R"(,"siblings":[{"name":"x"}]})",
      "{" + sha + R"(,"siblings":[{"rfilename":7}]})",
      "{" + sha + R"(,"siblings":[{"rfilename":"../../x.safetensors"}]})",
      "{" + sha + R"(,"siblings":[{"rfilename":"/etc/passwd"}]})",
      "{" + sha + R"(,"siblings":[{"rfilename":"a/../../b"}]})",
      "{" + sha + R"(,"siblings":[{"rfilename":"a\\b"}]})",
      "{" + sha + R"(,"siblings":[{"rfilename":""}]})",
      "{" + sha + R"(,"siblings":[{"rfilename":"a\u0000b"}]})",
      "{" + sha + R"(,"siblings":[{"rfilename":"C:\\x"}]})",
      "{" + sha + ",",
      std::string(100000, '[') ,
  };
  for (const std::string& body : corpus) EXPECT_THROW(parse_repo_info(body, kUrl, "file name"), Error) << body.substr(0, 80);
}

HttpResponse head(long status, std::vector<std::pair<std::string, std::string>> h) {
  HttpResponse r;
  r.status = status;
  r.headers = std::move(h);
  return r;
}

TEST(FileMetadataHeaders, RegularAndLfs) {
  const std::string url = "http://127.0.0.1:1/o/m/resolve/" + kSha + "/config.json";
  FileMetadata m = parse_file_metadata(
      head(200, {{"x-repo-commit", kSha}, {"etag", "W/\"abc123\""}, {"content-length", "81"}}), url);
  EXPECT_EQ(m.etag, "abc123");
  EXPECT_EQ(m.size, 81u);
  EXPECT_EQ(m.location, url);
  const std::string sha256(64, 'e');
  m = parse_file_metadata(head(302, {{"x-repo-commit", kSha},
                                     {"etag", "\"pointer\""},
                                     {"x-linked-etag", "\"" + sha256 + "\""},
                                     {"x-linked-size", "3145728"},
                                     {"content-length", "0"},
                                     {"location", "http://127.0.0.1:2/blobs/x?sig=1"}}),
                          url);
  EXPECT_EQ(m.etag, sha256);
  EXPECT_EQ(m.size, 3145728u);
  EXPECT_EQ(m.location, "http://127.0.0.1:2/blobs/x?sig=1");
  // A redirect without X-Linked-Size: its Content-Length is the redirect's, not the file's.
  m = parse_file_metadata(head(302, {{"x-repo-commit", kSha}, {"etag", "\"e\""}, {"content-length", "0"},
                                     {"location", "/x"}}),
                          url);
  EXPECT_FALSE(m.size.has_value());
  EXPECT_EQ(m.location, "http://127.0.0.1:1/x");
}

TEST(FileMetadataHeaders, BrokenOrHostileRefused) {
  const std::string url = "http://127.0.0.1:1/o/m/resolve/" + kSha + "/f";
  const std::vector<std::vector<std::pair<std::string, std::string>>> corpus = {
      {{"etag", "\"e\""}},                                        // not a Hub: no X-Repo-Commit
      {{"x-repo-commit", "main"}, {"etag", "\"e\""}},             // not a commit
      {{"x-repo-commit", kSha}},                                  // no ETag
      {{"x-repo-commit", kSha}, {"etag", "\"../../evil\""}},      // an ETag that is a path
      {{"x-repo-commit", kSha}, {"x-linked-etag", "\"a/b\""}},
      {{"x-repo-commit", kSha}, {"etag", "\"\""}},
      {{"x-repo-commit", kSha}, {"etag", "\"e\""}, {"content-length", "-1"}},
      {{"x-repo-commit", kSha}, {"etag", "\"e\""}, {"x-linked-size", "12abc"}},
      {{"x-repo-commit", kSha}, {"etag", "\"e\""}, {"x-linked-size", "99999999999999999999999"}},
  };
  for (const auto& h : corpus) EXPECT_THROW(parse_file_metadata(head(200, h), url), Error);
  EXPECT_THROW(parse_file_metadata(head(302, {{"x-repo-commit", kSha}, {"etag", "\"e\""},
                                              {"location", "file:///etc/passwd"}}),
                                   url),
               Error);
}

}  // namespace
}  // namespace kvad::hub
