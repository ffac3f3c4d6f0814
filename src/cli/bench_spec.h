// `kvad bench` with speculation flags (cli/speculation.h).
#pragma once
#include <string>

#include "cli/loaded_model.h"
#include "cli/speculation.h"

namespace kvad {
class Session;
}

namespace kvad::cli {

/// Greedy decoding of n_gen tokens after a prompt (the file's text, or a
/// built-in code edit), plain and with `spec`, `reps` times each after a
/// warm-up, interleaved; prints the median tokens/s of each, the speedup,
/// the acceptance rate, and whether the tokens were the same (kvad::Error
/// when not). `s` holds sequence 0 of the target with room for the prompt
/// and n_gen tokens.
void bench_spec(const LoadedModel& m, Session& s, Speculation& spec, const SpecOptions& o, const std::string& prompt_file,
                int n_gen, int reps);

}  // namespace kvad::cli
