// The image APIs' request parsers and answers (server/images_api.h) without
// a model: OpenAI's /v1/images/generations and A1111's /sdapi/v1/txt2img
// bodies to PaintRequests, every bound a 400 with one line, and the answers'
// shapes. The real pipeline through real clients is tests/server/test_images.py.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "engine/painter.h"
#include "server/images_api.h"
#include "server/openai.h"

namespace {

using kvad::PaintRequest;
using kvad::server::ApiError;
using kvad::server::parse_images_request;
using kvad::server::parse_txt2img_request;
using json = nlohmann::ordered_json;

// "STATUS PARAM CODE: MESSAGE" of the refusal, "" when accepted.
std::string refusal(const std::string& body, bool a1111 = false) {
  try {
    if (a1111)
      parse_txt2img_request(body, 5);
    else
      parse_images_request(body, 5);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.message.find('\n'), std::string::npos) << e.message;
    return std::to_string(e.status) + " " + e.param + " " + e.code + ": " + e.message;
  }
  return "";
}

TEST(ImagesRequest, OpenAIFields) {
  const auto r = parse_images_request(
      R"({"model":"sd15","prompt":"a fox","n":2,"size":"128x64","response_format":"b64_json","output_format":"png",
          "quality":"auto","steps":3,"seed":9,"cfg_scale":4.5,"negative_prompt":"blur","scheduler":"DPM++ 2M Karras"})",
      5);
  EXPECT_EQ(r.model, "sd15");
  EXPECT_EQ(r.paint.prompt, "a fox");
  EXPECT_EQ(r.paint.n, 2);
  EXPECT_EQ(r.paint.width, 128);
  EXPECT_EQ(r.paint.height, 64);
  EXPECT_EQ(r.paint.steps, 3);
  EXPECT_EQ(r.paint.seed, 9u);
  EXPECT_EQ(*r.paint.cfg, 4.5);
  EXPECT_EQ(*r.paint.negative_prompt, "blur");
  EXPECT_EQ(r.paint.scheduler, "DPM++ 2M Karras");
  // Left out: the pipeline's defaults (0 size, no cfg, no negative prompt), the random seed given.
  const auto d = parse_images_request(R"({"prompt":"x","size":"auto"})", 5);
  EXPECT_EQ(d.paint.width, 0);
  EXPECT_FALSE(d.paint.cfg.has_value());
  EXPECT_FALSE(d.paint.negative_prompt.has_value());
  EXPECT_EQ(d.paint.seed, 5u);
  EXPECT_EQ(parse_images_request(R"({"prompt":"x","seed":-1})", 11).paint.seed, 11u);
  EXPECT_EQ(parse_images_request(R"({"prompt":"x","seed":18446744073709551615})", 11).paint.seed,
            18446744073709551615ull);
}

TEST(ImagesRequest, BoundsAre400) {
  EXPECT_NE(refusal(R"({"prompt":"x","size":"4096x4096"})").find("invalid_value: Invalid request: width 4096"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"prompt":"x","steps":0})").find("steps 0 is out of range"), std::string::npos);
  EXPECT_NE(refusal(R"({"prompt":"x","steps":1000000})").find("steps 1000000"), std::string::npos);
  EXPECT_NE(refusal(R"({"prompt":"x","n":100})").find("400 n invalid_value"), std::string::npos);
  EXPECT_NE(refusal(R"({"prompt":"x","size":"100x100"})").find("multiple of 8"), std::string::npos);
  EXPECT_NE(refusal(json{{"prompt", std::string(1 << 20, 'x')}}.dump()).find("1048576 bytes"), std::string::npos);
  EXPECT_NE(refusal(R"({"prompt":"x","response_format":"url"})").find("b64_json only"), std::string::npos);
  EXPECT_NE(refusal(R"({"prompt":"x","output_format":"webp"})").find("'png' only"), std::string::npos);
  EXPECT_NE(refusal(R"({"prompt":"x","scheduler":"heun"})").find("unknown scheduler"), std::string::npos);
  EXPECT_NE(refusal(R"({"prompt":"x","seed":-2})").find("400 seed"), std::string::npos);
  EXPECT_NE(refusal(R"({"prompt":"x","steps":2.5})").find("invalid_type"), std::string::npos);
  EXPECT_NE(refusal(R"({"prompt":"x","steps":1e300})").find("invalid_type"), std::string::npos);
  EXPECT_NE(refusal(R"({"prompt":"x","n":99999999999999999999})").find("400"), std::string::npos);
  EXPECT_NE(refusal(R"({"prompt":"x","cfg_scale":"high"})").find("invalid_type"), std::string::npos);
  EXPECT_NE(refusal(R"({"prompt":5})").find("invalid_type"), std::string::npos);
  EXPECT_NE(refusal(R"({"size":"64x64"})").find("missing_required_parameter"), std::string::npos);
  for (const char* size : {"64", "x64", "64x", "64x64x8", "-64x64", "0x64", "123456x64", "64 x 64"})
    EXPECT_NE(refusal(json{{"prompt", "x"}, {"size", size}}.dump()).find("400 size"), std::string::npos) << size;
  EXPECT_NE(refusal("[1]").find("invalid_json"), std::string::npos);
  EXPECT_NE(refusal("{").find("invalid_json"), std::string::npos);
  EXPECT_NE(refusal(std::string(100, '[') + std::string(100, ']')).find("nested"), std::string::npos);
  EXPECT_EQ(refusal(R"({"prompt":"x","steps":20.0})"), "");
}

