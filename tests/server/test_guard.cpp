// The front door's helpers (server/guard.h): log sanitising, the constant-time
// key compare, Host parsing and the allow-list.
#include <gtest/gtest.h>

#include "server/guard.h"
#include "server/openai.h"

using namespace kvad::server;

TEST(Guard, SanitizeForLogEscapesControlAndCuts) {
  EXPECT_EQ(sanitize_for_log("/v1/models"), "/v1/models");
  EXPECT_EQ(sanitize_for_log("/a\nINJECTED\x1b[31m"), "/a\\x0aINJECTED\\x1b[31m");
  EXPECT_EQ(sanitize_for_log("a b\\"), "a\\x20b\\x5c");
  EXPECT_EQ(sanitize_for_log("\xc3\xa9"), "\\xc3\\xa9");
  EXPECT_EQ(sanitize_for_log(std::string(300, 'x'), 4), "xxxx...");
}

TEST(Guard, ConstantTimeEqual) {
  EXPECT_TRUE(constant_time_equal("Bearer k", "Bearer k"));
  EXPECT_TRUE(constant_time_equal("", ""));
  EXPECT_FALSE(constant_time_equal("Bearer k", "Bearer j"));
  EXPECT_FALSE(constant_time_equal("Bearer k", "Bearer kk"));
  EXPECT_FALSE(constant_time_equal("", "x"));
  EXPECT_FALSE(constant_time_equal(std::string("a\0b", 3), std::string("a\0c", 3)));
}

TEST(Guard, HostNames) {
  EXPECT_EQ(host_name_of("localhost:8080"), "localhost");
  EXPECT_EQ(host_name_of("LocalHost."), "localhost");
  EXPECT_EQ(host_name_of("127.0.0.1"), "127.0.0.1");
  EXPECT_EQ(host_name_of("[::1]:80"), "::1");
  EXPECT_EQ(host_name_of("::1"), "::1");
  const std::vector<std::string> loopback = {"localhost", "127.0.0.1", "::1"};
  EXPECT_TRUE(host_allowed("127.0.0.1:9", loopback));
  EXPECT_TRUE(host_allowed("[::1]:9", loopback));
  EXPECT_FALSE(host_allowed("evil.example:9", loopback));
  EXPECT_FALSE(host_allowed("localhost.evil.example", loopback));
  EXPECT_FALSE(host_allowed("", loopback));
  EXPECT_TRUE(host_allowed("anything", {}));
}

TEST(Guard, DeepJsonIsRefusedBeforeParsing) {
  const std::string deep(100000, '[');
  try {
    parse_completion_request(deep, true);
    FAIL();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.code, "invalid_json");
  }
  // Brackets inside strings do not count.
  const std::string in_string = R"({"model": "m", "prompt": ")" + std::string(1000, '[') + R"("})";
  EXPECT_EQ(parse_completion_request(in_string, false).prompt.size(), 1000u);
}

TEST(Guard, StopSequencesAreBounded) {
  const std::string ok = R"({"model": "m", "prompt": "x", "stop": [")" + std::string(1024, 'a') + R"("]})";
  EXPECT_EQ(parse_completion_request(ok, false).gen.stop.size(), 1u);
  for (const std::string& body : {R"({"model": "m", "prompt": "x", "stop": ")" + std::string(1025, 'a') + R"("})",
                                  R"({"model": "m", "prompt": "x", "stop": ["a", ")" + std::string(1 << 20, 'a') + R"("]})"}) {
    try {
      parse_completion_request(body, false);
      FAIL();
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400);
      EXPECT_EQ(e.param, "stop");
    }
  }
}
