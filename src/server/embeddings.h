// POST /v1/embeddings (OpenAI API reference, "Embeddings"; the `openai`
// Python package's EmbeddingCreateParams and CreateEmbeddingResponse types):
// request validation and the response object. No HTTP here.
#pragma once
#include <cstddef>
#include <string>

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
std::string embeddings_response(const std::string& body, const std::string& model_id, Embedder& embedder,
                                size_t max_inputs = kMaxEmbeddingInputs);

/// RFC 4648 base64 (with padding) of `n` bytes.
std::string base64_encode(const void* data, size_t n);

}  // namespace kvad::server
