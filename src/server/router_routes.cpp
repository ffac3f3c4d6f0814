// What a router in front of several kvad servers asks each of them
// (sglang-router, which routes to any OpenAI-compatible backend): the
// model-info and server-info routes of SGLang's HTTP server, answered with
// kvad's model and slots. /health, /v1/models and /metrics (the load:
// running and queued requests, KV cache use) are the server's own.
// Source: sglang python/sglang/srt/entrypoints/http_server.py
// (get_model_info, get_server_info) for the field names.
#include "server/server_impl.h"

namespace kvad::server {

using json = nlohmann::ordered_json;

void Server::Impl::router_routes() {
  auto model_info = [this](const httplib::Request&, httplib::Response& res) {
    // model_path is the name requests give ("model"), as SGLang's is the
    // served model's path or Hub id.
    res.set_content(dump(json{{"model_path", o.model_id},
                              {"tokenizer_path", o.model_id},
                              {"is_generation", o.model_kind != "embedding"},
                              {"preferred_sampling_params", nullptr},
                              {"weight_version", "default"},
                              {"has_image_understanding", false},
                              {"has_audio_understanding", false},
                              {"model_type", model->hparams().arch},
                              {"architectures", json::array({model->hparams().arch})}}),
                    "application/json");
  };
  auto server_info = [this](const httplib::Request&, httplib::Response& res) {
    const SchedulerMetrics m = sched->metrics();
    res.set_content(dump(json{{"model_path", o.model_id},
                              {"served_model_name", o.model_id},
                              {"tp_size", 1},
                              {"dp_size", 1},
                              {"context_length", sched->n_ctx()},
                              {"max_running_requests", sched->n_slots()},
                              {"max_total_num_tokens", static_cast<int64_t>(sched->n_ctx()) * sched->n_slots()},
                              {"internal_states", json::array({{{"num_running_reqs", m.active_slots},
                                                                {"num_queue_reqs", m.queue_depth},
                                                                {"num_used_tokens", m.kv_used_tokens}}})},
                              {"version", "kvad"}}),
                    "application/json");
  };
  for (const char* p : {"/get_model_info", "/model_info"}) http.Get(p, model_info);
  for (const char* p : {"/get_server_info", "/server_info"}) http.Get(p, server_info);
}

}  // namespace kvad::server
