// Internal: SentencePiece's precompiled normalization rules
// (NormalizerSpec.precompiled_charsmap; tokenizers' "Precompiled"
// normalizer, whose bytes are the same blob in base64).
//
// Format (sentencepiece normalizer.cc Normalizer::DecodePrecompiledCharsMap):
// a little-endian u32 trie_size, then trie_size bytes of a darts-clone
// double array (u32 units) whose keys are input byte strings and whose
// values are byte offsets into the rest of the blob: NUL-terminated
// replacement strings.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvad::tok {

class PrecompiledCharsmap {
 public:
  /// Parses the blob. Throws kvad::Error ("<name>: precompiled_charsmap: ...")
  /// when it is shorter than its header says, its trie is not whole u32
  /// units, or empty.
  PrecompiledCharsmap(std::string_view blob, const std::string& name);

  /// The replacement of the shortest key that is a prefix of `chunk`
  /// (spm_precompiled's transform, which tokenizers calls), nullopt when
  /// no key is. Trie walks stay inside the array (a unit pointing outside
  /// ends the walk) and a value past the strings gives nullopt.
  std::optional<std::string_view> transform(std::string_view chunk) const;

  /// tokenizers' Precompiled::normalize: per extended grapheme cluster
  /// (UAX #29, ICU's character break iterator): a cluster under 6 bytes
  /// with a transform is replaced by it; otherwise each character by its
  /// own transform, or kept. `s` is valid UTF-8. Returns whether the first
  /// character was replaced by nothing (the alignments then start past 0).
  bool normalize(std::string& s) const;

 private:
  std::vector<uint32_t> units_;
  std::string normalized_;
};

/// RFC 4648 base64 (the standard alphabet, '=' padding optional) to bytes;
/// nullopt for another character or a bad length.
std::optional<std::string> base64_decode(std::string_view text);
std::string base64_encode(std::string_view bytes);

}  // namespace kvad::tok
