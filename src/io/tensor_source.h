// TensorSource: a checkpoint's tensors by name, and its metadata by GGUF key
// (DESIGN.md seams 7 and 9). Two implementations:
//  - gguf_source: a GGUF file, tensors by their GGUF names.
//  - safetensors_source: a safetensors file or sharded checkpoint, tensors by
//    their checkpoint (HF) names as stored ("model.layers.0.self_attn.q_proj.weight")
//    and no metadata. Mapping HF names and config.json values to kvad's GGUF
//    names and keys is a separate step above this one (seam 9), so that
//    architectures never see which format a model came from.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"
#include "tensor/dtype.h"

namespace kvad {

namespace gguf { class File; }

/// One tensor of a checkpoint, its bytes in memory the source keeps alive
/// (a mapped file: used in place).
struct SourceTensor {
  std::string name;                        ///< as stored: "blk.0.attn_q.weight" (GGUF), "lm_head.weight" (HF)
  DType type = DType::F32;
  std::array<int64_t, 4> ne{1, 1, 1, 1};   ///< ggml order: ne[0] is the innermost (contiguous) dim
  int n_dims = 1;                          ///< dims stored in the file (1..4; a safetensors scalar is 1)
  const void* data = nullptr;              ///< aligned only as the file aligns it (safetensors: any byte)
  size_t n_bytes = 0;
  std::string origin;                      ///< the file the bytes are in
  /// The file's own name for the format: the ggml name for GGUF ("q4_K"),
  /// the safetensors dtype ("BF16", "F8_E4M3").
  std::string stored_dtype;
  /// false when kvad has no DType for the stored format (safetensors U8,
  /// F8_E4M3, F8_E5M2) or the tensor has more than 4 dims. The tensor is
  /// still listed (seam 7 accounts for it), with `type` = I8 for 1-byte
  /// formats so that sizes add up, but must not be computed with:
  /// require_supported() gives the error to throw.
  bool supported = true;
  /// Dims as stored, outermost first (safetensors' order; ne reversed).
  /// Empty for a scalar. A tensor of more than 4 dims has its outer dims
  /// folded into ne[3].
  std::vector<int64_t> shape;
};

/// Throws kvad::Error "<origin>: tensor <name> is stored as <stored_dtype>
/// [shape], which kvad cannot compute with" when !t.supported; a loader calls
/// it before using a tensor's bytes.
inline void require_supported(const SourceTensor& t) {
  if (t.supported) return;
  std::string dims;
  for (size_t i = 0; i < t.shape.size(); ++i) dims += (i ? ", " : "") + std::to_string(t.shape[i]);
  throw Error(t.origin + ": tensor " + t.name + " is stored as " + t.stored_dtype + " [" + dims +
              "], which kvad cannot compute with" +
              (t.shape.size() > 4 ? " (more than 4 dims)" : " (no kvad format for it)"));
}

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
  /// An array of booleans (GGUF ARRAY of BOOL, or of integers: nonzero is
  /// true), e.g. llama.cpp's per-layer {arch}.attention.sliding_window_pattern;
  /// empty when absent. Throws kvad::Error naming the key for another type.
  /// Default: no arrays (a source whose metadata has none).
  virtual std::vector<bool> get_bool_array(std::string_view key) const {
    (void)key;
    return {};
  }
  /// True when `key` holds an array (GGUF ARRAY, a view's list), false when
  /// it is absent or a scalar. Default: a non-empty get_bool_array (so that a
  /// source wrapping another by forwarding the getters answers as it does).
  virtual bool is_array(std::string_view key) const {
    if (!has(key)) return false;
    try {
      return !get_bool_array(key).empty();
    } catch (const Error&) {
      return false;  // a scalar
    }
  }
  /// How an error names metadata `key`: the key, and where the checkpoint
  /// states it when that is elsewhere (an HF view: "llama.embedding_length
  /// (config.json hidden_size)"). Default: the key.
  virtual std::string key_name(std::string_view key) const { return std::string(key); }
  /// How an error names tensor `name`: the name, and the checkpoint's own
  /// name when that differs (an HF view: "token_embd.weight
  /// (model.embed_tokens.weight)"). Default: the name.
  virtual std::string tensor_name(std::string_view name) const { return std::string(name); }
};

/// A GGUF file as a TensorSource (names and keys as stored).
std::shared_ptr<const TensorSource> gguf_source(std::shared_ptr<const gguf::File> f);
/// A GGUF model split into parts NAME-00001-of-0000N.gguf (llama.cpp's
/// gguf-split, gguf-py's writer): given any part's path, every part opened,
/// metadata from the first, tensors from all. A path not named that way is
/// one ordinary GGUF. Throws kvad::Error for a missing part, parts whose
/// split.count / split.no / split.tensors.count disagree, or a tensor in two parts.
std::shared_ptr<const TensorSource> gguf_split_source(const std::string& any_part);
/// True when `path` is named as a part of a split GGUF; then *prefix is the
/// name before "-0000i-of-0000N.gguf" and *n the number of parts.
bool gguf_split_name(const std::string& path, std::string* prefix, int* n);

/// The GGUF file behind a source made by gguf_source, or nullptr.
std::shared_ptr<const gguf::File> gguf_file(const TensorSource& s);

/// A safetensors checkpoint as a TensorSource (src/io/safetensors_source.cpp).
/// `path` is one of:
///  - a `.safetensors` file;
///  - a `*.safetensors.index.json` file (or diffusers' variant index
///    `*.safetensors.index.<variant>.json`): its weight_map's shards, in its directory;
///  - a directory holding `model.safetensors` (used when present, as
///    transformers does) or else `model.safetensors.index.json`.
/// Tensors keep their checkpoint names as stored (no mapping to GGUF names);
/// they are listed shard by shard (shard names sorted), in data-offset order
/// within a shard. Metadata: none (has() is false, getters return their
/// default, require_int throws); config.json is read elsewhere.
/// Every shard header is validated at once (safetensors::File::open). Sharded
/// checkpoints: every tensor of the weight_map must be in the shard it names,
/// and every tensor of a shard must be in the weight_map under that shard
/// (an error, not a warning: a tensor the index does not list would be
/// invisible to the name mapping, or present twice). Shard names in the
/// HF cache are symlinks into blobs/; they are followed.
/// Throws kvad::Error (SafetensorsError for format errors) naming the file
/// and the tensor or field.
std::shared_ptr<const TensorSource> safetensors_source(const std::string& path);

}  // namespace kvad
