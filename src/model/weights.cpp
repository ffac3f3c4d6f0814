#include "model/weights.h"

#include <string>
#include <tuple>
#include <vector>

#include "dist/comm.h"
#include "model/pipeline.h"
#include "base/error.h"
#include "io/tensor_source.h"
#include "model/hparams.h"
#include "tensor/ops.h"

namespace kvad {

WeightLoader::WeightLoader(std::shared_ptr<const TensorSource> src, const DeviceOptions& o)
    : src_(std::move(src)), opts_(o), dev_(Device::parse(o.device)) {
  if (const std::string why = ops::unavailable(dev_); !why.empty()) throw Error(why);
}

const std::string& WeightLoader::path() const { return src_->path(); }

bool WeightLoader::has(const std::string& name) const { return src_->find(name) != nullptr; }

const SourceTensor* WeightLoader::find(const std::string& name) const { return src_->find(name); }

void WeightLoader::name_dim(int64_t value, const std::string& what) {
  std::string& names = dim_names_[value];
  if (names.find(what) != std::string::npos) return;
  names += (names.empty() ? "" : " or ") + what;
}

void WeightLoader::name_key_dim(int64_t value, const std::string& key) {
  if (src_->has(key)) name_dim(value, src_->key_name(key));  // a width the architecture derived names no key
}

void WeightLoader::name_dims(const HParams& hp) {
  const std::string a = hp.arch + ".";
  const std::string head_dim = src_->has(a + "attention.key_length") ? src_->key_name(a + "attention.key_length")
                                                                      : "the head_dim (embedding_length / head_count)";
  name_dim(hp.n_embd, src_->key_name(a + "embedding_length"));
  if (hp.n_ff > 0) name_dim(hp.n_ff, src_->key_name(a + "feed_forward_length"));
  name_dim(hp.n_head * hp.head_dim, src_->key_name(a + "attention.head_count") + " × " + head_dim);
  const std::string kv_heads = src_->key_name(a + (src_->has(a + "attention.head_count_kv") ? "attention.head_count_kv"
                                                                                            : "attention.head_count"));
  name_dim(hp.n_head_kv * hp.head_dim, kv_heads + " × " + head_dim);
  name_dim(hp.head_dim, head_dim);
}

static std::string dims_str(const int64_t* ne, size_t n) {
  std::string s = "[";
  for (size_t i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

namespace {
DType dense_type(const std::string& dtype) {
  if (dtype == "bf16") return DType::BF16;
  if (dtype == "f16") return DType::F16;
  if (dtype == "f32") return DType::F32;
  throw Error("--dtype '" + dtype + "' is not one of bf16, f16, f32");
}
}  // namespace

// The CPU and sim rows compute with every format kvad reads: weights stay
// as stored there. On a GPU (registry.h DeviceOptions): quant "" keeps a
// format the device reads and makes dense or unreadable ones `dtype`;
// "none" makes every matrix `dtype`; a format name requantizes every matrix
// (rows that do not fit its block fall back to q8_0, then to `dtype`).
DType WeightLoader::device_format(const Tensor& t) const {
  if (dev_.type != DeviceType::CUDA) return t.type;
  const DType dense = dense_type(opts_.dtype);
  if (opts_.quant.empty()) return is_float(t.type) || !ops::has_format(dev_, t.type) ? dense : t.type;
  if (opts_.quant == "none") return dense;
  const DTypeInfo* q = find_dtype_by_name(opts_.quant);
  if (!q || !q->quantized || !ops::has_format(dev_, q->type))
    throw Error("--quant '" + opts_.quant + "' is not one of none, q8_0, q4_0, q4_k, q6_k");
  if (t.ne[0] % q->block_elems == 0) return q->type;
  if (t.ne[0] % 32 == 0) return DType::Q8_0;  // e.g. rows of 896 elements for a 256-element K-quant
  return dense;
}

Tensor WeightLoader::get_optional(const std::string& name, std::initializer_list<int64_t> ne) {
  if (auto it = taken_.find(name); it != taken_.end()) return it->second;
  const SourceTensor* st = src_->find(name);
  if (!st) return {};
  std::vector<int64_t> want(ne);
  while (want.size() < 4) want.push_back(1);
  const std::vector<int64_t> have(st->ne.begin(), st->ne.end());
  if (want != have) {
    // Which hyper-parameters the expected dims that differ come from.
    std::string why;
    for (size_t i = 0; i < 4; ++i)
      if (want[i] != have[i])
        if (auto it = dim_names_.find(want[i]); it != dim_names_.end() && why.find(it->second) == std::string::npos)
          why += (why.empty() ? ": " : "; ") + std::to_string(want[i]) + " is " + it->second;
    throw Error(src_->path() + ": tensor " + src_->tensor_name(name) + " has shape " +
                dims_str(st->ne.data(), st->n_dims) + ", expected " + dims_str(ne.begin(), ne.size()) + why);
  }
  require_supported(*st);  // U8/F8 and 5-d tensors of a safetensors checkpoint, named as stored
  if (!ops::has_format(Device::cpu(), st->type))
    throw Error(src_->path() + ": tensor " + name + " is " + dtype_name(st->type) +
                ", a format kvad cannot compute with yet");
  Tensor t;
  t.name = name;
  t.type = st->type;
  t.ne = st->ne;
  t.set_contiguous_strides();
  t.data = st->data;
  t.storage = std::make_shared<Storage>(Device::cpu(), const_cast<void*>(st->data), st->n_bytes, src_->keepalive());
  n_params_ += t.n_elements();
  if (!dev_.is_cpu()) {
    const bool matrix = st->n_dims >= 2;
    if (matrix) {
      const DType to = device_format(t);
      if (to != t.type) t = ops::convert(t, to);
      if (!ops::has_format(dev_, t.type))
        throw Error(src_->path() + ": tensor " + name + " is " + dtype_name(t.type) + ", a format " + dev_.str() +
                    " cannot compute with");
    }
    t = ops::to(t, dev_);
  }
  bytes_ += t.n_bytes();
  taken_.emplace(name, t);
  return t;
}

Tensor WeightLoader::get(const std::string& name, std::initializer_list<int64_t> ne) {
  Tensor t = get_optional(name, ne);
  if (!t) throw Error(src_->path() + ": missing tensor " + name);
  return t;
}

// blk.N.* → N; -1 for a tensor outside the blocks.
static int64_t block_of(const std::string& name) {
  if (name.compare(0, 4, "blk.") != 0) return -1;
  int64_t n = 0;
  size_t i = 4;
  for (; i < name.size() && i < 12 && name[i] >= '0' && name[i] <= '9'; ++i) n = n * 10 + (name[i] - '0');
  return i > 4 && i < name.size() && name[i] == '.' ? n : -1;
}

void WeightLoader::finish() const {
  std::string unused;
  int n = 0;
  for (const SourceTensor& st : src_->tensors()) {
    if (taken_.count(st.name)) continue;
    if (stage_) {  // a pipeline stage answers for its own blocks only
      const int64_t b = block_of(st.name);
      if (b < stage_first_ || b >= stage_last_) continue;
    }
    if (n < 8) unused += (n ? ", " : "") + st.name;
    ++n;
  }
  if (n)
    throw Error(src_->path() + ": " + std::to_string(n) + " tensor(s) not used by architecture " +
                src_->get_string("general.architecture", "?") + ": " + unused + (n > 8 ? ", ..." : ""));
}

Model::Model(std::shared_ptr<const TensorSource> src) : hp_(read_hparams(*src)), source_(std::move(src)) {}

WeightLoader Model::open_weights(const DeviceOptions& o, int64_t n_blocks) {
  n_blocks_ = n_blocks < 0 ? hp_.n_layer : n_blocks;
  stage_first_ = 0, stage_last_ = n_blocks_;
  comm_ = o.comm && o.comm->size() > 1 ? o.comm : nullptr;
  if (comm_) {
    const auto stages = pipeline_split(n_blocks_, comm_->size(), o.layer_split);
    std::tie(stage_first_, stage_last_) = stages[static_cast<size_t>(comm_->rank())];
  } else if (!o.layer_split.empty() && o.layer_split.size() != 1) {
    throw Error("pipeline: --layer-split lists " + std::to_string(o.layer_split.size()) + " stages, the pipeline has 1");
  }
  WeightLoader wl(source_, o);
  if (comm_) wl.only_layers(stage_first_, stage_last_);
  device_ = wl.device();
  wl.name_dims(hp_);
  if (hp_.n_vocab > 0) wl.name_dim(hp_.n_vocab, "the rows of " + source_->tensor_name("token_embd.weight"));
  return wl;
}

bool Model::pipelined() const { return comm_ != nullptr; }

void Model::finish_loading(const WeightLoader& wl) {
  wl.finish();
  weight_bytes_ = wl.bytes();
  hp_.n_params = wl.n_params();
}

}  // namespace kvad
