// KV cache for attention layers, in f16, one slab per sequence per layer.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "model/model.h"

namespace kvad {

/// Keys and values of every attention layer for n_seq sequences of n_ctx
/// positions. Layout per layer: k[seq][pos][kv_dim] f16 with
/// kv_dim = n_head_kv * head_dim; v likewise.
class KVCache final : public Cache {
 public:
  KVCache(int64_t n_layer, int64_t kv_dim, int32_t n_ctx, int n_seq);

  int32_t n_ctx() const override { return n_ctx_; }
  int n_seq() const override { return n_seq_; }
  int32_t cached(int seq) const override { return n_cached_.at(seq); }
  int32_t truncate(int seq, int32_t n) override;
  size_t bytes() const override;
  size_t bytes_per_token() const override;

  /// Row of layer `il`'s keys for (seq, pos): kv_dim f16 values.
  uint16_t* k(int64_t il, int seq, int64_t pos) { return k_[il].get() + row(seq, pos); }
  uint16_t* v(int64_t il, int seq, int64_t pos) { return v_[il].get() + row(seq, pos); }
  int64_t kv_dim() const { return kv_dim_; }
  /// Records that (seq, pos) now holds a value.
  void mark(int seq, int32_t pos) {
    if (pos + 1 > n_cached_[seq]) n_cached_[seq] = pos + 1;
  }

 private:
  size_t row(int seq, int64_t pos) const {
    return (static_cast<size_t>(seq) * n_ctx_ + static_cast<size_t>(pos)) * kv_dim_;
  }
  int64_t n_layer_, kv_dim_;
  int32_t n_ctx_;
  int n_seq_;
  std::vector<std::unique_ptr<uint16_t[]>> k_, v_;  // left uninitialized: untouched pages cost no RSS
  std::vector<int32_t> n_cached_;
};

}  // namespace kvad
