// A SentencePiece model file (spiece.model, tokenizer.model): the
// serialized ModelProto of sentencepiece's src/sentencepiece_model.proto,
// read with a bounded protobuf wire-format reader (no libprotobuf): the
// fields a Unigram/BPE tokenizer needs, every other field skipped.
//
//   ModelProto      1 pieces (repeated SentencePiece), 2 trainer_spec,
//                   3 normalizer_spec
//   SentencePiece   1 piece (string), 2 score (float), 3 type (enum:
//                   1 NORMAL, 2 UNKNOWN, 3 CONTROL, 4 USER_DEFINED, 5 UNUSED, 6 BYTE)
//   TrainerSpec     3 model_type (1 UNIGRAM, 2 BPE, 3 WORD, 4 CHAR),
//                   35 byte_fallback, 40 unk_id, 41 bos_id, 42 eos_id, 43 pad_id
//   NormalizerSpec  1 name, 2 precompiled_charsmap (bytes), 3 add_dummy_prefix,
//                   4 remove_extra_whitespaces, 5 escape_whitespaces
// Defaults are the .proto's (model_type UNIGRAM, unk 0, bos 1, eos 2, pad
// -1, add_dummy_prefix / remove_extra_whitespaces / escape_whitespaces true).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvad::tok {

struct SpieceModel {
  struct Piece {
    std::string piece;
    float score = 0;
    int32_t type = 1;  ///< SentencePiece.Type (tokenizer.h TokenType has the same numbers)
  };
  std::vector<Piece> pieces;
  int32_t model_type = 1;  ///< 1 UNIGRAM, 2 BPE, 3 WORD, 4 CHAR
  bool byte_fallback = false;
  int32_t unk_id = 0, bos_id = 1, eos_id = 2, pad_id = -1;
  std::string normalizer_name;
  std::string precompiled_charsmap;  ///< the raw blob (tokenizer/precompiled.h); may be empty
  bool add_dummy_prefix = true, remove_extra_whitespaces = true, escape_whitespaces = true;
};

/// Files larger than this are refused before they are read.
constexpr size_t kMaxSpieceBytes = size_t{64} << 20;

/// Parses ModelProto bytes. `name` (the file) prefixes errors. Throws
/// kvad::Error "NAME: offset N: ..." for a truncated field, a varint over
/// 10 bytes, a length past the end of its message, a group or unknown wire
/// type, a wrong wire type for a known field, more than 2^22 pieces, a
/// piece that is empty or not UTF-8, a piece type
/// outside 1..6, an id field outside -1..pieces-1, or no pieces. Memory is
/// bounded by the input: every piece consumes input bytes.
SpieceModel parse_spiece_model(std::string_view bytes, const std::string& name);

/// Reads and parses the file `path` (at most kMaxSpieceBytes).
SpieceModel read_spiece_model(const std::string& path);

}  // namespace kvad::tok
