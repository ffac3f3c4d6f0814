// Llama (Touvron et al. 2023, "LLaMA"; GGUF architecture "llama"), which
// SmolLM and Mistral files also use: pre-norm decoder blocks of
//   x = x + Wo · Attn(RoPE(Wq · n), RoPE(Wk · n), Wv · n),  n = RMSNorm(x) ⊙ attn_norm
//   x = x + Wdown · (SiLU(Wgate · n) ⊙ Wup · n),            n = RMSNorm(x) ⊙ ffn_norm
// then RMSNorm ⊙ output_norm and the output head (tied to token_embd when
// the file has no output.weight). RoPE pairs adjacent dims (GGUF llama
// files store Q and K permuted for that). Tensor names as llama.cpp's GGUF
// converter writes them (token_embd, blk.N.attn_q, ...).
#include <cmath>
#include <memory>
#include <vector>

#include "base/error.h"
#include "base/thread_pool.h"
#include "io/gguf.h"
#include "kernels/cpu/ops.h"
#include "model/hparams.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "model/weights.h"

namespace kvad {
namespace {

struct Layer {
  Tensor attn_norm, wq, wk, wv, wo;
  Tensor ffn_norm, w_gate, w_up, w_down;
};

class Llama final : public Model {
 public:
  explicit Llama(std::shared_ptr<const gguf::File> f) {
    file_ = f;
    hp_ = read_hparams(*f);
    WeightLoader wl(f);
    const int64_t E = hp_.n_embd, D = hp_.head_dim, F = hp_.n_ff;
    const int64_t q_dim = hp_.n_head * D, kv_dim = hp_.n_head_kv * D;
    const gguf::TensorInfo* te = f->find_tensor("token_embd.weight");
    if (!te || te->ne.size() < 2) throw Error(f->path() + ": missing tensor token_embd.weight");
    hp_.n_vocab = te->ne[1];
    tok_embd_ = wl.get("token_embd.weight", {E, hp_.n_vocab});
    output_norm_ = wl.get("output_norm.weight", {E});
    output_ = wl.get_optional("output.weight", {E, hp_.n_vocab});
    if (!output_) output_ = tok_embd_;  // tied head: the same tensor, no copy
    // Tensors not taken here (e.g. llama3's rope_freqs.weight, which kvad
    // does not apply yet) make wl.finish() refuse the file rather than ignore them.
    layers_.resize(hp_.n_layer);
    for (int64_t il = 0; il < hp_.n_layer; ++il) {
      const std::string p = "blk." + std::to_string(il) + ".";
      Layer& L = layers_[il];
      L.attn_norm = wl.get(p + "attn_norm.weight", {E});
      L.wq = wl.get(p + "attn_q.weight", {E, q_dim});
      L.wk = wl.get(p + "attn_k.weight", {E, kv_dim});
      L.wv = wl.get(p + "attn_v.weight", {E, kv_dim});
      L.wo = wl.get(p + "attn_output.weight", {q_dim, E});
      L.ffn_norm = wl.get(p + "ffn_norm.weight", {E});
      L.w_gate = wl.get(p + "ffn_gate.weight", {E, F});
      L.w_up = wl.get(p + "ffn_up.weight", {E, F});
      L.w_down = wl.get(p + "ffn_down.weight", {F, E});
      for (const Tensor* t : {&L.attn_norm, &L.ffn_norm})
        if (t->type != DType::F32) throw Error(f->path() + ": " + t->name + " must be f32");
    }
    if (output_norm_.type != DType::F32) throw Error(f->path() + ": output_norm.weight must be f32");
    wl.finish();
    weight_bytes_ = wl.bytes();
    hp_.n_params = wl.n_params();
  }

  std::unique_ptr<Cache> new_cache(int32_t n_ctx, int n_seq) const override {
    return std::make_unique<KVCache>(hp_.n_layer, hp_.n_head_kv * hp_.head_dim, n_ctx, n_seq);
  }

  void forward(ThreadPool& pool, Cache& cache_base, const BatchView& b, float* logits) override {
    auto& cache = static_cast<KVCache&>(cache_base);
    const int64_t n = b.n, E = hp_.n_embd, D = hp_.head_dim, F = hp_.n_ff;
    const int64_t H = hp_.n_head, Hkv = hp_.n_head_kv;
    const int64_t q_dim = H * D, kv_dim = Hkv * D;
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));

