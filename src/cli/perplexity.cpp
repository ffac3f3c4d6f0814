// `kvad perplexity`: perplexity of a model over a text file, by llama.cpp's
// llama-perplexity method, and KL divergence against a saved base run.
//
// The method (llama.cpp tools/perplexity, the default ppl_stride = 0 path):
//   * the whole text is tokenized once, adding BOS as the model's tokenizer
//     says (tokenizer.ggml.add_bos_token);
//   * it is cut into chunks of n_ctx (-c) tokens; --chunks N keeps the first
//     N; the tail that does not fill a chunk is dropped; at least 2·n_ctx
//     tokens are needed;
//   * each chunk is evaluated from an empty cache in batches of -b tokens,
//     its first token replaced by BOS when the tokenizer adds one;
//   * only the second half is scored: the logits at positions
//     first = n_ctx/2 .. n_ctx-2 predict tokens first+1 .. n_ctx-1, so each
//     chunk adds n_ctx - 1 - first negative log-likelihoods;
//   * after each chunk `[i]exp(mean nll)` is printed, and at the end
//     `Final estimate: PPL = exp(m) +/- ppl·sqrt((E[nll²] - m²)/(count-1))`.
//
// --kl-divergence-base FILE saves the run's log-probabilities, in kvad's own
// format (little-endian):
//   char[8]  "KVADKLD1"
//   int32    n_ctx, n_vocab, n_chunk, n_scored (= n_ctx - 1 - n_ctx/2)
//   int32    tokens[n_chunk · n_ctx]       (the text's tokens, before BOS
//                                            replacement)
//   float32  logprob[n_chunk][n_scored][n_vocab]  (log-softmax of the
//            logits at positions n_ctx/2 .. n_ctx-2 of each chunk)
// i.e. 4·n_chunk·n_scored·n_vocab bytes of payload (about 12 MiB per chunk
// for a 49k vocabulary at -c 128).
// --kl-divergence FILE reads it back, evaluates the same tokens (n_ctx and
// the chunks come from the file; -f is not needed) and reports the mean
// KL(base ‖ this), the top-1 agreement (the share of positions whose most
// likely token is the same) and the PPL of both runs and their difference.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "cli/commands.h"
#include "cli/generation_options.h"
#include "cli/loaded_model.h"
#include "cli/model_store.h"
#include "engine/session.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace kvad::cli {

