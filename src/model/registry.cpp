#include "model/registry.h"

#include "base/error.h"
#include "base/thread_pool.h"
#include "io/gguf.h"
#include "io/tensor_source.h"
#include "model/cache.h"
#include "model/hf.h"
#include "model/pipeline.h"
#include "tensor/backend.h"
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

namespace {

// The ops each architecture's forward pass runs (tests/model/test_registry.cpp
// checks every set against the ops a forward pass of its tiny checkpoints
// calls, both ways). Which devices run it follows from the rows.
// A Llama-style decoder: RMSNorm, RoPE, causal attention, SwiGLU.
constexpr OpSet kDecoder = {Op::GetRows, Op::RmsNorm, Op::Matmul, Op::Rope,
                            Op::KvStore, Op::Attention, Op::Add, Op::Swiglu};
constexpr OpSet kMoe = {Op::MoeRoute, Op::MatmulId, Op::MoeSum};
// Gemma: GeGLU, the embeddings scaled by sqrt(n_embd).
constexpr OpSet kGemma = {Op::GetRows, Op::RmsNorm, Op::Matmul, Op::Rope,  Op::KvStore,
                          Op::Attention, Op::Add, Op::Scale, Op::Geglu};
// Gated DeltaNet layers beside gated attention (qwen3next.cpp).
constexpr OpSet kDeltaNet = {Op::Cont,     Op::Mul,     Op::Scale,  Op::Silu,
                             Op::Sigmoid, Op::Softplus, Op::SsmConv, Op::GatedDeltaRule};

// llama's GGUF architecture also holds Mixtral: layers with experts
// (blk.N.ffn_gate_inp.weight) run the MoE ops.
OpSet llama_checkpoint_ops(const TensorSource& src) {
  for (const SourceTensor& t : src.tensors())
    if (t.name.size() > 20 && t.name.compare(t.name.size() - 20, 20, ".ffn_gate_inp.weight") == 0) return kMoe;
  return {};
}

}  // namespace

const std::vector<ArchEntry>& architectures() {
  static const std::vector<ArchEntry> archs = {
      {.name = "llama", .ops = kDecoder, .load = &load_llama, .hf = &kLlamaHfNames,
       .checkpoint_ops = &llama_checkpoint_ops},
      {.name = "qwen2", .ops = kDecoder, .load = &load_llama, .hf = &kQwen2HfNames},
      {.name = "qwen3", .ops = kDecoder, .load = &load_llama, .hf = &kQwen3HfNames},
      {.name = "gemma3", .ops = kGemma, .load = &load_gemma3, .hf = &kGemma3HfNames},
      {.name = "qwen3moe", .ops = kDecoder | kMoe, .load = &load_llama, .hf = &kQwen3MoeHfNames},
      // The shared expert's gate is a sigmoid.
      {.name = "qwen2moe", .ops = kDecoder | kMoe | OpSet{Op::Sigmoid}, .load = &load_llama, .hf = &kQwen2MoeHfNames},
      // MLA: latent attention for decode, attention_seq for the expanded prefill.
      {.name = "deepseek2",
       .ops = kMoe | OpSet{Op::GetRows, Op::RmsNorm, Op::Matmul, Op::MatmulBatched, Op::Cont, Op::Rope, Op::KvStore,
                           Op::Add, Op::Swiglu, Op::Concat, Op::Slice, Op::AttentionLatent, Op::AttentionSeq},
       .load = &load_deepseek2, .hf = &kDeepseek2HfNames},
      {.name = "qwen3next", .ops = kDecoder | kDeltaNet | kMoe | OpSet{Op::Concat}, .load = &load_qwen3next,
       .hf = &kQwen3NextHfNames},
      {.name = "qwen35", .ops = kDecoder | kDeltaNet, .load = &load_qwen3next, .hf = &kQwen35HfNames},
      {.name = "qwen35moe", .ops = kDecoder | kDeltaNet | kMoe, .load = &load_qwen3next, .hf = &kQwen35MoeHfNames},
      {.name = "phi3", .ops = kDecoder, .load = &load_llama, .hf = &kPhi3HfNames},
      {.name = "gpt2", .ops = {Op::GetRows, Op::LayerNorm, Op::Matmul, Op::KvStore, Op::Attention, Op::Add, Op::Gelu},
       .load = &load_gpt2, .hf = &kGpt2HfNames},
      // Attention sinks, the clamped SwiGLU in its experts.
      {.name = "gpt-oss",
       .ops = kMoe | OpSet{Op::GetRows, Op::RmsNorm, Op::Matmul, Op::Rope, Op::KvStore, Op::Attention,
                           Op::AttentionSinks, Op::Add, Op::SwigluOai},
       .load = &load_gpt_oss, .hf = &kGptOssHfNames},
      // An encoder: bidirectional attention, exact GELU.
      {.name = "bert", .kind = ModelKind::Embedding,
       .ops = {Op::GetRows, Op::LayerNorm, Op::Matmul, Op::KvStore, Op::AttentionBidirectional, Op::Add,
               Op::GeluErf},
       .load = &load_bert, .hf = &kBertHfNames},
      // Gemma 3's ops and attention logit soft-capping.
      {.name = "gemma2", .ops = kGemma | OpSet{Op::AttentionSoftcap}, .load = &load_gemma3, .hf = &kGemma2HfNames},
  };
  return archs;
}

ModelKind model_kind(const Model& m) {
  const ArchEntry* a = find_architecture(m.hparams().arch);
  return a ? a->kind : ModelKind::Text;
}

