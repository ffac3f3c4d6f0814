// GGUF reader (versions 2 and 3), memory-mapped.
//
// Source: the GGUF specification (ggml/docs/gguf.md in the ggml project):
// header (magic "GGUF", u32 version, u64 tensor_count, u64 kv_count), then
// kv_count metadata pairs, then tensor_count tensor infos (name, u32 n_dims,
// u64 ne[n_dims], u32 ggml type, u64 offset), then padding to
// `general.alignment` (default 32), then the tensor data section. Tensor
// offsets are relative to the start of the data section.
//
// Every malformed input is a kvad::GGUFError naming the file, the key or
// tensor, and the byte offset; the reader never reads outside the buffer.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"
#include "tensor/dtype.h"

namespace kvad {

class MappedFile;

class GGUFError : public Error {
 public:
  using Error::Error;
};

namespace gguf {

/// GGUF metadata value types (gguf_type in the spec).
enum class ValueType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5,
  FLOAT32 = 6, BOOL = 7, STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};
const char* value_type_name(ValueType t);

/// One metadata value: a scalar, a string, or an array of one element type.
/// Accessors throw GGUFError (naming the key) on a type mismatch; integer
/// accessors accept any integer type whose value fits.
class Value {
 public:
  ValueType type() const { return type_; }
  /// For arrays: the element type. Arrays of arrays are read but their
  /// elements are not exposed (no real file needs them).
  ValueType array_type() const { return array_type_; }
  const std::string& key() const { return key_; }

  int64_t as_int() const;       ///< any integer type (u64 above INT64_MAX throws)
  uint64_t as_uint() const;     ///< any integer type, value >= 0
  double as_float() const;      ///< FLOAT32/FLOAT64 (and integers)
  bool as_bool() const;         ///< BOOL
  const std::string& as_string() const;  ///< STRING

  size_t array_size() const;    ///< ARRAY: number of elements
  const std::vector<std::string>& as_string_array() const;  ///< ARRAY of STRING
  std::vector<int64_t> as_int_array() const;    ///< ARRAY of any integer type, or of BOOL (0/1)
  std::vector<float> as_float_array() const;    ///< ARRAY of FLOAT32/FLOAT64 (or integers)

  // Storage (public for the reader and writer; use the accessors).
  std::string key_;
  ValueType type_ = ValueType::UINT8;
  ValueType array_type_ = ValueType::UINT8;
  uint64_t u_ = 0;              // unsigned integers, bool
  int64_t i_ = 0;               // signed integers
  double f_ = 0;                // floats
  std::string s_;               // string
  std::vector<std::string> strs_;  // string arrays
  std::vector<uint64_t> uarr_;  // unsigned/bool integer arrays
  std::vector<int64_t> iarr_;   // signed integer arrays
  std::vector<double> farr_;    // float arrays
  size_t n_ = 0;                // array length
  std::string file_;            // file it was read from ("" when built in memory)
  uint64_t offset_ = 0;         // byte offset of the key/value pair in that file
};

/// A tensor's description and its bytes inside the mapped file.
struct TensorInfo {
  std::string name;
  std::vector<int64_t> ne;  ///< dims, ggml order: ne[0] is the row length (innermost)
  DType type = DType::F32;
  uint64_t offset = 0;      ///< from the start of the data section
  size_t n_bytes = 0;       ///< row_bytes(type, ne[0]) * product of the other dims
  const uint8_t* data = nullptr;  ///< points into the file's bytes
  int64_t n_elements() const;
};

class File {
 public:
  /// Maps and parses a file. Throws GGUFError (message starts with the path).
  static std::unique_ptr<File> open(const std::string& path);
  /// Parses bytes held by the caller (which must outlive the File): for
  /// fuzzing and tests. `name` is used in error messages. Throws GGUFError
  /// ("<name>: <key or tensor>: <problem> at offset <byte>") on any malformed
  /// input; memory use follows the bytes parsed, never the counts claimed.
  static std::unique_ptr<File> parse(const uint8_t* data, size_t size, const std::string& name);

  ~File();

  const std::string& path() const { return name_; }
  uint32_t version() const { return version_; }
  size_t alignment() const { return alignment_; }
  /// Offset of the data section in the file, bytes.
  size_t data_offset() const { return data_offset_; }
  /// Total file size, bytes.
  size_t file_size() const { return size_; }
  const uint8_t* file_data() const { return data_; }

  /// Metadata in file order.
  const std::vector<Value>& metadata() const { return kv_; }
  /// nullptr when absent.
  const Value* find(std::string_view key) const;
  /// Throws GGUFError naming the key when absent.
  const Value& get(std::string_view key) const;
  // Convenience with defaults when the key is absent (type mismatch still throws).
  int64_t get_int(std::string_view key, int64_t def) const;
  double get_float(std::string_view key, double def) const;
  bool get_bool(std::string_view key, bool def) const;
  std::string get_string(std::string_view key, const std::string& def) const;

  /// Tensor infos in file order.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  /// nullptr when absent.
  const TensorInfo* find_tensor(std::string_view name) const;
  /// Sum of all tensors' n_bytes.
  size_t tensor_bytes() const;

 private:
  File() = default;
  static std::unique_ptr<File> parse_impl(const uint8_t* data, size_t size, const std::string& name);
  std::string name_;
  std::unique_ptr<MappedFile> map_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  uint32_t version_ = 0;
  size_t alignment_ = 32;
  size_t data_offset_ = 0;
  std::vector<Value> kv_;
  std::map<std::string, size_t, std::less<>> kv_index_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

}  // namespace gguf
}  // namespace kvad
