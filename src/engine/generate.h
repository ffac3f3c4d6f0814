// Prefill a prompt, then decode token by token, streaming text.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/speculative.h"

namespace kvad {

class TokenGrammar;

class Session;
class Sampler;
class Tokenizer;

struct GenerateStats {
  int32_t n_prompt = 0;      ///< prompt tokens evaluated (past the reused prefix)
  int32_t n_cached = 0;      ///< prompt tokens reused from the cache
  int32_t n_generated = 0;   ///< tokens sampled
  double prefill_s = 0;      ///< seconds in prompt evaluation
  double decode_s = 0;       ///< seconds in decode steps
  int32_t n_decode_evals = 0;   ///< target forward calls of the decode steps (speculation: one per verify or plain step)
  int32_t n_decode_tokens = 0;  ///< tokens the decode steps chose (n_decode_evals without speculation); for tok/s
  SpecStats spec;            ///< speculation's counters (zero without a proposer)
  std::string stop;          ///< "eog", "length", "stopped", "context"
};

struct GenerateOptions {
  int32_t max_tokens = 256;  ///< -1: until end of generation or context full
  int32_t n_batch = 512;     ///< prompt tokens per forward call
  int seq = 0;
  /// Prefix reuse (DESIGN.md seam 6): the token ids sequence `seq` holds.
  /// When set, only the prompt tokens past the longest common prefix with
  /// these are evaluated (via Session::truncate, continuing from the position
  /// it returns); on return it holds exactly what the cache holds. When
  /// null, the sequence starts empty.
  std::vector<int32_t>* held = nullptr;
  /// Decode control tokens as their text (StreamDecoder's `special`), for
  /// replies a parser reads by their control-token markers (gpt-oss's
  /// Harmony channels).
  bool special_text = false;
  /// When set, every sampled token must continue a sentence of this grammar
  /// (llama.cpp's --grammar / --json-schema): the logits of the others are
  /// masked before sampling; end-of-generation is allowed exactly where the
  /// text is a whole sentence, and generation stops (stop "grammar") when no
  /// byte can follow. The caller owns it; it is advanced in place.
  TokenGrammar* grammar = nullptr;
  /// When set, decoding speculates with it (engine/speculative.h): the same
  /// tokens at temperature 0, the same distribution otherwise. The caller
  /// owns it.
  Proposer* proposer = nullptr;
  SpecOptions spec;
};

/// Length of the longest common prefix of a and b.
size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b);

/// Evaluates `prompt` on sequence opts.seq (reusing a cached prefix when
/// opts.held is set), then samples up to
/// max_tokens tokens, stopping at an end-of-generation token. Each complete
/// piece of UTF-8 text goes to on_text; returning false from it stops.
/// Throws kvad::Error when the prompt does not fit the context.
GenerateStats generate(Session& s, const Tokenizer& tok, Sampler& sampler,
                       const std::vector<int32_t>& prompt, const GenerateOptions& opts,
                       const std::function<bool(const std::string&)>& on_text);

/// Evaluates tokens on seq from position cached(seq) in chunks of n_batch,
/// asking logits only for the last one; returns them ([n_vocab]).
const std::vector<float>& prefill(Session& s, const std::vector<int32_t>& tokens, int seq, int32_t n_batch);

}  // namespace kvad
