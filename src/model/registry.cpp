#include "model/registry.h"

#include "base/error.h"
#include "base/thread_pool.h"
#include "io/gguf.h"
#include "io/tensor_source.h"
#include "model/cache.h"
#include "model/hf.h"
#include "tensor/ops.h"

namespace kvad {

// One loader per architecture file (model/text/).
std::unique_ptr<Model> load_llama(std::shared_ptr<const TensorSource> src, const DeviceOptions& o);
std::unique_ptr<Model> load_gemma3(std::shared_ptr<const TensorSource> src, const DeviceOptions& o);
std::unique_ptr<Model> load_bert(std::shared_ptr<const TensorSource> src, const DeviceOptions& o);
std::unique_ptr<Model> load_gpt2(std::shared_ptr<const TensorSource> src, const DeviceOptions& o);
std::unique_ptr<Model> load_deepseek2(std::shared_ptr<const TensorSource> src, const DeviceOptions& o);
std::unique_ptr<Model> load_gpt_oss(std::shared_ptr<const TensorSource> src, const DeviceOptions& o);
std::unique_ptr<Model> load_qwen3next(std::shared_ptr<const TensorSource> src, const DeviceOptions& o);
extern const HfNames kQwen3NextHfNames, kQwen35HfNames, kQwen35MoeHfNames;
extern const HfNames kLlamaHfNames, kQwen2HfNames, kQwen3HfNames, kGemma3HfNames, kGpt2HfNames, kPhi3HfNames,
    kQwen3MoeHfNames, kBertHfNames, kDeepseek2HfNames, kGptOssHfNames, kQwen2MoeHfNames;
extern const HfNames kGemma2HfNames;

const char* model_kind_name(ModelKind k) {
  switch (k) {
    case ModelKind::Text: return "text";
    case ModelKind::Embedding: return "embedding";
    case ModelKind::Image: return "image";
  }
  return "?";
}

const std::vector<ArchEntry>& architectures() {
  static const std::vector<ArchEntry> archs = {
      {"llama", ModelKind::Text, {"cpu", "sim", "cuda"}, &load_llama, &kLlamaHfNames},
      {"qwen2", ModelKind::Text, {"cpu", "sim", "cuda"}, &load_llama, &kQwen2HfNames},
      {"qwen3", ModelKind::Text, {"cpu", "sim", "cuda"}, &load_llama, &kQwen3HfNames},
      {"gemma3", ModelKind::Text, {"cpu", "sim", "cuda"}, &load_gemma3, &kGemma3HfNames},
      // MoE's ops (moe_route, matmul_id, moe_sum) have no CUDA row yet.
      {"qwen3moe", ModelKind::Text, {"cpu", "sim"}, &load_llama, &kQwen3MoeHfNames},
      {"qwen2moe", ModelKind::Text, {"cpu", "sim"}, &load_llama, &kQwen2MoeHfNames},
      // MLA's latent attention and slice, and the MoE ops, have no CUDA row yet.
      {"deepseek2", ModelKind::Text, {"cpu", "sim"}, &load_deepseek2, &kDeepseek2HfNames},
      // Gated DeltaNet layers: ssm_conv, gated_delta_rule, sigmoid, softplus have no CUDA row yet.
      {"qwen3next", ModelKind::Text, {"cpu", "sim"}, &load_qwen3next, &kQwen3NextHfNames},
      {"qwen35", ModelKind::Text, {"cpu", "sim"}, &load_qwen3next, &kQwen35HfNames},
      {"qwen35moe", ModelKind::Text, {"cpu", "sim"}, &load_qwen3next, &kQwen35MoeHfNames},
      {"phi3", ModelKind::Text, {"cpu", "sim", "cuda"}, &load_llama, &kPhi3HfNames},
      {"gpt2", ModelKind::Text, {"cpu", "sim", "cuda"}, &load_gpt2, &kGpt2HfNames},
      // MoE ops, attention sinks and the clamped SwiGLU have no CUDA row yet.
      {"gpt-oss", ModelKind::Text, {"cpu", "sim"}, &load_gpt_oss, &kGptOssHfNames},
      // The CUDA row has no bidirectional attention or exact GELU yet.
      {"bert", ModelKind::Embedding, {"cpu", "sim"}, &load_bert, &kBertHfNames},
      // Gemma 2's attention logit soft-capping has no CUDA row yet (gemma3.cpp).
      {"gemma2", ModelKind::Text, {"cpu", "sim"}, &load_gemma3, &kGemma2HfNames},
  };
  return archs;
}

ModelKind model_kind(const Model& m) {
  for (const auto& a : architectures())
    if (a.name == m.hparams().arch) return a.kind;
  return ModelKind::Text;
}

std::string supported_architectures(const std::string& backend) {
  std::string s;
  for (const auto& a : architectures())
    for (const auto& b : a.backends)
      if (b == backend) s += (s.empty() ? "" : ", ") + a.name;
  return s;
}

std::string backend_unavailable(const std::string& device) {
  Device d;
  try {
    d = Device::parse(device);
  } catch (const Error& e) {
    return e.what();
  }
  return ops::unavailable(d);
}

std::unique_ptr<Model> load_model(std::shared_ptr<const TensorSource> src, const DeviceOptions& o) {
  const std::string arch = src->get_string("general.architecture", "");
  if (arch.empty()) throw Error(src->path() + ": no general.architecture key; is this a model file?");
  if (const std::string why = backend_unavailable(o.device); !why.empty()) throw Error(why);
  const Device d = Device::parse(o.device);
  const std::string type = d.type == DeviceType::CPU ? "cpu" : d.type == DeviceType::Sim ? "sim" : "cuda";
  for (const auto& a : architectures()) {
    if (a.name != arch) continue;
    for (const auto& b : a.backends)
      if (b == type) {
        // Format conversions at load split their rows over the cores.
        ThreadPool pool(0);
        ops::PoolScope scope(pool);
        return a.load(std::move(src), o);
      }
  }
  throw Error(src->path() + ": architecture '" + arch + "' is not supported on " + type +
              " (supported: " + supported_architectures(type) + ")");
}

std::unique_ptr<Model> load_model(std::shared_ptr<const gguf::File> f, const DeviceOptions& o) {
  return load_model(gguf_source(std::move(f)), o);
}

std::unique_ptr<Model> load_model(std::shared_ptr<const gguf::File> f, const std::string& device) {
  DeviceOptions o;
  o.device = device;
  return load_model(std::move(f), o);
}

namespace {
// Every architecture composes its cache per layer (new_cache makes a LayerCaches).
LayerCaches& layer_caches(Cache& cache, const std::string& arch) {
  auto* c = dynamic_cast<LayerCaches*>(&cache);
  if (!c) throw Error("architecture " + arch + ": the cache was not made by Model::new_cache");
  return *c;
}
}  // namespace

// The cache cuts the batch into pieces it can hold and commits each after
// it ran (llama.cpp's decode loop over the memory's ubatches).
void Model::forward(ThreadPool& pool, Cache& cache, const BatchView& b, float* logits) const {
  ops::PoolScope scope(pool);
  LayerCaches& c = layer_caches(cache, hp_.arch);
  for (const BatchPiece& p : cache.split(b)) {
    forward_impl(c, p.view, logits + p.out_offset * hp_.n_vocab);
    cache.commit(p.view);
  }
}

void Model::hidden(ThreadPool& pool, Cache& cache, const BatchView& b, float* hidden) const {
  ops::PoolScope scope(pool);
  LayerCaches& c = layer_caches(cache, hp_.arch);
  for (const BatchPiece& p : cache.split(b)) {
    hidden_impl(c, p.view, hidden + p.out_offset * hp_.n_embd);
    cache.commit(p.view);
  }
}

void Model::hidden_impl(LayerCaches&, const BatchView&, float*) const {
  throw Error("architecture " + hp_.arch + " gives no hidden states for embeddings (kvad pools llama, qwen2, "
              "qwen3 and bert)");
}

}  // namespace kvad
