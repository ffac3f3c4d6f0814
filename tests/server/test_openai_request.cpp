// server::parse_completion_request on its own: defaults, each field's checks,
// and a corpus of broken bodies (tests/fixtures/server/requests) that must
// parse or throw ApiError, never anything else.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "server/anthropic.h"
#include "server/openai.h"
#include "server/responses.h"

using kvad::server::ApiError;
using kvad::server::CompletionRequest;
using kvad::server::parse_completion_request;

namespace {

struct Expect {
  int status;
  std::string code, param;
};

Expect error_of(const std::string& body, bool chat) {
  try {
    parse_completion_request(body, chat);
  } catch (const ApiError& e) {
    return {e.status, e.code, e.param};
  }
  return {0, "", ""};
}

const std::string kMsgs = R"("messages": [{"role": "user", "content": "Hi"}])";

std::string chat(const std::string& extra) { return "{\"model\": \"m\", " + kMsgs + (extra.empty() ? "" : ", " + extra) + "}"; }

std::string read_fixture(const std::string& name) {
  std::ifstream in(std::filesystem::path(KVAD_SOURCE_DIR) / "tests/fixtures/server/requests" / name, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST(OpenAIRequest, ChatDefaultsFollowOpenAI) {
  CompletionRequest r = parse_completion_request(chat(""), true);
  EXPECT_TRUE(r.chat);
  EXPECT_EQ(r.model, "m");
  ASSERT_EQ(r.messages.size(), 1u);
  EXPECT_EQ(r.messages[0].role, "user");
  EXPECT_EQ(r.messages[0].content, "Hi");
  EXPECT_EQ(r.gen.max_tokens, -1);  // until the model stops or the context is full
  EXPECT_EQ(r.gen.sampling.temp, 1.0f);
  EXPECT_EQ(r.gen.sampling.top_p, 1.0f);
  EXPECT_EQ(r.gen.sampling.top_k, 0);
  EXPECT_EQ(r.gen.sampling.min_p, 0.0f);
  EXPECT_EQ(r.gen.sampling.repeat_penalty, 1.0f);
  EXPECT_EQ(r.gen.sampling.presence_penalty, 0.0f);
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.include_usage);
  EXPECT_TRUE(r.gen.stop.empty());
}

TEST(OpenAIRequest, ChatFields) {
  CompletionRequest r = parse_completion_request(
      chat(R"("max_tokens": 5, "max_completion_tokens": 7, "temperature": 0, "top_p": 0.5, "seed": 42,
             "presence_penalty": -1.5, "frequency_penalty": 2, "stop": "END", "stream": true,
             "stream_options": {"include_usage": true}, "n": 1, "user": "ignored", "top_k": 3)"),
      true);
  EXPECT_EQ(r.gen.max_tokens, 7);  // max_completion_tokens wins
  EXPECT_EQ(r.gen.sampling.temp, 0.0f);
  EXPECT_EQ(r.gen.sampling.top_p, 0.5f);
  EXPECT_EQ(r.gen.sampling.seed, 42u);
  EXPECT_EQ(r.gen.sampling.presence_penalty, -1.5f);
  EXPECT_EQ(r.gen.sampling.frequency_penalty, 2.0f);
  EXPECT_EQ(r.gen.sampling.top_k, 3);
  EXPECT_EQ(r.gen.stop, std::vector<std::string>{"END"});
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
}

TEST(OpenAIRequest, MessagesContentPartsAndRoles) {
  CompletionRequest r = parse_completion_request(
      R"({"model": "m", "messages": [
           {"role": "developer", "content": "Be brief."},
           {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
           {"role": "assistant", "content": null}]})",
      true);
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[1].content, "ab");
  EXPECT_EQ(r.messages[2].content, "");
}

