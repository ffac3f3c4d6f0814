// CLIP's BPE tokenizer from a diffusers pipeline's `tokenizer/` (or
// `tokenizer_2/`) folder: vocab.json + merges.txt, with tokenizer_config.json
// and special_tokens_map.json when present. The text encoders of SD 1.5, SDXL
// and FLUX read their prompt through it.
//
// It is the tokenizer transformers 5 builds for CLIPTokenizer (the
// `tokenizers` pipeline of models/clip/tokenization_clip.py, which is also
// transformers 4's CLIPTokenizerFast): NFC, whitespace runs to one space,
// lower-casing; CLIP's word regex, then GPT-2's byte-level map; BPE with the
// `</w>` end-of-word suffix; <|startoftext|> ... <|endoftext|> around the
// ids. Special tokens are those of the config (bos, eos, unk, pad; a pad such
// as SDXL's "!" becomes a special token too, as transformers makes it), each
// with the flags of the last attribute naming it. Put together as a
// tokenizer.json and run by kvad's HF tokenizer (tokenizer/hf_*.cpp); tests
// compare against transformers' CLIPTokenizer on the real CLIP vocabulary.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace kvad {

/// How the text is cleaned before CLIP's word regex.
enum class ClipCleaning {
  /// transformers 5's CLIPTokenizer (= transformers 4's CLIPTokenizerFast):
  /// NFC, whitespace runs to one space, lower-casing.
  Tokenizers,
  /// transformers 4's slow CLIPTokenizer when ftfy is not installed (what a
  /// diffusers pipeline loaded with transformers 4 uses): BasicTokenizer's
  /// clean-up -- control and format characters (Cc, Cf, Co, Cn, Cs), NUL
  /// and U+FFFD removed, whitespace to spaces, spaces around CJK ideographs
  /// -- then NFC and lower-casing; special tokens matched in the raw text.
  Basic,
};

class ClipTokenizer {
 public:
  /// Reads `dir`/vocab.json and `dir`/merges.txt (required) and
  /// tokenizer_config.json, special_tokens_map.json (optional). Throws
  /// kvad::Error naming the file for a missing or malformed file, a merges
  /// line that is not two tokens, special tokens absent from the vocabulary,
  /// or a model_max_length outside 2..4096.
  static ClipTokenizer from_folder(const std::string& dir, ClipCleaning cleaning = ClipCleaning::Tokenizers);
  /// The same from file contents; empty `config` / `special_tokens_map`
  /// mean absent. `name` prefixes error messages.
  static ClipTokenizer from_texts(std::string_view vocab_json, std::string_view merges_txt,
                                  std::string_view config = {}, std::string_view special_tokens_map = {},
                                  const std::string& name = "tokenizer",
                                  ClipCleaning cleaning = ClipCleaning::Tokenizers);

  /// The tokenizer of openai/clip-vit-large-patch14 (SD 1.5's and SDXL's
  /// first; `pad_token` "<|endoftext|>") or of SDXL's tokenizer_2 (`pad_token`
  /// "!") on CLIP's vocabulary built into kvad (tokenizer/clip_vocab.h), with
  /// model_max_length 77: for checkpoints that ship no tokenizer folder.
  /// Throws kvad::Error for a pad token outside the vocabulary.
  static ClipTokenizer builtin(std::string_view pad_token, ClipCleaning cleaning = ClipCleaning::Tokenizers);

  /// transformers' tokenizer(text).input_ids: BOS, the text's ids, EOS; no
  /// truncation. Text equal to a special token's is that token.
  std::vector<int32_t> encode(std::string_view text) const;
  /// What diffusers' pipelines feed the text encoder:
  /// tokenizer(text, padding="max_length", max_length=model_max_length,
  /// truncation=True).input_ids -- exactly max_length() ids: BOS, at most
  /// max_length() - 2 of the text's ids, EOS, then pad() to the end.
  std::vector<int32_t> encode_padded(std::string_view text) const;

  int32_t bos() const { return bos_; }  ///< <|startoftext|>, 49406 in CLIP's vocabulary
  int32_t eos() const { return eos_; }  ///< <|endoftext|>, 49407
  int32_t pad() const { return pad_; }  ///< SD 1.5: eos; SDXL's tokenizer_2: "!" (0)
  int max_length() const { return max_length_; }  ///< model_max_length, 77
  const Tokenizer& tokenizer() const { return *tok_; }

 private:
  std::vector<int32_t> body(std::string_view text) const;
  std::shared_ptr<const Tokenizer> tok_;
  ClipCleaning cleaning_ = ClipCleaning::Tokenizers;
  std::vector<std::pair<std::string, int32_t>> specials_;  // longest first
  int32_t bos_ = -1, eos_ = -1, pad_ = -1;
  int max_length_ = 77;
};

}  // namespace kvad
