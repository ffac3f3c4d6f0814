#include "model/kv_cache.h"

#include <algorithm>

namespace kvad {

KVCache::KVCache(int64_t n_layer, int64_t kv_dim, int32_t n_ctx, int n_seq)
    : n_layer_(n_layer), kv_dim_(kv_dim), n_ctx_(n_ctx), n_seq_(n_seq), n_cached_(n_seq, 0) {
  const size_t per_layer = static_cast<size_t>(n_seq) * n_ctx * kv_dim;
  k_.resize(n_layer);
  v_.resize(n_layer);
  // Pages are only touched when a position is written, so an unused context
  // costs address space, not resident memory.
  for (int64_t il = 0; il < n_layer; ++il) {
    k_[il].reset(new uint16_t[per_layer]);
    v_[il].reset(new uint16_t[per_layer]);
  }
}

int32_t KVCache::truncate(int seq, int32_t n) {
  n_cached_.at(seq) = std::clamp(n, 0, n_cached_.at(seq));
  return n_cached_[seq];
}

size_t KVCache::bytes() const {
  return static_cast<size_t>(n_layer_) * 2 * n_seq_ * n_ctx_ * kv_dim_ * sizeof(uint16_t);
}

size_t KVCache::bytes_per_token() const {
  return static_cast<size_t>(n_layer_) * 2 * kv_dim_ * sizeof(uint16_t);
}

}  // namespace kvad