TEST(OpenAIRequest, CompletionPrompts) {
  CompletionRequest a = parse_completion_request(R"({"model": "m", "prompt": "Hello"})", false);
  EXPECT_FALSE(a.prompt_is_ids);
  EXPECT_EQ(a.prompt, "Hello");
  EXPECT_EQ(a.gen.max_tokens, 16);  // the legacy endpoint's documented default
  CompletionRequest b = parse_completion_request(R"({"model": "m", "prompt": ["Hello"]})", false);
  EXPECT_EQ(b.prompt, "Hello");
  CompletionRequest c = parse_completion_request(R"({"model": "m", "prompt": [1, 2, 3]})", false);
  EXPECT_TRUE(c.prompt_is_ids);
  EXPECT_EQ(c.prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  CompletionRequest d = parse_completion_request(R"({"model": "m", "prompt": [[4, 5]]})", false);
  EXPECT_EQ(d.prompt_ids, (std::vector<int32_t>{4, 5}));
}

TEST(OpenAIRequest, Errors) {
  const struct {
    std::string body;
    bool chat;
    Expect want;
  } cases[] = {
      {"{bad", true, {400, "invalid_json", ""}},
      {"", true, {400, "invalid_json", ""}},
      {"[1]", true, {400, "invalid_type", ""}},
      {R"({"messages": [{"role": "user", "content": "x"}]})", true, {400, "missing_required_parameter", "model"}},
      {R"({"model": "m"})", true, {400, "missing_required_parameter", "messages"}},
      {R"({"model": "m", "messages": {}})", true, {400, "invalid_type", "messages"}},
      {R"({"model": "m", "messages": [{"content": "x"}]})", true,
       {400, "missing_required_parameter", "messages[0].role"}},
      {R"({"model": "m", "messages": [{"role": "user", "content": [{"type": "text"}]}]})", true,
       {400, "invalid_type", "messages[0].content[0].text"}},
      {chat(R"("temperature": true)"), true, {400, "invalid_type", "temperature"}},
      {chat(R"("temperature": -0.1)"), true, {400, "invalid_value", "temperature"}},
      {chat(R"("max_tokens": 3000000000)"), true, {400, "invalid_value", "max_tokens"}},
      {chat(R"("max_tokens": 18446744073709551615)"), true, {400, "invalid_value", "max_tokens"}},
      {chat(R"("n": 17)"), true, {400, "invalid_value", "n"}},
      {chat(R"("stop": [1])"), true, {400, "invalid_type", "stop"}},
      {chat(R"("stream_options": 1)"), true, {400, "invalid_type", "stream_options"}},
      {chat(R"("stream_options": {"include_usage": "yes"})"), true, {400, "invalid_type", "stream_options.include_usage"}},
      {chat(R"("response_format": {"type": "json_schema"})"), true, {400, "invalid_type", "response_format.json_schema"}},
      {chat(R"("response_format": {"type": "json_schema", "json_schema": {"name": "x"}})"), true,
       {400, "missing_required_parameter", "response_format.json_schema.schema"}},
      {chat(R"("response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"not": {}}}})"), true,
       {400, "invalid_schema", "response_format.json_schema.schema"}},
      {chat(R"("response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "array", "uniqueItems": true}}})"),
       true, {400, "invalid_schema", "response_format.json_schema.schema"}},
      {chat(R"("response_format": {"type": "xml"})"), true, {400, "unsupported_value", "response_format"}},
      {chat(R"("grammar": "root ::= foo")"), true, {400, "invalid_grammar", "grammar"}},
      {chat(R"("grammar": 5)"), true, {400, "invalid_type", "grammar"}},
      {chat(R"("grammar": "root ::= [a]", "response_format": {"type": "json_object"})"), true,
       {400, "invalid_value", "grammar"}},
      {R"({"model": "m", "prompt": "x", "json_schema": {"$ref": "#/nowhere"}})", false, {400, "invalid_schema", "json_schema"}},
      {chat(R"("logprobs": 1)"), true, {400, "invalid_type", "logprobs"}},
      {R"({"model": "m", "prompt": 5})", false, {400, "invalid_type", "prompt"}},
      {R"({"model": "m", "prompt": []})", false, {400, "invalid_value", "prompt"}},
      {R"({"model": "m", "prompt": [1, "a"]})", false, {400, "invalid_type", "prompt"}},
      {R"({"model": "m", "prompt": "x", "logprobs": 21})", false, {400, "invalid_value", "logprobs"}},
      {R"({"model": "m", "prompt": "x", "logprobs": true})", false, {400, "invalid_type", "logprobs"}},
      {chat(R"("top_logprobs": 2)"), true, {400, "invalid_value", "top_logprobs"}},
      {R"({"model": "m", "prompt": "x", "suffix": "y"})", false, {400, "unsupported_value", "suffix"}},
  };
  for (const auto& c : cases) {
    const Expect got = error_of(c.body, c.chat);
    EXPECT_EQ(got.status, c.want.status) << c.body;
    EXPECT_EQ(got.code, c.want.code) << c.body;
    EXPECT_EQ(got.param, c.want.param) << c.body;
  }
}

