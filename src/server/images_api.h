// The image APIs' requests and answers, without HTTP (routes in
// image_routes.cpp):
//
// OpenAI's POST /v1/images/generations (platform.openai.com/docs/api-reference/images/create):
//   {"prompt": str (required), "model": str, "n": int, "size": "WxH" | "auto",
//    "response_format": "b64_json" (the only one: "url" is a 400, kvad keeps
//    no files to link to), "output_format": "png" (the only one),
//    "quality", "style", "background", "moderation", "user": accepted, unused;
//    kvad's extras: "steps", "seed" (-1: random), "cfg_scale",
//    "negative_prompt", "scheduler" (engine/diffusion/scheduler_config.h names)}
//   -> {"created", "data": [{"b64_json": PNG base64}], "output_format": "png", "size": "WxH"}
//
// AUTOMATIC1111's POST /sdapi/v1/txt2img (stable-diffusion-webui
// modules/api/models.py StableDiffusionTxt2ImgProcessingAPI): prompt,
// negative_prompt, steps, cfg_scale, width, height, seed (-1: random),
// sampler_name (or sampler_index; "DPM++ 2M" with "scheduler": "Karras" is
// dpm++2m_karras), batch_size (pictures from one noise draw), n_iter
// (batches, batch i seeded seed + i * batch_size as A1111 does); other
// fields (hires fix, restore_faces, ...) are accepted and unused.
//   -> {"images": [PNG base64], "parameters": {the request, defaults filled},
//       "info": "<JSON string: prompt, seed, all_seeds, infotexts, ...>"}
//
// Fields a request leaves out take the pipeline's defaults (Painter::settle:
// the model's size, 20 steps, its cfg and scheduler), not A1111's 512x512.
// Every bound is check_paint_request's (engine/painter.h), checked before
// anything is queued; batch_size x n_iter is at most kPaintMaxImages.
// Errors: ApiError 400 with one line naming the field.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/painter.h"
#include "server/openai.h"

namespace kvad::server {

/// POST /v1/images/generations, parsed; paint is checked by check_paint_request.
struct ImagesRequest {
  std::string model;  ///< "" when left out
  PaintRequest paint;
};
/// `random_seed` draws the seed of a request that asks for a random one.
ImagesRequest parse_images_request(std::string_view body, uint64_t random_seed);

/// The answer to an images request: one PNG (with A1111's parameters chunk) per picture.
nlohmann::ordered_json images_response(const std::vector<PaintedImage>& images, int64_t created);

/// POST /sdapi/v1/txt2img, parsed: `batches` (n_iter of them, each
/// batch_size pictures), each checked by check_paint_request.
struct Txt2ImgRequest {
  std::vector<PaintRequest> batches;
  nlohmann::ordered_json body;  ///< the request as sent (echoed as "parameters")
};
Txt2ImgRequest parse_txt2img_request(std::string_view body, uint64_t random_seed);

/// The txt2img answer for the settled `batches` and the pictures painted
/// (fewer when interrupted). `model` names the checkpoint (sd_model_name).
nlohmann::ordered_json txt2img_response(const Txt2ImgRequest& r, const std::vector<PaintRequest>& batches,
                                        const std::vector<PaintedImage>& images, const std::string& model);

/// A picture as base64 of its PNG with the `parameters` text chunk.
std::string png_base64(const PaintedImage& im);

/// A1111's sampler names kvad accepts (GET /sdapi/v1/samplers):
/// [{"name", "aliases": [kvad's name], "options": {}}].
nlohmann::ordered_json a1111_samplers();

}  // namespace kvad::server
