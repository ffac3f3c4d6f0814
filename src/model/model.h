// Model: an architecture's weights and forward pass, behind one interface.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tensor/device.h"
#include "tensor/dtype.h"
#include "tensor/tensor.h"

namespace kvad {

class ThreadPool;
class TensorSource;
namespace dist { class Comm; }
class LayerCaches;
class WeightLoader;
struct DeviceOptions;
struct LoraSet;

/// What every architecture reports about itself (the CLI, the Session's
/// micro-batch size, the server's metrics read it). Each architecture reads
/// its own hyper-parameters into its own struct and fills this summary;
/// names as the GGUF keys (`{arch}.embedding_length`, ...).
struct HParams {
  std::string arch;          ///< general.architecture
  std::string name;          ///< general.name
  int64_t n_vocab = 0;       ///< rows of token_embd
  int64_t n_ctx_train = 0;   ///< {arch}.context_length
  int64_t n_embd = 0;        ///< {arch}.embedding_length
  int64_t n_layer = 0;       ///< {arch}.block_count
  int64_t n_head = 0;        ///< {arch}.attention.head_count
  int64_t n_head_kv = 0;     ///< {arch}.attention.head_count_kv (default n_head)
  int64_t head_dim = 0;      ///< {arch}.attention.key_length (default n_embd / n_head)
  int64_t n_ff = 0;          ///< {arch}.feed_forward_length
  int64_t n_rot = 0;         ///< {arch}.rope.dimension_count (default head_dim)
  float norm_eps = 1e-5f;    ///< {arch}.attention.layer_norm_rms_epsilon
  float rope_freq_base = 10000.0f;  ///< {arch}.rope.freq_base
  float rope_freq_scale = 1.0f;     ///< 1 / {arch}.rope.scaling.factor (linear)
  int64_t n_params = 0;      ///< total elements over all weights
};

/// Formats of the attention key and value caches (llama.cpp's
/// --cache-type-k/-ctk and --cache-type-v/-ctv): F16 (the default, as
/// llama.cpp's) or F32 (exact: what transformers keeps at float32).
struct KVTypes {
  DType k = DType::F16;
  DType v = DType::F16;
};

/// Tokens to evaluate: token[i] at position pos[i] of sequence seq[i].
/// Rows listed in `out` (indices into the batch, ascending) get logits.
struct BatchView {
  const int32_t* token = nullptr;
  const int32_t* pos = nullptr;
  const int32_t* seq = nullptr;
  int64_t n = 0;
  const int32_t* out = nullptr;
  int64_t n_out = 0;
  /// The LoRA adapters every row runs through (model/lora.h); nullptr or
  /// empty: the base model. Owned by the caller for the call's duration.
  const LoraSet* lora = nullptr;
  /// When given, instead: row i's adapters, lora_rows[i] (nullptr: the base
  /// model), [n] — a batch that mixes adapters.
  const LoraSet* const* lora_rows = nullptr;
};

/// A piece of a batch that one forward pass evaluates (Cache::split): `view`
/// is a run of the batch's entries, its `out` re-indexed into the piece (the
/// indices live in `out`); `out_offset` is the rows of output that earlier
/// pieces produce.
struct BatchPiece {
  BatchView view;
  int64_t out_offset = 0;
  std::vector<int32_t> out;
};

/// Per-sequence state an architecture keeps between forward calls, composed
/// per layer (model/cache.h). Owned by a Session.
class Cache {
 public:
  virtual ~Cache() = default;
  virtual int32_t n_ctx() const = 0;  ///< positions per sequence
  virtual int n_seq() const = 0;      ///< sequences held
  /// Positions held for sequence `seq`.
  virtual int32_t cached(int seq) const = 0;
  /// Forgets positions >= n of `seq`; returns the position it landed on:
  /// min(n, cached(seq)) when every layer can rewind there, lower when one
  /// cannot (a sliding-window ring that has overwritten what position n
  /// needs, a recurrent state: they land on 0). The caller continues from
  /// the returned position.
  virtual int32_t truncate(int seq, int32_t n) = 0;
  /// The batch cut into the pieces one forward pass can evaluate, in batch
  /// order (llama.cpp's memory init_batch and its ubatches): each holds at
  /// most the n_batch tokens the cache was sized for, and a piece ends where
  /// the cache must see the state (a sequence reaching a snapshot position
  /// of a recurrent layer). Model::forward runs them in turn, committing
  /// each; an empty batch gives no piece.
  virtual std::vector<BatchPiece> split(const BatchView& b) const = 0;
  /// Records that a piece (from split) has been evaluated: its positions are
  /// now held, and the recurrent states of each sequence that now holds a
  /// multiple of the snapshot interval are snapshotted.
  virtual void commit(const BatchView& piece) = 0;
  /// Makes sequence `dst` hold the first `n` positions of sequence `src`
  /// (copied on the cache's device; `src` is unchanged), as if `dst` had
  /// evaluated them. Returns false, changing nothing, when it cannot: n
  /// larger than cached(src), src == dst, or a layer that no longer holds
  /// what position n needs (a sliding-window ring that moved past it; a kind
  /// with no copy). vLLM's and llama.cpp's seq_cp serve the same purpose.
  virtual bool copy_prefix(int src, int dst, int32_t n) { (void)src, (void)dst, (void)n; return false; }
  /// Makes a later truncate(seq, n) with n >= cached(seq) (now) land on n
  /// exactly, for as long as the sequence does not rewind below that point:
  /// a recurrent layer copies its states at cached(seq) (one such copy per
  /// sequence; the next call replaces it), as speculative decoding needs
  /// before it verifies proposed tokens. Key/value and latent layers rewind
  /// anywhere already (a sliding-window ring keeps window + n_batch
  /// positions, so a rewind of at most one batch lands exactly): nothing to
  /// do, the default.
  virtual void snapshot(int seq) { (void)seq; }
  /// Bytes of cache storage actually allocated.
  virtual size_t bytes() const = 0;
  /// Recurrent layers (model/cache.h): bytes of the live states (all
  /// sequences), of the snapshots held now, and how many snapshots (over all
  /// sequences). All part of bytes(); 0 for a cache without recurrent layers.
  virtual size_t state_bytes() const { return 0; }
  virtual size_t snapshot_bytes() const { return 0; }
  virtual int64_t n_snapshots() const { return 0; }
  /// Bytes stored per token at full context: bytes() / (n_ctx · n_seq)
  /// (a sliding-window layer's ring counts what it holds, not n_ctx rows).
  virtual size_t bytes_per_token() const = 0;
};

class Model {
 public:
  Model() = default;
  /// The shared start of an architecture's constructor: keeps `src` (source_)
  /// and reads its decoder keys into hp_ (model/hparams.h read_hparams,
  /// which throws kvad::Error naming a missing or invalid key).
  explicit Model(std::shared_ptr<const TensorSource> src);
  virtual ~Model() = default;
  const HParams& hparams() const { return hp_; }
  /// A fresh, empty cache for n_seq sequences of n_ctx positions each, on the
  /// model's device. n_batch: the most tokens one forward call holds (a
  /// sliding-window layer keeps window + n_batch positions per sequence).
  /// types: the key/value caches' formats (LayerCaches throws kvad::Error
  /// for one other than f16 or f32).
  /// Pipeline parallel (model/pipeline.h): on rank 0 the cache is wrapped
  /// so that every operation on it (truncate, copy_prefix, snapshot, each
  /// forward) reaches the other stages' caches too; the other ranks make
  /// theirs when rank 0 does. Each stage's cache holds only its layers.
  std::unique_ptr<Cache> new_cache(int32_t n_ctx, int n_seq, int64_t n_batch, KVTypes types = {}) const;
  /// Evaluates a batch, splitting CPU work over `pool`: the pieces
  /// cache.split(b) cuts (at most n_batch tokens each) in turn, each
  /// committed to the cache after it ran. Never changes the model: any
  /// number of threads may call it at once, each with its own cache and pool
  /// (DESIGN.md seam 4). The caller (Session) has checked that every
  /// sequence's positions continue from what the cache holds and fit in it.
  /// `cache` must come from this model's new_cache (kvad::Error otherwise).
  /// logits: [b.n_out, n_vocab] f32, host memory.
  /// Pipeline parallel: every stage runs its layers on each piece in turn,
  /// the hidden state [piece.n, n_embd] f32 going once from stage s to s + 1
  /// and the last stage's logits to rank 0 (logits may be nullptr on the
  /// other ranks); rank 0 calls it, the others are driven by it
  /// (serve_pipeline_stage).
  /// prenorm: when given, [b.n, n_embd] f32, host memory: every row's
  /// hidden state after the last decoder block, before the final norm (what
  /// a multi-token prediction layer consumes, DeepSeek-V3 section 2.2);
  /// nullptr costs nothing. Throws kvad::Error when given to a split model.
  void forward(ThreadPool& pool, Cache& cache, const BatchView& b, float* logits, float* prenorm = nullptr) const;
  /// Multi-token prediction (MTP) layers this model runs (DeepSeek-V3's
  /// nextn layer, Qwen3-Next's mtp block; 0: the checkpoint has none).
  virtual int64_t n_mtp() const { return 0; }
  /// A fresh cache for the first MTP layer's attention (its own key/value
  /// or latent rows), as new_cache. Throws kvad::Error when n_mtp() is 0 or
  /// the model is split (pipeline parallel).
  std::unique_ptr<Cache> new_mtp_cache(int32_t n_ctx, int n_seq, int64_t n_batch, KVTypes types = {}) const;
  /// Runs the first MTP layer (DeepSeek-V3 Technical Report section 2.2;
  /// vLLM's deepseek_mtp.py and qwen3_next_mtp.py): row i, at position
  /// b.pos[i], is the main model's pre-norm hidden state h (hidden, [b.n,
  /// n_embd] f32, host memory: forward's prenorm at that position, or the
  /// previous MTP step's hidden_out when chaining) with the token that
  /// followed it, b.token[i];
  ///   x = eh_proj · [RMSNorm(emb(token)) ⊙ enorm | RMSNorm(h) ⊙ hnorm]
  ///   x = decoder block(x)  (attention over this cache, the layer's FFN)
  ///   logits = head(RMSNorm(x) ⊙ shared_head_norm)  for token pos + 2
  /// logits: [b.n_out, n_vocab] f32; hidden_out (may be nullptr): [b.n_out,
  /// n_embd] f32, the state the next chained step takes as h (DeepSeek: x
  /// before the head's norm; Qwen3-Next: after it, as vLLM chains them).
  /// `cache` from new_mtp_cache. Throws kvad::Error as new_mtp_cache.
  void forward_mtp(ThreadPool& pool, Cache& cache, const BatchView& b, const float* hidden, float* logits,
                   float* hidden_out) const;
  /// As forward, but returns the last hidden state of the rows b.out asks
  /// for instead of logits, as transformers' base model returns it
  /// (`last_hidden_state`: after a decoder's final norm, an encoder's last
  /// post-norm), for pooling into sentence embeddings (engine/embed.h).
  /// hidden: [b.n_out, n_embd] f32, host memory. Throws kvad::Error for an
  /// architecture that has no such output.
  void hidden(ThreadPool& pool, Cache& cache, const BatchView& b, float* hidden) const;
  /// Bytes of weights as stored on the model's device (in place in the
  /// mapped file on the CPU).
  size_t weight_bytes() const { return weight_bytes_; }
  /// Where the weights and caches live.
  Device device() const { return device_; }
  /// The checkpoint the weights came from (kept open for the model's lifetime).
  const TensorSource& source() const { return *source_; }
  /// Pipeline parallel: the world this model is split over (nullptr when the
  /// whole model is in this process), and the decoder blocks this rank holds,
  /// [stage_first(), stage_last()) of n_blocks() (all of them unless split).
  dist::Comm* comm() const { return comm_; }
  bool pipelined() const;
  int64_t stage_first() const { return stage_first_; }
  int64_t stage_last() const { return stage_last_; }
  int64_t n_blocks() const { return n_blocks_; }

