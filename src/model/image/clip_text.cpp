#include "model/image/clip_text.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "model/image/layers.h"
#include "model/image/pipeline.h"
#include "tensor/ops.h"

namespace kvad::image {

Tensor clip_activation(const Tensor& x, const std::string& act) {
  if (act == "quick_gelu") return ops::quick_gelu(x);
  if (act == "gelu") return ops::gelu_erf(x);
  throw Error("CLIP hidden_act '" + act + "' is not one kvad runs (quick_gelu, gelu)");
}

ClipTextEncoder::ClipTextEncoder(const WeightScope& scope, const ClipTextConfig& c) : c_(c), dev_(scope.device()) {
  const int64_t E = c.hidden_size, F = c.intermediate_size;
  const WeightScope m = scope.sub("text_model");
  tok_ = m.get("embeddings.token_embedding.weight", {E, c.vocab_size});
  pos_ = m.get("embeddings.position_embedding.weight", {E, c.max_position_embeddings});
  final_w_ = vector_f32(m, "final_layer_norm.weight", E);
  final_b_ = vector_f32(m, "final_layer_norm.bias", E);
  if (c.with_projection) proj_ = scope.get("text_projection.weight", {E, c.projection_dim});
  for (int64_t il = 0; il < c.num_hidden_layers; ++il) {
    const WeightScope l = m.sub("encoder.layers." + std::to_string(il));
    Block b;
    b.ln1_w = vector_f32(l, "layer_norm1.weight", E), b.ln1_b = vector_f32(l, "layer_norm1.bias", E);
    b.wq = l.get("self_attn.q_proj.weight", {E, E}), b.bq = vector_f32(l, "self_attn.q_proj.bias", E);
    b.wk = l.get("self_attn.k_proj.weight", {E, E}), b.bk = vector_f32(l, "self_attn.k_proj.bias", E);
    b.wv = l.get("self_attn.v_proj.weight", {E, E}), b.bv = vector_f32(l, "self_attn.v_proj.bias", E);
    b.wo = l.get("self_attn.out_proj.weight", {E, E}), b.bo = vector_f32(l, "self_attn.out_proj.bias", E);
    b.ln2_w = vector_f32(l, "layer_norm2.weight", E), b.ln2_b = vector_f32(l, "layer_norm2.bias", E);
    b.fc1 = l.get("mlp.fc1.weight", {E, F}), b.fc1_b = vector_f32(l, "mlp.fc1.bias", F);
    b.fc2 = l.get("mlp.fc2.weight", {F, E}), b.fc2_b = vector_f32(l, "mlp.fc2.bias", E);
    blocks_.push_back(std::move(b));
  }
}

ClipTextEncoder::Output ClipTextEncoder::encode(std::span<const int32_t> ids, Layer layer, bool pooled) const {
  const int64_t n = static_cast<int64_t>(ids.size()), E = c_.hidden_size, H = c_.num_attention_heads, D = E / H;
  if (n < 1 || n > c_.max_position_embeddings)
    throw Error("CLIP text encoder: " + std::to_string(n) + " tokens, outside 1.." +
                std::to_string(c_.max_position_embeddings) + " (max_position_embeddings)");
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= c_.vocab_size)
      throw Error("CLIP text encoder: token id " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                  " is outside the vocabulary of " + std::to_string(c_.vocab_size));
  std::vector<int32_t> pos(n);
  for (int64_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>(i);
  const Tensor tid = ops::from_host(ids.data(), DType::I32, {n, 1, 1, 1}, dev_);
  const Tensor tpos = ops::from_host(pos.data(), DType::I32, {n, 1, 1, 1}, dev_);
  Tensor x = ops::add(ops::get_rows(tok_, tid), ops::get_rows(pos_, tpos));  // [n, E]
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const int64_t L = c_.num_hidden_layers;
  // Penultimate without a pooled output stops before the last layer.
  const int64_t n_run = layer == Layer::Penultimate && !pooled ? L - 1 : L;
  Tensor penultimate = L == 1 ? x : Tensor{};
  for (int64_t il = 0; il < n_run; ++il) {
    const Block& b = blocks_[il];
    const Tensor h = ops::layer_norm(x, b.ln1_w, b.ln1_b, static_cast<float>(c_.layer_norm_eps));
    const Tensor q = ops::matmul(h, b.wq, &b.bq).view({D, H, n, 1});  // [n, H, D]
    const Tensor k = ops::matmul(h, b.wk, &b.bk).view({D, H, n, 1});
    const Tensor v = ops::matmul(h, b.wv, &b.bv).view({D, H, n, 1});
    const Tensor a = ops::attention_seq(q, k, v, tpos, scale);  // causal, [n, H, D]
    x = ops::add(x, ops::matmul(a.view({E, n, 1, 1}), b.wo, &b.bo));
    const Tensor g = ops::layer_norm(x, b.ln2_w, b.ln2_b, static_cast<float>(c_.layer_norm_eps));
    const Tensor f = clip_activation(ops::matmul(g, b.fc1, &b.fc1_b), c_.hidden_act);  // [n, F]
    x = ops::add(x, ops::matmul(f, b.fc2, &b.fc2_b));
    if (il == L - 2) penultimate = x;  // hidden_states[-2]
  }
  Output out;
  const bool need_last = layer == Layer::Last || pooled;
  const Tensor last =
      need_last ? ops::layer_norm(x, final_w_, final_b_, static_cast<float>(c_.layer_norm_eps)) : Tensor{};
  out.hidden = layer == Layer::Last ? last : penultimate;
  if (pooled) {
    int64_t eos = 0;
    if (c_.eos_token_id == 2) {
      eos = std::max_element(ids.begin(), ids.end()) - ids.begin();  // the first of the largest id
    } else {
      const auto it = std::find(ids.begin(), ids.end(), static_cast<int32_t>(c_.eos_token_id));
      eos = it == ids.end() ? 0 : it - ids.begin();  // argmax of an all-false mask: 0
    }
    const Tensor row = ops::cont(last.rows(eos, eos + 1));  // [1, E]
    out.pooled = c_.with_projection ? ops::matmul(row, proj_) : row;
    out.pooled = out.pooled.view({out.pooled.ne[0], 1, 1, 1});
  }
  return out;
}

PromptEncoder::PromptEncoder(const Pipeline& pl, WeightLoader& wl)
    : xl_(pl.pipeline_class == PipelineClass::StableDiffusionXL),
      force_zeros_(pl.force_zeros_for_empty_prompt),
      // A single file carries no tokenizer: CLIP's, built into kvad.
      tok_(pl.tokenizer.empty() ? ClipTokenizer::builtin("<|endoftext|>") : ClipTokenizer::from_folder(pl.tokenizer)),
      enc_(wl.root().sub("text_encoder"), pl.text_encoder) {
  if (xl_) {
    tok_2_ = pl.tokenizer_2.empty() ? ClipTokenizer::builtin("!") : ClipTokenizer::from_folder(pl.tokenizer_2);
    enc_2_.emplace(wl.root().sub("text_encoder_2"), *pl.text_encoder_2);
  }
}

PromptEmbeds PromptEncoder::encode(std::string_view prompt) const {
  using L = ClipTextEncoder::Layer;
  PromptEmbeds e;
  if (!xl_) {
    e.hidden = enc_.encode(tok_.encode_padded(prompt), L::Last, false).hidden;
    return e;
  }
  const Tensor a = enc_.encode(tok_.encode_padded(prompt), L::Penultimate, false).hidden;
  ClipTextEncoder::Output b = enc_2_->encode(tok_2_->encode_padded(prompt), L::Penultimate, true);
  e.hidden = ops::concat(a, b.hidden);  // [77, E1 + E2]
  e.pooled = b.pooled;
  return e;
}

PromptEmbeds PromptEncoder::negative(const std::optional<std::string>& negative_prompt) const {
  if (negative_prompt || !(xl_ && force_zeros_)) return encode(negative_prompt.value_or(""));
  // zeros_like(prompt_embeds), zeros_like(pooled_prompt_embeds)
  const int64_t n = tok_.max_length(), E = enc_.config().hidden_size + enc_2_->config().hidden_size,
                P = enc_2_->config().projection_dim;
  const std::vector<float> zeros(static_cast<size_t>(std::max(n * E, P)), 0.0f);
  PromptEmbeds e;
  e.hidden = ops::from_host(zeros.data(), DType::F32, {E, n, 1, 1}, enc_.device());
  e.pooled = ops::from_host(zeros.data(), DType::F32, {P, 1, 1, 1}, enc_.device());
  return e;
}

}  // namespace kvad::image
