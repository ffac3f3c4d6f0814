// What the model-running subcommands share to run a model split over the
// ranks of an MPI job (model/pipeline.h): the flags, vLLM's names
// (--pipeline-parallel-size/-pp, --tensor-parallel-size/-tp), the checks
// made before anything loads, and the roles of rank 0 and the other ranks.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "cli/loaded_model.h"
#include "cli/speculation.h"

namespace CLI { class App; }

namespace kvad::cli {

struct DistOptions {
  int pp = 1;  ///< --pipeline-parallel-size / -pp
  int tp = 1;  ///< --tensor-parallel-size / -tp (1 only, for now)
  std::vector<int64_t> layer_split;  ///< --layer-split a,b,...: blocks per stage

  void add_to(CLI::App* c);
  /// Before loading, on every rank alike: tp must be 1; a world size other
  /// than 1 needs an MPI build; the world size must equal tp × pp. Sets
  /// dev.comm and dev.layer_split for a split run. Throws kvad::Error on
  /// rank 0 (dist::AgreedError on the others), one line naming the numbers.
  void apply(DeviceOptions& dev) const;
  /// What run and bench do before anything else: apply() to a copy of
  /// `device`, refuse_speculation() when the run is split, then
  /// load_on_every_rank(). Throws as those do.
  LoadedModel load(const std::string& model_arg, const DeviceOptions& device, const SpecFlags& spec) const;
};

/// A split run refuses speculative decoding (not supported there yet):
/// kvad::Error on rank 0, dist::AgreedError on the others.
void refuse_speculation(const SpecFlags& spec);

/// load_for_cli on every rank of a split run, then agreement: when any rank
/// failed, rank 0 throws kvad::Error naming that rank and its message, the
/// others dist::AgreedError. Without a split, load_for_cli.
LoadedModel load_on_every_rank(const std::string& model_arg, const DeviceOptions& dev);

/// On ranks other than 0 of a split run: carries out rank 0's steps until
/// it stops them (serve_pipeline_stage), and returns true: the subcommand
/// then returns. An error of this rank's own is printed ("rank N: ...") and
/// ends the job (MPI_Abort), since rank 0 may be waiting on this stage.
/// Returns false on rank 0 and in a run that is not split.
bool serve_if_stage(const LoadedModel& m, int threads);

/// Rank 0 of a split run: on destruction stops the other ranks (failed when
/// destroyed by an exception); does nothing in a run that is not split.
class PipelineDriver {
 public:
  explicit PipelineDriver(const LoadedModel& m);
  ~PipelineDriver();
  PipelineDriver(const PipelineDriver&) = delete;
  PipelineDriver& operator=(const PipelineDriver&) = delete;

 private:
  const Model* model_;
  int exceptions_;
};

}  // namespace kvad::cli
