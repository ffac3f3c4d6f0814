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
#include "io/gguf.h"
#include "kernels/cpu/ops.h"
#include "model/blocks.h"
#include "model/decoder_desc.h"
#include "model/hparams.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "model/weights.h"

namespace kvad {
namespace {

struct Layer {
  AttentionWeights attn;  // attn_norm, attn_q/k/v, attn_output
  MlpWeights ffn;         // ffn_norm, ffn_gate/up/down
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
      L.attn.norm = wl.get(p + "attn_norm.weight", {E});
      L.attn.wq = wl.get(p + "attn_q.weight", {E, q_dim});
      L.attn.wk = wl.get(p + "attn_k.weight", {E, kv_dim});
      L.attn.wv = wl.get(p + "attn_v.weight", {E, kv_dim});
      L.attn.wo = wl.get(p + "attn_output.weight", {q_dim, E});
      L.ffn.norm = wl.get(p + "ffn_norm.weight", {E});
      L.ffn.gate = wl.get(p + "ffn_gate.weight", {E, F});
      L.ffn.up = wl.get(p + "ffn_up.weight", {E, F});
      L.ffn.down = wl.get(p + "ffn_down.weight", {F, E});
      require_f32(f->path(), {&L.attn.norm, &L.ffn.norm});
    }
    require_f32(f->path(), {&output_norm_});
    wl.finish();
    weight_bytes_ = wl.bytes();
    hp_.n_params = wl.n_params();

    attn_.n_head = hp_.n_head;
    attn_.n_head_kv = hp_.n_head_kv;
    attn_.head_dim = D;
    attn_.n_rot = hp_.n_rot;
    attn_.rope_freq_base = hp_.rope_freq_base;
    attn_.rope_freq_scale = hp_.rope_freq_scale;
    attn_.rope_neox = false;  // GGUF llama Q/K rows are permuted for adjacent pairs
    attn_.scale = 1.0f / std::sqrt(static_cast<float>(D));
    attn_.norm_eps = hp_.norm_eps;
  }

  std::unique_ptr<Cache> new_cache(int32_t n_ctx, int n_seq) const override {
    return std::make_unique<KVCache>(hp_.n_layer, hp_.n_head_kv * hp_.head_dim, n_ctx, n_seq);
  }

  void forward(ThreadPool& pool, Cache& cache_base, const BatchView& b, float* logits) override {
    auto& cache = static_cast<KVCache&>(cache_base);
    const int64_t n = b.n, E = hp_.n_embd;
    x_.resize(n * E);
    h_.resize(n * E);

    cpu::get_rows(tok_embd_, b.token, n, x_.data());
    for (int64_t il = 0; il < hp_.n_layer; ++il) {
      const Layer& L = layers_[il];
      attention_.forward(pool, L.attn, attn_, cache, il, b, x_.data(), h_.data());
      cpu::add(x_.data(), h_.data(), n * E);
      mlp_.forward(pool, L.ffn, Activation::SiLU, hp_.norm_eps, x_.data(), n, h_.data());
      cpu::add(x_.data(), h_.data(), n * E);
    }
    for (int64_t t = 0; t < n; ++t) cache.mark(b.seq[t], b.pos[t]);

    // Only the rows asked for go through the final norm and the head.
    h_.resize(b.n_out * E);
    for (int64_t j = 0; j < b.n_out; ++j)
      cpu::rms_norm(&x_[b.out[j] * E], output_norm_.f32(), E, hp_.norm_eps, &h_[j * E]);
    cpu::matmul(pool, output_, h_.data(), b.n_out, logits);
  }

  /// This model as data, for other backends (decoder_desc.h).
  DecoderDesc describe() const {
    DecoderDesc d{hp_, file_, tok_embd_, output_norm_, output_, 1.0f, Activation::SiLU, {}};
    for (const Layer& L : layers_) d.layers.push_back({L.attn, L.ffn, {}, {}, attn_});
    return d;
  }

 private:
  Tensor tok_embd_, output_norm_, output_;
  std::vector<Layer> layers_;
  AttentionParams attn_;
  Attention attention_;
  GatedMlp mlp_;
  std::vector<float> x_, h_;  // residual stream and block outputs, reused across calls
};

}  // namespace

DecoderDesc describe_llama(std::shared_ptr<const gguf::File> f) { return Llama(std::move(f)).describe(); }

std::unique_ptr<Model> load_llama(std::shared_ptr<const gguf::File> f) {
  return std::make_unique<Llama>(std::move(f));
}

}  // namespace kvad
