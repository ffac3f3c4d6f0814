// Request bodies a hostile client would send, through the parsers alone: a
// JSON object of 10^6 keys costs time linear in its size on every API (the
// ctest timeout is the deadline: the quadratic parse of ordered_json took
// minutes), the linear parser builds what nlohmann's own parser builds, and
// the smaller checks (tool messages answer a call, NUL kept in messages,
// max_tokens beyond int64, a grammar too ambiguous at admission is a 400).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "server/anthropic.h"
#include "server/json_parse.h"
#include "server/openai.h"
#include "server/responses.h"

using kvad::server::ApiError;
using kvad::server::CompletionRequest;
using kvad::server::parse_completion_request;
using oj = nlohmann::ordered_json;

namespace {

// {"k0": 0, "k1": 1, ...} of n keys.
std::string many_keys(size_t n) {
  std::string s = "{";
  for (size_t i = 0; i < n; ++i) s += (i ? ",\"" : "\"") + std::to_string(i) + "\":0";
  return s + "}";
}

// The same text through nlohmann's parser and parse_json_ordered: equal
// values (dumped, so key order counts), or both refuse with one message.
void expect_same_parse(const std::string& text) {
  std::string want, got;
  try {
    want = oj::parse(text).dump();
  } catch (const oj::exception& e) {
    want = std::string("error: ") + e.what();
  }
  try {
    got = kvad::server::parse_json_ordered(text).dump();
  } catch (const oj::exception& e) {
    got = std::string("error: ") + e.what();
  }
  EXPECT_EQ(got, want) << text.substr(0, 200);
}

ApiError error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ApiError& e) {
    return e;
  }
  return ApiError(0, "no error");
}

}  // namespace

TEST(JsonParseOrdered, BuildsWhatNlohmannBuilds) {
  for (const char* t : {R"({"b": 1, "a": 2, "b": 3})", R"({"x": {"y": [1, {"z": null}], "y": true}})", "[]", "{}",
                        R"("\u00e9\ud83d\ude00")", "1e400", "-0", "18446744073709551616", "9223372036854775808",
                        R"({"a": 1,})", R"({"a" 1})", "[1, 2", "", " 7 ", "tru", R"({"a": "\xff"})", "[1] x",
                        R"({"d": 1, "d": {"e": [1, 2]}, "c": 0, "d": [3]})"})
    expect_same_parse(t);
  // Objects above the hash index's threshold, with duplicates at random.
  std::mt19937 rng(7);
  for (int k = 0; k < 30; ++k) {
    const size_t n = 1 + rng() % 400;
    std::string s = "{";
    for (size_t i = 0; i < n; ++i)
      s += (i ? "," : "") + std::string("\"") + std::to_string(rng() % (n / 2 + 1)) + "\":" +
           (rng() % 5 ? std::to_string(i) : "{\"n\": [" + std::to_string(i) + "]}");
    expect_same_parse(s + "}");
  }
  // The request corpus.
  const std::filesystem::path dir = std::filesystem::path(KVAD_SOURCE_DIR) / "tests/fixtures/server/requests";
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(e.path(), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    expect_same_parse(ss.str());
  }
}

// 10^6 keys (10.9 MB, under the 16 MB body limit) in an ignored field of
// each API's body, in logit_bias (refused after parsing: over its cap), and
// 10^5 $defs of a response_format schema.
TEST(ManyKeys, ParseInLinearTimeOnEveryApi) {
  const std::string big = many_keys(1000000);
  ASSERT_GT(big.size(), 10u << 20);
  const std::string msgs = R"("messages": [{"role": "user", "content": "Hi"}])";
  CompletionRequest c = parse_completion_request("{\"model\": \"m\", " + msgs + ", \"x\": " + big + "}", true);
  EXPECT_EQ(c.messages.size(), 1u);
  c = parse_completion_request("{\"model\": \"m\", \"prompt\": \"Hi\", \"metadata\": " + big + "}", false);
  EXPECT_EQ(c.prompt, "Hi");
  c = kvad::server::parse_anthropic_request("{\"model\": \"m\", \"max_tokens\": 5, " + msgs + ", \"x\": " + big + "}");
  EXPECT_EQ(c.gen.max_tokens, 5);
  kvad::server::ResponsesEcho echo;
  c = kvad::server::parse_responses_request("{\"model\": \"m\", \"input\": \"Hi\", \"metadata\": " + big + "}", &echo);
  EXPECT_EQ(c.messages.size(), 1u);
  const ApiError e = error_of([&] { parse_completion_request("{\"model\": \"m\", " + msgs + ", \"logit_bias\": " + big + "}", true); });
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "logit_bias");
  // $defs: 10^5 definitions, one referenced.
  std::string defs = "{";
  for (int i = 0; i < 100000; ++i) defs += (i ? ",\"d" : "\"d") + std::to_string(i) + "\":{\"type\":\"integer\"}";
  defs += "}";
  c = parse_completion_request("{\"model\": \"m\", " + msgs + R"(, "response_format": {"type": "json_schema",
      "json_schema": {"name": "n", "schema": {"$defs": )" + defs + R"(, "$ref": "#/$defs/d99999"}}}})", true);
  EXPECT_TRUE(c.gen.grammar);
}

