// POST /v1/embeddings request validation and response shape
// (server/embeddings.h) without a model: a stand-in tokenizer (one id per
// byte, [CLS]=101 ... [SEP]=102 around them) and dimensions; the base64 of
// the answer (RFC 4648 section 10 vectors, little-endian f32). The real
// model through the real client is tests/server/test_embeddings.py.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "server/embeddings.h"
#include "server/openai.h"

namespace {

using kvad::server::ApiError;
using kvad::server::EmbeddingsModel;
using kvad::server::parse_embeddings_request;

EmbeddingsModel fake() {
  EmbeddingsModel m;
  m.id = "minilm";
  m.dim = 2;
  m.n_vocab = 30522;
  m.max_seq_length = 8;
  m.tokenize = [](std::string_view t) {
    std::vector<int32_t> ids = {101};
    for (unsigned char c : t.substr(0, 6)) ids.push_back(1000 + c);
    ids.push_back(102);
    return ids;
  };
  return m;
}

// The status, param and code of the ApiError a body gets.
std::string refusal(const std::string& body) {
  try {
    parse_embeddings_request(body, fake(), 4);
  } catch (const ApiError& e) {
    return std::to_string(e.status) + " " + e.param + " " + e.code;
  }
  return "accepted";
}

TEST(EmbeddingsRequest, InputShapes) {
  const EmbeddingsModel m = fake();
  auto inputs = [&](const std::string& body) { return parse_embeddings_request(body, m).inputs; };
  EXPECT_EQ(inputs(R"({"model":"minilm","input":"ab"})"), (std::vector<std::vector<int32_t>>{{101, 1097, 1098, 102}}));
  EXPECT_EQ(inputs(R"({"model":"minilm","input":["a","b"]})").size(), 2u);
  EXPECT_EQ(inputs(R"({"model":"minilm","input":[5,6,7]})"), (std::vector<std::vector<int32_t>>{{5, 6, 7}}));
  EXPECT_EQ(inputs(R"({"model":"minilm","input":[[5],[6,7]]})"), (std::vector<std::vector<int32_t>>{{5}, {6, 7}}));
  EXPECT_FALSE(parse_embeddings_request(R"({"model":"minilm","input":"a"})", m).base64);
  EXPECT_TRUE(parse_embeddings_request(R"({"model":"minilm","input":"a","encoding_format":"base64"})", m).base64);
  EXPECT_EQ(inputs(R"({"model":"minilm","input":"a","dimensions":2,"user":"u","encoding_format":null,"x":1})").size(),
            1u);
}

TEST(EmbeddingsRequest, RefusalsNameTheField) {
  EXPECT_EQ(refusal("{"), "400  invalid_json");
  EXPECT_EQ(refusal(std::string(100, '[')), "400  invalid_json");
  EXPECT_EQ(refusal("[]"), "400  invalid_type");
  EXPECT_EQ(refusal(R"({"input":"a"})"), "400 model missing_required_parameter");
  EXPECT_EQ(refusal(R"({"model":"other","input":"a"})"), "404 model model_not_found");
  EXPECT_EQ(refusal(R"({"model":"minilm"})"), "400 input missing_required_parameter");
  EXPECT_EQ(refusal(R"({"model":"minilm","input":""})"), "400 input invalid_value");
  EXPECT_EQ(refusal(R"({"model":"minilm","input":[]})"), "400 input invalid_value");
  EXPECT_EQ(refusal(R"({"model":"minilm","input":[[]]})"), "400 input[0] invalid_value");
  EXPECT_EQ(refusal(R"({"model":"minilm","input":["a",""]})"), "400 input[1] invalid_value");
  EXPECT_EQ(refusal(R"({"model":"minilm","input":["a",[1]]})"), "400 input[1] invalid_type");
  EXPECT_EQ(refusal(R"({"model":"minilm","input":[1,"a"]})"), "400 input invalid_type");
  EXPECT_EQ(refusal(R"({"model":"minilm","input":[1,2.5]})"), "400 input invalid_type");
  EXPECT_EQ(refusal(R"({"model":"minilm","input":[1,30522]})"), "400 input invalid_value");
  EXPECT_EQ(refusal(R"({"model":"minilm","input":[-1]})"), "400 input invalid_value");
  EXPECT_EQ(refusal(R"({"model":"minilm","input":[1,1,1,1,1,1,1,1,1]})"), "400 input context_length_exceeded");
  EXPECT_EQ(refusal(R"({"model":"minilm","input":["a","b","c","d","e"]})"), "400 input invalid_value");
  EXPECT_EQ(refusal(R"({"model":"minilm","input":["a","b","c","d"]})"), "accepted");  // max_inputs 4
  EXPECT_EQ(refusal(R"({"model":"minilm","input":{"a":1}})"), "400 input invalid_type");
  EXPECT_EQ(refusal(R"({"model":"minilm","input":true})"), "400 input invalid_type");
  EXPECT_EQ(refusal(R"({"model":"minilm","input":"a","encoding_format":"int8"})"), "400 encoding_format invalid_value");
  EXPECT_EQ(refusal(R"({"model":"minilm","input":"a","dimensions":1})"), "400 dimensions unsupported_value");
  EXPECT_EQ(refusal(R"({"model":"minilm","input":"a","dimensions":"2"})"), "400 dimensions invalid_type");
  EXPECT_EQ(refusal(R"({"model":"minilm","input":"a","user":5})"), "400 user invalid_type");
  EXPECT_EQ(refusal(R"({"model":5,"input":"a"})"), "400 model invalid_type");
}

TEST(EmbeddingsRequest, ResponseShape) {
  const EmbeddingsModel m = fake();
  kvad::server::EmbeddingsRequest r = parse_embeddings_request(R"({"model":"minilm","input":[[101,7,102],[7]]})", m);
  const std::vector<float> v = {0.5f, -0.25f, 1.0f, -2.5f};
  const nlohmann::json f = nlohmann::json::parse(kvad::server::embeddings_response_body(r, v, m));
  EXPECT_EQ(f["object"], "list");
  EXPECT_EQ(f["model"], "minilm");
  EXPECT_EQ(f["usage"]["prompt_tokens"], 4);  // 3 ids and 1 id
  EXPECT_EQ(f["usage"]["total_tokens"], 4);
  ASSERT_EQ(f["data"].size(), 2u);
  EXPECT_EQ(f["data"][1]["object"], "embedding");
  EXPECT_EQ(f["data"][1]["index"], 1);
  EXPECT_EQ(f["data"][1]["embedding"], nlohmann::json::parse("[1.0, -2.5]"));
  r.base64 = true;
  const nlohmann::json b = nlohmann::json::parse(kvad::server::embeddings_response_body(r, v, m));
  EXPECT_EQ(b["data"][1]["embedding"], "AACAPwAAIMA=");  // 0x3f800000, 0xc0200000 little-endian
  EXPECT_THROW(kvad::server::embeddings_response_body(r, {1.0f}, m), kvad::Error);
}

TEST(EmbeddingsBase64, Rfc4648Vectors) {
  const std::pair<std::string, std::string> cases[] = {{"", ""},         {"f", "Zg=="},         {"fo", "Zm8="},
                                                       {"foo", "Zm9v"},  {"foob", "Zm9vYg=="},  {"fooba", "Zm9vYmE="},
                                                       {"foobar", "Zm9vYmFy"}};
  for (const auto& [in, want] : cases) EXPECT_EQ(kvad::server::base64_encode(in.data(), in.size()), want) << in;
}

}  // namespace
