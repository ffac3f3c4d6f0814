#include "engine/generate.h"

#include <algorithm>
#include <chrono>

#include "base/error.h"
#include "engine/grammar/grammar.h"
#include "engine/sampler.h"
#include "engine/session.h"
#include "tokenizer/tokenizer.h"

namespace kvad {

namespace {
double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}
}  // namespace

size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

const std::vector<float>& prefill(Session& s, const std::vector<int32_t>& tokens, int seq, int32_t n_batch) {
  if (tokens.empty()) throw Error("prefill: no tokens");
  Batch b;
  const std::vector<float>* out = nullptr;
  int32_t pos = s.cached(seq);
  for (size_t i = 0; i < tokens.size(); i += n_batch) {
    b.clear();
    const size_t end = std::min(tokens.size(), i + static_cast<size_t>(n_batch));
    for (size_t j = i; j < end; ++j) b.add(tokens[j], pos++, seq, j + 1 == tokens.size());
    out = &s.forward(b);
  }
  return *out;
}

GenerateStats generate(Session& s, const Tokenizer& tok, Sampler& sampler,
                       const std::vector<int32_t>& prompt, const GenerateOptions& opts,
                       const std::function<bool(const std::string&)>& on_text) {
  GenerateStats st;
  if (prompt.empty()) throw Error("empty prompt");
  if (static_cast<int64_t>(prompt.size()) > s.n_ctx())
    throw Error("prompt is " + std::to_string(prompt.size()) + " tokens, longer than the context (" +
                std::to_string(s.n_ctx()) + " tokens; raise --ctx-size)");
  // Reuse the longest common prefix with what the sequence holds, but always
  // evaluate at least the last prompt token so there are logits to sample.
  size_t keep = 0;
  if (opts.held) keep = std::min(common_prefix(*opts.held, prompt), prompt.size() - 1);
  const int32_t landed = s.truncate(opts.seq, static_cast<int32_t>(keep));
  if (opts.held) opts.held->resize(landed);
  st.n_cached = landed;
  const std::vector<int32_t> rest(prompt.begin() + landed, prompt.end());

  for (int32_t t : prompt) sampler.accept(t);
  double t0 = now_s();
  const std::vector<float>* logits = &prefill(s, rest, opts.seq, opts.n_batch);
  if (opts.proposer) opts.proposer->begin(prompt);
  st.prefill_s = now_s() - t0;
  st.n_prompt = static_cast<int32_t>(rest.size());
  if (opts.held) opts.held->insert(opts.held->end(), rest.begin(), rest.end());

  StreamDecoder dec(tok, opts.special_text);
  const int nv = s.n_vocab();
  std::vector<float> last(logits->end() - nv, logits->end());
  t0 = now_s();
  st.stop = "length";
  // Records a chosen token; false when generation ends with it.
  auto take = [&](int32_t id) {
    sampler.accept(id);
    ++st.n_generated;
    if (tok.is_eog(id)) { st.stop = "eog"; return false; }
    if (opts.grammar && !opts.grammar->accept(id))
      throw Error("grammar: the sampled token " + std::to_string(id) + " is not allowed");
    const std::string piece = dec.push(id);
    if (!piece.empty() && !on_text(piece)) { st.stop = "stopped"; return false; }
    if (opts.grammar && opts.grammar->finished()) { st.stop = "grammar"; return false; }
    return true;
  };
  if (opts.proposer && opts.max_tokens != 0) {
    // The first token comes from the prompt's logits; then each step
    // evaluates the last chosen token with the proposed ones.
    if (opts.grammar) opts.grammar->apply(last.data(), nv);
    const int32_t first = sampler.sample(last.data(), nv);
    std::vector<int32_t> context = prompt;
    context.push_back(first);
    SpecDecoder spec(s, opts.seq, opts.proposer, opts.spec);
    bool go_on = take(first);
    while (go_on && (opts.max_tokens < 0 || st.n_generated < opts.max_tokens)) {
      if (s.cached(opts.seq) >= s.n_ctx()) { st.stop = "context"; break; }
      const int32_t left = opts.max_tokens < 0 ? s.n_ctx() : opts.max_tokens - st.n_generated;
      const int32_t before = st.n_generated;
      const int64_t steps_before = spec.stats().n_steps;
      go_on = spec.step(context, sampler, opts.grammar, left, [&](int32_t id) {
        const bool more = take(id);
        return more && (opts.max_tokens < 0 || st.n_generated < opts.max_tokens);
      });
      st.n_decode_tokens += st.n_generated - before;
      st.n_decode_evals += static_cast<int32_t>(spec.stats().n_steps - steps_before);
      // The session holds all of the context but its last token; held
      // follows it by appending what this step added.
      if (opts.held) opts.held->insert(opts.held->end(), context.begin() + static_cast<std::ptrdiff_t>(opts.held->size()),
                                       context.end() - 1);
    }
    st.spec = spec.stats();
  } else {
    for (int32_t i = 0; opts.max_tokens < 0 || i < opts.max_tokens; ++i) {
      if (opts.grammar) opts.grammar->apply(last.data(), nv);  // throws GrammarError when nothing may follow
      const int32_t id = sampler.sample(last.data(), nv);
      if (!take(id)) break;
      if (opts.max_tokens >= 0 && i + 1 >= opts.max_tokens) break;
      const int32_t pos = s.cached(opts.seq);
      if (pos >= s.n_ctx()) { st.stop = "context"; break; }
      Batch b;
      b.add(id, pos, opts.seq, true);
      const auto& l = s.forward(b);
      ++st.n_decode_evals;
      ++st.n_decode_tokens;
      if (opts.held) opts.held->push_back(id);
      last.assign(l.begin(), l.begin() + nv);
    }
  }
  const std::string tail = dec.flush();
  if (!tail.empty()) on_text(tail);
  st.decode_s = now_s() - t0;
  return st;
}

}  // namespace kvad