TEST(OpenAIRequest, ResponseFormatAndGrammar) {
  EXPECT_EQ(parse_completion_request(chat(R"("response_format": {"type": "text"})"), true).gen.grammar, nullptr);
  auto accepts = [](const CompletionRequest& r, const std::string& text) {
    kvad::GrammarMatcher m(r.gen.grammar);
    return m.accept(text) && m.accepting();
  };
  const auto obj = parse_completion_request(chat(R"("response_format": {"type": "json_object"})"), true);
  ASSERT_NE(obj.gen.grammar, nullptr);
  EXPECT_TRUE(accepts(obj, R"({"a":[1,{"b":null}]})"));
  EXPECT_FALSE(accepts(obj, R"({"a": 1})"));  // compact unless kvad.json_whitespace is "pretty"
  const auto pretty = parse_completion_request(
      chat(R"("response_format": {"type": "json_object"}, "kvad": {"json_whitespace": "pretty"})"), true);
  EXPECT_TRUE(accepts(pretty, R"({"a": [1, {"b": null}]})"));
  EXPECT_FALSE(accepts(obj, "[1]"));
  const auto sch = parse_completion_request(
      chat(R"("response_format": {"type": "json_schema", "json_schema": {"name": "p", "strict": true,
           "schema": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"],
                      "additionalProperties": false}}})"),
      true);
  EXPECT_TRUE(accepts(sch, R"({"n":3})"));
  EXPECT_FALSE(accepts(sch, R"({"n": "3"})"));
  const auto gr = parse_completion_request(R"({"model": "m", "prompt": "x", "grammar": "root ::= [ab]+"})", false);
  EXPECT_TRUE(accepts(gr, "abba"));
  EXPECT_FALSE(accepts(gr, "abc"));
  // The refused keyword is named in the message.
  try {
    parse_completion_request(chat(R"J("response_format": {"type": "json_schema", "json_schema": {"name": "x",
        "schema": {"type": "object", "patternProperties": {"(?=a)": {"type": "integer"}}}}})J"), true);
    ADD_FAILURE() << "no error";
  } catch (const ApiError& e) {
    EXPECT_NE(std::string(e.what()).find("'patternProperties'"), std::string::npos) << e.what();
  }
}

TEST(OpenAIRequest, ErrorBodyIsOpenAIShaped) {
  const auto b = kvad::server::error_body(ApiError(404, "no such model", "invalid_request_error", "model", "model_not_found"));
  EXPECT_EQ(kvad::server::dump(b),
            R"({"error":{"message":"no such model","type":"invalid_request_error","param":"model","code":"model_not_found"}})");
  const auto n = kvad::server::error_body(ApiError(500, "x", "server_error"));
  EXPECT_TRUE(n["error"]["param"].is_null());
  EXPECT_TRUE(n["error"]["code"].is_null());
}

TEST(OpenAIRequest, DumpReplacesInvalidUtf8) {
  nlohmann::ordered_json j = {{"text", std::string("a\xff" "b")}};
  EXPECT_EQ(kvad::server::dump(j), "{\"text\":\"a\xEF\xBF\xBD" "b\"}");
}

