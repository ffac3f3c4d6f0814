// CLIP's BPE vocabulary built into kvad, for checkpoints that carry no
// tokenizer folder (Stable Diffusion single files in Stability's original
// layout). The vocabulary is data/bpe_simple_vocab_16e6.txt.gz, unchanged
// from the open-clip-torch wheel (data/README.md).
//
// The vocabulary is CLIP's simple_tokenizer.py construction (Radford et al.
// 2021; openai/CLIP clip/simple_tokenizer.py), which is also what the
// vocab.json of openai/clip-vit-large-patch14 holds: the 256 byte-level
// characters of GPT-2's byte map, the same 256 with "</w>", one token per
// merge of the file's lines 2..48895 (each merge's two halves joined), then
// <|startoftext|> (49406) and <|endoftext|> (49407): 49408 tokens.
#pragma once
#include <string>
#include <string_view>

namespace kvad {

struct ClipVocabTexts {
  std::string vocab_json;  ///< {"token": id, ...}, 49408 entries
  std::string merges_txt;  ///< "#version: 0.2" then "left right" per merge, 48894 lines
};

/// The built-in vocabulary as the two files of a transformers CLIP tokenizer
/// folder. Throws kvad::Error if the embedded data does not inflate to the
/// expected 49408-token vocabulary (a corrupt build).
ClipVocabTexts builtin_clip_vocab();

}  // namespace kvad
