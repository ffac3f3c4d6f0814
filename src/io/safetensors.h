// safetensors reader, memory-mapped and zero-copy; sharded checkpoints through
// `model.safetensors.index.json`.
//
// Source: the safetensors format as Hugging Face documents it (the README of
// github.com/huggingface/safetensors, "Format"), and its reference reader
// (safetensors/src/tensor.rs, `SafeTensors::read_metadata` and
// `Metadata::validate`):
//
//   bytes [0, 8)        N, an unsigned 64-bit little-endian integer: the
//                       header's length in bytes
//   bytes [8, 8 + N)    the header: a UTF-8 JSON object beginning with '{'
//                       (it may be padded at the end with spaces, 0x20).
//                       Each key but "__metadata__" names a tensor:
//                         {"dtype": "BF16", "shape": [d0, d1, ...],
//                          "data_offsets": [begin, end]}
//                       shape is row-major, outermost first (an empty shape
//                       is a scalar); begin/end are byte offsets relative to
//                       the start of the data, end exclusive.
//                       "__metadata__" is an optional map of string to string.
//   bytes [8 + N, EOF)  the data. The spec requires it to be entirely
//                       indexed, without holes or overlaps: the tensors,
//                       sorted by offset, tile it exactly.
//
// Every rule is checked before any tensor is exposed; a file that breaks one
// is a SafetensorsError whose message begins with the file's path and names
// the field or tensor, and the byte offset where one applies. Limits (as the
// reference reader's): a header of at most 100,000,000 bytes. Further rules
// of kvad's: no duplicate keys in any JSON object (the spec forbids them;
// a JSON parser would silently keep one, and the reference reader does), JSON
// nested at most 16 deep (the format needs 3). Unknown fields inside a tensor's entry
// are ignored, as the reference reader ignores them.
//
// Alignment: tensor data is used in place and is aligned only as the file
// aligns it. Hugging Face's writer pads the header so the data starts at a
// multiple of 8 bytes; individual tensors may start at any byte.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"

namespace kvad {

class MappedFile;

class SafetensorsError : public Error {
 public:
  using Error::Error;
};

namespace safetensors {

/// Header length limit in bytes (the reference reader's MAX_HEADER_SIZE).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

/// The dtypes kvad reads, by their safetensors names. Any other name
/// ("F64", "BOOL", "F8_E8M0", ...) is a SafetensorsError naming it.
enum class Dtype { F32, F16, BF16, I8, U8, I32, I64, F8_E4M3, F8_E5M2 };

/// Its safetensors name: "F32", "F8_E4M3".
const char* dtype_name(Dtype d);
/// Bytes per element (1, 2, 4 or 8).
size_t dtype_size(Dtype d);

/// One tensor's entry in the header, validated.
struct TensorInfo {
  std::string name;              ///< key in the header, as stored ("model.layers.0.mlp.up_proj.weight")
  Dtype dtype = Dtype::F32;
  std::vector<int64_t> shape;    ///< row-major, outermost first; empty for a scalar
  uint64_t begin = 0;            ///< data_offsets[0]: bytes from the start of the data
  uint64_t end = 0;              ///< data_offsets[1], exclusive
  const uint8_t* data = nullptr; ///< first byte, in the parsed buffer (not aligned in general)
  size_t n_bytes = 0;            ///< end - begin == n_elements * dtype_size
  int64_t n_elements = 1;        ///< product of shape (1 for a scalar, 0 if a dim is 0)
};

/// A parsed safetensors file. Tensors are listed in data-offset order (the
/// order of their bytes in the file).
class File {
 public:
  /// Maps `path` and parses it. Throws kvad::Error when the file cannot be
  /// opened or mapped, SafetensorsError when it breaks the format.
  static std::unique_ptr<File> open(const std::string& path);
  /// Parses `size` bytes at `data` (which must outlive the File); `name` is
  /// used in messages. Throws SafetensorsError.
  static std::unique_ptr<File> parse(const uint8_t* data, size_t size, std::string name);

  ~File();
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  /// nullptr when absent.
  const TensorInfo* find(std::string_view name) const;
  /// "__metadata__" (empty when absent).
  const std::map<std::string, std::string, std::less<>>& metadata() const { return metadata_; }

  uint64_t header_bytes() const { return header_bytes_; }  ///< N
  uint64_t data_offset() const { return 8 + header_bytes_; }  ///< file offset of the data
  const uint8_t* file_data() const { return data_; }
  size_t file_size() const { return size_; }

 private:
  File() = default;
  void parse_header();

  std::string path_;
  std::unique_ptr<MappedFile> map_;  // null when parsing a caller's buffer
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  uint64_t header_bytes_ = 0;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, std::string, std::less<>> metadata_;
};

/// `model.safetensors.index.json`, as transformers writes it:
///   {"metadata": {"total_size": <bytes>, ...}, "weight_map": {"<tensor>": "<shard file>", ...}}
/// Only weight_map is read ("metadata" may be any object or absent; total_size
/// is not checked: real checkpoints disagree on what it counts).
struct Index {
  std::map<std::string, std::string, std::less<>> weight_map;  ///< tensor -> shard file name
  std::vector<std::string> shards;                             ///< distinct shard names, sorted
};

/// Parses an index's JSON text; `path` is used in messages. Every shard name
/// must be a plain file name (not empty, not "." or "..", no '/', '\\' or NUL),
/// so that it can only name a file in the index's own directory. Throws
/// SafetensorsError naming the field (and the tensor, for a bad shard name).
Index parse_index(std::string_view json_text, const std::string& path);
/// Reads and parses the index file at `path`. Throws kvad::Error when it
/// cannot be read, SafetensorsError as parse_index.
Index read_index(const std::string& path);

/// True when `name` is a plain file name as parse_index requires.
bool is_plain_file_name(std::string_view name);

}  // namespace safetensors
}  // namespace kvad