TEST(OpenAIRequest, BrokenBodiesCorpus) {
  const std::filesystem::path dir = std::filesystem::path(KVAD_SOURCE_DIR) / "tests/fixtures/server/requests";
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".json") continue;
    std::ifstream in(e.path(), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    // Each API's parser: a request or ApiError 400, never anything else.
    for (int api = 0; api < 4; ++api) {
      try {
        kvad::server::ResponsesEcho echo;
        if (api < 2) parse_completion_request(ss.str(), api == 0);
        else if (api == 2) kvad::server::parse_anthropic_request(ss.str());
        else kvad::server::parse_responses_request(ss.str(), &echo);
      } catch (const ApiError& err) {
        EXPECT_EQ(err.status, 400) << e.path() << ": " << err.what();
      } catch (const std::exception& other) {
        ADD_FAILURE() << e.path() << ": not an ApiError: " << other.what();
      }
    }
    ++n;
  }
  EXPECT_GE(n, 15);
}

TEST(OpenAIRequest, Tools) {
  CompletionRequest r = parse_completion_request(
      read_fixture("tools_ok.json"), true);
  ASSERT_EQ(r.tools.size(), 1u);
  EXPECT_EQ(r.tools[0].name, "get_weather");
  EXPECT_EQ(r.tool_choice.kind, kvad::server::ToolChoice::named);
  EXPECT_EQ(r.tool_choice.name, "get_weather");
  EXPECT_FALSE(r.parallel_tool_calls);
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_TRUE(r.messages[1].content_null);
  ASSERT_EQ(r.messages[1].tool_calls.size(), 1u);
  EXPECT_EQ(r.messages[1].tool_calls[0].arguments, R"({"city": "Oslo"})");
  EXPECT_EQ(r.messages[2].tool_call_id, "call_1");
  // Defaults: auto with tools, none without.
  EXPECT_EQ(parse_completion_request(chat(""), true).tool_choice.kind, kvad::server::ToolChoice::none);
  EXPECT_EQ(parse_completion_request(chat(R"("tools": [{"type": "function", "function": {"name": "f"}}])"), true)
                .tool_choice.kind,
            kvad::server::ToolChoice::automatic);
  EXPECT_FALSE(parse_completion_request(chat(R"("reasoning_format": "none")"), true).reasoning);
}

TEST(OpenAIRequest, ToolErrorsNameTheField) {
  struct C { std::string extra, param, code; };
  const C cases[] = {
      {R"("tools": [{"type": "function", "function": {"name": "a b"}}])", "tools[0].function.name", "invalid_value"},
      {R"("tools": [{"type": "function", "function": {"name": "f", "parameters": []}}])", "tools[0].function.parameters", "invalid_type"},
      {R"("tools": [{"type": "code_interpreter"}])", "tools[0].type", "unsupported_value"},
      {R"("tools": [{"type": "function"}])", "tools[0].function", "missing_required_parameter"},
      {R"("tool_choice": "required")", "tool_choice", "invalid_value"},
      {R"("tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": {"type": "function", "function": {"name": "g"}})", "tool_choice", "invalid_value"},
      {R"("reasoning_format": "loud")", "reasoning_format", "invalid_value"},
  };
  for (const C& c : cases) {
    const Expect e = error_of(chat(c.extra), true);
    EXPECT_EQ(e.status, 400) << c.extra;
    EXPECT_EQ(e.param, c.param) << c.extra;
    EXPECT_EQ(e.code, c.code) << c.extra;
  }
  EXPECT_EQ(error_of(R"({"model": "m", "messages": [{"role": "tool", "content": "r"}]})", true).param,
            "messages[0].tool_call_id");
}

