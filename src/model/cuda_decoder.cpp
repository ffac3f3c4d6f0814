// The GPU-resident decoder (issue 7 part 3; DESIGN.md seams 3 and 6): the
// llama family and Gemma 3 run from the description their architecture files
// give (decoder_desc.h), so this file holds no weight names or hyper-parameter
// rules, only where the data lives and which device op runs each step.
//
//  - Weights are uploaded once at load. Matrices keep their block format when
//    the GPU reads it directly (or are converted on the host, per
//    DeviceOptions, with the CPU format kernels); norms stay f32.
//  - The KV cache (CudaKVCache) lives in device memory, f16, laid out as the
//    CPU's: per layer k[seq][pos][n_head_kv·head_dim].
//  - forward() uploads the batch's token/position/sequence ids, runs every op
//    on the compute stream with no host round trip, and copies back only the
//    logits of the rows asked for (the one host wait per call).
//  - Prefill (more than 8 tokens) through a quantized weight uses the
//    tensor-core MMA GEMM (cuda::gemm_mma: tiles dequantized in shared
//    memory, split-K on small grids), or dequantize + cuBLAS with
//    KVAD_CUDA_GEMM=cublas; read once, when the model is loaded.
//
// Status: compiles; UNVERIFIED ON A GPU in this build. The greedy-continuation
// comparison with the CPU model is scripts/device-check's job.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/thread_pool.h"
#include "io/gguf.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cuda/context.h"
#include "kernels/cuda/ops.h"
#include "model/decoder_desc.h"
#include "model/registry.h"

namespace kvad {
namespace {

/// Keys and values of every layer for n_seq sequences of n_ctx positions, in
/// device memory (f16). Bookkeeping of cached positions stays on the host.
class CudaKVCache final : public Cache {
 public:
  CudaKVCache(int64_t n_layer, int64_t kv_dim, int32_t n_ctx, int n_seq)
      : n_layer_(n_layer), kv_dim_(kv_dim), n_ctx_(n_ctx), n_seq_(n_seq), n_cached_(n_seq, 0) {
    const size_t per_layer = static_cast<size_t>(n_seq) * n_ctx * kv_dim * sizeof(uint16_t);
    for (int64_t il = 0; il < n_layer; ++il) {
      k_.emplace_back(per_layer, "KV cache (k)");
      v_.emplace_back(per_layer, "KV cache (v)");
    }
  }
  int32_t n_ctx() const override { return n_ctx_; }
  int n_seq() const override { return n_seq_; }
  int32_t cached(int seq) const override { return n_cached_.at(seq); }
  int32_t truncate(int seq, int32_t n) override {
    n_cached_.at(seq) = std::clamp(n, 0, n_cached_.at(seq));
    return n_cached_[seq];
  }
  size_t bytes() const override { return static_cast<size_t>(n_layer_) * 2 * n_seq_ * n_ctx_ * kv_dim_ * 2; }
  size_t bytes_per_token() const override { return static_cast<size_t>(n_layer_) * 2 * kv_dim_ * 2; }

  uint16_t* k(int64_t il) { return k_[il].as<uint16_t>(); }
  uint16_t* v(int64_t il) { return v_[il].as<uint16_t>(); }
  void mark(int seq, int32_t pos) {
    if (pos + 1 > n_cached_[seq]) n_cached_[seq] = pos + 1;
  }

