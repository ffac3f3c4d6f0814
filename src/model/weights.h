// WeightLoader: takes an architecture's tensors by GGUF name from a
// TensorSource, checks their shapes, places them on the model's device, and
// makes sure every tensor of the checkpoint was taken (DESIGN.md seams 7, 9).
#pragma once
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>

#include "model/model.h"
#include "model/registry.h"
#include "tensor/tensor.h"

namespace kvad {

class TensorSource;
struct SourceTensor;
class WeightScope;

class WeightLoader {
 public:
  /// Weights go to o.device; on the CPU they are used in place from the
  /// mapped file. Throws kvad::Error for a device that cannot run here.
  WeightLoader(std::shared_ptr<const TensorSource> src, const DeviceOptions& o);

  /// The tensor `name`, on the device. `ne` gives the expected dims in ggml
  /// order (trailing 1s may be omitted). Matrices (two or more dims) keep their
  /// format when the device computes with it, else take the format
  /// DeviceOptions says (registry.h); vectors stay as stored. Asking twice
  /// gives the same tensor (a tied head shares the embedding). Throws
  /// kvad::Error naming the checkpoint and tensor when it is missing, has
  /// another shape, or no format the device has fits it.
  Tensor get(const std::string& name, std::initializer_list<int64_t> ne);
  /// As get(), but an absent tensor gives an empty Tensor.
  Tensor get_optional(const std::string& name, std::initializer_list<int64_t> ne);
  bool has(const std::string& name) const;
  /// The checkpoint's tensor `name` as stored (shape, format), nullptr when
  /// absent; taking it is still get()'s job.
  const SourceTensor* find(const std::string& name) const;

  /// Names the hyper-parameter behind a dim value, for shape errors:
  /// get() on a tensor whose dim differs from the expected `value` says
  /// "value is <what>" ("64 is llama.embedding_length (config.json
  /// hidden_size)"); several names for one value are listed together.
  void name_dim(int64_t value, const std::string& what);
  /// name_dim(value, the source's name of metadata `key`), when the source has the key.
  void name_key_dim(int64_t value, const std::string& key);
  /// name_dim for hp's widths and counts (embedding_length, feed_forward_length,
  /// head_count × key_length, head_count_kv × key_length, key_length),
  /// by the source's key names.
  void name_dims(const HParams& hp);

  /// The whole checkpoint as a scope (no prefix); layer(il) is "blk.il.".
  WeightScope root();
  WeightScope layer(int64_t il);

  /// Throws kvad::Error naming every tensor of the checkpoint nobody took.
  /// After only_layers (a pipeline stage): only the untaken tensors of the
  /// blocks [first, last) count; the other stages answer for the rest.
  void finish() const;
  void only_layers(int64_t first, int64_t last) { stage_ = true, stage_first_ = first, stage_last_ = last; }
  /// Bytes of the placed weights, as stored on the device.
  size_t bytes() const { return bytes_; }
  int64_t n_params() const { return n_params_; }
  Device device() const { return dev_; }
  /// The checkpoint's path, for error messages.
  const std::string& path() const;

 private:
  DType device_format(const Tensor& t) const;
  std::shared_ptr<const TensorSource> src_;
  DeviceOptions opts_;
  Device dev_;
  std::map<std::string, Tensor> taken_;
  std::map<int64_t, std::string> dim_names_;
  size_t bytes_ = 0;
  int64_t n_params_ = 0;
  bool stage_ = false;
  int64_t stage_first_ = 0, stage_last_ = 0;
};

/// A WeightLoader seen under a name prefix, as candle's VarBuilder::pp:
/// `wl.layer(3).get("attn_q.weight", ...)` takes "blk.3.attn_q.weight", and
/// `scope.sub("nextn")` is a scope for "blk.3.nextn.*". Cheap to copy; the
/// loader must outlive it. Every call throws as the loader's.
class WeightScope {
 public:
  WeightScope(WeightLoader& wl, std::string prefix) : wl_(&wl), prefix_(std::move(prefix)) {}
  /// The scope `prefix + name + "."`.
  WeightScope sub(const std::string& name) const { return {*wl_, prefix_ + name + "."}; }
  /// The full name of `name` in this scope.
  std::string name(const std::string& name) const { return prefix_ + name; }
  Tensor get(const std::string& name, std::initializer_list<int64_t> ne) const { return wl_->get(prefix_ + name, ne); }
  Tensor get_optional(const std::string& name, std::initializer_list<int64_t> ne) const {
    return wl_->get_optional(prefix_ + name, ne);
  }
  bool has(const std::string& name) const { return wl_->has(prefix_ + name); }
  const SourceTensor* find(const std::string& name) const { return wl_->find(prefix_ + name); }
  const std::string& prefix() const { return prefix_; }
  /// The checkpoint's path, for error messages.
  const std::string& path() const { return wl_->path(); }
  Device device() const { return wl_->device(); }
  WeightLoader& loader() const { return *wl_; }

 private:
  WeightLoader* wl_;
  std::string prefix_;
};

inline WeightScope WeightLoader::root() { return {*this, ""}; }
inline WeightScope WeightLoader::layer(int64_t il) { return {*this, "blk." + std::to_string(il) + "."}; }

}  // namespace kvad
