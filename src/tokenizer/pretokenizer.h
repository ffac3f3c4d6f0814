// Pre-tokenization for byte-level BPE: the regex sequence each
// `tokenizer.ggml.pre` name stands for, and a splitter that applies it.
//
// Source for which regexes apply to which pre-tokenizer name: llama.cpp's
// src/llama-vocab.cpp (llm_tokenizer_bpe and the `tokenizer_pre` table in
// llama_vocab::impl::load) and the models' HF tokenizer.json files.
// Semantics of a regex sequence (llama.cpp's unicode_regex_split, HF's
// Split with behavior "Isolated"): each regex in turn splits every piece the
// previous regexes produced; matches and the gaps between them both become
// pieces, and a regex only sees the piece it is applied to (so `$` and
// `(?!\S)` look at the piece's end, not the text's).
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvad::tok {

struct PreTokenizerSpec {
  std::vector<std::string> regexes;  ///< PCRE2 syntax, applied in order
  bool ignore_merges = false;  ///< a piece that is itself a vocabulary token is used whole (llama3)
  bool add_bos = false;        ///< default for `tokenizer.ggml.add_bos_token`
};

/// The spec for a `tokenizer.ggml.pre` name; nullopt when unknown.
std::optional<PreTokenizerSpec> pre_tokenizer_spec(std::string_view name);
/// Comma-separated list of the names pre_tokenizer_spec() knows.
std::string supported_pre_tokenizers();

/// Compiled regex sequence (PCRE2, UTF + UCP, JIT when available). Matching is
/// thread-safe: split() keeps its scratch space per thread.
class RegexSplitter {
 public:
  /// Throws kvad::Error naming the pattern and offset on a bad pattern.
  explicit RegexSplitter(const std::vector<std::string>& patterns);
  ~RegexSplitter();
  RegexSplitter(const RegexSplitter&) = delete;
  RegexSplitter& operator=(const RegexSplitter&) = delete;

  /// Splits `text` into pieces, written to `out` as [begin, end) byte offsets
  /// into `text`, in order, covering all of it. Invalid UTF-8 never matches a
  /// regex; it ends up in the gaps between matches.
  void split(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const;

 private:
  std::vector<void*> codes_;  // pcre2_code_8*
  std::vector<bool> jit_;
};

}  // namespace kvad::tok
