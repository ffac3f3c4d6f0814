// Decode speed with and without grammar-constrained sampling:
// SmolLM2 through the Scheduler (one slot), the same prompt unconstrained,
// with response_format json_object, and with a JSON schema. Prints decode
// tok/s (tokens after the first over the time after it, median of the
// repetitions, modes interleaved) and the mask cost per token. A plain
// program: it asserts nothing.
//   bench_grammar [MODEL.gguf] [repetitions] [max_tokens]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "engine/grammar/json_schema.h"
#include "engine/scheduler.h"
#include "io/gguf.h"
#include "model/model.h"
#include "model/registry.h"
#include "tokenizer/tokenizer.h"

using namespace kvad;

int main(int argc, char** argv) {
  const char* home = std::getenv("HOME");
  const std::string path = argc > 1 && argv[1][0] ? argv[1] : std::string(home ? home : "") + "/.cache/kvad/models/smollm2-135m.gguf";
  const int reps = argc > 2 ? std::atoi(argv[2]) : 5;
  const int max_tokens = argc > 3 ? std::atoi(argv[3]) : 128;
  try {
    std::shared_ptr<const gguf::File> file = gguf::File::open(path);
    std::shared_ptr<Model> model = load_model(file, "cpu");
    std::shared_ptr<Tokenizer> tok = Tokenizer::from_gguf(*file);
    SchedulerOptions o;
    o.n_slots = 1;
    o.n_ctx = 1024;
    Scheduler sched(model, tok, o);
    const auto prompt = tok->encode(
        "<|im_start|>user\nDescribe a person and their pets as JSON.<|im_end|>\n<|im_start|>assistant\n", false, true);
    const auto schema = nlohmann::ordered_json::parse(R"({"type": "object", "properties": {
      "name": {"type": "string"}, "age": {"type": "integer", "minimum": 0, "maximum": 120},
      "pets": {"type": "array", "items": {"type": "object", "properties": {"kind": {"enum": ["cat", "dog"]},
      "name": {"type": "string"}}, "required": ["kind", "name"]}}, "bio": {"type": "string"}},
      "required": ["name", "age", "pets", "bio"]})");
    struct Mode { const char* name; std::shared_ptr<const Grammar> g; std::vector<double> tps; double mask_s = 0; long tokens = 0; };
    std::vector<Mode> modes = {{"none", nullptr, {}},
                               {"json_object", Grammar::parse(json_any_gbnf(true)), {}},
                               {"json_schema", json_schema_grammar(schema), {}}};
    for (int r = 0; r < reps; ++r)
      for (Mode& m : modes) {
        GenParams p;
        p.sampling.temp = 1.0f;
        p.sampling.seed = 100 + static_cast<uint64_t>(r);
        p.max_tokens = max_tokens;
        p.grammar = m.g;
        auto job = sched.submit(prompt, p);
        GenEvent last;
        for (;;) {
          auto ev = job->wait(std::chrono::milliseconds(1000));
          if (ev && ev->done) { last = *ev; break; }
        }
        const GenUsage& u = last.usage;
        if (u.completion_tokens < 2) continue;
        m.tps.push_back((u.completion_tokens - 1) / (u.total_s - u.ttft_s));
        m.mask_s += u.grammar_s;
        m.tokens += u.completion_tokens;
      }
    std::printf("%-12s %10s %14s %8s\n", "grammar", "tok/s", "mask us/token", "tokens");
    for (Mode& m : modes) {
      std::sort(m.tps.begin(), m.tps.end());
      const double med = m.tps.empty() ? 0 : m.tps[m.tps.size() / 2];
      std::printf("%-12s %10.1f %14.1f %8ld\n", m.name, med, m.tokens ? 1e6 * m.mask_s / static_cast<double>(m.tokens) : 0.0,
                  m.tokens);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_grammar: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