    x_.resize(n * E);
    h_.resize(n * E);
    q_.resize(n * q_dim);
    k_.resize(n * kv_dim);
    v_.resize(n * kv_dim);
    att_.resize(n * q_dim);
    g_.resize(n * F);
    u_.resize(n * F);

    cpu::get_rows(tok_embd_, b.token, n, x_.data());

    for (int64_t il = 0; il < hp_.n_layer; ++il) {
      const Layer& L = layers_[il];
      for (int64_t t = 0; t < n; ++t)
        cpu::rms_norm(&x_[t * E], L.attn_norm.f32(), E, hp_.norm_eps, &h_[t * E]);
      cpu::matmul(pool, L.wq, h_.data(), n, q_.data());
      cpu::matmul(pool, L.wk, h_.data(), n, k_.data());
      cpu::matmul(pool, L.wv, h_.data(), n, v_.data());
      for (int64_t t = 0; t < n; ++t) {
        cpu::rope(&q_[t * q_dim], H, D, hp_.n_rot, b.pos[t], hp_.rope_freq_base, hp_.rope_freq_scale, false);
        cpu::rope(&k_[t * kv_dim], Hkv, D, hp_.n_rot, b.pos[t], hp_.rope_freq_base, hp_.rope_freq_scale, false);
        cpu::f32_to_f16_row(&k_[t * kv_dim], cache.k(il, b.seq[t], b.pos[t]), kv_dim);
        cpu::f32_to_f16_row(&v_[t * kv_dim], cache.v(il, b.seq[t], b.pos[t]), kv_dim);
      }
      // Causal attention: token t sees positions [0, pos[t]] of its sequence.
      pool.parallel_for(n * H, 1, [&](int64_t i0, int64_t i1, int) {
        thread_local std::vector<float> scores;
        for (int64_t i = i0; i < i1; ++i) {
          const int64_t t = i / H, h = i % H, kvh = h / (H / Hkv);
          const int64_t n_pos = b.pos[t] + 1;
          scores.resize(n_pos);
          cpu::attention_f16(&q_[t * q_dim + h * D], cache.k(il, b.seq[t], 0) + kvh * D,
                             cache.v(il, b.seq[t], 0) + kvh * D, n_pos, kv_dim, 1, 1, D, scale,
                             &att_[t * q_dim + h * D], scores.data());
        }
      });
      cpu::matmul(pool, L.wo, att_.data(), n, h_.data());
      for (int64_t i = 0; i < n * E; ++i) x_[i] += h_[i];

      for (int64_t t = 0; t < n; ++t)
        cpu::rms_norm(&x_[t * E], L.ffn_norm.f32(), E, hp_.norm_eps, &h_[t * E]);
      cpu::matmul(pool, L.w_gate, h_.data(), n, g_.data());
      cpu::matmul(pool, L.w_up, h_.data(), n, u_.data());
      cpu::swiglu(g_.data(), u_.data(), n * F);
      cpu::matmul(pool, L.w_down, g_.data(), n, h_.data());
      for (int64_t i = 0; i < n * E; ++i) x_[i] += h_[i];
    }
    for (int64_t t = 0; t < n; ++t) cache.mark(b.seq[t], b.pos[t]);

    // Only the rows asked for go through the final norm and the head.
    h_.resize(b.n_out * E);
    for (int64_t j = 0; j < b.n_out; ++j)
      cpu::rms_norm(&x_[b.out[j] * E], output_norm_.f32(), E, hp_.norm_eps, &h_[j * E]);
    cpu::matmul(pool, output_, h_.data(), b.n_out, logits);
  }

 private:
  Tensor tok_embd_, output_norm_, output_;
  std::vector<Layer> layers_;
  std::vector<float> x_, h_, q_, k_, v_, att_, g_, u_;  // activations, reused across calls
};

}  // namespace

std::unique_ptr<Model> load_llama(std::shared_ptr<const gguf::File> f) {
  return std::make_unique<Llama>(std::move(f));
}

}  // namespace kvad
