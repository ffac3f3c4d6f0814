// Loading LoRA adapters (model/lora.h load_lora): PEFT folders and
// llama.cpp's GGUF adapters, placed on kvad's weight names.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "io/gguf.h"
#include "io/mapped_source.h"
#include "io/tensor_source.h"
#include "model/hf.h"
#include "model/lora.h"
#include "model/model.h"
#include "model/quantize_once.h"
#include "model/registry.h"
#include "tensor/ops.h"

namespace kvad {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// The architectures whose forward passes consult the adapters, and the
// weights they consult them for (blocks.h attention_block, gated_mlp, mlp,
// decoder_logits). A pair for any other weight would be loaded and never
// used, so it is refused instead.
const char* const kArchs[] = {"llama", "qwen2", "qwen3", "qwen3moe", "qwen2moe", "gemma3", "gemma2"};
const char* const kWeights[] = {"attn_q.weight",  "attn_k.weight",  "attn_v.weight",   "attn_output.weight",
                                "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"};

bool adaptable(const std::string& name) {
  if (name == "output.weight") return true;
  if (!name.starts_with("blk.")) return false;
  const size_t dot = name.find('.', 4);
  if (dot == std::string::npos) return false;
  const std::string rest = name.substr(dot + 1);
  return std::find(std::begin(kWeights), std::end(kWeights), rest) != std::end(kWeights);
}

std::string ne_str(const std::array<int64_t, 4>& ne, int n_dims) {
  std::string s = "[";
  for (int i = 0; i < n_dims; ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

// A host f32 copy of `t` (f32, f16, bf16 or a block format kvad reads).
std::vector<float> host_f32(const SourceTensor& t, const std::string& file) {
  if (!t.supported || !ops::has_format(Device::cpu(), t.type) || t.n_dims > 2)
    throw Error(file + ": tensor " + t.name + " is " + t.stored_dtype + ", not a 2-d matrix kvad can read");
  const int64_t n = t.ne[0] * t.ne[1];
  std::vector<float> out(static_cast<size_t>(n));
  if (t.type == DType::F32) {
    std::memcpy(out.data(), t.data, out.size() * 4);  // safetensors data may sit at any byte
    return out;
  }
  std::vector<uint64_t> aligned((t.n_bytes + 7) / 8);
  std::memcpy(aligned.data(), t.data, t.n_bytes);
  const Tensor f = ops::convert(ops::wrap_host(aligned.data(), t.type, t.ne), DType::F32);
  ops::to_host(f, out.data());
  return out;
}

// What the loader knows of the base: its names, shapes and Q/K row layout.
struct Base {
  const Model& model;
  const TensorSource& src;
  std::string arch;
  bool qk_permuted = false;  // llama.cpp's GGUF llama layout (Q/K rows interleaved per head)
};

// Places the pair (a, b) beside base weight `name`: checks shapes and
// ranks, permutes B's Q/K rows when the layouts differ, and uploads both.
LoraPair place(const Base& base, const std::string& file, const std::string& name, const SourceTensor& a,
               const SourceTensor& b, bool b_permuted, float alpha, int64_t config_r, bool rslora, size_t* bytes) {
  const SourceTensor* w = base.src.find(name);
  if (!w) throw Error(file + ": " + a.name + " adapts " + name + ", which the base model does not have");
  if (!adaptable(name))
    throw Error(file + ": " + a.name + " adapts " + name + "; kvad applies LoRA to attn_q/k/v/output, ffn_gate/up/down "
                "and output only (not experts, embeddings or fused projections)");
  const int64_t n_in = w->ne[0], n_out = w->ne[1], r = a.ne[1];
  if (a.n_dims != 2 || b.n_dims != 2 || a.ne[0] != n_in || b.ne[1] != n_out)
    throw Error(file + ": the pair for " + name + " " + ne_str(w->ne, 2) + " does not fit it: " + a.name + " is " +
                ne_str(a.ne, a.n_dims) + " (want [" + std::to_string(n_in) + ", rank]), " + b.name + " is " +
                ne_str(b.ne, b.n_dims) + " (want [rank, " + std::to_string(n_out) + "])");
  if (b.ne[0] != r)
    throw Error(file + ": rank mismatch for " + name + ": " + a.name + " has rank " + std::to_string(r) + ", " + b.name +
                " has rank " + std::to_string(b.ne[0]));
  if (config_r > 0 && config_r != r)
    throw Error(file + ": rank mismatch for " + name + ": adapter_config.json says r = " + std::to_string(config_r) +
                ", its tensors have rank " + std::to_string(r));
  std::vector<float> av = host_f32(a, file), bv = host_f32(b, file);
  const bool q = name.ends_with("attn_q.weight"), k = name.ends_with("attn_k.weight");
  if ((q || k) && b_permuted != base.qk_permuted) {
    const HParams& hp = base.model.hparams();
    const std::vector<int64_t> m = llama_qk_rows(n_out, q ? hp.n_head : hp.n_head_kv);  // GGUF row j = HF row m[j]
    std::vector<float> p(bv.size());
    for (int64_t j = 0; j < n_out; ++j) {
      const int64_t from = base.qk_permuted ? m[j] : j, to = base.qk_permuted ? j : m[j];
      std::memcpy(&p[to * r], &bv[from * r], r * sizeof(float));
    }
    bv.swap(p);
  }
  LoraPair pair;
  const Device d = base.model.device();
  pair.a = ops::from_host(av.data(), DType::F32, {n_in, r, 1, 1}, d);
  pair.b = ops::from_host(bv.data(), DType::F32, {r, n_out, 1, 1}, d);
  pair.a.name = a.name;
  pair.b.name = b.name;
  pair.scale = alpha == 0 ? 1.0f : alpha / (rslora ? std::sqrt(static_cast<float>(r)) : static_cast<float>(r));
  *bytes += pair.a.n_bytes() + pair.b.n_bytes();
  return pair;
}

// peft's rank_pattern / alpha_pattern: the value for module `module` when a
// key names it (the key equal to the module's name or to a dotted suffix of
// it, as peft's get_pattern_key matches), else `def`.
double pattern_value(const json& cfg, const char* field, const std::string& module, double def) {
  if (!cfg.contains(field) || !cfg[field].is_object()) return def;
  for (const auto& [key, v] : cfg[field].items()) {
    if (!v.is_number()) throw Error(std::string("adapter_config.json: ") + field + "." + key + " is not a number");
    if (module == key || module.ends_with("." + key)) return v.get<double>();
  }
  return def;
}

std::shared_ptr<const LoraAdapter> load_peft(const fs::path& dir, const Base& base) {
  const fs::path cfg_path = dir / "adapter_config.json", st_path = dir / "adapter_model.safetensors";
  if (!fs::is_regular_file(cfg_path))
    throw Error(dir.string() + ": missing adapter_config.json (a PEFT adapter folder holds adapter_config.json and "
                "adapter_model.safetensors)");
  if (!fs::is_regular_file(st_path)) throw Error(dir.string() + ": missing adapter_model.safetensors");
  json cfg;
  try {
    std::ifstream in(cfg_path);
    cfg = json::parse(in);
  } catch (const json::exception& e) {
    throw Error(cfg_path.string() + ": " + e.what());
  }
  const std::string cfile = cfg_path.string();
  auto num = [&](const char* k, double def) {
    if (!cfg.contains(k) || cfg[k].is_null()) return def;
    if (!cfg[k].is_number()) throw Error(cfile + ": " + k + " is not a number");
    return cfg[k].get<double>();
  };
  if (cfg.contains("peft_type") && cfg["peft_type"].is_string() && cfg["peft_type"] != "LORA")
    throw Error(cfile + ": peft_type " + cfg["peft_type"].get<std::string>() + " is not LORA");
  if (cfg.value("use_dora", false)) throw Error(cfile + ": use_dora (DoRA) adapters are not supported");
  if (cfg.value("fan_in_fan_out", false)) throw Error(cfile + ": fan_in_fan_out (GPT-2 Conv1D) adapters are not supported");
  const double r = num("r", 0), alpha = num("lora_alpha", 0);
  if (!(r >= 1) || !std::isfinite(alpha)) throw Error(cfile + ": r must be a positive integer and lora_alpha a number");
  const bool rslora = cfg.value("use_rslora", false);
  const HfNames* names = nullptr;
  if (const ArchEntry* e = find_architecture(base.arch)) names = e->hf;
  if (!names) throw Error(dir.string() + ": kvad has no HF name table for architecture " + base.arch);

  const std::shared_ptr<const TensorSource> st = safetensors_source(st_path.string());
  const std::string file = st_path.string();
  auto ad = std::make_shared<LoraAdapter>();
  ad->path = dir.string();
  ad->arch = base.arch;
  for (const SourceTensor& t : st->tensors()) {
    std::string module = t.name;
    if (module.starts_with("base_model.model.")) module = module.substr(17);
    const size_t at = module.rfind(".lora_");
    if (at == std::string::npos || (module.substr(at) != ".lora_A.weight" && module.substr(at) != ".lora_B.weight"))
      throw Error(file + ": cannot place " + t.name + " (kvad reads <module>.lora_A.weight / .lora_B.weight pairs)");
    const bool is_a = module[at + 6] == 'A';
    module.resize(at);
    const std::string other = t.name.substr(0, t.name.size() - 8) + (is_a ? "B.weight" : "A.weight");
    const SourceTensor* pair = st->find(other);
    if (!pair) throw Error(file + ": " + t.name + " has no " + other);
    if (!is_a) continue;  // placed with its A
    TensorRename rn;
    if (!names->tensor(module + ".weight", rn) || rn.name.empty() || rn.part >= 0 ||
        rn.transform != TensorTransform::None)
      throw Error(file + ": cannot place " + t.name + ": " + module + " is not a " + base.arch + " linear kvad knows");
    const int64_t mr = static_cast<int64_t>(pattern_value(cfg, "rank_pattern", module, r));
    const float ma = static_cast<float>(pattern_value(cfg, "alpha_pattern", module, alpha));
    ad->pairs[rn.name] = place(base, file, rn.name, t, *pair, false, ma, mr, rslora, &ad->bytes);
  }
  if (ad->pairs.empty()) throw Error(file + ": no LoRA pairs");
  return ad;
}

std::shared_ptr<const LoraAdapter> load_gguf(const std::string& path, const Base& base) {
  const std::shared_ptr<const TensorSource> src = gguf_source(gguf::File::open(path));
  const std::string type = src->get_string("general.type", "");
  if (type != "adapter") throw Error(path + ": general.type is '" + type + "', not 'adapter' (a model, not a LoRA?)");
  const std::string at = src->get_string("adapter.type", "");
  if (at != "lora") throw Error(path + ": adapter.type is '" + at + "', not 'lora'");
  const std::string arch = src->get_string("general.architecture", "");
  if (arch != base.arch)
    throw Error(path + ": a LoRA for architecture " + arch + ", the model is " + base.arch);
  const float alpha = static_cast<float>(src->get_float("adapter.lora.alpha", 0));
  auto ad = std::make_shared<LoraAdapter>();
  ad->path = path;
  ad->arch = base.arch;
  for (const SourceTensor& t : src->tensors()) {
    const bool is_a = t.name.ends_with(".lora_a"), is_b = t.name.ends_with(".lora_b");
    if (!is_a && !is_b) throw Error(path + ": cannot place " + t.name + " (kvad reads <weight>.lora_a / .lora_b pairs)");
    const std::string name = t.name.substr(0, t.name.size() - 7);
    const SourceTensor* other = src->find(name + (is_a ? ".lora_b" : ".lora_a"));
    if (!other) throw Error(path + ": " + t.name + " has no " + name + (is_a ? ".lora_b" : ".lora_a"));
    if (!is_a) continue;
    // llama.cpp's converter permutes a llama adapter's Q/K rows as it does the model's.
    ad->pairs[name] = place(base, path, name, t, *other, base.arch == "llama", alpha, 0, false, &ad->bytes);
  }
  if (ad->pairs.empty()) throw Error(path + ": no LoRA pairs");
  return ad;
}

}  // namespace

std::shared_ptr<const LoraAdapter> load_lora(const std::string& path, const Model& model) {
  Base base{model, model.source(), model.hparams().arch};
  if (std::find(std::begin(kArchs), std::end(kArchs), base.arch) == std::end(kArchs))
    throw Error("LoRA " + path + ": kvad applies adapters to llama, qwen2, qwen3, qwen3moe, qwen2moe, gemma2 and "
                "gemma3 models, not " + base.arch + " (yet)");
  base.qk_permuted = base.arch == "llama" && model.source().get_int("kvad.rope.neox", 0) == 0;
  std::error_code ec;
  if (fs::is_directory(path, ec)) return load_peft(path, base);
  if (fs::is_regular_file(path, ec)) {
    if (path.ends_with(".gguf")) return load_gguf(path, base);
    if (fs::path(path).filename() == "adapter_model.safetensors") return load_peft(fs::path(path).parent_path(), base);
    throw Error("LoRA " + path + ": neither a PEFT folder (adapter_config.json + adapter_model.safetensors) nor a "
                ".gguf adapter");
  }
  throw Error("LoRA " + path + ": no such file or folder");
}

}  // namespace kvad