 protected:
  /// One piece of a batch (Cache::split), which fits the cache as it is: its
  /// logits [piece.n_out, n_vocab]. The cache records the piece's positions
  /// after it returns (Cache::commit); forward_impl only reads and writes
  /// the layers' contents.
  /// x: in, empty on the first stage (which embeds the piece's tokens) or
  /// the previous stage's hidden state [piece.n, n_embd] f32; out, the
  /// hidden state after the stage's last block (before the final norm).
  /// logits are written only by the stage that holds the head.
  virtual void forward_impl(LayerCaches& cache, const BatchView& piece, Tensor& x, float* logits) const = 0;
  /// The architecture's cache for every block (new_cache's arguments); its
  /// LayerCaches allocates only held_layers().
  virtual std::unique_ptr<Cache> make_cache(int32_t n_ctx, int n_seq, int64_t n_batch, KVTypes types) const = 0;
  /// As forward_impl for hidden(): [piece.n_out, n_embd]. Default: throws,
  /// naming the architecture.
  virtual void hidden_impl(LayerCaches& cache, const BatchView& piece, float* hidden) const;
  /// The MTP layer's cache (new_mtp_cache's arguments) and one piece of
  /// forward_mtp: h [piece.n, n_embd] f32 on the model's device. Defaults:
  /// throw, naming the architecture.
  virtual std::unique_ptr<Cache> make_mtp_cache(int32_t n_ctx, int n_seq, int64_t n_batch, KVTypes types) const;
  virtual void mtp_impl(LayerCaches& cache, const BatchView& piece, const Tensor& h, float* logits,
                        float* hidden_out) const;
  /// A constructor's first and last steps around its weights (model/weights.h).
  /// open_weights: the loader of source_ for `o`, device_ set to its device,
  /// hp_'s widths named for shape errors (WeightLoader::name_dims). Throws
  /// as WeightLoader's constructor.
  /// n_blocks: the decoder blocks forward runs (-1: hp_.n_layer), which a
  /// pipeline splits into stages (DeviceOptions::comm, layer_split); throws
  /// kvad::Error for more stages than blocks or a split that does not add up.
  WeightLoader open_weights(const DeviceOptions& o, int64_t n_blocks = -1);
  /// What this stage holds (pipeline parallel; everything otherwise).
  bool holds_embedding() const { return stage_first_ == 0; }
  bool holds_head() const { return stage_last_ == n_blocks_; }
  bool holds_block(int64_t il) const { return il >= stage_first_ && il < stage_last_; }
  std::pair<int64_t, int64_t> held_layers() const { return {stage_first_, stage_last_}; }
  /// finish_loading: throws for a checkpoint tensor nobody took
  /// (WeightLoader::finish), then records weight_bytes_ and hp_.n_params.
  void finish_loading(const WeightLoader& wl);
  HParams hp_;
  size_t weight_bytes_ = 0;
  Device device_;
  std::shared_ptr<const TensorSource> source_;

 private:
  void forward_stages(LayerCaches& cache, const BatchView& b, float* logits) const;  // model/pipeline.cpp
  dist::Comm* comm_ = nullptr;
  int64_t stage_first_ = 0, stage_last_ = 0, n_blocks_ = 0;
};

}  // namespace kvad