TEST(AnthropicRequest, BlocksBecomeMessages) {
  CompletionRequest r = kvad::server::parse_anthropic_request(read_fixture("anthropic_ok.json"));
  ASSERT_EQ(r.messages.size(), 4u);  // system, user, assistant (tool_use), tool
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[0].content, "be brief");
  EXPECT_EQ(r.messages[2].tool_calls.at(0).arguments, R"({"a":1})");
  EXPECT_EQ(r.messages[3].role, "tool");
  EXPECT_EQ(r.messages[3].tool_call_id, "toolu_1");
  EXPECT_EQ(r.messages[3].content, "ok");
  EXPECT_EQ(r.tool_choice.kind, kvad::server::ToolChoice::required);
  EXPECT_FALSE(r.parallel_tool_calls);
  EXPECT_EQ(r.gen.max_tokens, 10);
  EXPECT_EQ(r.gen.stop, std::vector<std::string>{"END"});
  for (const char* body : {R"({"model": "m", "messages": [{"role": "user", "content": "x"}]})",         // max_tokens
                           R"({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "image"}]}]})",
                           R"({"model": "m", "max_tokens": 5, "temperature": 1.5, "messages": [{"role": "user", "content": "x"}]})"}) {
    try {
      kvad::server::parse_anthropic_request(body);
      ADD_FAILURE() << body;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400);
      EXPECT_EQ(kvad::server::anthropic_error_body(e)["error"]["type"], "invalid_request_error");
    }
  }
}

TEST(ResponsesRequest, ItemsBecomeMessages) {
  kvad::server::ResponsesEcho echo;
  CompletionRequest r = kvad::server::parse_responses_request(read_fixture("responses_ok.json"), &echo);
  ASSERT_EQ(r.messages.size(), 4u);  // instructions, developer, the call, its output
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[1].role, "system");
  EXPECT_EQ(r.messages[2].role, "assistant");
  EXPECT_EQ(r.messages[2].tool_calls.at(0).id, "call_1");
  EXPECT_EQ(r.messages[3].tool_call_id, "call_1");
  EXPECT_EQ(r.tool_choice.kind, kvad::server::ToolChoice::named);
  EXPECT_EQ(r.gen.max_tokens, 20);
  EXPECT_EQ(echo.fields["instructions"], "brief");
  try {
    kvad::server::parse_responses_request(R"({"model": "m", "input": "x", "previous_response_id": "resp_1"})", &echo);
    ADD_FAILURE();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.param, "previous_response_id");
  }
}

TEST(OpenAIRequest, ModelSamplingDefaultsFillWhatTheRequestLeavesOut) {
  kvad::SamplerParams d = kvad::server::openai_sampling_defaults();
  d.temp = 0.7f;
  d.top_k = 20;
  d.top_p = 0.8f;
  d.repeat_penalty = 1.05f;
  CompletionRequest r = parse_completion_request(chat(R"("top_p": 0.5)"), true, d);
  EXPECT_FLOAT_EQ(r.gen.sampling.temp, 0.7f);
  EXPECT_EQ(r.gen.sampling.top_k, 20);
  EXPECT_FLOAT_EQ(r.gen.sampling.top_p, 0.5f);  // the request's own
  EXPECT_FLOAT_EQ(r.gen.sampling.repeat_penalty, 1.05f);
}

TEST(OpenAIRequest, LogitBias) {
  CompletionRequest r = parse_completion_request(chat(R"("logit_bias": {"5": -100, "17": 2.5})"), true);
  ASSERT_EQ(r.gen.sampling.logit_bias.size(), 2u);
  float b5 = 0, b17 = 0;
  for (const auto& [id, b] : r.gen.sampling.logit_bias) (id == 5 ? b5 : b17) = b;
  EXPECT_FLOAT_EQ(b5, -100.0f);
  EXPECT_FLOAT_EQ(b17, 2.5f);
  for (const char* bad : {R"("logit_bias": {"x": 1})", R"("logit_bias": {"": 1})", R"("logit_bias": {"99999999999": 1})",
                          R"("logit_bias": {"1": -101})", R"("logit_bias": {"1": "a"})", R"("logit_bias": 3)"}) {
    const Expect e = error_of(chat(bad), true);
    EXPECT_EQ(e.status, 400) << bad;
    EXPECT_EQ(e.param, "logit_bias") << bad;
  }
}