 private:
  int64_t n_layer_, kv_dim_;
  int32_t n_ctx_;
  int n_seq_;
  std::vector<cuda::DeviceBuffer> k_, v_;
  std::vector<int32_t> n_cached_;
};

/// A matrix resident on the device.
struct DevMatrix {
  cuda::DeviceBuffer buf;
  cuda::DeviceMatrix m;
};

DType dense_type(const std::string& dtype) {
  if (dtype == "bf16") return DType::BF16;
  if (dtype == "f16") return DType::F16;
  if (dtype == "f32") return DType::F32;
  throw Error("--dtype '" + dtype + "' is not one of bf16, f16, f32");
}

// The device format of a weight matrix under DeviceOptions (registry.h).
DType device_type(const Tensor& t, const DeviceOptions& o) {
  const DType dense = dense_type(o.dtype);
  const bool plain = t.type == DType::F32 || t.type == DType::F16 || t.type == DType::BF16;
  if (o.quant.empty()) return plain || !cuda::has_kernels(t.type) ? dense : t.type;
  if (o.quant == "none") return dense;
  const DTypeInfo* q = find_dtype_by_name(o.quant);
  if (!q || !(q->type == DType::Q8_0 || q->type == DType::Q4_0 || q->type == DType::Q4_K || q->type == DType::Q6_K))
    throw Error("--quant '" + o.quant + "' is not one of none, q8_0, q4_0, q4_k, q6_k");
  if (t.ne[0] % q->block_elems == 0) return q->type;
  if (t.ne[0] % 32 == 0) return DType::Q8_0;  // e.g. rows of 896 elements for a 256-element K-quant
  return dense;
}

// Converts (on the host, with the CPU format kernels, rows split over the
// pool) and uploads a weight matrix [n_out, n_in].
DevMatrix upload_matrix(ThreadPool& pool, const Tensor& t, DType type) {
  const int64_t n_in = t.ne[0], n_out = t.n_rows();
  if (n_in % 32 != 0)
    throw Error(t.name + ": rows of " + std::to_string(n_in) + " elements; the CUDA kernels need a multiple of 32");
  DevMatrix d;
  const size_t rb = row_bytes(type, n_in);
  d.buf.reserve(rb * n_out, t.name.c_str());
  if (type == t.type) {
    cuda::copy_to_device(d.buf.get(), t.data, t.n_bytes(), t.name.c_str());
  } else {
    const cpu::CpuKernels& from = cpu::cpu_kernels(t.type);
    const cpu::CpuKernels& to = cpu::cpu_kernels(type);
    if (!to.from_float) throw Error(t.name + ": no quantizer for " + dtype_name(type));
    std::vector<uint8_t> host(rb * n_out);
    pool.parallel_for(n_out, 16, [&](int64_t b, int64_t e, int) {
      std::vector<float> row(n_in);
      for (int64_t r = b; r < e; ++r) {
        from.to_float(t.row(r), row.data(), n_in);
        to.from_float(row.data(), host.data() + r * rb, n_in);
      }
    });
    cuda::copy_to_device(d.buf.get(), host.data(), host.size(), t.name.c_str());
  }
  d.m = cuda::DeviceMatrix{type, n_in, n_out, d.buf.get()};
  return d;
}

// An f32 vector on the device (norm weights), or null for an empty tensor.
cuda::DeviceBuffer upload_f32(const Tensor& t) {
  if (!t) return {};
  cuda::DeviceBuffer b(t.n_bytes(), t.name.c_str());
  cuda::copy_to_device(b.get(), t.data, t.n_bytes(), t.name.c_str());
  return b;
}

struct DevLayer {
  cuda::DeviceBuffer attn_norm, q_norm, k_norm, post_attention_norm, ffn_norm, post_ffw_norm;
  DevMatrix wq, wk, wv, wo, gate, up, down;
  AttentionParams p;
};

class CudaDecoder final : public Model {
 public:
  CudaDecoder(const DecoderDesc& d, const DeviceOptions& o)
      : embd_scale_(d.embd_scale), act_(d.act), gemm_(cuda::gemm_path_from_env()) {
    hp_ = d.hp;
    file_ = d.file;
    cuda::Context::get();
    ThreadPool pool(0);
    auto mat = [&](const Tensor& t) {
      DevMatrix m = upload_matrix(pool, t, device_type(t, o));
      weight_bytes_ += m.buf.bytes();
      return m;
    };
    auto vec = [&](const Tensor& t) {
      cuda::DeviceBuffer b = upload_f32(t);
      weight_bytes_ += b.bytes();
      return b;
    };
    tok_embd_ = mat(d.tok_embd);
    tied_ = d.output.data == d.tok_embd.data;
    if (!tied_) output_ = mat(d.output);
    output_norm_ = vec(d.output_norm);
    for (const DecoderLayerDesc& L : d.layers) {
      if (L.attn_params.head_dim > 256)
        throw Error(d.file->path() + ": head_dim " + std::to_string(L.attn_params.head_dim) +
                    " is larger than the CUDA attention kernel's 256");
      DevLayer g;
      g.attn_norm = vec(L.attn.norm);
      g.q_norm = vec(L.attn.q_norm);
      g.k_norm = vec(L.attn.k_norm);
      g.post_attention_norm = vec(L.post_attention_norm);
      g.ffn_norm = vec(L.ffn.norm);
      g.post_ffw_norm = vec(L.post_ffw_norm);
      g.wq = mat(L.attn.wq);
      g.wk = mat(L.attn.wk);
      g.wv = mat(L.attn.wv);
      g.wo = mat(L.attn.wo);
      g.gate = mat(L.ffn.gate);
      g.up = mat(L.ffn.up);
      g.down = mat(L.ffn.down);
      g.p = L.attn_params;
      layers_.push_back(std::move(g));
    }
    cuda::Context::get().sync("weight upload");
  }