TEST(ImagesRequest, Txt2ImgFields) {
  const auto r = parse_txt2img_request(
      R"({"prompt":"a fox","negative_prompt":"","steps":4,"cfg_scale":7,"width":64,"height":128,"seed":10,
          "sampler_name":"DPM++ 2M","scheduler":"Karras","batch_size":2,"n_iter":3,"enable_hr":false})",
      5);
  ASSERT_EQ(r.batches.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    const PaintRequest& b = r.batches[i];
    EXPECT_EQ(b.seed, 10u + 2 * i);  // A1111: batch i starts at seed + i * batch_size
    EXPECT_EQ(b.n, 2);
    EXPECT_EQ(b.width, 64);
    EXPECT_EQ(b.height, 128);
    EXPECT_EQ(b.scheduler, "DPM++ 2M Karras");
    EXPECT_FALSE(b.negative_prompt.has_value());  // "" is A1111's "none"
  }
  EXPECT_EQ(r.body["enable_hr"], false);
  EXPECT_EQ(parse_txt2img_request(R"({"prompt":"x","seed":-1})", 77).batches[0].seed, 77u);
  EXPECT_EQ(parse_txt2img_request(R"({"sampler_index":"Euler a"})", 1).batches[0].scheduler, "Euler a");
  EXPECT_EQ(parse_txt2img_request(R"({"sampler_name":"Euler","scheduler":"Karras"})", 1).batches[0].scheduler,
            "Euler");
  EXPECT_NE(refusal(R"({"width":4096,"height":4096})", true).find("4096"), std::string::npos);
  EXPECT_NE(refusal(R"({"batch_size":8,"n_iter":8})", true).find("400 n_iter"), std::string::npos);
  EXPECT_NE(refusal(R"({"n_iter":0})", true).find("400 n_iter"), std::string::npos);
  EXPECT_NE(refusal(R"({"width":0})", true).find("400 width"), std::string::npos);
  EXPECT_NE(refusal(R"({"sampler_name":"LMS"})", true).find("400 sampler_name"), std::string::npos);
}

TEST(ImagesRequest, Answers) {
  kvad::PaintedImage im;
  im.width = 8;
  im.height = 8;
  im.rgb.assign(8 * 8 * 3, 200);
  im.parameters.prompt = "p";
  im.parameters.steps = 2;
  im.parameters.sampler = "Euler";
  im.parameters.cfg_scale = 7.5;
  im.parameters.seed = 3;
  im.parameters.width = im.parameters.height = 8;
  const json o = kvad::server::images_response({im, im}, 123);
  EXPECT_EQ(o["created"], 123);
  EXPECT_EQ(o["size"], "8x8");
  ASSERT_EQ(o["data"].size(), 2u);
  EXPECT_EQ(o["data"][0]["b64_json"].get<std::string>().rfind("iVBORw0KGgo", 0), 0u);  // base64 of the PNG signature

  auto r = parse_txt2img_request(R"({"prompt":"p","seed":3,"n_iter":2})", 1);
  for (PaintRequest& b : r.batches) b.cfg = 7.5, b.scheduler = "euler", b.width = b.height = 8;
  const json a = kvad::server::txt2img_response(r, r.batches, {im}, "sd15");
  EXPECT_EQ(a["images"].size(), 1u);
  const json info = json::parse(a["info"].get<std::string>());
  EXPECT_EQ(info["all_seeds"], json::array({3, 4}));
  EXPECT_EQ(info["sampler_name"], "Euler");
  EXPECT_EQ(info["sd_model_name"], "sd15");
  EXPECT_EQ(info["infotexts"][0], "p\nSteps: 2, Sampler: Euler, CFG scale: 7.5, Seed: 3, Size: 8x8");
  EXPECT_EQ(a["parameters"]["n_iter"], 2);
  const json samplers = kvad::server::a1111_samplers();
  EXPECT_EQ(samplers.size(), 5u);
  EXPECT_EQ(samplers[1]["name"], "Euler a");
  EXPECT_EQ(samplers[4]["name"], "DPM++ 2M Karras");
}

}  // namespace
