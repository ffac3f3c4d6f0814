// SentencePiece ModelProto reader (spiece_model.h). Wire format: Protocol
// Buffers encoding (protobuf.dev/programming-guides/encoding): each field a
// varint key (number << 3 | wire type), then a varint (0), 8 bytes (1), a
// varint length and that many bytes (2), or 4 bytes (5); groups (3, 4) are
// not used by sentencepiece_model.proto and are refused.
#include "tokenizer/spiece_model.h"

#include <cstring>
#include <filesystem>
#include <fstream>

#include "base/error.h"
#include "tokenizer/unicode.h"

namespace kvad::tok {

namespace {

constexpr size_t kMaxPieces = size_t{1} << 22;

class Reader {
 public:
  Reader(std::string_view b, size_t base, const std::string& name) : b_(b), base_(base), name_(name) {}
  bool done() const { return pos_ >= b_.size(); }
  [[noreturn]] void fail(const std::string& msg) const {
    throw Error(name_ + ": offset " + std::to_string(base_ + pos_) + ": " + msg);
  }
  uint64_t varint() {
    uint64_t v = 0;
    for (int i = 0; i < 10; ++i) {
      if (pos_ >= b_.size()) fail("truncated varint");
      const uint8_t c = static_cast<uint8_t>(b_[pos_++]);
      if (i == 9 && c > 1) fail("varint longer than 64 bits");
      v |= uint64_t{c & 0x7Fu} << (7 * i);
      if (!(c & 0x80)) return v;
    }
    fail("varint longer than 10 bytes");
  }
  // The next field's key; false at the end of the message.
  bool key(uint32_t& field, uint32_t& wire) {
    if (done()) return false;
    const uint64_t k = varint();
    field = static_cast<uint32_t>(k >> 3), wire = static_cast<uint32_t>(k & 7);
    if (k >> 3 == 0 || k >> 32) fail("field number " + std::to_string(k >> 3) + " is not valid");
    return true;
  }
  // A length-delimited payload as a sub-reader; `base` tracks file offsets for errors.
  Reader bytes() {
    const uint64_t n = varint();
    if (n > b_.size() - pos_)
      fail("a length of " + std::to_string(n) + " bytes passes the end of its message (" +
           std::to_string(b_.size() - pos_) + " left)");
    Reader r(b_.substr(pos_, n), base_ + pos_, name_);
    pos_ += n;
    return r;
  }
  std::string_view rest() const { return b_.substr(pos_); }
  float fixed32_float() {
    if (b_.size() - pos_ < 4) fail("truncated 32-bit field");
    uint32_t u = 0;
    for (int i = 3; i >= 0; --i) u = u << 8 | static_cast<uint8_t>(b_[pos_ + static_cast<size_t>(i)]);
    pos_ += 4;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  void skip(uint32_t wire) {
    switch (wire) {
      case 0: varint(); return;
      case 1:
        if (b_.size() - pos_ < 8) fail("truncated 64-bit field");
        pos_ += 8;
        return;
      case 2: bytes(); return;
      case 5:
        if (b_.size() - pos_ < 4) fail("truncated 32-bit field");
        pos_ += 4;
        return;
      default: fail("wire type " + std::to_string(wire) + " (groups or unknown) is not used by ModelProto");
    }
  }
  void need(uint32_t wire, uint32_t want, const char* field) const {
    if (wire != want)
      fail(std::string(field) + " has wire type " + std::to_string(wire) + ", expected " + std::to_string(want));
  }
  int32_t int32(uint32_t wire, const char* field) {
    need(wire, 0, field);
    return static_cast<int32_t>(static_cast<uint32_t>(varint()));  // int32 is sign-extended to 64 bits on the wire
  }
  bool boolean(uint32_t wire, const char* field) {
    need(wire, 0, field);
    return varint() != 0;
  }
  std::string string(uint32_t wire, const char* field) {
    need(wire, 2, field);
    return std::string(bytes().rest());
  }

 private:
  std::string_view b_;
  size_t base_;
  size_t pos_ = 0;
  const std::string& name_;
};

SpieceModel::Piece read_piece(Reader r) {
  SpieceModel::Piece p;
  uint32_t f, w;
  while (r.key(f, w)) {
    if (f == 1) {
      p.piece = r.string(w, "SentencePiece.piece");
    } else if (f == 2) {
      r.need(w, 5, "SentencePiece.score");
      p.score = r.fixed32_float();
    } else if (f == 3) {
      p.type = r.int32(w, "SentencePiece.type");
      if (p.type < 1 || p.type > 6) r.fail("SentencePiece.type " + std::to_string(p.type) + " is not 1..6");
    } else {
      r.skip(w);
    }
  }
  std::string fixed;
  if (p.piece.empty()) r.fail("an empty piece");
  if (uni::sanitize(p.piece, fixed)) r.fail("a piece that is not valid UTF-8");
  return p;
}

void read_trainer(Reader r, SpieceModel& m) {
  uint32_t f, w;
  while (r.key(f, w)) {
    switch (f) {
      case 3: m.model_type = r.int32(w, "TrainerSpec.model_type"); break;
      case 35: m.byte_fallback = r.boolean(w, "TrainerSpec.byte_fallback"); break;
      case 40: m.unk_id = r.int32(w, "TrainerSpec.unk_id"); break;
      case 41: m.bos_id = r.int32(w, "TrainerSpec.bos_id"); break;
      case 42: m.eos_id = r.int32(w, "TrainerSpec.eos_id"); break;
      case 43: m.pad_id = r.int32(w, "TrainerSpec.pad_id"); break;
      default: r.skip(w);
    }
  }
  if (m.model_type < 1 || m.model_type > 4) r.fail("TrainerSpec.model_type " + std::to_string(m.model_type) + " is not 1..4");
}

void read_normalizer(Reader r, SpieceModel& m) {
  uint32_t f, w;
  while (r.key(f, w)) {
    switch (f) {
      case 1: m.normalizer_name = r.string(w, "NormalizerSpec.name"); break;
      case 2: m.precompiled_charsmap = r.string(w, "NormalizerSpec.precompiled_charsmap"); break;
      case 3: m.add_dummy_prefix = r.boolean(w, "NormalizerSpec.add_dummy_prefix"); break;
      case 4: m.remove_extra_whitespaces = r.boolean(w, "NormalizerSpec.remove_extra_whitespaces"); break;
      case 5: m.escape_whitespaces = r.boolean(w, "NormalizerSpec.escape_whitespaces"); break;
      default: r.skip(w);
    }
  }
}

}  // namespace

SpieceModel parse_spiece_model(std::string_view bytes, const std::string& name) {
  if (bytes.size() > kMaxSpieceBytes)
    throw Error(name + ": " + std::to_string(bytes.size()) + " bytes, more than the " +
                std::to_string(kMaxSpieceBytes >> 20) + " MiB a SentencePiece model may have");
  SpieceModel m;
  Reader r(bytes, 0, name);
  uint32_t f, w;
  while (r.key(f, w)) {
    if (f == 1) {
      r.need(w, 2, "ModelProto.pieces");
      if (m.pieces.size() >= kMaxPieces) r.fail("more than " + std::to_string(kMaxPieces) + " pieces");
      m.pieces.push_back(read_piece(r.bytes()));
    } else if (f == 2) {
      r.need(w, 2, "ModelProto.trainer_spec");
      read_trainer(r.bytes(), m);
    } else if (f == 3) {
      r.need(w, 2, "ModelProto.normalizer_spec");
      read_normalizer(r.bytes(), m);
    } else {
      r.skip(w);  // self_test_data, denormalizer_spec, extensions
    }
  }
  if (m.pieces.empty()) throw Error(name + ": no pieces (not a SentencePiece model?)");
  const int64_t n = static_cast<int64_t>(m.pieces.size());
  for (auto [id, field] : {std::pair{m.unk_id, "unk_id"}, {m.bos_id, "bos_id"}, {m.eos_id, "eos_id"},
                           {m.pad_id, "pad_id"}})
    if (id < -1 || id >= n)
      throw Error(name + ": TrainerSpec." + field + " " + std::to_string(id) + " is outside -1.." +
                  std::to_string(n - 1) + " (the pieces)");
  return m;
}

SpieceModel read_spiece_model(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) throw Error(path + ": no such file");
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) throw Error(path + ": cannot read its size: " + ec.message());
  if (size > kMaxSpieceBytes)
    throw Error(path + ": " + std::to_string(size) + " bytes, more than the " + std::to_string(kMaxSpieceBytes >> 20) +
                " MiB a SentencePiece model may have");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open");
  std::string bytes(static_cast<size_t>(size), '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(size));
  if (static_cast<size_t>(in.gcount()) != size) throw Error(path + ": short read");
  return parse_spiece_model(bytes, path);
}

}  // namespace kvad::tok
