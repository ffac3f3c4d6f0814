// GGUF writer (versions 2 and 3): metadata Values and tensors to bytes or a file.
//
// Source: the GGUF specification (ggml/docs/gguf.md). Layout written:
// header, metadata in insertion order, tensor infos in insertion order,
// zero padding to the alignment, then the tensor data, each tensor's bytes
// starting at a multiple of the alignment (relative to the data section) and
// zero-padded after it.
//
// Typical use (e.g. `kvad quantize`):
//
//   gguf::Writer w;                                    // version 3, alignment 32
//   for (const gguf::Value& v : in.metadata()) w.add(v);   // copy metadata
//   w.add(gguf::make_uint("general.quantization_version", gguf::ValueType::UINT32, 2));
//   w.add_tensor("token_embd.weight", DType::Q8_0, {576, 49152}, bytes, n_bytes);
//   w.write_file("out.gguf");
//
// A tensor too large to hold in memory (a quantizer's output) is added with
// add_tensor_deferred and its bytes are streamed by write_file(path, source).
//
// Tests also use the raw entry points (add_raw, add_tensor_info_raw,
// append_data_raw) to build deliberately corrupt files.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "io/gguf.h"

namespace kvad::gguf {

// ---- Value builders. Each throws GGUFError (naming the key) when the value
// does not fit the requested type or the type is of the wrong kind. ----

/// UINT8/UINT16/UINT32/UINT64 scalar.
Value make_uint(std::string key, ValueType type, uint64_t v);
/// INT8/INT16/INT32/INT64 scalar.
Value make_int(std::string key, ValueType type, int64_t v);
/// FLOAT32/FLOAT64 scalar (FLOAT32 is rounded to float when written).
Value make_float(std::string key, ValueType type, double v);
/// BOOL scalar.
Value make_bool(std::string key, bool v);
/// STRING scalar (bytes, usually UTF-8).
Value make_string(std::string key, std::string v);
/// ARRAY of UINT8/UINT16/UINT32/UINT64 or BOOL (elements 0/1).
Value make_uint_array(std::string key, ValueType elem, std::vector<uint64_t> v);
/// ARRAY of INT8/INT16/INT32/INT64.
Value make_int_array(std::string key, ValueType elem, std::vector<int64_t> v);
/// ARRAY of FLOAT32/FLOAT64.
Value make_float_array(std::string key, ValueType elem, std::vector<double> v);
/// ARRAY of STRING.
Value make_string_array(std::string key, std::vector<std::string> v);

/// Builds a GGUF file in memory. Not thread-safe. Errors are GGUFError.
class Writer {
 public:
  /// version: 2 or 3 (the two share one layout). Throws GGUFError otherwise.
  explicit Writer(uint32_t version = 3);

  uint32_t version() const { return version_; }
  size_t alignment() const { return alignment_; }

  /// Sets the tensor data alignment in bytes (a nonzero power of two) and
  /// records it as `general.alignment` (UINT32). Must be called before the
  /// first add_tensor. Throws GGUFError on a bad value or late call.
  void set_alignment(uint32_t alignment);

  /// Appends a metadata pair (key from v.key()). Throws GGUFError on a
  /// duplicate key, an empty key, an inconsistent Value (array length vs.
  /// storage), or a `general.alignment` that is not a valid UINT32 (a valid
  /// one sets the alignment, as set_alignment does).
  void add(const Value& v);

  /// Appends a tensor; its bytes are copied. ne in ggml order (ne[0] is the
  /// row length), 1..4 dims, each >= 0, ne[0] a multiple of the block size;
  /// n_bytes must equal row_bytes(type, ne[0]) * ne[1] * ... Throws
  /// GGUFError (naming the tensor) otherwise, or on a duplicate name.
  void add_tensor(const std::string& name, DType type, const std::vector<int64_t>& ne,
                  const void* data, size_t n_bytes);

  /// Appends a tensor whose bytes the Writer does not hold: the same checks
  /// as add_tensor (without n_bytes), and its place in the data section is
  /// reserved. Its bytes are supplied by write_file(path, source);
  /// to_bytes() and write_file(path) throw GGUFError while the Writer has one.
  void add_tensor_deferred(const std::string& name, DType type, const std::vector<int64_t>& ne);

  /// Receives part of a deferred tensor's bytes.
  using Sink = std::function<void(const void* data, size_t n)>;
  /// Supplies a deferred tensor's bytes: called once per deferred tensor, in
  /// insertion order, with its index among all tensors and its size in bytes;
  /// it calls `write` any number of times with exactly n_bytes in total.
  using TensorSource = std::function<void(size_t tensor_index, size_t n_bytes, const Sink& write)>;

  /// Total bytes the file will have.
  size_t size() const;
  /// The file's bytes.
  std::vector<uint8_t> to_bytes() const;
  /// Writes the file (streams the tensor data). Throws GGUFError naming the
  /// path on an I/O error.
  void write_file(const std::string& path) const;
  /// Writes the file, streaming the deferred tensors' bytes from `source`
  /// (which may be empty when there are none). Throws GGUFError naming the
  /// path on an I/O error, or naming the tensor when a source gives the wrong
  /// number of bytes. An exception from `source` propagates. On any error the
  /// file is closed and left as far as it was written: write to a temporary
  /// name and rename it when this returns.
  void write_file(const std::string& path, const TensorSource& source) const;

  // ---- Raw entry points for tests that build corrupt files. Nothing is
  // checked: the bytes are written exactly as given. ----

  /// Appends a metadata pair without any check (duplicates allowed).
  void add_raw(const Value& v);
  /// Appends a tensor info with an arbitrary type id, dims and data offset
  /// (relative to the data section); no data is attached.
  void add_tensor_info_raw(const std::string& name, uint32_t type_id, const std::vector<uint64_t>& ne,
                           uint64_t offset);
  /// Appends bytes to the end of the data section.
  void append_data_raw(const void* data, size_t n);

  /// Byte offsets in the written file, for tests that patch fields.
  struct Layout {
    std::vector<size_t> kv;      ///< start of each metadata pair
    std::vector<size_t> tensor;  ///< start of each tensor info
    size_t data = 0;             ///< start of the data section
  };
  Layout layout() const;

 private:
  struct Tensor {
    std::string name;
    uint32_t type_id = 0;
    std::vector<uint64_t> ne;
    uint64_t offset = 0;
    size_t n_bytes = 0;
  };
  // The data section as a list of pieces: bytes held in data_, zero padding,
  // or a deferred tensor's bytes.
  struct Segment {
    enum Kind { kBytes, kZeros, kDeferred } kind = kBytes;
    size_t pos = 0;     // kBytes: start in data_
    size_t n = 0;       // bytes
    size_t tensor = 0;  // kDeferred: index in tensors_
  };
  std::vector<uint8_t> head_bytes() const;  // header, metadata, infos, padding
  size_t check_tensor(const std::string& name, DType type, const std::vector<int64_t>& ne) const;
  void push_tensor(const std::string& name, DType type, const std::vector<int64_t>& ne, size_t n_bytes);
  void append_bytes(const void* data, size_t n);
  void pad_data();

  uint32_t version_;
  size_t alignment_ = 32;
  std::vector<Value> kv_;
  std::vector<Tensor> tensors_;
  std::vector<uint8_t> data_;      // bytes of the kBytes segments
  std::vector<Segment> segments_;  // the data section, in order
  size_t data_size_ = 0;           // bytes in the data section
  size_t n_deferred_ = 0;
};

}  // namespace kvad::gguf
