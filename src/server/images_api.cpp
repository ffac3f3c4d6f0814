#include "server/images_api.h"

#include <cmath>

#include "engine/diffusion/scheduler_config.h"
#include "io/png.h"
#include "server/embeddings.h"
#include "server/json_parse.h"

namespace kvad::server {

using json = nlohmann::ordered_json;

namespace {

constexpr int kMaxDepth = 16;

ApiError bad(const std::string& param, const std::string& msg, const std::string& code = "invalid_value") {
  return ApiError(400, msg, "invalid_request_error", param, code);
}

const char* kind(const json& v) {
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer() || v.is_number_unsigned()) return "an integer";
  if (v.is_number_float()) return "a decimal";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return "null";
}

[[noreturn]] void bad_type(const std::string& param, const char* expected, const json& got) {
  throw bad(param, "Invalid type for '" + param + "': expected " + expected + ", but got " + kind(got) + " instead.",
            "invalid_type");
}

json parse_object(std::string_view text) {
  if (json_depth_over(text, kMaxDepth) != 0)
    throw bad("", "The JSON body of your request is nested more than " + std::to_string(kMaxDepth) + " levels deep.",
              "invalid_json");
  json body = parse_json_ordered_or_discarded(text);
  if (body.is_discarded()) throw bad("", "We could not parse the JSON body of your request.", "invalid_json");
  if (!body.is_object()) throw bad("", "The JSON body of your request must be an object.", "invalid_json");
  return body;
}

const std::string* text_field(const json& b, const char* name) {
  const json* v = field(b, name);
  if (!v) return nullptr;
  if (!v->is_string()) bad_type(name, "a string", *v);
  return &v->get_ref<const std::string&>();
}

// An integer, any int64 (the bounds are check_paint_request's); `dflt` when left out.
int64_t int_field(const json& b, const char* name, int64_t dflt) {
  const json* v = field(b, name);
  if (!v) return dflt;
  if (v->is_number_float()) {  // 20.0 is 20
    const double d = v->get<double>();
    if (!(std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15)) bad_type(name, "an integer", *v);
    return static_cast<int64_t>(d);
  }
  if (!v->is_number_integer() && !v->is_number_unsigned()) bad_type(name, "an integer", *v);
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    throw bad(name, "Invalid value for '" + std::string(name) + "': out of range.");
  return v->get<int64_t>();
}

std::optional<double> number_field(const json& b, const char* name) {
  const json* v = field(b, name);
  if (!v) return std::nullopt;
  if (!v->is_number()) bad_type(name, "a number", *v);
  return v->get<double>();
}

uint64_t seed_of(const json& b, const char* name, uint64_t random_seed) {
  const json* v = field(b, name);
  if (!v) return random_seed;
  if (v->is_number_unsigned()) return v->get<uint64_t>();
  const int64_t s = int_field(b, name, -1);
  if (s == -1) return random_seed;
  if (s < 0) throw bad(name, "Invalid value for '" + std::string(name) + "': a seed is >= 0, or -1 for a random one.");
  return static_cast<uint64_t>(s);
}

// check_paint_request's one line as a 400 naming `param`.
void check(const PaintRequest& r, const std::string& param) {
  try {
    check_paint_request(r);
  } catch (const Error& e) {
    throw bad(param, std::string("Invalid request: ") + e.what() + ".");
  }
}

// "WxH": each side 1..5 digits.
void parse_size(const std::string& s, PaintRequest& r) {
  if (s == "auto") return;
  const size_t x = s.find('x');
  auto side = [&](std::string_view d) -> int64_t {
    if (d.empty() || d.size() > 5 || d.find_first_not_of("0123456789") != std::string_view::npos)
      throw bad("size", "Invalid value for 'size': expected \"WIDTHxHEIGHT\" in pixels (e.g. \"512x512\") or "
                        "\"auto\", got \"" + s.substr(0, 32) + "\".");
    return std::stoll(std::string(d));
  };
  if (x == std::string::npos) side("");
  r.width = side(std::string_view(s).substr(0, x));
  r.height = side(std::string_view(s).substr(x + 1));
  if (r.width == 0 || r.height == 0)
    throw bad("size", "Invalid value for 'size': a side of 0 pixels (\"" + s + "\").");
}

// A scheduler name, as a 400 when parse_scheduler_name refuses it.
std::string scheduler_of(const std::string& name, const std::string& param) {
  try {
    diffusion::parse_scheduler_name(name);
  } catch (const Error& e) {
    throw bad(param, "Invalid value for '" + param + "': " + e.what() + ".");
  }
  return name;
}

}  // namespace

