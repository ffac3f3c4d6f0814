// TensorSource: a checkpoint's tensors by GGUF name, and its metadata by GGUF
// key (DESIGN.md seams 7 and 9). GGUF files are the first implementation; a
// safetensors checkpoint plugs in by naming its tensors and config values the
// GGUF way, so architectures never see which format a model came from.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tensor/dtype.h"

namespace kvad {

namespace gguf { class File; }

/// One tensor of a checkpoint, its bytes in memory the source keeps alive
/// (a mapped file: used in place).
struct SourceTensor {
  std::string name;                        ///< GGUF name: "blk.0.attn_q.weight"
  DType type = DType::F32;
  std::array<int64_t, 4> ne{1, 1, 1, 1};   ///< ggml order
  int n_dims = 1;                          ///< dims stored in the file (1..4)
  const void* data = nullptr;
  size_t n_bytes = 0;
  std::string origin;                      ///< the file the bytes are in
};

class TensorSource {
 public:
  virtual ~TensorSource() = default;
  /// The checkpoint's path, for error messages.
  virtual const std::string& path() const = 0;
  /// Every tensor, in the checkpoint's order.
  virtual const std::vector<SourceTensor>& tensors() const = 0;
  /// nullptr when absent.
  virtual const SourceTensor* find(std::string_view name) const = 0;
  /// Keeps the tensors' bytes alive (a tensor viewing them holds it).
  virtual std::shared_ptr<const void> keepalive() const = 0;

  // Metadata by GGUF key ("llama.embedding_length"). The getters with a
  // default return it when the key is absent; a key of another type throws
  // kvad::Error naming it.
  virtual bool has(std::string_view key) const = 0;
  virtual int64_t get_int(std::string_view key, int64_t def) const = 0;
  /// Throws kvad::Error naming the key when it is absent.
  virtual int64_t require_int(std::string_view key) const = 0;
  virtual double get_float(std::string_view key, double def) const = 0;
  virtual std::string get_string(std::string_view key, const std::string& def) const = 0;
};

/// A GGUF file as a TensorSource (names and keys as stored).
std::shared_ptr<const TensorSource> gguf_source(std::shared_ptr<const gguf::File> f);
/// The GGUF file behind a source made by gguf_source, or nullptr.
std::shared_ptr<const gguf::File> gguf_file(const TensorSource& s);

}  // namespace kvad
