#include "cli/loaded_model.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/generation_options.h"
#include "cli/model_store.h"
#include "base/error.h"
#include "io/gguf.h"
#include "engine/chat_prompt.h"
#include "io/quantize.h"
#include "io/tensor_source.h"
#include "model/hf.h"
#include "model/quantize_once.h"
#include "model/registry.h"
#include "tokenizer/tokenizer.h"
#ifdef KVAD_WITH_CUDA
#include "kernels/cuda/cpu_offload.h"
#endif

namespace kvad::cli {

namespace {

// KVAD_GPU_OFFLOAD=1 with --device cpu: large matmuls go to the GPU when the
// gate admits them (kernels/cuda/cpu_offload.h). Without a GPU it says so
// once and the CPU keeps every op.
void maybe_enable_offload() {
  const char* v = std::getenv("KVAD_GPU_OFFLOAD");
  if (!v || std::string(v) != "1") return;
#ifdef KVAD_WITH_CUDA
  std::string why;
  if (cuda::install_cpu_offload(cuda::OffloadGate::from_env(), &why))
    std::fprintf(stderr, "kvad: eager GPU offload on (KVAD_GPU_OFFLOAD=1)\n");
  else
    std::fprintf(stderr, "kvad: KVAD_GPU_OFFLOAD=1 ignored: %s\n", why.c_str());
#else
  std::fprintf(stderr, "kvad: KVAD_GPU_OFFLOAD=1 ignored: kvad was built without CUDA\n");
#endif
}

// The names --quant takes, for its error message.
std::string form_names() {
  std::string types;
  for (const quant::QuantType& t : quant::quant_types()) types += (types.empty() ? "" : ", ") + std::string(t.name);
  for (const quant::QuantType& t : quant::float_types()) types += ", " + std::string(t.name);
  return types + ", or none";
}

void check_form(const std::string& quant, const char* what) {
  try {
    (void)quant::find_form_type(quant);
  } catch (const Error&) {
    throw Error("--quant " + quant + " is not a type " + what + " can be converted to (" + form_names() + ")");
  }
}

// The GGUF at `path` in the form `quant` from the quantize-once cache (made
// on a miss), saying which on stderr, with a warning when a quantized source
// is quantized again.
std::shared_ptr<const TensorSource> gguf_form(const std::string& path, const std::string& quant) {
  check_form(quant, "a GGUF");
  const quant::QuantType& type = quant::find_form_type(quant);
  {
    // The stored format of most matrix bytes, for the warning.
    const std::shared_ptr<const TensorSource> stored = gguf_split_source(path);
    std::map<DType, size_t> bytes;
    for (const SourceTensor& t : stored->tensors())
      if (t.n_dims >= 2 && quant::is_quantized_tensor(t.name, {t.ne.begin(), t.ne.end()})) bytes[t.type] += t.n_bytes;
    DType most = DType::F32;
    size_t n = 0;
    for (const auto& [t, b] : bytes)
      if (b > n) n = b, most = t;
    if (!is_float(most) && !is_float(type.base) && most != type.base)
      std::fprintf(stderr,
                   "kvad: warning: requantizing %s, stored %s, to %s: its quality is bounded by %s (start from an "
                   "F16/BF16 GGUF or the HF checkpoint for better)\n",
                   path.c_str(), dtype_name(most), type.name, dtype_name(most));
  }
  const std::string dir = kvad_home() + "/cache";
  const auto q0 = std::chrono::steady_clock::now();
  bool hit = false;
  std::shared_ptr<const TensorSource> src = quantize_once_gguf(path, quant, dir, &hit);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - q0).count();
  const std::string file = quantize_once_gguf_path(path, quant, dir);
  if (hit)
    std::fprintf(stderr, "kvad: %s from the quantize-once cache: %s\n", type.name, file.c_str());
  else
    std::fprintf(stderr, "kvad: converted to %s once (%.1f s): %s\n", type.name, secs, file.c_str());
  return src;
}

}  // namespace

LoadedModel load_for_cli(const std::string& model_arg, const DeviceOptions& dev, bool any_kind) {
  // Refuse an unusable device before resolving (which may pull) or mapping anything.
  if (const std::string why = backend_unavailable(dev.device); !why.empty()) throw Error(why);
  if (model_arg.empty())
    std::fprintf(stderr, "[kvad] model %s (the default; --model names another)\n", kDefaultModel);
  return load_for_cli(resolve_model_full(model_arg), dev, any_kind);
}

