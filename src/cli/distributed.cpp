#include "cli/distributed.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstring>
#include <exception>

#include "base/error.h"
#include "base/thread_pool.h"
#include "dist/comm.h"
#include "model/model.h"
#include "model/pipeline.h"

namespace kvad::cli {

namespace {

// An error every rank finds alike (the same flags, the same world).
[[noreturn]] void fail_alike(const std::string& msg) {
  if (dist::world_rank_hint() == 0) throw Error(msg);
  throw dist::AgreedError(msg);
}

}  // namespace

void DistOptions::add_to(CLI::App* c) {
  c->add_option("--pipeline-parallel-size", pp,
                "Split the model's layers over this many ranks of an MPI job (mpirun -np N; -pp is the same flag)")
      ->option_text("N  (-pp)")
      ->check(CLI::Range(1, 4096));
  c->add_option("--tensor-parallel-size", tp, "Tensor parallel ranks (-tp; only 1 for now)")
      ->option_text("N  (-tp)")
      ->check(CLI::Range(1, 4096));
  c->add_option("--layer-split", layer_split,
                "With -pp: the layers of each stage, in rank order (e.g. 10,20; they add up to the model's layers; "
                "default: an even split)")
      ->delimiter(',');
}

void DistOptions::apply(DeviceOptions& dev) const {
  if (tp != 1)
    fail_alike("--tensor-parallel-size " + std::to_string(tp) + ": tensor parallel is not supported yet (use 1)");
  const int want = tp * pp;
  const int launched = dist::launched_size();
  if (!dist::mpi_built() && (want > 1 || launched > 1)) fail_alike(dist::no_mpi_message(want > 1 ? want : launched));
  dist::Comm& w = dist::world();
  if (w.size() != want)
    fail_alike("world size " + std::to_string(w.size()) + " is not tp × pp = " + std::to_string(want) + " (tp " +
               std::to_string(tp) + ", pp " + std::to_string(pp) + "): start kvad with mpirun -np " +
               std::to_string(want) + (want == 1 ? " (or without mpirun)" : ""));
  if (!layer_split.empty() && static_cast<int>(layer_split.size()) != pp)
    fail_alike("--layer-split lists " + std::to_string(layer_split.size()) + " stages, --pipeline-parallel-size is " +
               std::to_string(pp));
  if (want > 1) dev.comm = &w;
  dev.layer_split = layer_split;
}

LoadedModel DistOptions::load(const std::string& model_arg, const DeviceOptions& device, const SpecFlags& spec) const {
  DeviceOptions dev = device;
  apply(dev);
  if (dev.comm) refuse_speculation(spec);
  return load_on_every_rank(model_arg, dev);
}

void refuse_speculation(const SpecFlags& spec) {
  if (spec.on()) fail_alike("speculative decoding is not supported with --pipeline-parallel-size above 1 yet");
}

LoadedModel load_on_every_rank(const std::string& model_arg, const DeviceOptions& dev) {
  if (!dev.comm || dev.comm->size() <= 1) return load_for_cli(model_arg, dev);
  dist::Comm& comm = *dev.comm;
  LoadedModel m;
  char msg[512] = {};
  try {
    m = load_for_cli(model_arg, dev);
  } catch (const std::exception& e) {
    std::snprintf(msg, sizeof msg, "%s", e.what());
    if (!msg[0]) std::snprintf(msg, sizeof msg, "failed to load");
  }
  std::vector<char> all(sizeof msg * static_cast<size_t>(comm.size()));
  comm.allgather(msg, sizeof msg, all.data());
  for (int r = 0; r < comm.size(); ++r) {
    const char* e = all.data() + sizeof msg * static_cast<size_t>(r);
    if (!e[0]) continue;
    const std::string text = std::string(e, strnlen(e, sizeof msg));
    if (comm.rank() != 0) throw dist::AgreedError(text);
    throw Error(r == 0 ? text : "rank " + std::to_string(r) + ": " + text);
  }
  return m;
}

bool serve_if_stage(const LoadedModel& m, int threads) {
  dist::Comm* comm = m.model->comm();
  if (!comm || comm->rank() == 0) return false;
  try {
    ThreadPool pool(threads);
    serve_pipeline_stage(*m.model, pool);
  } catch (const dist::AgreedError&) {
    throw;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvad: error: rank %d: %s\n", comm->rank(), e.what());
    comm->abort(1);
  }
  return true;
}

PipelineDriver::PipelineDriver(const LoadedModel& m) : model_(m.model.get()), exceptions_(std::uncaught_exceptions()) {}

PipelineDriver::~PipelineDriver() {
  dist::Comm* comm = model_->comm();
  if (comm && comm->rank() == 0) stop_pipeline_stages(*comm, std::uncaught_exceptions() > exceptions_);
}

}  // namespace kvad::cli
