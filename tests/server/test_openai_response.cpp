// The response objects server/openai.h builds, against the shapes of the
// OpenAI API reference ("The chat completion object", "The chat completion
// chunk object", "The completion object"): the fields the `openai` Python
// package's types read, in the order the API sends them.
#include <gtest/gtest.h>

#include "server/openai.h"

using json = nlohmann::ordered_json;
using namespace kvad;
using namespace kvad::server;

namespace {

const ResponseMeta kChat{"chatcmpl-1", 1700000000, "m", true};
const ResponseMeta kText{"cmpl-1", 1700000000, "m", false};

GenUsage usage(int32_t prompt, int32_t cached, int32_t completion) {
  GenUsage u;
  u.prompt_tokens = prompt;
  u.cached_tokens = cached;
  u.completion_tokens = completion;
  return u;
}

}  // namespace

TEST(OpenAIResponse, ChatCompletion) {
  const json r = completion_response(kChat, "hi", "stop", usage(5, 2, 3));
  EXPECT_EQ(r.dump(), R"({"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":"m",)"
                      R"("choices":[{"index":0,"message":{"role":"assistant","content":"hi","refusal":null},)"
                      R"("logprobs":null,"finish_reason":"stop"}],)"
                      R"("usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8,)"
                      R"("prompt_tokens_details":{"cached_tokens":2}}})");
}

TEST(OpenAIResponse, TextCompletion) {
  const json r = completion_response(kText, "hi", "length", usage(1, 0, 1));
  EXPECT_EQ(r["object"], "text_completion");
  EXPECT_EQ(r["choices"][0].dump(), R"({"index":0,"text":"hi","logprobs":null,"finish_reason":"length"})");
}

TEST(OpenAIResponse, ChatChunks) {
  EXPECT_EQ(chat_role_chunk(kChat, false).dump(),
            R"({"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"m",)"
            R"("choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},)"
            R"("logprobs":null,"finish_reason":null}]})");
  const json text = completion_chunk(kChat, "a", nullptr, true);
  EXPECT_EQ(text["choices"].dump(), R"([{"index":0,"delta":{"content":"a"},"logprobs":null,"finish_reason":null}])");
  ASSERT_TRUE(text.contains("usage"));
  EXPECT_TRUE(text["usage"].is_null());
  const json last = completion_chunk(kChat, "", "stop", false);
  EXPECT_EQ(last["choices"].dump(), R"([{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}])");
  EXPECT_FALSE(last.contains("usage"));
  const json u = usage_chunk(kChat, usage(4, 0, 2));
  EXPECT_EQ(u["choices"], json::array());
  EXPECT_EQ(u["usage"]["total_tokens"], 6);
}

TEST(OpenAIResponse, TextChunk) {
  const json c = completion_chunk(kText, "a", nullptr, false);
  EXPECT_EQ(c["object"], "text_completion");
  EXPECT_EQ(c["choices"].dump(), R"([{"index":0,"text":"a","logprobs":null,"finish_reason":null}])");
}

TEST(OpenAIResponse, Models) {
  EXPECT_EQ(model_list("m", 7).dump(),
            R"({"object":"list","data":[{"id":"m","object":"model","created":7,"owned_by":"kvad"}]})");
}

TEST(OpenAIResponse, GenerationError) {
  const ApiError down = generation_error("the server is shutting down");
  EXPECT_EQ(down.status, 503);
  EXPECT_EQ(down.code, "server_shutting_down");
  const ApiError gram = generation_error("grammar: no token of the vocabulary can continue the text");
  EXPECT_EQ(gram.status, 400);
  EXPECT_EQ(gram.code, "invalid_grammar");
  const ApiError other = generation_error("out of memory");
  EXPECT_EQ(other.status, 500);
  EXPECT_EQ(other.code, "internal_error");
  EXPECT_EQ(error_body(other).dump(),
            R"({"error":{"message":"The generation failed: out of memory","type":"server_error",)"
            R"("param":null,"code":"internal_error"}})");
}