LoadedModel load_for_cli(const ResolvedModel& r, const DeviceOptions& dev, bool any_kind) {
  const auto t0 = std::chrono::steady_clock::now();
  LoadedModel m;
  if (const std::string why = backend_unavailable(dev.device); !why.empty()) throw Error(why);
  m.path = r.path;
  if (!r.checkpoint) {
    // A split GGUF (NAME-00001-of-0000N.gguf) loads as one model. On the CPU
    // --quant converts it once through the quantize-once cache; on the GPU
    // the device converts formats at load.
    std::shared_ptr<const TensorSource> src;
    DeviceOptions d = dev;
    if (!dev.quant.empty() && dev.quant != "none" && dev.device.rfind("cuda", 0) != 0) {
      src = gguf_form(m.path, dev.quant);
      d.quant = "";
    } else {
      src = gguf_split_source(m.path);
    }
    m.file = gguf_file(*src);
    m.model = load_model(src, d);
    m.tokenizer = Tokenizer::from_gguf(*m.file);
  } else {
    std::shared_ptr<const TensorSource> src;
    DeviceOptions d = dev;
    // --quant none (the default for checkpoints): bf16/f16/f32 weights as stored.
    const std::string quant = dev.quant.empty() ? "none" : dev.quant;
    if (quant == "none") src = open_hf_checkpoint(r.path);
    const std::string dir = r.path;
    bool tokenizer_cached = false;
    if (quant != "none") {
      const QuantizeOnceKey key{kvad_home() + "/cache", r.repo, r.commit, dir};
      const auto q0 = std::chrono::steady_clock::now();
      bool hit = false;
      check_form(quant, "an HF checkpoint");
      // A hit maps the cached GGUF without reading (or stacking) the checkpoint's tensors.
      src = quantize_once(r.path, quant, key, &hit);
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - q0).count();
      const std::string file = quantize_once_path(key, quant);
      if (hit)
        std::fprintf(stderr, "kvad: %s from the quantize-once cache: %s\n", quant.c_str(), file.c_str());
      else
        std::fprintf(stderr, "kvad: quantized to %s once (%.1f s): %s\n", quant.c_str(), secs, file.c_str());
      d.quant = "";  // the cache's formats, as stored, on every device
      // The cache file keeps the checkpoint's tokenizer (stamped with the
      // tokenizer files, so it is this one): reading it there skips parsing
      // tokenizer.json, most of a cached load's time.
      if (const std::shared_ptr<const gguf::File> f = gguf_file(*src); f && f->find(kGgufHfTokenizerKey)) {
        m.tokenizer = Tokenizer::from_gguf(*f);
        tokenizer_cached = true;
      }
    }
    m.model = load_model(src, d);
    if (!tokenizer_cached) {
      // tokenizer_config.json is optional, as in transformers (no chat template then).
      const std::string cfg = dir + "/tokenizer_config.json";
      std::error_code ec;
      m.tokenizer = Tokenizer::from_tokenizer_json(dir + "/tokenizer.json", std::filesystem::exists(cfg, ec) ? cfg : "");
    }
    m.generation_config = read_generation_config(dir);
    m.tokenizer->add_eog_ids(m.generation_config.eos_token_id);
  }
  if (const ModelKind k = model_kind(*m.model); k != ModelKind::Text && !any_kind)
    throw Error(m.path + ": architecture " + m.model->hparams().arch + " is an " + model_kind_name(k) +
                " model (kind " + model_kind_name(k) + "), not a text-generation one; use kvad embed or kvad serve");
  if (dev.device == "cpu") maybe_enable_offload();
  m.load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return m;
}

SamplerParams LoadedModel::sampler_params(const GenerationOptions& o) const {
  std::string taken;
  SamplerParams p = o.sampler_params(generation_config, &taken);
  if (!taken.empty()) std::fprintf(stderr, "kvad: sampling defaults from generation_config.json: %s\n", taken.c_str());
  return p;
}

ChatPrompt chat_prompt(const LoadedModel& m) {
  if (m.file) return ChatPrompt::from_gguf(*m.file, *m.tokenizer);
  return ChatPrompt::from_tokenizer(*m.tokenizer, m.path + "/tokenizer_config.json");
}

}  // namespace kvad::cli
