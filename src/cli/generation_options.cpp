#include "cli/generation_options.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "cli/model_store.h"
#include "io/generation_config.h"
#include "model/cache.h"
#include "model/lora.h"
#include "model/model.h"

namespace kvad::cli {

namespace {
// Checked before CLI::Range, whose message for a non-number ("Value abc not
// in range 0 to 4096") reads as if abc were a number out of range.
const CLI::Validator kInteger(
    [](std::string& s) -> std::string {
      size_t i = (!s.empty() && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
      if (i == s.size() || s.find_first_not_of("0123456789", i) != std::string::npos)
        return "expects an integer, got '" + s + "'";
      return {};
    },
    "INT");

const CLI::Validator kNumber(
    [](std::string& s) -> std::string {
      errno = 0;
      char* end = nullptr;
      const double v = s.empty() ? 0 : std::strtod(s.c_str(), &end);
      if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v) || s.find_first_of("xXnN") != std::string::npos)
        return "expects a number, got '" + s + "'";
      return {};
    },
    "FLOAT");
}  // namespace

const CLI::Validator& integer_check() { return kInteger; }
const CLI::Validator& number_check() { return kNumber; }

void GenerationOptions::add_to(CLI::App* c, const std::string& max_tokens_help) {
  c->add_option("-m,--model", model, "GGUF file or model-store name (default: " + std::string(kDefaultModel) + ")");
  c->add_option("-n,--max-tokens", max_tokens, max_tokens_help)->capture_default_str();
  const std::string hf = " (an HF checkpoint's generation_config.json may set another default)";
  temp_ = c->add_option("--temp", sp.temp, "Temperature (0: greedy)" + hf)->check(kNumber)->check(CLI::Range(0.0, 1000.0))->capture_default_str();
  top_k_ = c->add_option("--top-k", sp.top_k, "Top-k (0: off)" + hf)
               ->check(kInteger)
               ->check(CLI::Range(0, 1 << 30))
               ->capture_default_str();
  top_p_ = c->add_option("--top-p", sp.top_p, "Top-p (1: off)" + hf)->check(kNumber)->check(CLI::Range(0.0, 1.0))->capture_default_str();
  min_p_ = c->add_option("--min-p", sp.min_p, "Min-p (0: off)" + hf)->check(kNumber)->check(CLI::Range(0.0, 1.0))->capture_default_str();
  repeat_penalty_ = c->add_option("--repeat-penalty", sp.repeat_penalty, "Repetition penalty (1: off)" + hf)
                        ->check(kNumber)
                        ->check(CLI::Range(0.0, 100.0))
                        ->capture_default_str();
  c->add_option("--seed", seed, "Sampling seed (-1: random)")->capture_default_str();
  add_threads_option(c, threads);
  c->add_option("-c,--ctx-size", ctx_size, "Context size in tokens (0: min(4096, model's))")
      ->check(kInteger)->check(CLI::Range(0, 1 << 24))
      ->capture_default_str();
  add_device_options(c, device);
  cache_type.add_to(c);
  c->add_option("--lora", lora,
                "LoRA adapter PATH[@STRENGTH] (repeatable; strength 1 when absent): a PEFT folder "
                "(adapter_config.json + adapter_model.safetensors) or a llama.cpp GGUF adapter")
      ->allow_extra_args(false);
}

std::shared_ptr<const LoraSet> GenerationOptions::lora_set(const Model& m, bool report) const {
  if (lora.empty()) return nullptr;
  auto set = std::make_shared<LoraSet>();
  for (const std::string& arg : lora) {
    const auto [path, strength] = parse_lora_arg(arg);
    set->uses.push_back({load_lora(path, m), strength});
    const LoraAdapter& a = *set->uses.back().adapter;
    if (report)
      std::fprintf(stderr, "lora: %s: %zu adapted weights, %.1f KiB, strength %g\n", path.c_str(), a.pairs.size(),
                 a.bytes / 1024.0, strength);
  }
  return set;
}

void add_threads_option(CLI::App* c, int& threads) {
  c->add_option("-t,--threads", threads, "CPU threads (0: all cores)")
      ->check(kInteger)
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
}

