// llama.cpp's own server endpoints (not OpenAI's) over kvad's generation:
// POST /completion and /infill (a prompt as text or token ids, llama.cpp's
// field names, its response and server-sent-event shapes), /tokenize,
// /detokenize, /apply-template, GET /props and /slots. No HTTP here
// (llamacpp_routes.cpp has the handlers).
//
// Reference: llama.cpp's tools/server/README.md ("API Endpoints": POST
// /completion, /tokenize, /detokenize, /apply-template, /infill; GET /props,
// /slots) for the field names and shapes, and llama.cpp's GGUF keys for
// fill-in-the-middle tokens (tokenizer.ggml.fim_{pre,suf,mid,pad,rep,sep}_token_id,
// and the older tokenizer.ggml.{prefix,suffix,middle}_token_id).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/openai.h"
#include "server/stream.h"

namespace kvad {
class Tokenizer;
namespace gguf { class File; }
}

namespace kvad::server {

/// A model's fill-in-the-middle tokens; -1 where it has none.
struct FimTokens {
  int32_t pre = -1, suf = -1, mid = -1;  ///< prefix, suffix, middle: what /infill needs
  int32_t pad = -1, rep = -1, sep = -1;  ///< padding, repository name, file separator (repo-level prompts)
  bool ok() const { return pre >= 0 && suf >= 0 && mid >= 0; }
};

/// The FIM tokens of a model: each from its GGUF key
/// (tokenizer.ggml.fim_pre_token_id, ..., or the older prefix/suffix/middle
/// keys) when `f` has it and it names a token of `tok`, else the first
/// token of the vocabulary spelled as a family writes it: Qwen2.5-Coder
/// <|fim_prefix|> <|fim_suffix|> <|fim_middle|> <|fim_pad|> <|repo_name|>
/// <|file_sep|>; StarCoder <fim_prefix> <fim_suffix> <fim_middle> <fim_pad>
/// <repo_name> <file_sep>; CodeLlama <PRE> <SUF> <MID> (also as ▁<PRE> ...);
/// DeepSeek-Coder <｜fim▁begin｜> <｜fim▁hole｜> <｜fim▁end｜>. `f` may be null
/// (an HF checkpoint: the vocabulary alone). Never throws.
FimTokens find_fim_tokens(const gguf::File* f, const Tokenizer& tok);

/// One /infill `input_extra` chunk.
struct InfillChunk {
  std::string filename, text;
};

/// The /infill prompt as llama.cpp's server builds it: with repository
/// tokens (rep and sep) and extra chunks, <rep>myproject\n then
/// <sep>FILENAME\nTEXT per chunk; else the chunks' text as is; then
/// [BOS if the model adds one] <pre>PREFIX<suf>SUFFIX<mid>PROMPT. Code
/// text is tokenized without parsing special-token text. Throws ApiError
/// 400 code model_not_supported when the model has no FIM tokens (naming
/// `model_id`), and 400 context_length_exceeded when the text cannot fit
/// n_ctx tokens (checked by bytes before tokenizing: max_token_bytes is the
/// longest token's text).
std::vector<int32_t> infill_prompt(const Tokenizer& tok, const FimTokens& fim, const std::string& model_id,
                                   const std::string& prefix, const std::string& suffix,
                                   const std::vector<InfillChunk>& extra, const std::string& prompt,
                                   int32_t n_ctx, size_t max_token_bytes);

/// A validated /completion or /infill request.
struct LlamaCompletion {
  CompletionRequest r;   ///< chat false; prompt as text (r.prompt) or ids (r.prompt_ids)
  bool mixed = false;    ///< prompt was an array mixing token ids and strings: `pieces` holds it
  std::vector<nlohmann::ordered_json> pieces;  ///< ids and strings in order, for the handler to tokenize
  int32_t n_probs = 0;
  bool return_tokens = false;
  bool ignore_eos = false;
  int32_t repeat_last_n = 64;
  // /infill
  std::string input_prefix, input_suffix;
  std::vector<InfillChunk> input_extra;
};

/// Parses a /completion body (or, with `infill`, an /infill body: then
/// `prompt` is optional and input_prefix / input_suffix / input_extra are
/// read). Fields as llama.cpp's README names them: prompt (a string, token
/// ids, or ids and strings mixed; one prompt), n_predict (-1: no limit),
/// temperature, top_k, top_p, min_p, repeat_penalty, repeat_last_n,
/// presence_penalty, frequency_penalty, seed (-1: random), stop, grammar
/// (GBNF), json_schema, n_probs (0..20), logit_bias ([[id, bias | false]]
/// or {"id": bias}), ignore_eos, cache_prompt (accepted: kvad reuses cached
/// prefixes always), return_tokens, stream. Samplers kvad does not have are
/// accepted at their off values (mirostat 0, typical_p 1, dry_multiplier 0,
/// xtc_probability 0, dynatemp_range 0, top_n_sigma -1) and a 400
/// unsupported_value otherwise; other fields are ignored. Throws ApiError
/// 400 naming the field.
LlamaCompletion parse_llamacpp_completion(const std::string& body, bool infill, const SamplerParams& defaults);

/// llama.cpp's `stop_type`: "eos", "limit" or "word".
std::string llamacpp_stop_type(const GenEvent& last);

/// The per-token probabilities of `n_probs`: [{id, token, logprob, bytes,
/// top_logprobs: [{id, token, logprob, bytes}]}].
nlohmann::ordered_json llamacpp_probs(const std::vector<GenTokenLogprobs>& tokens,
                                      const std::function<std::string(int32_t)>& piece);

/// llama.cpp's `timings` from a request's usage (milliseconds, tokens per second).
nlohmann::ordered_json llamacpp_timings(const GenUsage& u);

/// A token's text for /tokenize with_pieces: a string when it is valid
/// UTF-8, else its bytes as a list of integers.
nlohmann::ordered_json llamacpp_piece(const std::string& piece);

/// The /completion event stream: data: {content, tokens, stop: false, ...}
/// per delta, then one with stop: true and the final fields (`final_fields`
/// filled by the caller: model, generation_settings, ...); an error is
/// data: {"error": {...}}.
std::unique_ptr<StreamEmitter> llamacpp_emitter(nlohmann::ordered_json final_fields, int32_t n_probs);

}  // namespace kvad::server
