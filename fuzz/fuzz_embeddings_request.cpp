// libFuzzer: request bodies for POST /v1/embeddings (server/embeddings.h),
// against a stand-in model (one token id per byte). Parsing must succeed or
// throw server::ApiError (an HTTP 4xx answer), and an accepted request's
// inputs must respect the bounds the parser promises; any other exception,
// a crash or a sanitizer report is a bug.
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "server/embeddings.h"
#include "server/openai.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  kvad::server::EmbeddingsModel m;
  m.id = "m";
  m.dim = 3;
  m.n_vocab = 300;
  m.max_seq_length = 16;
  m.tokenize = [](std::string_view t) {
    std::vector<int32_t> ids;
    for (unsigned char c : t.substr(0, 16)) ids.push_back(c);
    return ids;
  };
  try {
    const kvad::server::EmbeddingsRequest r = kvad::server::parse_embeddings_request(body, m, 8);
    if (r.inputs.empty() || r.inputs.size() > 8) std::abort();
    for (const auto& in : r.inputs) {
      if (in.empty() || in.size() > 16) std::abort();
      for (int32_t id : in)
        if (id < 0 || id >= m.n_vocab) std::abort();
    }
    (void)kvad::server::embeddings_response_body(r, std::vector<float>(r.inputs.size() * 3, 0.5f), m);
  } catch (const kvad::server::ApiError& e) {
    if (e.status < 400 || e.status >= 500) std::abort();
    (void)kvad::server::dump(kvad::server::error_body(e));
  } catch (const std::exception&) {
    std::abort();
  }
  return 0;
}