ImagesRequest parse_images_request(std::string_view text, uint64_t random_seed) {
  const json b = parse_object(text);
  ImagesRequest out;
  PaintRequest& r = out.paint;
  const std::string* prompt = text_field(b, "prompt");
  if (!prompt) throw bad("prompt", "Missing required parameter: 'prompt'.", "missing_required_parameter");
  r.prompt = *prompt;
  if (const std::string* m = text_field(b, "model")) out.model = *m;
  r.n = int_field(b, "n", 1);
  if (const std::string* s = text_field(b, "size")) parse_size(*s, r);
  if (const std::string* f = text_field(b, "response_format"); f && *f != "b64_json")
    throw bad("response_format", *f == "url" ? "Invalid value for 'response_format': kvad returns images as b64_json "
                                               "only (it keeps no files to link to)."
                                             : "Invalid value for 'response_format': '" + f->substr(0, 32) +
                                                   "'; supported: 'b64_json'.",
              "unsupported_value");
  if (const std::string* f = text_field(b, "output_format"); f && *f != "png")
    throw bad("output_format", "Invalid value for 'output_format': '" + f->substr(0, 32) + "'; kvad writes 'png' only.",
              "unsupported_value");
  for (const char* unused : {"quality", "style", "background", "moderation", "user"}) text_field(b, unused);
  r.steps = int_field(b, "steps", r.steps);
  r.seed = seed_of(b, "seed", random_seed);
  r.cfg = number_field(b, "cfg_scale");
  if (const std::string* np = text_field(b, "negative_prompt")) r.negative_prompt = *np;
  if (const std::string* s = text_field(b, "scheduler")) r.scheduler = scheduler_of(*s, "scheduler");
  check(r, r.n != 1 ? "n" : "");
  return out;
}

json images_response(const std::vector<PaintedImage>& images, int64_t created) {
  json data = json::array();
  for (const PaintedImage& im : images) data.push_back({{"b64_json", png_base64(im)}});
  json out = {{"created", created}, {"data", std::move(data)}, {"output_format", "png"}};
  if (!images.empty())
    out["size"] = std::to_string(images[0].width) + "x" + std::to_string(images[0].height);
  return out;
}

