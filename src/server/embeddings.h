// POST /v1/embeddings (OpenAI API reference, "Embeddings"; the `openai`
// Python package's EmbeddingCreateParams and CreateEmbeddingResponse types):
// request validation and the response object. No HTTP here.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace kvad {
class Embedder;
}

namespace kvad::server {

/// Inputs one request may embed, and tokens summed over them (OpenAI's own
/// limits: 2048 inputs, 300,000 tokens).
inline constexpr size_t kMaxEmbeddingInputs = 2048;
inline constexpr size_t kMaxEmbeddingTokens = 300000;

/// Answers a /v1/embeddings body with the response's JSON text:
///   {"object": "list", "data": [{"object": "embedding", "index": i,
///    "embedding": [f32 ...] | "base64 of little-endian f32"}], "model",
///    "usage": {"prompt_tokens", "total_tokens"}}.
/// Request fields: model (required; must be `model_id`, else 404
/// model_not_found), input (required: a non-empty string, a list of up to
/// max_inputs non-empty strings, a non-empty list of token ids, or a list of
/// such lists; text is tokenized with the model's specials and truncated at
/// its max_seq_length as sentence-transformers does, token ids are used as
/// given and may not exceed it), encoding_format ("float", the default, or
/// "base64"; more than kMaxEmbeddingTokens tokens in all is refused),
/// dimensions (accepted only when equal to the model's: kvad does
/// not shorten embeddings), user (ignored). A null field is as if absent;
/// unknown fields are ignored. Throws ApiError 400 (invalid_json,
/// invalid_type, invalid_value, missing_required_parameter, unsupported_value,
/// context_length_exceeded) naming the field, before any model work.
/// `cancelled` is asked between forward calls (Embedder::embed): true ends
/// the work with EmbedCancelled.
std::string embeddings_response(const std::string& body, const std::string& model_id, Embedder& embedder,
                                const std::function<bool()>& cancelled = nullptr,
                                size_t max_inputs = kMaxEmbeddingInputs);

/// What the request parser needs to know of the model (an Embedder's, or a
/// stand-in in tests and the fuzz target).
struct EmbeddingsModel {
  std::string id;              ///< the model id requests must name
  int64_t dim = 0;             ///< embedding dimensions
  int32_t n_vocab = 0;         ///< token ids accepted: [0, n_vocab)
  int32_t max_seq_length = 0;  ///< most token ids one input may have
  /// Text → token ids (with specials, truncated at max_seq_length).
  std::function<std::vector<int32_t>(std::string_view)> tokenize;
};
EmbeddingsModel embeddings_model(const std::string& id, const Embedder& e);

/// A validated request: the inputs as token ids, and the answer's encoding.
struct EmbeddingsRequest {
  std::vector<std::vector<int32_t>> inputs;
  bool base64 = false;
};
/// The validation of embeddings_response, without the model's work.
/// Throws ApiError as documented there.
EmbeddingsRequest parse_embeddings_request(const std::string& body, const EmbeddingsModel& m,
                                           size_t max_inputs = kMaxEmbeddingInputs);
/// The response JSON text for `r` and its vectors ([r.inputs.size(), m.dim]).
std::string embeddings_response_body(const EmbeddingsRequest& r, const std::vector<float>& vecs,
                                     const EmbeddingsModel& m);

/// RFC 4648 base64 (with padding) of `n` bytes.
std::string base64_encode(const void* data, size_t n);

}  // namespace kvad::server
