// Per-layer caches (DESIGN.md seam 6): an architecture lists one LayerSpec
// per layer and make_cache composes them into the Cache a Session owns. The
// bytes live on the model's device and never cross to the host.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "model/model.h"
#include "tensor/tensor.h"

namespace kvad {

/// An attention layer's keys and values (KVLayer): the widths of one
/// token's keys and values (n_head_kv · head_dim), and the window (0: every
/// position; W: positions (p - W, p] are read, so the layer keeps a ring of
/// W + n_batch positions per sequence).
struct KeyValueSpec {
  int64_t k_dim = 0, v_dim = 0;
  int32_t window = 0;
};

/// An MLA layer's latent cache (LatentLayer; DeepSeek V2/V3): kv_lora_rank
/// values of compressed c_kv and rope_dim (qk_rope_head_dim) of the shared
/// k_pe per token.
struct LatentSpec {
  int64_t kv_lora_rank = 0, rope_dim = 0;
};

/// A recurrent layer's state (RecurrentLayer; Qwen3-Next's gated DeltaNet
/// layers): f32 values of one sequence's convolution state ((K-1) · C) and
/// delta-rule state (Hv · Dk · Dv), and the snapshot interval N (0: none).
/// Every recurrent layer of a cache takes the same N.
struct RecurrentSpec {
  int64_t conv_elems = 0, ssm_elems = 0;
  int32_t snapshot_every = 0;
};

/// What one layer keeps between forward calls: its kind, with that kind's sizes.
using LayerSpec = std::variant<KeyValueSpec, LatentSpec, RecurrentSpec>;

/// One recurrent layer's live state, f32: conv [n_seq, conv_elems], ssm
/// [n_seq, ssm_elems]; row s is sequence s's state after cached(s) tokens
/// (ops::ssm_conv and ops::gated_delta_rule update it in place).
struct RecurrentLayer {
  Tensor conv, ssm;
};

/// One layer's keys and values, f16 or f32 (KVTypes): k [n_seq · slots,
/// k_dim], v [n_seq · slots, v_dim]; position p of sequence s lives in row
/// s · slots + p % slots.
struct KVLayer {
  Tensor k, v;
  int64_t slots = 0;   ///< n_ctx, or min(n_ctx, window + n_batch) for a sliding-window layer
  int32_t window = 0;
};

/// One MLA layer's latent cache (DeepSeek-V2 section 2.1.2): per token only
/// c_kv (kv_lora_rank values, after kv_a_layernorm) and the shared roped key
/// part k_pe (qk_rope_head_dim values), one row c_kv | k_pe of
/// kv_lora_rank + rope_dim f32 values: c [n_seq · n_ctx, kv_lora_rank +
/// rope_dim]; position p of sequence s lives in row s · n_ctx + p. f32, not
/// f16: the absorbed product reads each row once per head, and f32 keeps it
/// within 1e-4 of transformers (the tiny fixtures); the row is already 7×
/// smaller than the expanded K/V it stands for. --cache-type-k/-v (KVTypes)
/// do not apply to it.
struct LatentLayer {
  Tensor c;
  int64_t kv_lora_rank = 0, rope_dim = 0;
  int64_t slots = 0;  ///< n_ctx
};

/// The KV cache format a --cache-type-k / --cache-type-v value names:
/// "f16" or "f32" (llama.cpp's names). `flag` names the option in the error
/// (kvad::Error naming the value and the accepted ones, e.g. for llama.cpp's
/// quantized "q8_0", which kvad does not have).
DType kv_cache_type(const std::string& name, const std::string& flag);

/// The Cache of a model whose layers are listed by LayerSpec.
class LayerCaches final : public Cache {
 public:
  /// Allocates every layer on `d`, keys and values in the formats `types`
  /// names. Throws kvad::Error for a K/V format other than f16 and f32, for
  /// n_ctx, n_seq or n_batch <= 0, for a layer whose spec lacks its kind's
  /// sizes (key/value: k_dim, v_dim > 0 and window >= 0; latent:
  /// kv_lora_rank > 0 and rope_dim >= 0; recurrent: conv_elems, ssm_elems > 0
  /// and snapshot_every >= 0), for recurrent layers with different snapshot
  /// intervals, and as ops::empty when the device is out of memory.
  ///
  /// Recurrent layers: a state absorbs every token it reads and cannot give
  /// one back, so a rewind lands on a snapshot. With N = snapshot_every > 0
  /// the states of every recurrent layer are copied (on the device) each
  /// time a sequence reaches a multiple of N positions, at a cost of
  /// (positions / N) × the per-sequence state bytes, allocated as taken and
  /// counted by bytes(); N = 0 keeps none, and any rewind short of cached(s)
  /// lands on 0. The states are f32 whatever `types` says.
  ///
  /// held: the layers [first, last) this process keeps (a pipeline stage;
  /// last -1: to the end). The others are described (their kinds and ring
  /// sizes take part in split and truncate, so that every stage cuts and
  /// lands as one process would) but get no storage, and their accessors
  /// throw kvad::Error.
  LayerCaches(const std::vector<LayerSpec>& layers, int32_t n_ctx, int n_seq, int64_t n_batch, Device d,
              KVTypes types, std::pair<int64_t, int64_t> held = {0, -1});