Txt2ImgRequest parse_txt2img_request(std::string_view text, uint64_t random_seed) {
  Txt2ImgRequest out;
  out.body = parse_object(text);
  const json& b = out.body;
  PaintRequest r;
  if (const std::string* p = text_field(b, "prompt")) r.prompt = *p;
  if (const std::string* np = text_field(b, "negative_prompt"); np && !np->empty()) r.negative_prompt = *np;
  r.steps = int_field(b, "steps", r.steps);
  r.cfg = number_field(b, "cfg_scale");
  r.width = int_field(b, "width", 0);
  r.height = int_field(b, "height", 0);
  if (field(b, "width") && r.width == 0) throw bad("width", "Invalid value for 'width': 0 pixels.");
  if (field(b, "height") && r.height == 0) throw bad("height", "Invalid value for 'height': 0 pixels.");
  r.seed = seed_of(b, "seed", random_seed);
  std::string sampler;
  if (const std::string* s = text_field(b, "sampler_name")) sampler = *s;
  else if (const std::string* s2 = text_field(b, "sampler_index")) sampler = *s2;
  // A1111 1.9+ names the sigma schedule apart: "DPM++ 2M" with "Karras" (other schedules: the sampler's own).
  if (const std::string* sched = text_field(b, "scheduler"); sched && *sched == "Karras" && sampler == "DPM++ 2M")
    sampler += " Karras";
  if (!sampler.empty()) r.scheduler = scheduler_of(sampler, "sampler_name");
  r.n = int_field(b, "batch_size", 1);
  const int64_t n_iter = int_field(b, "n_iter", 1);
  check(r, r.n != 1 ? "batch_size" : "");
  if (n_iter < 1 || n_iter > kPaintMaxImages || r.n * n_iter > kPaintMaxImages)
    throw bad("n_iter", "Invalid request: batch_size " + std::to_string(r.n) + " x n_iter " + std::to_string(n_iter) +
                            " pictures is out of range (1 to " + std::to_string(kPaintMaxImages) + ").");
  for (int64_t i = 0; i < n_iter; ++i) {
    out.batches.push_back(r);
    out.batches.back().seed = r.seed + static_cast<uint64_t>(i * r.n);
  }
  return out;
}

json txt2img_response(const Txt2ImgRequest& r, const std::vector<PaintRequest>& batches,
                      const std::vector<PaintedImage>& images, const std::string& model) {
  json imgs = json::array(), infotexts = json::array(), all_seeds = json::array(), all_prompts = json::array();
  for (const PaintedImage& im : images) {
    imgs.push_back(png_base64(im));
    infotexts.push_back(png::a1111_parameters(im.parameters));
  }
  for (const PaintRequest& b : batches)
    for (int64_t i = 0; i < b.n; ++i) {
      all_seeds.push_back(b.seed);
      all_prompts.push_back(b.prompt);
    }
  const PaintRequest& s = batches.front();
  const diffusion::SchedulerChoice sc = diffusion::parse_scheduler_name(s.scheduler);
  const std::string sampler = diffusion::a1111_sampler_name(sc.kind) + (sc.karras ? " Karras" : "");
  json params = r.body;
  params["prompt"] = s.prompt;
  params["negative_prompt"] = s.negative_prompt.value_or("");
  params["steps"] = s.steps;
  params["cfg_scale"] = *s.cfg;
  params["width"] = s.width;
  params["height"] = s.height;
  params["seed"] = s.seed;
  params["sampler_name"] = sampler;
  params["batch_size"] = s.n;
  params["n_iter"] = batches.size();
  const json info = {{"prompt", s.prompt},
                     {"all_prompts", all_prompts},
                     {"negative_prompt", s.negative_prompt.value_or("")},
                     {"seed", s.seed},
                     {"all_seeds", all_seeds},
                     {"subseed", -1},
                     {"width", s.width},
                     {"height", s.height},
                     {"sampler_name", sampler},
                     {"cfg_scale", *s.cfg},
                     {"steps", s.steps},
                     {"batch_size", s.n},
                     {"sd_model_name", model},
                     {"infotexts", infotexts}};
  return {{"images", std::move(imgs)}, {"parameters", std::move(params)}, {"info", dump(info)}};
}

std::string png_base64(const PaintedImage& im) {
  const std::string bytes =
      png::encode_rgb8(im.rgb, im.width, im.height, {{"parameters", png::a1111_parameters(im.parameters)}});
  return base64_encode(bytes.data(), bytes.size());
}

json a1111_samplers() {
  json out = json::array();
  for (const std::string& name : diffusion::scheduler_names()) {
    const diffusion::SchedulerChoice c = diffusion::parse_scheduler_name(name);
    out.push_back({{"name", diffusion::a1111_sampler_name(c.kind) + (c.karras ? " Karras" : "")},
                   {"aliases", json::array({name})},
                   {"options", json::object()}});
  }
  return out;
}

}  // namespace kvad::server
