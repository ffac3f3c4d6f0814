// libFuzzer: request bodies for POST /v1/images/generations and
// /sdapi/v1/txt2img (server/images_api.h); the first byte picks the parser
// ('o': OpenAI's, else A1111's). Parsing must succeed or throw
// server::ApiError 400; an accepted request must be within
// check_paint_request's bounds (it is called again here) and its answer must
// build; any other exception, a crash or a sanitizer report is a bug.
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "engine/painter.h"
#include "server/images_api.h"
#include "server/openai.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    if (data[0] == 'o') {
      const kvad::server::ImagesRequest r = kvad::server::parse_images_request(body, 1);
      kvad::check_paint_request(r.paint);
      (void)kvad::server::images_response({}, 0);
    } else {
      const kvad::server::Txt2ImgRequest r = kvad::server::parse_txt2img_request(body, 1);
      if (r.batches.empty() || r.batches.size() > static_cast<size_t>(kvad::kPaintMaxImages)) std::abort();
      int64_t pictures = 0;
      std::vector<kvad::PaintRequest> settled = r.batches;  // as Painter::settle leaves them
      for (kvad::PaintRequest& b : settled) {
        kvad::check_paint_request(b);
        pictures += b.n;
        b.cfg = b.cfg.value_or(7.5);
        if (b.scheduler.empty()) b.scheduler = "euler";
      }
      if (pictures > kvad::kPaintMaxImages) std::abort();
      (void)kvad::server::txt2img_response(r, settled, {}, "m");
    }
  } catch (const kvad::server::ApiError& e) {
    if (e.status != 400) std::abort();
    if (e.message.find('\n') != std::string::npos) std::abort();
    (void)kvad::server::dump(kvad::server::error_body(e));
  } catch (const std::exception&) {
    std::abort();
  }
  return 0;
}
