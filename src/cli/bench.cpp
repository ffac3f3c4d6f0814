// `kvad bench`: prefill (ppN) and decode (tgN) speed, in the style of llama-bench.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "base/error.h"
#include "base/thread_pool.h"
#include "cli/commands.h"
#include "cli/bench_spec.h"
#include "cli/distributed.h"
#include "cli/generation_options.h"
#include "cli/loaded_model.h"
#include "io/tensor_source.h"
#include "cli/model_store.h"
#include "dist/comm.h"
#include "engine/session.h"
#include "io/gguf.h"
#include "model/model.h"
#include "model/pipeline.h"

namespace kvad::cli {

namespace {

struct BenchOptions {
  std::string model;
  int threads = 0;
  int n_prompt = 512;
  int n_gen = 128;
  int reps = 5;
  bool json = false;
  DeviceOptions device;
  CacheTypeOptions cache_type;
  SpecFlags spec;
  std::string spec_prompt_file;
  DistOptions dist;
};

struct Result {
  std::string test;
  int n_prompt = 0, n_gen = 0;
  std::vector<double> ns;  // per repetition
  std::vector<double> ts;  // tokens per second per repetition
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / v.size();
}
double stddev(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  const double m = mean(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / (v.size() - 1));
}

// The format most of the weight bytes are in ("Q4_1"), as llama-bench names the model type.
std::string main_format(const TensorSource& f) {
  std::map<std::string, size_t> bytes;
  for (const auto& t : f.tensors()) bytes[dtype_name(t.type)] += t.n_bytes;
  std::string best;
  size_t mx = 0;
  for (const auto& [k, v] : bytes)
    if (v > mx) { mx = v; best = k; }
  for (auto& c : best) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return best;
}

std::string params_str(int64_t n) {
  char b[32];
  if (n >= 1000000000) std::snprintf(b, sizeof b, "%.2f B", n / 1e9);
  else std::snprintf(b, sizeof b, "%.2f M", n / 1e6);
  return b;
}

// Per rank: bytes and messages sent and received per decoded token over the
// tg test (each rank's stage boundary, the truncates between repetitions
// included).
void print_pipeline_traffic(const std::vector<dist::CommStats>& st, double tokens) {
  std::printf("\npipeline traffic per decoded token (tg, %.0f tokens; dist counters):\n", tokens);
  std::printf("| %4s | %12s | %12s | %12s | %12s |\n", "rank", "sent B", "sent msgs", "recv B", "recv msgs");
  for (size_t r = 0; r < st.size(); ++r)
    std::printf("| %4zu | %12.1f | %12.2f | %12.1f | %12.2f |\n", r, st[r].bytes_sent / tokens,
                st[r].messages_sent / tokens, st[r].bytes_received / tokens, st[r].messages_received / tokens);
}

void bench(const BenchOptions& o) {
  if (o.reps < 1) throw Error("-r must be at least 1");
  if (o.n_prompt < 0 || o.n_gen < 0) throw Error("-p and -n must not be negative");
  const KVTypes kv = o.cache_type.types();
  o.spec.check();
  LoadedModel m = o.dist.load(o.model, o.device, o.spec);
  if (serve_if_stage(m, o.threads)) return;  // ranks other than 0: rank 0 drives
  const PipelineDriver driver(m);
  dist::Comm* comm = m.model->comm();
  if (o.spec.on()) {
    const int32_t n_ctx = 4096;
    Session s(m.model, n_ctx, 1, o.threads, kv);
    SamplerParams sp;
    sp.temp = 0;
    const std::unique_ptr<Speculation> spec = make_speculation(o.spec, m, s, o.device, n_ctx, o.threads, kv, sp);
    bench_spec(m, s, *spec, o.spec.spec, o.spec_prompt_file, o.n_gen, o.reps);
    return;
  }
  const std::string backend = o.device.device == "cpu" ? "CPU" : o.device.device == "sim" ? "sim" : "CUDA";
  const HParams& hp = m.model->hparams();
  const int32_t n_ctx = std::max(o.n_prompt, o.n_gen) + 1;
  Session s(m.model, n_ctx, 1, o.threads, kv);
  const int threads = s.pool().size();
  std::mt19937 rng(42);
  std::uniform_int_distribution<int32_t> tok(0, s.n_vocab() - 1);
  using clk = std::chrono::steady_clock;

  auto run_pp = [&] {
    s.truncate(0, 0);
    Batch b;
    for (int i = 0; i < o.n_prompt; ++i) b.add(tok(rng), i, 0, i + 1 == o.n_prompt);
    const auto t0 = clk::now();
    s.forward(b);
    return std::chrono::duration<double, std::nano>(clk::now() - t0).count();
  };
  auto run_tg = [&] {
    s.truncate(0, 0);
    Batch b;
    const auto t0 = clk::now();
    for (int i = 0; i < o.n_gen; ++i) {
      b.clear();
      b.add(tok(rng), i, 0, true);
      s.forward(b);
    }
    return std::chrono::duration<double, std::nano>(clk::now() - t0).count();
  };

  std::vector<Result> results;
  if (o.n_prompt > 0) {
    Result r{"pp" + std::to_string(o.n_prompt), o.n_prompt, 0, {}, {}};
    run_pp();  // warm-up, as llama-bench does
    for (int i = 0; i < o.reps; ++i) r.ns.push_back(run_pp());
    for (double ns : r.ns) r.ts.push_back(o.n_prompt / (ns * 1e-9));
    results.push_back(r);
  }
  // Split runs: every rank's traffic over the decode test (the counters of
  // dist::Comm), per decoded token.
  std::vector<dist::CommStats> tg_stats;
  if (o.n_gen > 0) {
    Result r{"tg" + std::to_string(o.n_gen), 0, o.n_gen, {}, {}};
    run_tg();
    if (comm) pipeline_stats(*comm, /*reset=*/true);
    for (int i = 0; i < o.reps; ++i) r.ns.push_back(run_tg());
    if (comm) tg_stats = pipeline_stats(*comm, /*reset=*/true);
    for (double ns : r.ns) r.ts.push_back(o.n_gen / (ns * 1e-9));
    results.push_back(r);
  }

  const std::string fmt = main_format(m.model->source());
  const std::string label = m.model->source().get_string("general.size_label", params_str(hp.n_params));
  const std::string model_type = hp.arch + " " + label + " " + fmt;
  const size_t size = m.model->weight_bytes();
  const size_t rss = peak_rss_bytes();
  if (o.json) {
    nlohmann::json arr = nlohmann::json::array();
    for (const auto& r : results) {
      arr.push_back({{"build_commit", "kvad"},
                     {"backends", backend},
                     {"cpu_info", ""},
                     {"model_filename", m.path},
                     {"model_type", model_type},
                     {"model_size", size},
                     {"model_n_params", hp.n_params},
                     {"n_batch", std::max(o.n_prompt, 1)},
                     {"n_ubatch", std::max(o.n_prompt, 1)},
                     {"n_threads", threads},
                     {"type_k", o.cache_type.k},
                     {"type_v", o.cache_type.v},
                     {"n_prompt", r.n_prompt},
                     {"n_gen", r.n_gen},
                     {"avg_ns", static_cast<uint64_t>(mean(r.ns))},
                     {"stddev_ns", static_cast<uint64_t>(stddev(r.ns))},
                     {"avg_ts", mean(r.ts)},
                     {"stddev_ts", stddev(r.ts)},
                     {"median_ts", median(r.ts)},
                     {"samples_ns", r.ns},
                     {"samples_ts", r.ts},
                     {"peak_rss_bytes", rss}});
    }
    std::printf("%s\n", arr.dump(2).c_str());
    return;
  }
  std::printf("| %-28s | %10s | %10s | %-7s | %7s | %8s | %20s |\n", "model", "size", "params", "backend",
              "threads", "test", "t/s (median ± sd)");
  std::printf("| %s | %s | %s | %s | %s | %s | %s |\n", std::string(28, '-').c_str(), std::string(10, '-').c_str(),
              std::string(10, '-').c_str(), std::string(7, '-').c_str(), std::string(7, '-').c_str(),
              std::string(8, '-').c_str(), std::string(20, '-').c_str());
  for (const auto& r : results) {
    char sz[32], ts[48];
    std::snprintf(sz, sizeof sz, "%.2f MiB", size / 1048576.0);
    std::snprintf(ts, sizeof ts, "%.2f ± %.2f", median(r.ts), stddev(r.ts));
    std::printf("| %-28s | %10s | %10s | %-7s | %7d | %8s | %20s |\n", model_type.c_str(), sz,
                params_str(hp.n_params).c_str(), backend.c_str(), threads, r.test.c_str(), ts);
  }
  std::printf("\npeak RSS %.1f MiB, %d repetitions after 1 warm-up each\n", rss / 1048576.0, o.reps);
  if (!tg_stats.empty()) print_pipeline_traffic(tg_stats, static_cast<double>(o.n_gen) * o.reps);
}

}  // namespace

void add_bench(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* c = app.add_subcommand("bench", "Measure prefill and decode speed (llama-bench style)");
  c->add_option("-m,--model", o->model, "GGUF file or model-store name (default: " + std::string(kDefaultModel) + ")");
  add_threads_option(c, o->threads);
  c->add_option("-p,--n-prompt", o->n_prompt, "Prompt tokens for the prefill test (0: skip)")->capture_default_str();
  c->add_option("-n,--n-gen", o->n_gen, "Tokens for the decode test (0: skip)")->capture_default_str();
  c->add_option("-r,--repetitions", o->reps, "Repetitions per test")
      ->check(integer_check())
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  c->add_flag("--json", o->json, "Print a JSON array with llama-bench's field names");
  add_device_options(c, o->device);
  o->cache_type.add_to(c);
  o->spec.add_to(c);
  o->dist.add_to(c);
  c->add_option("--spec-prompt-file", o->spec_prompt_file,
                "With --spec-ngram or --model-draft: the prompt to decode after (default: a built-in code edit)");
  c->callback([o] { bench(*o); });
}

}  // namespace kvad::cli