namespace {

constexpr char kMagic[8] = {'K', 'V', 'A', 'D', 'K', 'L', 'D', '1'};

struct PerplexityOptions {
  std::string model;
  std::string file;
  int32_t n_ctx = 512;
  bool ctx_given = false;  ///< -c on the command line
  int32_t n_batch = 2048;
  int threads = 0;
  int32_t chunks = -1;
  std::string kl_base;  ///< --kl-divergence-base: write
  std::string kl_file;  ///< --kl-divergence: read
  DeviceOptions device;
  CacheTypeOptions cache_type;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// log-softmax of one row into out (doubles for the sums, as llama.cpp does).
void log_softmax(const float* logits, int n_vocab, float* out) {
  float mx = logits[0];
  for (int i = 1; i < n_vocab; ++i) mx = std::max(mx, logits[i]);
  double sum = 0;
  for (int i = 0; i < n_vocab; ++i) sum += std::exp(double(logits[i]) - mx);
  const double lse = std::log(sum) + mx;
  for (int i = 0; i < n_vocab; ++i) out[i] = static_cast<float>(double(logits[i]) - lse);
}

// Negative log-likelihood of `tok` under the logits row, exactly as
// llama.cpp's log_softmax(): max-shifted, the sum in double.
double nll_of(const float* logits, int n_vocab, int32_t tok) {
  float mx = logits[0];
  for (int i = 1; i < n_vocab; ++i) mx = std::max(mx, logits[i]);
  double sum = 0;
  for (int i = 0; i < n_vocab; ++i) sum += std::exp(double(logits[i]) - mx);
  return -(double(logits[tok]) - mx - std::log(sum));
}

struct KlBase {
  int32_t n_ctx = 0, n_vocab = 0, n_chunk = 0, n_scored = 0;
  std::vector<int32_t> tokens;
  std::ifstream in;  ///< positioned at the first log-prob row
};

void open_kl_base(const std::string& path, KlBase& b) {
  b.in.open(path, std::ios::binary);
  if (!b.in) throw Error("cannot open " + path);
  char magic[8];
  int32_t h[4];
  b.in.read(magic, 8);
  b.in.read(reinterpret_cast<char*>(h), sizeof h);
  if (!b.in || std::memcmp(magic, kMagic, 8) != 0)
    throw Error(path + " is not a kvad --kl-divergence-base file (bad magic)");
  b.n_ctx = h[0];
  b.n_vocab = h[1];
  b.n_chunk = h[2];
  b.n_scored = h[3];
  if (b.n_ctx < 4 || b.n_vocab <= 0 || b.n_chunk <= 0 || b.n_scored != b.n_ctx - 1 - b.n_ctx / 2)
    throw Error(path + ": inconsistent header");
  b.tokens.resize(size_t(b.n_chunk) * b.n_ctx);
  b.in.read(reinterpret_cast<char*>(b.tokens.data()), b.tokens.size() * sizeof(int32_t));
  if (!b.in) throw Error(path + ": truncated");
}

void perplexity(const PerplexityOptions& o) {
  const bool kl_read = !o.kl_file.empty();
  const bool kl_write = !o.kl_base.empty();
  if (kl_read && kl_write) throw Error("--kl-divergence and --kl-divergence-base exclude each other");
  if (!kl_read && o.file.empty()) throw Error("perplexity needs a text file (-f FILE)");

  KlBase base;
  if (kl_read) open_kl_base(o.kl_file, base);

  const KVTypes kv = o.cache_type.types();
  LoadedModel m = load_for_cli(o.model, o.device);
  const Tokenizer& tok = *m.tokenizer;
  const bool add_bos = tok.add_bos() && tok.bos() >= 0;
  if (tok.add_bos() && tok.bos() < 0) throw Error("the tokenizer adds BOS but has no BOS token");

  std::vector<int32_t> tokens;
  int32_t n_ctx = o.n_ctx;
  if (kl_read) {
    tokens = base.tokens;
    n_ctx = base.n_ctx;
    if (o.ctx_given && o.n_ctx != n_ctx)
      std::fprintf(stderr, "kvad: -c %d ignored: %s was made with -c %d\n", o.n_ctx, o.kl_file.c_str(), n_ctx);
  } else {
    if (n_ctx < 4) throw Error("-c must be at least 4");
    tokens = tok.encode(read_file(o.file), /*add_special=*/true, /*parse_special=*/false);
    if (static_cast<int64_t>(tokens.size()) < 2 * int64_t(n_ctx))
      throw Error("need at least " + std::to_string(2 * int64_t(n_ctx)) + " tokens for -c " +
                  std::to_string(n_ctx) + ", the text has " + std::to_string(tokens.size()));
  }
  const int n_vocab = static_cast<int>(m.model->hparams().n_vocab);
  if (kl_read && base.n_vocab != n_vocab)
    throw Error("the model's vocabulary (" + std::to_string(n_vocab) + ") differs from the base run's (" +
                std::to_string(base.n_vocab) + ")");
  const int32_t n_ctx_model = static_cast<int32_t>(m.model->hparams().n_ctx_train);
  if (n_ctx_model > 0 && n_ctx > n_ctx_model)
    std::fprintf(stderr, "kvad: warning: -c %d is past the model's trained context (%d)\n", n_ctx, n_ctx_model);

  const int n_chunk_max = static_cast<int>(tokens.size() / n_ctx);
  const int n_chunk = o.chunks < 0 ? n_chunk_max : std::min(o.chunks, n_chunk_max);
  if (n_chunk <= 0) throw Error("no chunk to evaluate");
  const int32_t n_batch = std::min(o.n_batch, n_ctx);
  if (n_batch <= 0) throw Error("-b must be positive");
  if (n_ctx % n_batch != 0)
    throw Error("-b " + std::to_string(n_batch) + " must divide -c " + std::to_string(n_ctx) +
                " (or be at least -c)");
  const int first = n_ctx / 2;
  const int n_scored = n_ctx - 1 - first;

  std::ofstream out;
  if (kl_write) {
    out.open(o.kl_base, std::ios::binary);
    if (!out) throw Error("cannot write " + o.kl_base);
    const int32_t h[4] = {n_ctx, n_vocab, n_chunk, n_scored};
    out.write(kMagic, 8);
    out.write(reinterpret_cast<const char*>(h), sizeof h);
    out.write(reinterpret_cast<const char*>(tokens.data()), size_t(n_chunk) * n_ctx * sizeof(int32_t));
  }

  Session s(m.model, n_ctx, 1, o.threads, kv);
  std::fprintf(stderr, "kvad: perplexity over %d chunks, n_ctx=%d, batch_size=%d, %zu tokens, add_bos=%d\n",
               n_chunk, n_ctx, n_batch, tokens.size(), add_bos ? 1 : 0);

  double nll = 0, nll2 = 0;
  int64_t count = 0;
  // KL statistics (kl_read).
  double kld_sum = 0, kld_sum2 = 0, base_nll = 0, base_nll2 = 0;
  int64_t same_top = 0;
  std::vector<float> chunk_logits(size_t(n_ctx - first) * n_vocab);
  std::vector<float> lp(n_vocab), lp_base(n_vocab);
  Batch b;
  for (int i = 0; i < n_chunk; ++i) {
    const size_t start = size_t(i) * n_ctx;
    s.truncate(0, 0);
    size_t rows = 0;
    for (int j = 0; j < n_ctx / n_batch; ++j) {
      b.clear();
      for (int k = 0; k < n_batch; ++k) {
        const int32_t pos = j * n_batch + k;
        int32_t t = tokens[start + pos];
        if (pos == 0 && add_bos) t = tok.bos();
        b.add(t, pos, 0, pos >= first);
      }
      const std::vector<float>& lg = s.forward(b);
      std::copy(lg.begin(), lg.begin() + b.out.size() * size_t(n_vocab), chunk_logits.begin() + rows * n_vocab);
      rows += b.out.size();
    }
    for (int r = 0; r < n_scored; ++r) {
      const float* row = chunk_logits.data() + size_t(r) * n_vocab;
      const int32_t target = tokens[start + first + 1 + r];
      const double v = nll_of(row, n_vocab, target);
      nll += v;
      nll2 += v * v;
      if (kl_write || kl_read) log_softmax(row, n_vocab, lp.data());
      if (kl_write) out.write(reinterpret_cast<const char*>(lp.data()), n_vocab * sizeof(float));
      if (kl_read) {
        base.in.read(reinterpret_cast<char*>(lp_base.data()), n_vocab * sizeof(float));
        if (!base.in) throw Error(o.kl_file + ": truncated");
        double kl = 0;
        int top = 0, top_base = 0;
        for (int t = 0; t < n_vocab; ++t) {
          kl += std::exp(double(lp_base[t])) * (double(lp_base[t]) - lp[t]);
          if (lp[t] > lp[top]) top = t;
          if (lp_base[t] > lp_base[top_base]) top_base = t;
        }
        kld_sum += kl;
        kld_sum2 += kl * kl;
        same_top += top == top_base;
        const double bv = -double(lp_base[target]);
        base_nll += bv;
        base_nll2 += bv * bv;
      }
    }
    count += n_scored;
    std::printf("[%d]%.4f,", i + 1, std::exp(nll / count));
    std::fflush(stdout);
  }
  std::printf("\n");
  if (kl_write && !out.flush()) throw Error("cannot write " + o.kl_base);

  auto mean_err = [](double sum, double sum2, int64_t n, double& mean) {
    mean = sum / n;
    double var = sum2 / n - mean * mean;
    return var > 0 && n > 1 ? std::sqrt(var / (n - 1)) : 0.0;
  };
  double m_nll;
  const double e_nll = mean_err(nll, nll2, count, m_nll);
  const double ppl = std::exp(m_nll);
  std::printf("Final estimate: PPL = %.4f +/- %.5f\n", ppl, e_nll * ppl);
  if (kl_read) {
    double m_base, m_kl;
    const double e_base = mean_err(base_nll, base_nll2, count, m_base);
    const double e_kl = mean_err(kld_sum, kld_sum2, count, m_kl);
    const double ppl_base = std::exp(m_base);
    const double p = double(same_top) / count;
    std::printf("Base PPL:         %.4f +/- %.5f\n", ppl_base, e_base * ppl_base);
    std::printf("Delta PPL:        %+.4f (%+.3f%%)\n", ppl - ppl_base, 100.0 * (ppl / ppl_base - 1.0));
    std::printf("Mean KLD:         %.6f +/- %.6f\n", m_kl, e_kl);
    std::printf("Same top token:   %.3f +/- %.3f %%\n", 100.0 * p, 100.0 * std::sqrt(p * (1 - p) / (count - 1)));
  }
}

}  // namespace

void add_perplexity(CLI::App& app) {
  auto o = std::make_shared<PerplexityOptions>();
  CLI::App* c = app.add_subcommand(
      "perplexity", "Perplexity over a text file (llama-perplexity's method), or KL divergence against a base run");
  c->add_option("-m,--model", o->model,
                "GGUF file, model-store name or HF repo (default: " + std::string(kDefaultModel) + ")");
  c->add_option("-f,--file", o->file, "The text file");
  CLI::Option* ctx = c->add_option("-c,--ctx-size", o->n_ctx, "Tokens per chunk (--kl-divergence: the base file's)")
                         ->capture_default_str();
  c->add_option("-b,--batch-size", o->n_batch, "Tokens per forward call (capped at -c; must divide -c)")
      ->capture_default_str();
  add_threads_option(c, o->threads);
  c->add_option("--chunks", o->chunks, "Evaluate at most N chunks (-1: all)")->capture_default_str();
  c->add_option("--kl-divergence-base", o->kl_base,
                "Save this run's log-probabilities to FILE (kvad's format, see perplexity.cpp)");
  c->add_option("--kl-divergence", o->kl_file,
                "Compare with a --kl-divergence-base FILE: mean KLD, same top token %, delta PPL");
  add_device_options(c, o->device);
  o->cache_type.add_to(c);
  c->callback([o, ctx] {
    o->ctx_given = ctx->count() > 0;
    perplexity(*o);
  });
}

}  // namespace kvad::cli
