// `kvad bench --spec-ngram N | --model-draft M`: decode speed with and
// without speculative decoding on one prompt, repetitions interleaved
// (plain, speculative, plain, ...), and the acceptance rate.
#include "cli/bench_spec.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "base/error.h"
#include "engine/generate.h"
#include "engine/sampler.h"
#include "engine/session.h"
#include "tokenizer/tokenizer.h"

namespace kvad::cli {

namespace {

// A code edit: a file, then the same file with a change being written out
// again (what n-gram lookup is for).
const char* kDefaultPrompt =
    "Here is a Python file:\n\n"
    "def parse_config(path):\n"
    "    with open(path) as f:\n"
    "        lines = f.read().splitlines()\n"
    "    config = {}\n"
    "    for line in lines:\n"
    "        line = line.strip()\n"
    "        if not line or line.startswith('#'):\n"
    "            continue\n"
    "        key, value = line.split('=', 1)\n"
    "        config[key.strip()] = value.strip()\n"
    "    return config\n\n"
    "def save_config(path, config):\n"
    "    with open(path, 'w') as f:\n"
    "        for key, value in sorted(config.items()):\n"
    "            f.write(key + ' = ' + value + '\\n')\n\n"
    "The same file, with parse_config renamed to load_config and every other line unchanged:\n\n"
    "def load_config(path):\n";

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

void bench_spec(const LoadedModel& m, Session& s, Speculation& spec, const SpecOptions& o, const std::string& prompt_file,
                int n_gen, int reps) {
  std::string text = kDefaultPrompt;
  if (!prompt_file.empty()) {
    std::ifstream in(prompt_file, std::ios::binary);
    if (!in) throw Error("--spec-prompt-file " + prompt_file + ": cannot open");
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  const std::vector<int32_t> ids = m.tokenizer->encode(text, true, false);
  if (static_cast<int64_t>(ids.size()) + n_gen + 1 > s.n_ctx())
    throw Error("bench: the prompt (" + std::to_string(ids.size()) + " tokens) and -n " + std::to_string(n_gen) +
                " do not fit the context");
  SamplerParams sp;
  sp.temp = 0;
  std::vector<double> plain_ts, spec_ts;
  SpecStats total;
  std::vector<int32_t> want;
  bool same = true;
  auto once = [&](Proposer* p) {
    s.truncate(0, 0);
    if (spec.draft_session) spec.draft_session->truncate(0, 0);  // the draft evaluates the prompt again: counted
    Sampler sampler(sp);
    GenerateOptions go;
    go.max_tokens = n_gen;
    go.proposer = p;
    go.spec = o;
    std::vector<int32_t> held;
    go.held = &held;
    const GenerateStats st = generate(s, *m.tokenizer, sampler, ids, go, [](const std::string&) { return true; });
    if (p) {
      total.n_proposed += st.spec.n_proposed;
      total.n_accepted += st.spec.n_accepted;
      total.n_verify += st.spec.n_verify;
      total.n_steps += st.spec.n_steps;
    }
    std::vector<int32_t> gen(held.begin() + static_cast<std::ptrdiff_t>(ids.size()), held.end());
    if (!p && want.empty()) want = gen;
    if (p && gen != want) same = false;
    return st.decode_s > 0 ? st.n_decode_tokens / st.decode_s : 0.0;
  };
  once(nullptr);  // warm-up
  once(spec.proposer.get());
  for (int i = 0; i < reps; ++i) {
    plain_ts.push_back(once(nullptr));
    spec_ts.push_back(once(spec.proposer.get()));
  }
  const double a = median(plain_ts), b = median(spec_ts);
  std::printf("| %-40s | %8s | %12s |\n", ("decode (greedy, prompt " + std::to_string(ids.size()) + " tokens)").c_str(), "test",
              "t/s (median)");
  std::printf("| %s | %s | %s |\n", std::string(40, '-').c_str(), std::string(8, '-').c_str(), std::string(12, '-').c_str());
  std::printf("| %-40s | %8s | %12.2f |\n", "plain", ("tg" + std::to_string(n_gen)).c_str(), a);
  std::printf("| %-40s | %8s | %12.2f |\n", spec.describe.substr(0, 40).c_str(), ("tg" + std::to_string(n_gen)).c_str(), b);
  std::printf("\nspeedup %.2fx | proposed %lld, accepted %lld (%.1f%%), %.2f tokens per target forward | %s | %d "
              "repetitions after 1 warm-up, interleaved\n",
              a > 0 ? b / a : 0, static_cast<long long>(total.n_proposed), static_cast<long long>(total.n_accepted),
              100.0 * total.acceptance(),
              total.n_steps ? static_cast<double>(reps + 1) * (n_gen - 1) / total.n_steps : 0.0,
              same ? "same tokens as plain decoding" : "TOKENS DIFFER from plain decoding", reps);
  if (!same) throw Error("bench: speculative decoding changed the greedy tokens");
}

}  // namespace kvad::cli