  int32_t n_ctx() const override { return n_ctx_; }
  int n_seq() const override { return n_seq_; }
  int32_t cached(int seq) const override { return n_cached_.at(seq); }
  int32_t truncate(int seq, int32_t n) override;
  bool copy_prefix(int src, int dst, int32_t n) override;
  /// Cache::snapshot: with recurrent layers, copies seq's states at
  /// cached(seq) (unless a snapshot is held there already), dropping the
  /// previous copy this call made for seq; counted by n_snapshots() and
  /// snapshot_bytes() while held. copy_prefix does not hand it on.
  void snapshot(int seq) override;
  /// Allocated bytes: K/V, live recurrent states, and the snapshots held now.
  size_t bytes() const override { return bytes_ + rec_bytes_ + snapshot_bytes_; }
  size_t bytes_per_token() const override;

  /// Recurrent layers: the snapshot interval (0: none), the snapshots held
  /// (over all sequences), their bytes, the live states' bytes (all
  /// sequences), and the bytes of one sequence's live states (all recurrent
  /// layers), which is also what one snapshot costs.
  int32_t snapshot_every() const { return snapshot_every_; }
  int64_t n_snapshots() const override;
  size_t snapshot_bytes() const override { return snapshot_bytes_; }
  size_t state_bytes() const override { return rec_bytes_; }
  size_t state_bytes_per_seq() const { return state_bytes_per_seq_; }
  /// Layer il's recurrent state. Throws kvad::Error when it is not a Recurrent layer.
  RecurrentLayer& recurrent(int64_t il);
  /// Cache::split: micro-batches of equal size, at most n_batch tokens and a
  /// multiple of 8 (the CPU GEMM's token tile) where n_batch is one, in batch
  /// order (each sequence's tokens stay in order, so every piece continues
  /// its sequences), and with recurrent layers also cut after every token
  /// that brings its sequence to a multiple of the snapshot interval, so that
  /// commit() sees the state at exactly that position.
  std::vector<BatchPiece> split(const BatchView& b) const override;
  /// Cache::commit.
  void commit(const BatchView& piece) override;

  /// Layer il's keys and values. Throws kvad::Error when it is not a KeyValue layer.
  KVLayer& kv(int64_t il);
  /// Layer il's latent cache. Throws kvad::Error when it is not a Latent layer.
  LatentLayer& latent(int64_t il);

 private:
  int32_t kv_landing(int seq, int32_t n) const;
  std::vector<LayerSpec> specs_;
  std::vector<KVLayer> kv_;
  std::vector<LatentLayer> latent_;
  int32_t n_ctx_;
  int n_seq_;
  int64_t n_batch_;
  size_t bytes_ = 0;
  std::vector<int32_t> n_cached_;
  std::vector<RecurrentLayer> rec_;
  std::vector<size_t> rec_layers_;  // indices of the recurrent layers
  int32_t snapshot_every_ = 0;
  size_t rec_bytes_ = 0, snapshot_bytes_ = 0, state_bytes_per_seq_ = 0;
  // Per sequence: position → (conv, ssm) copies of every recurrent layer, in rec_layers_ order.
  std::vector<std::map<int32_t, std::vector<Tensor>>> snaps_;
  // Per sequence: the position of the copy snapshot() made (-1: none).
  std::vector<int32_t> extra_;
  void take_snapshot(int seq, int32_t at);
};

}  // namespace kvad
