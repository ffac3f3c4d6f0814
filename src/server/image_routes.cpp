// The image routes (server/images_api.h): OpenAI's /v1/images/generations
// and the A1111 API image front ends speak, over the image queue
// (server/image_jobs.h).
#include <ctime>
#include <random>

#include "server/images_api.h"
#include "server/server_impl.h"

namespace kvad::server {

using json = nlohmann::ordered_json;

namespace {

ApiError no_image_model(const std::string& model_id) {
  return ApiError(400, "The server holds no image model (its model '" + model_id + "' is a text model); start kvad "
                  "serve with --image-model.", "invalid_request_error", "model", "model_not_supported");
}

uint64_t random_seed() { return std::random_device{}(); }

// Each request's defaults filled in by the pipeline (a 400 for what settle() refuses).
std::vector<PaintRequest> settled(const Painter& p, const std::vector<PaintRequest>& batches) {
  std::vector<PaintRequest> out;
  for (const PaintRequest& r : batches) {
    try {
      out.push_back(p.settle(r));
    } catch (const Error& e) {
      throw ApiError(400, std::string("Invalid request: ") + e.what() + ".", "invalid_request_error", "",
                     "invalid_value");
    }
  }
  return out;
}

}  // namespace

std::shared_ptr<ImageJob> Server::Impl::paint(const httplib::Request& req, httplib::Response& res,
                                              std::vector<PaintRequest> batches) {
  if (stopping) throw ApiError(503, "The server is shutting down.", "server_error", "", "server_shutting_down");
  bool queue_stopped = false;
  std::shared_ptr<ImageJob> job = images->submit(std::move(batches), &queue_stopped);
  if (!job) {
    if (queue_stopped) throw ApiError(503, "The server is shutting down.", "server_error", "", "server_shutting_down");
    res.set_header("Retry-After", "1");
    throw ApiError(503, "The image queue is full (" + std::to_string(images->max_queue()) +
                            " jobs wait behind the one painting); retry later.",
                   "server_error", "", "queue_full");
  }
  const int fd = find_connection_fd(req);
  while (!job->wait_for(static_cast<int>(kPoll.count()))) {
    if (stopping) {
      job->cancel = true;  // and wait for the painter to let go of it
    } else if (peer_closed(fd)) {
      job->cancel = true;  // the painter stops before its next step
      res.status = 499;    // nobody reads it
      return nullptr;
    }
  }
  if (!job->error.empty())
    throw ApiError(500, "Painting failed: " + job->error, "server_error", "", "internal_error");
  if (job->cancelled && !job->interrupted)
    throw ApiError(503, "The server is shutting down.", "server_error", "", "server_shutting_down");
  return job;
}

void Server::Impl::image_routes() {
  auto guarded = [this](auto fn) {
    return guarded_as(fn, [](const ApiError& e) { return error_body(e); });
  };
  auto need_images = [this] {
    if (!images) throw no_image_model(o.model_id);
  };

  http.Post("/v1/images/generations", guarded([this, need_images](const httplib::Request& req, httplib::Response& res) {
    need_images();
    const ImagesRequest r = parse_images_request(req.body, random_seed());
    if (!r.model.empty() && r.model != o.image_model_id)
      throw ApiError(404, "The model '" + sanitize_for_log(r.model, 64) + "' does not exist or is not an image model "
                     "(this server paints with '" + o.image_model_id + "').",
                     "invalid_request_error", "model", "model_not_found");
    const std::shared_ptr<ImageJob> job = paint(req, res, settled(images->painter(), {r.paint}));
    if (!job) return;
    if (job->interrupted)
      throw ApiError(409, "The image job was interrupted (/sdapi/v1/interrupt) before it finished.",
                     "invalid_request_error", "", "interrupted");
    res.set_content(dump(images_response(job->images, static_cast<int64_t>(std::time(nullptr)))),
                    "application/json");
  }));
  http.Get("/v1/images/generations", [](const httplib::Request& req, httplib::Response& res) {
    res.status = 405;
    res.set_content(dump(error_body(ApiError(405, "Method not allowed: use POST " + req.path + ".",
                                             "invalid_request_error", "", "method_not_allowed"))),
                    "application/json");
  });

  http.Post("/sdapi/v1/txt2img", guarded([this, need_images](const httplib::Request& req, httplib::Response& res) {
    need_images();
    const Txt2ImgRequest r = parse_txt2img_request(req.body, random_seed());
    const std::vector<PaintRequest> batches = settled(images->painter(), r.batches);
    const std::shared_ptr<ImageJob> job = paint(req, res, batches);
    if (!job) return;  // interrupted: answered with the batches painted before it
    res.set_content(dump(txt2img_response(r, batches, job->images, o.image_model_id)), "application/json");
  }));

  http.Get("/sdapi/v1/progress", guarded([this, need_images](const httplib::Request& req, httplib::Response& res) {
    need_images();
    const ImageProgress p = images->progress();
    double progress = 0, eta = 0;
    if (p.running && p.steps > 0 && p.batches > 0) {
      progress = static_cast<double>(p.batch * p.steps + p.step) / static_cast<double>(p.batches * p.steps);
      if (progress > 0) eta = p.elapsed_s / progress - p.elapsed_s;
    }
    json image = nullptr;
    if (!p.preview.empty() && req.get_param_value("skip_current_image") != "true") {
      const std::string bytes = png::encode_rgb8(p.preview, p.preview_w, p.preview_h);
      image = base64_encode(bytes.data(), bytes.size());
    }
    const json state = {{"skipped", false},
                        {"interrupted", p.interrupted},
                        {"stopping_generation", false},
                        {"job", p.running ? "txt2img" : ""},
                        {"job_count", p.job_count},
                        {"job_timestamp", "0"},
                        {"job_no", p.batch},
                        {"sampling_step", p.step},
                        {"sampling_steps", p.steps}};
    res.set_content(dump(json{{"progress", progress},
                              {"eta_relative", eta},
                              {"state", state},
                              {"current_image", image},
                              {"textinfo", nullptr}}),
                    "application/json");
  }));

  http.Post("/sdapi/v1/interrupt", guarded([this, need_images](const httplib::Request&, httplib::Response& res) {
    need_images();
    images->interrupt();
    res.set_content("{}", "application/json");
  }));

  http.Get("/sdapi/v1/sd-models", guarded([this, need_images](const httplib::Request&, httplib::Response& res) {
    need_images();
    const Painter& p = images->painter();
    res.set_content(dump(json::array({{{"title", o.image_model_id},
                                       {"model_name", o.image_model_id},
                                       {"hash", nullptr},
                                       {"sha256", nullptr},
                                       {"filename", p.pipeline().path},
                                       {"config", nullptr}}})),
                    "application/json");
  }));

  http.Get("/sdapi/v1/samplers", guarded([need_images](const httplib::Request&, httplib::Response& res) {
    need_images();
    res.set_content(dump(a1111_samplers()), "application/json");
  }));

  http.Get("/sdapi/v1/options", guarded([this, need_images](const httplib::Request&, httplib::Response& res) {
    need_images();
    res.set_content(dump(json{{"sd_model_checkpoint", o.image_model_id}, {"samples_format", "png"}}),
                    "application/json");
  }));
}

}  // namespace kvad::server
