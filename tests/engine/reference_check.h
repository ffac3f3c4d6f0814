// Checks of a kvad model against a llama.cpp reference fixture
// (tests/fixtures/reference/NAME.json, made by tools/make_reference.py), shared
// by the per-model reference tests. The checks report through GoogleTest
// (EXPECT/ASSERT), so call them from inside a TEST.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "io/gguf.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace kvad::test {

/// A store model with its fixture, loaded once per test program.
struct ReferenceModel {
  std::string name;
  nlohmann::json j;  ///< the fixture
  std::shared_ptr<const gguf::File> file;
  std::shared_ptr<Model> model;
  std::unique_ptr<Tokenizer> tok;
  bool add_bos = false;  ///< the fixture's settings.add_bos: prompts were tokenized with BOS
  int32_t n_ctx = 512;   ///< the fixture's settings.n_ctx
};

/// The model `name` from the store and its fixture; nullptr when the model is
/// not installed (the caller skips). Cached: later calls return the same one.
ReferenceModel* load_reference(const std::string& name);

struct Tolerances {
  /// Bound on |logit_kvad - logit_llama.cpp| over the reference's top-10 at every step.
  double logit_tol = 1.0;
  /// Where llama.cpp's top-1/top-2 gap is below this, the engines may pick
  /// different tokens; top-1 must agree everywhere else.
  double margin = 0.5;
  /// Prompts whose free-running 32-token greedy continuation must equal llama.cpp's.
  int min_exact = 5;
};

/// For every prompt of the fixture: the tokenization equals llama.cpp's; with
/// the reference's tokens fed back (teacher forcing) every step's logits are
/// within logit_tol and top-1 agrees where the margin is clear; free-running
/// greedy decoding equals the reference up to its first near-tie; at least
/// min_exact prompts agree on all tokens. Prints a line per prompt and the
/// measured maximum difference.
void check_greedy_continuations(ReferenceModel& r, const Tolerances& tol);

/// prompts[0].prefill_top10: logits at every position of one batched prompt
/// evaluation are within logit_tol, top-1 agrees where the margin is clear.
void check_batched_prefill(ReferenceModel& r, const Tolerances& tol);

/// Two prompts in one batch (two sequences) give the logits of separate runs.
void check_two_sequences_in_one_batch(ReferenceModel& r);

}  // namespace kvad::test