  std::unique_ptr<Cache> new_cache(int32_t n_ctx, int n_seq) const override {
    return std::make_unique<CudaKVCache>(hp_.n_layer, hp_.n_head_kv * hp_.head_dim, n_ctx, n_seq);
  }

  void forward(ThreadPool&, Cache& cache_base, const BatchView& b, float* logits) override {
    auto* cache = dynamic_cast<CudaKVCache*>(&cache_base);
    if (!cache) throw Error("CUDA model: the cache was not made by this model's new_cache");
    const int64_t n = b.n, E = hp_.n_embd, V = hp_.n_vocab;
    if (n <= 0) return;
    const int64_t q_dim = hp_.n_head * hp_.head_dim, kv_dim = hp_.n_head_kv * hp_.head_dim, F = hp_.n_ff;

    // Ids for the device: tokens, positions, sequences, output rows.
    ids_host_.assign(b.token, b.token + n);
    ids_host_.insert(ids_host_.end(), b.pos, b.pos + n);
    ids_host_.insert(ids_host_.end(), b.seq, b.seq + n);
    ids_host_.insert(ids_host_.end(), b.out, b.out + b.n_out);
    for (int64_t i = 0; i < n; ++i)
      if (b.token[i] < 0 || b.token[i] >= tok_embd_.m.n_out)
        throw Error("CUDA model: token id " + std::to_string(b.token[i]) + " outside [0, " +
                    std::to_string(tok_embd_.m.n_out) + ")");
    ids_.reserve(ids_host_.size() * sizeof(int32_t), "batch ids");
    cuda::copy_to_device_async(ids_.get(), ids_host_.data(), ids_host_.size() * sizeof(int32_t), "batch ids");
    const int32_t* tok = ids_.as<int32_t>();
    const int32_t* pos = tok + n;
    const int32_t* seq = pos + n;
    const int32_t* out = seq + n;

    float* x = buf(x_, n * E);
    float* h = buf(h_, n * E);
    float* nb = buf(n_, n * std::max(E, q_dim));
    float* q = buf(q_, n * q_dim);
    float* k = buf(k_, n * kv_dim);
    float* v = buf(v_, n * kv_dim);
    float* att = buf(att_, n * q_dim);
    float* g = buf(g_, n * F);
    float* u = buf(u_, n * F);

    cuda::get_rows(tok_embd_.m, tok, n, x);
    if (embd_scale_ != 1.0f) cuda::scale(x, embd_scale_, n * E);
    for (size_t il = 0; il < layers_.size(); ++il) {
      const DevLayer& L = layers_[il];
      const AttentionParams& p = L.p;
      // Attention block (blocks.h Attention::forward, on the device).
      cuda::rms_norm(x, L.attn_norm.as<float>(), n, E, p.norm_eps, nb);
      matmul(L.wq.m, nb, n, q);
      matmul(L.wk.m, nb, n, k);
      matmul(L.wv.m, nb, n, v);
      if (L.q_norm.get()) cuda::rms_norm(q, L.q_norm.as<float>(), n * p.n_head, p.head_dim, p.norm_eps, q);
      if (L.k_norm.get()) cuda::rms_norm(k, L.k_norm.as<float>(), n * p.n_head_kv, p.head_dim, p.norm_eps, k);
      cuda::rope(q, pos, n, p.n_head, p.head_dim, p.n_rot, p.rope_freq_base, p.rope_freq_scale, p.rope_neox);
      cuda::rope(k, pos, n, p.n_head_kv, p.head_dim, p.n_rot, p.rope_freq_base, p.rope_freq_scale, p.rope_neox);
      cuda::kv_write(k, n, kv_dim, seq, pos, cache->k(il), cache->n_ctx());
      cuda::kv_write(v, n, kv_dim, seq, pos, cache->v(il), cache->n_ctx());
      cuda::attention(q, cache->k(il), cache->v(il), seq, pos, n, p.n_head, p.n_head_kv, p.head_dim, cache->n_ctx(),
                      p.scale, p.sliding_window, att);
      matmul(L.wo.m, att, n, h);
      if (L.post_attention_norm.get()) cuda::rms_norm(h, L.post_attention_norm.as<float>(), n, E, hp_.norm_eps, h);
      cuda::add(x, h, n * E);
      // Gated MLP (blocks.h GatedMlp::forward).
      cuda::rms_norm(x, L.ffn_norm.as<float>(), n, E, hp_.norm_eps, nb);
      matmul(L.gate.m, nb, n, g);
      matmul(L.up.m, nb, n, u);
      if (act_ == Activation::SiLU) cuda::swiglu(g, u, n * F);
      else cuda::geglu(g, u, n * F);
      matmul(L.down.m, g, n, h);
      if (L.post_ffw_norm.get()) cuda::rms_norm(h, L.post_ffw_norm.as<float>(), n, E, hp_.norm_eps, h);
      cuda::add(x, h, n * E);
    }
    for (int64_t t = 0; t < n; ++t) cache->mark(b.seq[t], b.pos[t]);
    if (b.n_out == 0) {
      cuda::Context::get().sync("forward");
      return;
    }

    // Only the rows asked for: gather, final norm, head, copy back.
    cuda::get_rows(cuda::DeviceMatrix{DType::F32, E, n, x}, out, b.n_out, nb);
    cuda::rms_norm(nb, output_norm_.as<float>(), b.n_out, E, hp_.norm_eps, h);
    float* lg = buf(logits_, b.n_out * V);
    matmul(tied_ ? tok_embd_.m : output_.m, h, b.n_out, lg);
    cuda::copy_to_host(logits, lg, static_cast<size_t>(b.n_out) * V * sizeof(float), "forward (logits)");
  }

 private:
  // y = x · Wᵀ on the device, prefill through the GEMM path chosen at load.
  void matmul(const cuda::DeviceMatrix& w, const float* x, int64_t n_tok, float* y) const {
    cuda::matmul(w, x, n_tok, y, gemm_);
  }

  static float* buf(cuda::DeviceBuffer& b, int64_t n_floats) {
    b.reserve(static_cast<size_t>(std::max<int64_t>(n_floats, 1)) * sizeof(float), "activations");
    return b.as<float>();
  }

  float embd_scale_;
  Activation act_;
  cuda::GemmPath gemm_;  // KVAD_CUDA_GEMM at load (ops.h)
  bool tied_ = true;
  DevMatrix tok_embd_, output_;
  cuda::DeviceBuffer output_norm_;
  std::vector<DevLayer> layers_;
  // Grow-only activations and ids, reused across calls.
  cuda::DeviceBuffer x_, h_, n_, q_, k_, v_, att_, g_, u_, logits_, ids_;
  std::vector<int32_t> ids_host_;
};

}  // namespace

std::unique_ptr<Model> load_cuda_decoder(const DecoderDesc& d, const DeviceOptions& o) {
  return std::make_unique<CudaDecoder>(d, o);
}

}  // namespace kvad
