// ollama's and llama.cpp's request parsers on their own (ollama_api.h,
// llamacpp_api.h): what each field becomes, ollama's model names, and the
// broken-bodies corpus (tests/fixtures/server/requests), which must parse
// or throw ApiError 400, never anything else.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "server/llamacpp_api.h"
#include "server/ollama_api.h"

using kvad::server::ApiError;
using kvad::server::parse_llamacpp_completion;
using kvad::server::parse_ollama_request;

namespace {

const kvad::SamplerParams kDefaults = kvad::server::openai_sampling_defaults();

std::string read_fixture(const std::string& name) {
  std::ifstream in(std::filesystem::path(KVAD_SOURCE_DIR) / "tests/fixtures/server/requests" / name, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string ollama_param(const std::string& body, bool chat) {
  try {
    parse_ollama_request(body, chat, kDefaults);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400) << body;
    return e.param.empty() ? e.message : e.param;
  }
  return "";
}

}  // namespace

TEST(OllamaRequest, ModelNames) {
  using kvad::server::ollama_name_matches;
  EXPECT_TRUE(ollama_name_matches("smollm2:135m", "smollm2-135m"));
  EXPECT_TRUE(ollama_name_matches("SmolLM2-135M:latest", "smollm2-135m"));
  EXPECT_TRUE(ollama_name_matches("hf.co/Org/Name", "org/name"));
  EXPECT_FALSE(ollama_name_matches("smollm2", "smollm2-135m"));
  EXPECT_FALSE(ollama_name_matches("", "smollm2-135m"));
  EXPECT_EQ(kvad::server::ollama_model_name("smollm2-135m"), "smollm2-135m:latest");
  EXPECT_EQ(kvad::server::ollama_model_name("org/name"), "org/name:latest");
  EXPECT_EQ(kvad::server::ollama_model_name("a:b"), "a:b");
}

TEST(OllamaRequest, ChatFields) {
  const kvad::server::OllamaRequest q = parse_ollama_request(read_fixture("ollama_chat_ok.json"), true, kDefaults);
  const kvad::server::CompletionRequest& r = q.r;
  EXPECT_TRUE(r.chat);
  EXPECT_FALSE(r.stream);
  EXPECT_EQ(r.model, "smollm2:135m");
  ASSERT_EQ(r.messages.size(), 3u);
  ASSERT_EQ(r.messages[1].tool_calls.size(), 1u);
  EXPECT_EQ(r.messages[1].tool_calls[0].arguments, R"({"a":1})");
  EXPECT_EQ(r.messages[2].role, "tool");
  EXPECT_EQ(r.messages[2].tool_call_id, r.messages[1].tool_calls[0].id);  // tied by tool_name
  ASSERT_EQ(r.tools.size(), 1u);
  EXPECT_TRUE(r.gen.grammar);  // format: a schema
  EXPECT_FLOAT_EQ(r.gen.sampling.temp, 0.5f);
  EXPECT_EQ(r.gen.max_tokens, 20);
  EXPECT_EQ(r.gen.stop, std::vector<std::string>{"x"});
  EXPECT_EQ(q.repeat_last_n, -1);
  EXPECT_TRUE(q.show_thinking);
}

TEST(OllamaRequest, GenerateFields) {
  const kvad::server::OllamaRequest q = parse_ollama_request(read_fixture("ollama_generate_ok.json"), false, kDefaults);
  EXPECT_TRUE(q.r.chat);  // rendered through the template: system, then the prompt
  ASSERT_EQ(q.r.messages.size(), 2u);
  EXPECT_EQ(q.r.messages[0].role, "system");
  EXPECT_EQ(q.r.messages[1].content, "Hi");
  EXPECT_TRUE(q.r.stream);     // ollama streams unless told not to
  EXPECT_EQ(q.r.gen.max_tokens, -1);
  EXPECT_EQ(q.r.gen.logprobs, 3);
  EXPECT_TRUE(q.r.gen.grammar);  // format "json"
  const auto raw = parse_ollama_request(R"({"model": "m", "prompt": "1, 2,", "raw": true})", false, kDefaults);
  EXPECT_FALSE(raw.r.chat);
  EXPECT_EQ(raw.r.prompt, "1, 2,");
  EXPECT_EQ(raw.r.gen.max_tokens, -1);  // not the legacy endpoint's 16
  EXPECT_TRUE(parse_ollama_request(R"({"model": "m"})", false, kDefaults).load_only);
  EXPECT_TRUE(parse_ollama_request(R"({"model": "m", "messages": []})", true, kDefaults).load_only);
  EXPECT_FALSE(parse_ollama_request(R"({"model": "m", "prompt": "x", "think": false})", false, kDefaults).show_thinking);
}

TEST(OllamaRequest, Errors) {
  EXPECT_EQ(ollama_param(R"({"messages": []})", true), "model");
  EXPECT_EQ(ollama_param(R"({"model": "m", "prompt": "x", "format": "yaml"})", false), "format");
  EXPECT_EQ(ollama_param(R"({"model": "m", "prompt": "x", "format": {"type": "string", "pattern": "(a"}})", false),
            "format");
  EXPECT_EQ(ollama_param(R"({"model": "m", "prompt": "x", "options": {"temperature": 9}})", false), "options.temperature");
  EXPECT_EQ(ollama_param(R"({"model": "m", "prompt": "x", "options": {"top_k": "a"}})", false), "options.top_k");
  EXPECT_EQ(ollama_param(R"({"model": "m", "prompt": "x", "options": {"num_predict": -3}})", false), "options.num_predict");
  EXPECT_EQ(ollama_param(R"({"model": "m", "prompt": "x", "options": 3})", false), "options");
  EXPECT_EQ(ollama_param(R"({"model": "m", "prompt": "x", "keep_alive": []})", false), "keep_alive");
  EXPECT_EQ(ollama_param(R"({"model": "m", "prompt": "x", "think": "very"})", false), "think");
  EXPECT_EQ(ollama_param(R"({"model": "m", "prompt": "x", "images": ["aGk="]})", false), "images");
  EXPECT_EQ(ollama_param(R"({"model": "m", "messages": [{"role": "tool", "content": "r"}]})", true),
            "messages[0].role");
  EXPECT_EQ(ollama_param(R"({"model": "m", "messages": [{"role": "user", "content": 3}]})", true), "messages[0].content");
  EXPECT_EQ(ollama_param(R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "web"}]})", true),
            "tools[0].type");
}

