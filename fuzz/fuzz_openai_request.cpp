// libFuzzer: request bodies for /v1/chat/completions, /v1/completions,
// /v1/messages (Anthropic), /v1/responses, ollama's /api/chat and
// /api/generate, and llama.cpp's /completion and /infill.
// Parsing must succeed or throw server::ApiError (an HTTP 4xx answer);
// any other exception, a crash or a sanitizer report is a bug.
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <string>

#include "server/anthropic.h"
#include "server/llamacpp_api.h"
#include "server/ollama_api.h"
#include "server/openai.h"
#include "server/responses.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  for (bool chat : {true, false}) {
    try {
      kvad::server::CompletionRequest r = kvad::server::parse_completion_request(body, chat);
      (void)kvad::server::dump(kvad::server::usage_json(kvad::GenUsage{}));
      (void)r;
    } catch (const kvad::server::ApiError& e) {
      if (e.status < 400 || e.status >= 500) std::abort();
      (void)kvad::server::dump(kvad::server::error_body(e));
    } catch (const std::exception&) {
      std::abort();
    }
  }
  for (int api = 0; api < 2; ++api) {
    try {
      kvad::server::ResponsesEcho echo;
      kvad::server::CompletionRequest r = api == 0 ? kvad::server::parse_anthropic_request(body)
                                                   : kvad::server::parse_responses_request(body, &echo);
      (void)r;
    } catch (const kvad::server::ApiError& e) {
      if (e.status < 400 || e.status >= 500) std::abort();
      (void)kvad::server::dump(kvad::server::anthropic_error_body(e));
    } catch (const std::exception&) {
      std::abort();
    }
  }
  for (bool flag : {true, false}) {
    try {
      kvad::server::OllamaRequest r = kvad::server::parse_ollama_request(body, flag, kvad::server::openai_sampling_defaults());
      (void)r;
    } catch (const kvad::server::ApiError& e) {
      if (e.status < 400 || e.status >= 500) std::abort();
      (void)kvad::server::dump(kvad::server::ollama_error_body(e));
    } catch (const std::exception&) {
      std::abort();
    }
    try {
      kvad::server::LlamaCompletion r = kvad::server::parse_llamacpp_completion(body, flag, kvad::server::openai_sampling_defaults());
      (void)r;
    } catch (const kvad::server::ApiError& e) {
      if (e.status < 400 || e.status >= 500) std::abort();
    } catch (const std::exception&) {
      std::abort();
    }
  }
  return 0;
}
