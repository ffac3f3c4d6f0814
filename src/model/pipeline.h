// Pipeline parallel: a decoder's blocks split in contiguous ranges over the
// ranks of a dist::Comm (Huang et al. 2019, "GPipe"; vLLM's and
// TensorRT-LLM's pipeline_parallel_size), stage s on rank s. Rank 0 holds
// the embedding and drives: each Session call (forward, truncate,
// copy_prefix, snapshot) is broadcast to the other ranks, which run
// serve_pipeline_stage until rank 0 stops them. A forward step passes the
// hidden state [n, n_embd] f32 once per stage boundary (stage s to s + 1)
// and the last stage's logits [n_out, n_vocab] back to rank 0, per piece of
// the batch (Cache::split, the same pieces on every rank). Every rank's
// cache holds only its own blocks; the rank-0 cache is a PipelineCache.
//
// One step at a time: stages do not overlap (micro-batches under load are
// not done yet).
#pragma once
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "model/model.h"

namespace kvad {

namespace dist { class Comm; struct CommStats; }
class LayerCaches;

/// The blocks of each stage, [first, last) per stage, for n_blocks blocks
/// over n_stages stages: `counts` blocks each when given (--layer-split),
/// else an even split with the remainder on the stages before the last, one
/// each from the second-to-last back (vLLM's get_pp_indices: the last stage
/// also holds the head). Throws kvad::Error for n_stages < 1, more stages
/// than blocks, counts of another length, a count below 1, or counts that
/// do not add up to n_blocks.
std::vector<std::pair<int64_t, int64_t>> pipeline_split(int64_t n_blocks, int n_stages,
                                                        const std::vector<int64_t>& counts = {});

/// Rank 0's cache of a pipelined model: `inner` (its own blocks) plus the
/// same operations sent to every other stage, which keeps a cache of its own
/// blocks under the same id. Made by Model::new_cache.
class PipelineCache final : public Cache {
 public:
  PipelineCache(dist::Comm& comm, int32_t id, std::unique_ptr<Cache> inner);
  ~PipelineCache() override;  ///< the other stages drop their caches too
  int32_t n_ctx() const override { return inner_->n_ctx(); }
  int n_seq() const override { return inner_->n_seq(); }
  int32_t cached(int seq) const override { return inner_->cached(seq); }
  /// Every stage lands on the same position: the landing depends only on
  /// the cache's layout and history, which every stage's LayerCaches keeps
  /// for all blocks (held or not).
  int32_t truncate(int seq, int32_t n) override;
  std::vector<BatchPiece> split(const BatchView& b) const override { return inner_->split(b); }
  void commit(const BatchView& piece) override { inner_->commit(piece); }
  bool copy_prefix(int src, int dst, int32_t n) override;
  void snapshot(int seq) override;
  /// This rank's bytes only (each rank holds its own blocks' share).
  size_t bytes() const override { return inner_->bytes(); }
  size_t state_bytes() const override { return inner_->state_bytes(); }
  size_t snapshot_bytes() const override { return inner_->snapshot_bytes(); }
  int64_t n_snapshots() const override { return inner_->n_snapshots(); }
  size_t bytes_per_token() const override { return inner_->bytes_per_token(); }

  /// Sends the batch of a forward step to the other stages.
  void announce_forward(const BatchView& b);
  LayerCaches& layers();

 private:
  dist::Comm& comm_;
  int32_t id_;
  std::unique_ptr<Cache> inner_;
};

/// Model::new_cache's wrapping: on rank 0 a PipelineCache around `c` (the
/// other ranks are told to make theirs), elsewhere `c` itself.
std::unique_ptr<Cache> pipeline_cache(dist::Comm& comm, std::unique_ptr<Cache> c, int32_t n_ctx, int n_seq,
                                      int64_t n_batch, KVTypes types);

/// Ranks other than 0: carries out rank 0's calls on this stage's blocks of
/// `m` until rank 0 stops the pipeline. Returns when rank 0 stopped after
/// its work; throws dist::AgreedError when rank 0 stopped on an error, and
/// kvad::Error for an error of its own (after which the caller should end
/// the job: rank 0 may be waiting on this stage).
void serve_pipeline_stage(const Model& m, ThreadPool& pool);

/// Rank 0: every rank's counters (dist::CommStats, rank order), as they
/// are before this call's own messages; reset: then zeroes them. Throws
/// kvad::Error on another rank.
std::vector<dist::CommStats> pipeline_stats(dist::Comm& comm, bool reset);

/// Rank 0: tells every other stage to return from serve_pipeline_stage
/// (failed: to throw dist::AgreedError, exiting non-zero). Ends the job
/// instead (Comm::abort) when rank 0 fails in the middle of a step, where
/// the other ranks wait for a message that will not come.
void stop_pipeline_stages(dist::Comm& comm, bool failed);

}  // namespace kvad