TEST(LlamaCppRequest, Fields) {
  const kvad::server::LlamaCompletion c = parse_llamacpp_completion(read_fixture("llamacpp_completion_ok.json"), false,
                                                                    kDefaults);
  EXPECT_TRUE(c.mixed);
  ASSERT_EQ(c.pieces.size(), 4u);
  EXPECT_EQ(c.r.gen.max_tokens, 8);
  EXPECT_EQ(c.n_probs, 2);
  EXPECT_EQ(c.r.gen.logprobs, 2);
  EXPECT_TRUE(c.r.gen.grammar);
  EXPECT_TRUE(c.r.stream);
  EXPECT_TRUE(c.ignore_eos);
  ASSERT_EQ(c.r.gen.sampling.logit_bias.size(), 2u);
  EXPECT_EQ(c.r.gen.sampling.logit_bias[0].first, 5);
  EXPECT_TRUE(std::isinf(c.r.gen.sampling.logit_bias[0].second));  // false bans the token
  EXPECT_FLOAT_EQ(c.r.gen.sampling.logit_bias[1].second, 1.5f);
  const kvad::server::LlamaCompletion ids = parse_llamacpp_completion(R"({"prompt": [1, 2, 3]})", false, kDefaults);
  EXPECT_TRUE(ids.r.prompt_is_ids);
  EXPECT_EQ(ids.r.prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(ids.r.gen.max_tokens, -1);
  const kvad::server::LlamaCompletion in = parse_llamacpp_completion(read_fixture("llamacpp_infill_ok.json"), true, kDefaults);
  EXPECT_EQ(in.input_prefix, "def f(");
  EXPECT_EQ(in.input_suffix, ")");
  ASSERT_EQ(in.input_extra.size(), 1u);
  EXPECT_EQ(in.input_extra[0].filename, "a.py");
  EXPECT_EQ(in.r.prompt, "");
}

TEST(LlamaCppRequest, Errors) {
  auto param = [](const std::string& body) {
    try {
      parse_llamacpp_completion(body, false, kDefaults);
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400) << body;
      return e.param;
    }
    return std::string("(parsed)");
  };
  EXPECT_EQ(param(R"({})"), "prompt");
  EXPECT_EQ(param(R"({"prompt": ["a", "b"]})"), "prompt");
  EXPECT_EQ(param(R"({"prompt": [[1], [2]]})"), "prompt");
  EXPECT_EQ(param(R"({"prompt": "x", "n_predict": -2})"), "n_predict");
  EXPECT_EQ(param(R"({"prompt": "x", "n_probs": 21})"), "n_probs");
  EXPECT_EQ(param(R"({"prompt": "x", "mirostat": 1})"), "mirostat");
  EXPECT_EQ(param(R"({"prompt": "x", "typical_p": 0.5})"), "typical_p");
  EXPECT_EQ(param(R"({"prompt": "x", "logit_bias": [[1]]})"), "logit_bias");
  EXPECT_EQ(param(R"({"prompt": "x", "logit_bias": [["hi", 1]]})"), "logit_bias");
  EXPECT_EQ(param(R"({"prompt": "x", "grammar": "root ::= ("})"), "grammar");
  EXPECT_EQ(param(R"({"prompt": "x", "seed": "1"})"), "seed");
  EXPECT_EQ(param(R"({"prompt": "x", "mirostat": 0, "typical_p": 1, "top_n_sigma": -1, "samplers": []})"), "(parsed)");
}

TEST(NativeRequests, BrokenBodiesCorpus) {
  const std::filesystem::path dir = std::filesystem::path(KVAD_SOURCE_DIR) / "tests/fixtures/server/requests";
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".json") continue;
    std::ifstream in(e.path(), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    for (int api = 0; api < 4; ++api) {
      try {
        if (api < 2) parse_ollama_request(ss.str(), api == 0, kDefaults);
        else parse_llamacpp_completion(ss.str(), api == 3, kDefaults);
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
