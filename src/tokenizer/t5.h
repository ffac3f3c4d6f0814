// T5's tokenizer as transformers 5's T5Tokenizer (models/t5/tokenization_t5.py,
// the class diffusers' FLUX pipelines load tokenizer_2/ with) builds it, and
// the prompt tokenization of diffusers' FluxPipeline._get_t5_prompt_embeds.
//
// From a SentencePiece model (spiece.model) it is the tokenizers pipeline
// T5Tokenizer makes of one: normalizer Precompiled(the model's
// precompiled_charsmap; none when it has none), pre-tokenizer
// WhitespaceSplit then Metaspace("▁", prepend_scheme "always", or "never"
// without add_dummy_prefix, split), model Unigram(pieces and scores, then
// <extra_id_99> .. <extra_id_0> at score 0, unk_id, byte_fallback as the
// model says), post-processor "$A </s>", decoder Metaspace; the control and
// unknown pieces and the extra ids are special added tokens.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace kvad {

namespace tok {
struct SpieceModel;
}

/// The tokenizer of a T5 tokenizer folder (diffusers' tokenizer_2/, a
/// transformers checkpoint): tokenizer.json when present (with
/// tokenizer_config.json beside it), else spiece.model. Throws kvad::Error
/// naming the folder when it has neither, or as from_tokenizer_json and
/// parse_spiece_model do.
std::unique_ptr<Tokenizer> t5_tokenizer(const std::string& dir);

/// The tokenizer T5Tokenizer builds from a SentencePiece model (above);
/// `extra_ids` sentinel tokens (T5Tokenizer's default 100). `name` is used
/// in errors. Throws kvad::Error for a model that is not Unigram, has no
/// </s> piece, or whose precompiled_charsmap is malformed.
std::unique_ptr<Tokenizer> t5_tokenizer_from_spiece(const tok::SpieceModel& m, const std::string& name,
                                                    int extra_ids = 100);

/// The input ids of FluxPipeline._get_t5_prompt_embeds: tokenizer_2(prompt,
/// padding="max_length", max_length=max_sequence_length, truncation=True)
/// -- the prompt's tokens (added tokens such as <extra_id_0> matched), cut
/// to max_sequence_length - 1, then </s>, then <pad> up to
/// max_sequence_length (FLUX.1-dev 512, schnell 256). Throws kvad::Error
/// for max_sequence_length < 1 or over 2^16, or a tokenizer without </s>
/// or <pad>.
std::vector<int32_t> t5_prompt_ids(const Tokenizer& tok, std::string_view prompt, int64_t max_sequence_length);

}  // namespace kvad