TEST(ToolMessages, AnswerACallOfThePrecedingAssistantMessage) {
  const std::string call = R"({"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
      "function": {"name": "f", "arguments": "{}"}}]})";
  auto body = [](const std::string& msgs) { return "{\"model\": \"m\", \"messages\": [" + msgs + "]}"; };
  const std::string user = R"({"role": "user", "content": "q"})";
  // Matched: accepted.
  EXPECT_EQ(parse_completion_request(body(user + "," + call + R"(,{"role": "tool", "tool_call_id": "call_1", "content": "r"})"), true)
                .messages.size(), 3u);
  struct C {
    std::string msgs, param;
  };
  const C cases[] = {
      {user + R"(,{"role": "tool", "tool_call_id": "call_1", "content": "r"})", "messages[1].role"},  // no call before
      {user + "," + call + R"(,{"role": "tool", "tool_call_id": "call_2", "content": "r"})", "messages[2].tool_call_id"},
      {user + "," + call + "," + user + R"(,{"role": "tool", "tool_call_id": "call_1", "content": "r"})", "messages[3].role"},
  };
  for (const C& c : cases) {
    const ApiError e = error_of([&] { parse_completion_request(body(c.msgs), true); });
    EXPECT_EQ(e.status, 400) << c.msgs;
    EXPECT_EQ(e.param, c.param) << c.msgs;
    EXPECT_EQ(e.code, "invalid_value") << c.msgs;
  }
}

TEST(ErrorMessages, KeepNulAndNameTheRealLimit) {
  // A NUL in a client's string stays in the message (what() stops there).
  const ApiError e = error_of([] {
    parse_completion_request(R"({"model": "m", "messages": [{"role": "us\u0000er", "content": "x"}]})", true);
  });
  EXPECT_EQ(e.status, 400);
  EXPECT_NE(e.message.find(std::string("us\0er", 5)), std::string::npos);
  EXPECT_NE(kvad::server::error_body(e)["error"]["message"].get<std::string>().find(std::string("us\0er", 5)),
            std::string::npos);
  EXPECT_NE(kvad::server::anthropic_error_body(e)["error"]["message"].get<std::string>().find(std::string("us\0er", 5)),
            std::string::npos);
  // Anthropic max_tokens beyond int64 is >= 1: taken (capped), not "must be >= 1".
  for (const char* mt : {"9223372036854775808", "18446744073709551615", "9223372036854775807"}) {
    const CompletionRequest r = kvad::server::parse_anthropic_request(
        std::string(R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": )") + mt + "}");
    EXPECT_EQ(r.gen.max_tokens, INT32_MAX) << mt;
  }
  for (const char* mt : {"0", "-1", "-9223372036854775808"}) {
    const ApiError z = error_of([&] {
      kvad::server::parse_anthropic_request(
          std::string(R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": )") + mt + "}");
    });
    EXPECT_EQ(z.status, 400) << mt;
    EXPECT_NE(z.message.find("greater than or equal to 1"), std::string::npos) << mt;
  }
  // A grammar too ambiguous for the matcher, whether it shows at admission
  // or at a later token: the client's grammar, a 400.
  for (const char* err : {"admission failed: grammar: more than 4096 parse stacks at once (the grammar is too ambiguous)",
                          "grammar: more than 4096 parse stacks at once (the grammar is too ambiguous)"}) {
    const ApiError g = kvad::server::generation_error(err);
    EXPECT_EQ(g.status, 400) << err;
    EXPECT_EQ(g.code, "invalid_grammar");
    EXPECT_NE(g.message.find("parse stacks"), std::string::npos);
  }
  EXPECT_EQ(kvad::server::generation_error("admission failed: bad_alloc").status, 500);
}
