#include "server/embeddings.h"

#include <bit>
#include <cstdint>
#include <cstring>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/embed.h"
#include "server/openai.h"

namespace kvad::server {

namespace {

using json = nlohmann::json;

ApiError bad(const std::string& msg, const std::string& param, const std::string& code = "invalid_value") {
  return ApiError(400, msg, "invalid_request_error", param, code);
}

const char* type_of(const json& j) {
  switch (j.type()) {
    case json::value_t::string: return "string";
    case json::value_t::array: return "array";
    case json::value_t::object: return "object";
    case json::value_t::boolean: return "boolean";
    case json::value_t::null: return "null";
    case json::value_t::number_float: return "number";
    default: return "integer";
  }
}

// One input of token ids, checked against the vocabulary and the length.
std::vector<int32_t> token_input(const json& a, const std::string& param, const EmbeddingsModel& e) {
  if (a.empty()) throw bad("'" + param + "' is an empty list of tokens.", param);
  if (a.size() > static_cast<size_t>(e.max_seq_length))
    throw bad("This model's maximum input length is " + std::to_string(e.max_seq_length) +
                  " tokens; '" + param + "' has " + std::to_string(a.size()) + ".",
              param, "context_length_exceeded");
  std::vector<int32_t> ids;
  ids.reserve(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const json& v = a[i];
    if (!v.is_number_integer())
      throw bad("'" + param + "[" + std::to_string(i) + "]' must be a token id (an integer), not of type " +
                    type_of(v) + ".", param, "invalid_type");
    const int64_t id = v.get<int64_t>();
    if (id < 0 || id >= e.n_vocab)
      throw bad("'" + param + "[" + std::to_string(i) + "]': token id " + std::to_string(id) +
                    " is not in the vocabulary (" + std::to_string(e.n_vocab) + " tokens).", param);
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

std::vector<std::vector<int32_t>> parse_input(const json& in, const EmbeddingsModel& e, size_t max_inputs) {
  std::vector<std::vector<int32_t>> out;
  auto text = [&](const json& s, const std::string& param) {
    if (s.get_ref<const std::string&>().empty()) throw bad("'" + param + "' must not be an empty string.", param);
    out.push_back(e.tokenize(s.get_ref<const std::string&>()));
  };
  if (in.is_string()) {
    text(in, "input");
    return out;
  }
  if (!in.is_array())
    throw bad(std::string("'input' must be a string, a list of strings, a list of token ids or a list of lists of "
                          "token ids, not of type ") + type_of(in) + ".", "input", "invalid_type");
  if (in.empty()) throw bad("'input' must not be an empty list.", "input");
  if (in[0].is_number_integer()) {  // one input as token ids
    out.push_back(token_input(in, "input", e));
    return out;
  }
  if (in.size() > max_inputs)
    throw bad("'input' has " + std::to_string(in.size()) + " items; at most " + std::to_string(max_inputs) +
                  " may be embedded in one request.", "input");
  const bool strings = in[0].is_string();
  for (size_t i = 0; i < in.size(); ++i) {
    const std::string param = "input[" + std::to_string(i) + "]";
    if (strings && in[i].is_string()) text(in[i], param);
    else if (!strings && in[i].is_array()) out.push_back(token_input(in[i], param, e));
    else
      throw bad("'" + param + "' is of type " + type_of(in[i]) + "; every item of 'input' must be " +
                    (strings ? "a string" : "a list of token ids") + ", like the first.", param, "invalid_type");
  }
  return out;
}

}  // namespace

std::string base64_encode(const void* data, size_t n) {
  static const char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const auto* p = static_cast<const uint8_t*>(data);
  std::string s;
  s.reserve((n + 2) / 3 * 4);
  for (size_t i = 0; i < n; i += 3) {
    const uint32_t v = uint32_t{p[i]} << 16 | (i + 1 < n ? uint32_t{p[i + 1]} << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
    s += kAlphabet[v >> 18 & 63];
    s += kAlphabet[v >> 12 & 63];
    s += i + 1 < n ? kAlphabet[v >> 6 & 63] : '=';
    s += i + 2 < n ? kAlphabet[v & 63] : '=';
  }
  return s;
}

EmbeddingsModel embeddings_model(const std::string& id, const Embedder& e) {
  EmbeddingsModel m;
  m.id = id;
  m.dim = e.dim();
  m.n_vocab = e.n_vocab();
  m.max_seq_length = e.config().max_seq_length;
  m.tokenize = [&e](std::string_view text) { return e.tokenize(text); };
  return m;
}

EmbeddingsRequest parse_embeddings_request(const std::string& body_text, const EmbeddingsModel& e,
                                           size_t max_inputs) {
  if (json_depth_over(body_text, kMaxJsonDepth) != 0)
    throw ApiError(400, "The JSON body of your request is nested more than " + std::to_string(kMaxJsonDepth) +
                            " levels deep.", "invalid_request_error", "", "invalid_json");
  json body;
  try {
    body = json::parse(body_text);
  } catch (const json::exception& ex) {
    throw ApiError(400, std::string("We could not parse the JSON body of your request: ") + ex.what(),
                   "invalid_request_error", "", "invalid_json");
  }
  if (!body.is_object())
    throw ApiError(400, std::string("The request body must be a JSON object, not of type ") + type_of(body) + ".",
                   "invalid_request_error", "", "invalid_type");
  const json* model = field(body, "model");
  if (!model) throw bad("Missing required parameter: 'model'.", "model", "missing_required_parameter");
  if (!model->is_string()) throw bad("'model' must be a string.", "model", "invalid_type");
  if (model->get<std::string>() != e.id)
    throw ApiError(404, "The model '" + model->get<std::string>() + "' does not exist; this server has '" + e.id +
                            "'.", "invalid_request_error", "model", "model_not_found");
  EmbeddingsRequest r;
  if (const json* f = field(body, "encoding_format")) {
    if (!f->is_string() || (*f != "float" && *f != "base64"))
      throw bad("'encoding_format' must be \"float\" or \"base64\".", "encoding_format");
    r.base64 = *f == "base64";
  }
  if (const json* d = field(body, "dimensions")) {
    if (!d->is_number_integer()) throw bad("'dimensions' must be an integer.", "dimensions", "invalid_type");
    if (d->get<int64_t>() != e.dim)
      throw bad("This model's embeddings have " + std::to_string(e.dim) +
                    " dimensions and kvad does not shorten them; 'dimensions' must be " + std::to_string(e.dim) +
                    " or absent.", "dimensions", "unsupported_value");
  }
  if (const json* u = field(body, "user"); u && !u->is_string())
    throw bad("'user' must be a string.", "user", "invalid_type");
  const json* in = field(body, "input");
  if (!in) throw bad("Missing required parameter: 'input'.", "input", "missing_required_parameter");
  r.inputs = parse_input(*in, e, max_inputs);
  size_t total = 0;
  for (const auto& v : r.inputs) total += v.size();
  if (total > kMaxEmbeddingTokens)
    throw bad("'input' has " + std::to_string(total) + " tokens in all; at most " +
                  std::to_string(kMaxEmbeddingTokens) + " may be embedded in one request.", "input",
              "context_length_exceeded");
  return r;
}

std::string embeddings_response_body(const EmbeddingsRequest& r, const std::vector<float>& vecs,
                                     const EmbeddingsModel& m) {
  const size_t dim = static_cast<size_t>(m.dim);
  if (vecs.size() != r.inputs.size() * dim)
    throw Error("embeddings: " + std::to_string(vecs.size()) + " values for " + std::to_string(r.inputs.size()) +
                " inputs of " + std::to_string(dim) + " dimensions");
  int64_t n_tokens = 0;
  nlohmann::ordered_json data = nlohmann::ordered_json::array();
  for (size_t i = 0; i < r.inputs.size(); ++i) {
    n_tokens += static_cast<int64_t>(r.inputs[i].size());
    const float* v = vecs.data() + i * dim;
    nlohmann::ordered_json item = {{"object", "embedding"}, {"index", i}};
    if (r.base64) {
      std::vector<uint8_t> bytes(dim * sizeof(float));
      std::memcpy(bytes.data(), v, bytes.size());
      if constexpr (std::endian::native == std::endian::big)
        for (size_t k = 0; k < bytes.size(); k += 4) std::swap(bytes[k], bytes[k + 3]), std::swap(bytes[k + 1], bytes[k + 2]);
      item["embedding"] = base64_encode(bytes.data(), bytes.size());
    } else {
      item["embedding"] = std::vector<float>(v, v + dim);
    }
    data.push_back(std::move(item));
  }
  nlohmann::ordered_json out = {{"object", "list"},
                                {"data", std::move(data)},
                                {"model", m.id},
                                {"usage", {{"prompt_tokens", n_tokens}, {"total_tokens", n_tokens}}}};
  return dump(out);
}

std::string embeddings_response(const std::string& body, const std::string& model_id, Embedder& e,
                                const std::function<bool()>& cancelled, size_t max_inputs) {
  const EmbeddingsModel m = embeddings_model(model_id, e);
  const EmbeddingsRequest r = parse_embeddings_request(body, m, max_inputs);
  return embeddings_response_body(r, e.embed(r.inputs, cancelled), m);
}

}  // namespace kvad::server