const ArchEntry* find_architecture(const std::string& arch) {
  for (const ArchEntry& a : architectures())
    if (a.name == arch) return &a;
  return nullptr;
}

OpSet missing_ops(const ArchEntry& a, DeviceType t, const TensorSource* src) {
  OpSet need = a.ops;
  if (src && a.checkpoint_ops) need = need | a.checkpoint_ops(*src);
  const BackendOps* row = find_backend(t);
  return row ? need - row_ops(*row) : need;
}

std::vector<std::string> arch_devices(const ArchEntry& a, const TensorSource* src) {
  std::vector<std::string> out;
  for (int i = 0; i < kDeviceTypes; ++i) {
    const auto t = static_cast<DeviceType>(i);
    if (find_backend(t) && missing_ops(a, t, src).empty()) out.push_back(find_backend(t)->name);
  }
  return out;
}

std::string supported_architectures(const std::string& backend) {
  Device d;
  try {
    d = Device::parse(backend);
  } catch (const Error&) {
    return "";
  }
  if (!find_backend(d.type)) return "";
  std::string s;
  for (const auto& a : architectures())
    if (missing_ops(a, d.type).empty()) s += (s.empty() ? "" : ", ") + a.name;
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
  const std::string type = find_backend(d.type)->name;
  const ArchEntry* a = find_architecture(arch);
  if (!a) {
    std::string known;
    for (const ArchEntry& e : architectures()) known += (known.empty() ? "" : ", ") + e.name;
    throw Error(src->path() + ": architecture '" + arch + "' is not supported (kvad runs: " + known + ")");
  }
  if (const OpSet missing = missing_ops(*a, d.type, src.get()); !missing.empty()) {
    std::string devices;
    for (const std::string& t : arch_devices(*a, src.get())) devices += (devices.empty() ? "" : ", ") + t;
    throw Error(src->path() + ": architecture '" + arch + "' is not supported on " + type + ", whose row has no " +
                missing.str() + " (" + arch + " runs on: " + (devices.empty() ? "none" : devices) + "; " + type +
                " runs: " + supported_architectures(type) + ")");
  }
  // Format conversions at load split their rows over the cores.
  ThreadPool pool(0);
  ops::PoolScope scope(pool);
  return a->load(std::move(src), o);
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
void Model::forward(ThreadPool& pool, Cache& cache, const BatchView& b, float* logits, float* prenorm) const {
  ops::PoolScope scope(pool);
  if (prenorm && pipelined())
    throw Error("hidden states for multi-token prediction are not computed by a split model (pipeline parallel)");
  if (pipelined()) {
    if (auto* pc = dynamic_cast<PipelineCache*>(&cache)) {
      pc->announce_forward(b);
      forward_stages(pc->layers(), b, logits);
    } else {
      forward_stages(layer_caches(cache, hp_.arch), b, logits);
    }
    return;
  }
  LayerCaches& c = layer_caches(cache, hp_.arch);
  for (const BatchPiece& p : cache.split(b)) {
    Tensor x;
    forward_impl(c, p.view, x, logits + p.out_offset * hp_.n_vocab);
    if (prenorm) ops::to_host(x, prenorm + (p.view.token - b.token) * hp_.n_embd);  // [piece.n, n_embd]
    cache.commit(p.view);
  }
}

std::unique_ptr<Cache> Model::new_mtp_cache(int32_t n_ctx, int n_seq, int64_t n_batch, KVTypes types) const {
  if (n_mtp() == 0) throw Error(source_->path() + " has no multi-token prediction layers (" + hp_.arch + ")");
  if (pipelined()) throw Error("multi-token prediction does not run on a split model (pipeline parallel)");
  return make_mtp_cache(n_ctx, n_seq, n_batch, types);
}

void Model::forward_mtp(ThreadPool& pool, Cache& cache, const BatchView& b, const float* hidden, float* logits,
                        float* hidden_out) const {
  if (n_mtp() == 0) throw Error(source_->path() + " has no multi-token prediction layers (" + hp_.arch + ")");
  ops::PoolScope scope(pool);
  LayerCaches& c = layer_caches(cache, hp_.arch);
  const int64_t E = hp_.n_embd;
  for (const BatchPiece& p : cache.split(b)) {
    const Tensor h = ops::from_host(hidden + (p.view.token - b.token) * E, DType::F32, {E, p.view.n, 1, 1}, device_);
    mtp_impl(c, p.view, h, logits + p.out_offset * hp_.n_vocab, hidden_out ? hidden_out + p.out_offset * E : nullptr);
    cache.commit(p.view);
  }
}

std::unique_ptr<Cache> Model::make_mtp_cache(int32_t, int, int64_t, KVTypes) const {
  throw Error("architecture " + hp_.arch + " runs no multi-token prediction layers");
}

void Model::mtp_impl(LayerCaches&, const BatchView&, const Tensor&, float*, float*) const {
  throw Error("architecture " + hp_.arch + " runs no multi-token prediction layers");
}

std::unique_ptr<Cache> Model::new_cache(int32_t n_ctx, int n_seq, int64_t n_batch, KVTypes types) const {
  std::unique_ptr<Cache> c = make_cache(n_ctx, n_seq, n_batch, types);
  if (!pipelined()) return c;
  return pipeline_cache(*comm_, std::move(c), n_ctx, n_seq, n_batch, types);
}

void Model::hidden(ThreadPool& pool, Cache& cache, const BatchView& b, float* hidden) const {
  if (pipelined()) throw Error("hidden states (embeddings) are not computed by a split model (pipeline parallel)");
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