void CacheTypeOptions::add_to(CLI::App* c) {
  // A bad value is a usage error (status 2) with kv_cache_type's message,
  // before any model is read. -ctk / -ctv are llama.cpp's spellings
  // (rewritten by llama_flag_alias; CLI11 takes no multi-letter short names,
  // so the help shows them beside the type).
  auto check = [](const std::string& flag) {
    return CLI::Validator(
        [flag](std::string& value) -> std::string {
          try {
            (void)kv_cache_type(value, flag);
            return "";
          } catch (const std::exception& e) {
            const std::string m = e.what();
            return m.rfind(flag + ": ", 0) == 0 ? m.substr(flag.size() + 2) : m;
          }
        },
        "");
  };
  c->add_option("--cache-type-k", k, "KV cache format of keys: f16 (default) or f32; -ctk is the same flag (llama.cpp's)")
      ->option_text("{f16,f32}  (-ctk)")
      ->check(check("--cache-type-k"));
  c->add_option("--cache-type-v", v, "KV cache format of values: f16 (default) or f32; -ctv is the same flag (llama.cpp's)")
      ->option_text("{f16,f32}  (-ctv)")
      ->check(check("--cache-type-v"));
}

KVTypes CacheTypeOptions::types() const {
  return {kv_cache_type(k, "--cache-type-k"), kv_cache_type(v, "--cache-type-v")};
}

std::string llama_flag_alias(const std::string& arg) {
  if (arg == "-ctk") return "--cache-type-k";
  if (arg == "-ctv") return "--cache-type-v";
  if (arg == "-pp") return "--pipeline-parallel-size";  // vLLM's short names
  if (arg == "-tp") return "--tensor-parallel-size";
  return arg;
}

void add_device_options(CLI::App* c, DeviceOptions& d) {
  c->add_option("--device", d.device, "Where the model runs: cpu, cuda (the GPU; needs a CUDA build), or sim (the CPU kernels behind a device boundary that counts every host transfer; for checks)")
      ->check(CLI::IsMember({"cpu", "cuda", "sim"}))
      ->capture_default_str();
  c->add_option("--dtype", d.dtype, "cuda: format of dense weights and of those the GPU cannot read as stored")
      ->check(CLI::IsMember({"bf16", "f16", "f32"}))
      ->capture_default_str();
  c->add_option("--quant", d.quant,
                "HF checkpoints, and GGUFs on the CPU: convert once at load into $KVAD_HOME/cache (any kvad "
                "quantize type: q8_0, q4_0, q4_k_m, ...; or f32, f16, bf16: dequantized), or none (default: "
                "weights as stored; a quantized GGUF requantized says its quality is bounded by its format); "
                "cuda with a GGUF: requantize every matrix (q8_0, q4_0, q4_k, q6_k), or none (all --dtype); "
                "default: keep the file's formats the GPU reads")
      ->check(CLI::IsMember({"none", "f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q2_k", "q3_k_m", "q4_k", "q4_k_s",
                             "q4_k_m", "q5_k_m", "q6_k", "iq4_nl", "tq2_0"}));
  c->add_option("--state-snapshot-every", d.state_snapshot_every,
                "Recurrent layers (qwen3next): copy the state every N positions so that a rewind (a chat turn "
                "that changes the history, prefix reuse) re-prefills from the nearest copy; 0: none (a rewind "
                "re-prefills from the start); -1: the model's default")
      ->check(kInteger)->check(CLI::Range(-1, 1 << 24))
      ->capture_default_str();
}

SamplerParams GenerationOptions::sampler_params() const {
  SamplerParams p = sp;
  p.seed = seed >= 0 ? static_cast<uint64_t>(seed) : std::random_device{}();
  return p;
}

SamplerParams GenerationOptions::sampler_params(const GenerationConfig& gc, std::string* taken) const {
  // Only the fields whose flag was not given; do_sample false (greedy) only
  // when --temp was not given either.
  GenerationConfig take;
  auto unset = [](const CLI::Option* o) { return !o || o->count() == 0; };
  if (unset(temp_)) take.temperature = gc.temperature, take.do_sample = gc.do_sample;
  if (unset(top_k_)) take.top_k = gc.top_k;
  if (unset(top_p_)) take.top_p = gc.top_p;
  if (unset(min_p_)) take.min_p = gc.min_p;
  if (unset(repeat_penalty_)) take.repetition_penalty = gc.repetition_penalty;
  if (take.do_sample && *take.do_sample) take.do_sample.reset();  // true changes nothing
  if (taken) *taken = take.sampling_summary();
  return with_generation_config(sampler_params(), take);
}

int32_t GenerationOptions::context_size(const HParams& hp) const {
  return ctx_size > 0 ? ctx_size : static_cast<int32_t>(std::min<int64_t>(4096, hp.n_ctx_train));
}

}  // namespace kvad::cli
