#include "model/pipeline.h"

#include <exception>
#include <map>
#include <string>

#include "base/error.h"
#include "base/thread_pool.h"
#include "dist/comm.h"
#include "model/cache.h"
#include "tensor/ops.h"

namespace kvad {

namespace {

// What rank 0 broadcasts before each call it makes on its cache; the other
// ranks wait for it in serve_pipeline_stage.
enum class StageOp : int32_t { Stop, Failed, NewCache, FreeCache, Forward, Truncate, CopyPrefix, Snapshot, Stats };
struct Command {
  StageOp op = StageOp::Stop;
  int32_t cache = 0;
  int64_t a = 0, b = 0, c = 0, d = 0;
};

constexpr int kTagHidden = 1, kTagLogits = 2, kTagStats = 3;

// Rank 0 is between the broadcast of a step and its last message: an error
// there leaves the other ranks waiting (stop_pipeline_stages aborts the job).
bool g_in_step = false;
int32_t g_next_cache = 1;

// Set for the step; left set when the step ends by an exception.
struct StepScope {
  StepScope() : exceptions_(std::uncaught_exceptions()) { g_in_step = true; }
  ~StepScope() {
    if (std::uncaught_exceptions() == exceptions_) g_in_step = false;
  }
  int exceptions_;
};

void send_command(dist::Comm& comm, Command c) { comm.bcast(&c, sizeof c, 0); }

}  // namespace

std::vector<std::pair<int64_t, int64_t>> pipeline_split(int64_t n_blocks, int n_stages,
                                                        const std::vector<int64_t>& counts) {
  if (n_stages < 1) throw Error("pipeline: " + std::to_string(n_stages) + " stages; need at least 1");
  if (n_stages > n_blocks)
    throw Error("pipeline: " + std::to_string(n_stages) + " pipeline stages for a model of " + std::to_string(n_blocks) +
                " layers; each stage needs at least one layer");
  std::vector<int64_t> n(static_cast<size_t>(n_stages), n_blocks / n_stages);
  if (!counts.empty()) {
    if (counts.size() != n.size())
      throw Error("pipeline: --layer-split lists " + std::to_string(counts.size()) + " stages, the pipeline has " +
                  std::to_string(n_stages));
    int64_t sum = 0;
    for (int64_t c : counts) {
      if (c < 1) throw Error("pipeline: --layer-split gives a stage " + std::to_string(c) + " layers; each needs at least 1");
      sum += c;
    }
    if (sum != n_blocks)
      throw Error("pipeline: --layer-split adds up to " + std::to_string(sum) + " layers, the model has " +
                  std::to_string(n_blocks));
    n = counts;
  } else {
    for (int64_t i = 0; i < n_blocks % n_stages; ++i) ++n[static_cast<size_t>(n_stages - 2 - i)];
  }
  std::vector<std::pair<int64_t, int64_t>> out;
  int64_t first = 0;
  for (int64_t c : n) out.emplace_back(first, first + c), first += c;
  return out;
}

PipelineCache::PipelineCache(dist::Comm& comm, int32_t id, std::unique_ptr<Cache> inner)
    : comm_(comm), id_(id), inner_(std::move(inner)) {}

PipelineCache::~PipelineCache() {
  if (!g_in_step) send_command(comm_, {StageOp::FreeCache, id_});
}

int32_t PipelineCache::truncate(int seq, int32_t n) {
  send_command(comm_, {StageOp::Truncate, id_, seq, n});
  return inner_->truncate(seq, n);
}

bool PipelineCache::copy_prefix(int src, int dst, int32_t n) {
  send_command(comm_, {StageOp::CopyPrefix, id_, src, dst, n});
  return inner_->copy_prefix(src, dst, n);
}

void PipelineCache::snapshot(int seq) {
  send_command(comm_, {StageOp::Snapshot, id_, seq});
  inner_->snapshot(seq);
}

void PipelineCache::announce_forward(const BatchView& b) {
  g_in_step = true;  // until forward_stages has received the last logits
  send_command(comm_, {StageOp::Forward, id_, b.n, b.n_out});
  std::vector<int32_t> buf(static_cast<size_t>(3 * b.n + b.n_out));
  std::copy(b.token, b.token + b.n, buf.begin());
  std::copy(b.pos, b.pos + b.n, buf.begin() + b.n);
  std::copy(b.seq, b.seq + b.n, buf.begin() + 2 * b.n);
  std::copy(b.out, b.out + b.n_out, buf.begin() + 3 * b.n);
  comm_.bcast(buf.data(), buf.size() * sizeof(int32_t), 0);
}

LayerCaches& PipelineCache::layers() {
  auto* c = dynamic_cast<LayerCaches*>(inner_.get());
  if (!c) throw Error("pipeline: the cache was not made by Model::new_cache");
  return *c;
}

std::unique_ptr<Cache> pipeline_cache(dist::Comm& comm, std::unique_ptr<Cache> c, int32_t n_ctx, int n_seq,
                                      int64_t n_batch, KVTypes types) {
  if (comm.rank() != 0) return c;
  const int32_t id = g_next_cache++;
  send_command(comm, {StageOp::NewCache, id, n_ctx, n_seq, n_batch,
                      static_cast<int64_t>(types.k) | (static_cast<int64_t>(types.v) << 16)});
  return std::make_unique<PipelineCache>(comm, id, std::move(c));
}

// Every rank cuts the batch into the same pieces (the caches have the same
// layout) and runs them in turn: stage s waits for stage s - 1's hidden
// state, runs its blocks, and hands on the result; the last stage's logits
// go to rank 0.
void Model::forward_stages(LayerCaches& cache, const BatchView& b, float* logits) const {
  StepScope step;
  dist::Comm& comm = *comm_;
  const int rank = comm.rank(), last = comm.size() - 1;
  const int64_t E = hp_.n_embd, V = hp_.n_vocab;
  std::vector<float> hidden, own_logits;
  if (rank == last && rank != 0) own_logits.resize(static_cast<size_t>(b.n_out * V));
  float* out = rank == 0 ? logits : own_logits.data();
  for (const BatchPiece& p : cache.split(b)) {
    const int64_t n = p.view.n;
    Tensor x;
    if (!holds_embedding()) {
      hidden.resize(static_cast<size_t>(n * E));
      comm.recv(hidden.data(), hidden.size() * sizeof(float), rank - 1, kTagHidden);
      x = ops::from_host(hidden.data(), DType::F32, {E, n, 1, 1}, device_);
    }
    float* piece_logits = out ? out + p.out_offset * V : nullptr;
    forward_impl(cache, p.view, x, holds_head() ? piece_logits : nullptr);
    if (!holds_head()) {
      if (!x || x.type != DType::F32 || x.ne[0] != E || x.ne[1] != n)
        throw Error("pipeline: " + hp_.arch + " stage " + std::to_string(rank) + " gave no [n, n_embd] f32 hidden state");
      hidden.resize(static_cast<size_t>(n * E));
      ops::to_host(x, hidden.data());
      comm.send(hidden.data(), hidden.size() * sizeof(float), rank + 1, kTagHidden);
    } else if (rank != 0 && p.view.n_out > 0) {
      comm.send(piece_logits, static_cast<size_t>(p.view.n_out * V) * sizeof(float), 0, kTagLogits);
    }
    if (rank == 0 && !holds_head() && p.view.n_out > 0)
      comm.recv(piece_logits, static_cast<size_t>(p.view.n_out * V) * sizeof(float), last, kTagLogits);
    cache.commit(p.view);
  }
}

void serve_pipeline_stage(const Model& m, ThreadPool& pool) {
  dist::Comm* comm = m.comm();
  if (!comm || comm->rank() == 0) throw Error("pipeline: serve_pipeline_stage runs on ranks other than 0");
  ops::PoolScope scope(pool);
  std::map<int32_t, std::unique_ptr<Cache>> caches;
  auto cache = [&](int32_t id) -> Cache& {
    const auto it = caches.find(id);
    if (it == caches.end()) throw Error("pipeline: rank 0 named cache " + std::to_string(id) + ", which this rank does not have");
    return *it->second;
  };
  std::vector<int32_t> buf;
  for (;;) {
    Command c;
    comm->bcast(&c, sizeof c, 0);
    switch (c.op) {
      case StageOp::Stop: return;
      case StageOp::Failed: throw dist::AgreedError("rank 0 stopped the pipeline on an error");
      case StageOp::NewCache:
        caches[c.cache] = m.new_cache(static_cast<int32_t>(c.a), static_cast<int>(c.b), c.c,
                                      {static_cast<DType>(c.d & 0xffff), static_cast<DType>(c.d >> 16)});
        break;
      case StageOp::FreeCache: caches.erase(c.cache); break;
      case StageOp::Forward: {
        const int64_t n = c.a, n_out = c.b;
        if (n < 0 || n_out < 0 || n_out > n) throw Error("pipeline: rank 0 sent a malformed step");
        buf.resize(static_cast<size_t>(3 * n + n_out));
        comm->bcast(buf.data(), buf.size() * sizeof(int32_t), 0);
        const BatchView v{buf.data(), buf.data() + n, buf.data() + 2 * n, n, buf.data() + 3 * n, n_out};
        m.forward(pool, cache(c.cache), v, nullptr);
        break;
      }
      case StageOp::Truncate: cache(c.cache).truncate(static_cast<int>(c.a), static_cast<int32_t>(c.b)); break;
      case StageOp::CopyPrefix:
        cache(c.cache).copy_prefix(static_cast<int>(c.a), static_cast<int>(c.b), static_cast<int32_t>(c.c));
        break;
      case StageOp::Snapshot: cache(c.cache).snapshot(static_cast<int>(c.a)); break;
      case StageOp::Stats: {
        const dist::CommStats st = comm->stats();
        comm->send(&st, sizeof st, 0, kTagStats);
        if (c.a) comm->reset_stats();
        break;
      }
      default: throw Error("pipeline: unknown command " + std::to_string(static_cast<int>(c.op)) + " from rank 0");
    }
  }
}

std::vector<dist::CommStats> pipeline_stats(dist::Comm& comm, bool reset) {
  std::vector<dist::CommStats> out(static_cast<size_t>(comm.size()));
  if (comm.rank() != 0) throw Error("pipeline: pipeline_stats runs on rank 0");
  if (comm.size() > 1) {
    send_command(comm, {StageOp::Stats, 0, reset ? 1 : 0});
    for (int r = 1; r < comm.size(); ++r) comm.recv(&out[static_cast<size_t>(r)], sizeof(dist::CommStats), r, kTagStats);
  }
  out[0] = comm.stats();
  if (reset) comm.reset_stats();
  return out;
}

void stop_pipeline_stages(dist::Comm& comm, bool failed) {
  if (comm.size() <= 1 || comm.rank() != 0) return;
  if (g_in_step) comm.abort(1);
  send_command(comm, {failed ? StageOp::Failed : StageOp::Stop});
}

}  // namespace kvad
