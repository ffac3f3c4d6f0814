#include "model/image/unet_blocks.h"

#include <cmath>
#include <string>

#include "base/error.h"

namespace kvad::image::unet {

Tensor timestep_proj(const Tensor& values, int64_t dim, bool flip_sin_to_cos, int64_t freq_shift) {
  const int64_t half = dim / 2, n = values.n_elements();
  if (half < 1 || half == freq_shift)
    throw Error("timestep embedding: dim " + std::to_string(dim) + " with freq_shift " + std::to_string(freq_shift) +
                " has no frequencies");
  // As torch computes them in f32: exponent = -ln(10000) · k, / (half - shift), exp.
  std::vector<float> f(static_cast<size_t>(half));
  const float ln = static_cast<float>(-std::log(10000.0));
  for (int64_t k = 0; k < half; ++k)
    f[k] = std::exp(ln * static_cast<float>(k) / static_cast<float>(half - freq_shift));
  const Tensor freqs = ops::from_host(f.data(), DType::F32, {half, 1, 1, 1}, values.device());
  const Tensor a = ops::mul(values.view({1, n, 1, 1}), freqs);  // [n, half]: t · f_k
  const Tensor s = ops::sin(a), co = ops::cos(a);
  Tensor e = flip_sin_to_cos ? ops::concat(co, s, 0) : ops::concat(s, co, 0);
  if (dim % 2) e = ops::pad(e, {0, 0, 0, 0}, {1, 0, 0, 0});
  return e;
}

TimestepEmbedding::TimestepEmbedding(const WeightScope& s, int64_t n_in, int64_t n_out)
    : l1(s.sub("linear_1"), n_in, n_out, true), l2(s.sub("linear_2"), n_out, n_out, true) {}

Tensor TimestepEmbedding::operator()(const Tensor& x) const { return l2(ops::silu(l1(x))); }

ResnetBlock2D::ResnetBlock2D(const WeightScope& s, int64_t in, int64_t out_, int64_t temb,
                             const UNet2DConditionConfig& c, double scale)
    : norm1(s.sub("norm1"), c.norm_num_groups, in, c.norm_eps),
      norm2(s.sub("norm2"), c.norm_num_groups, out_, c.norm_eps),
      conv1(s.sub("conv1"), in, out_, 3, 1, 1),
      conv2(s.sub("conv2"), out_, out_, 3, 1, 1),
      time_emb_proj(s.sub("time_emb_proj"), temb, out_, true),
      output_scale_factor(static_cast<float>(scale)),
      out(out_) {
  if (in != out_) conv_shortcut.emplace(s.sub("conv_shortcut"), in, out_, 1, 1, 0);
}

Tensor ResnetBlock2D::operator()(const Tensor& x, const Tensor& temb_act) const {
  Tensor h = conv1(ops::silu(norm1(x)));
  const Tensor t = time_emb_proj(temb_act);  // [N or 1, out]
  h = ops::add(h, t.view({out, 1, 1, t.ne[1]}));
  h = conv2(ops::silu(norm2(h)));
  Tensor y = ops::add(conv_shortcut ? (*conv_shortcut)(x) : x, h);
  return output_scale_factor == 1 ? y : ops::scale(y, 1 / output_scale_factor);
}

Attention::Attention(const WeightScope& s, int64_t dim_, int64_t context_dim, int64_t heads_)
    : to_q(s.sub("to_q"), dim_, dim_, false),
      to_k(s.sub("to_k"), context_dim, dim_, false),
      to_v(s.sub("to_v"), context_dim, dim_, false),
      to_out(s.sub("to_out.0"), dim_, dim_, true),
      heads(heads_),
      dim(dim_) {}

Tensor Attention::operator()(const Tensor& x, const Tensor* ctx) const {
  const int64_t n = x.ne[1], N = x.ne[2], D = dim / heads;
  const Tensor x2 = x.view({dim, n * N, 1, 1});
  Tensor q, k, v;
  int64_t m = n;
  if (!ctx) {
    std::vector<Tensor> qkv = ops::matmul_multi(x2, {&to_q.w, &to_k.w, &to_v.w});
    q = qkv[0], k = qkv[1], v = qkv[2];
  } else {
    m = ctx->ne[1];
    q = to_q(x2);
    std::vector<Tensor> kv = ops::matmul_multi(ctx->view({ctx->ne[0], m * N, 1, 1}), {&to_k.w, &to_v.w});
    k = kv[0], v = kv[1];
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const Tensor a = ops::sdpa(q.view({D, heads, n, N}), k.view({D, heads, m, N}), v.view({D, heads, m, N}), scale);
  return to_out(a.view({dim, n * N, 1, 1})).view({dim, n, N, 1});
}

BasicTransformerBlock::BasicTransformerBlock(const WeightScope& s, int64_t dim, int64_t context_dim, int64_t heads)
    : norm1(s.sub("norm1"), dim, 1e-5),
      norm2(s.sub("norm2"), dim, 1e-5),
      norm3(s.sub("norm3"), dim, 1e-5),
      attn1(s.sub("attn1"), dim, dim, heads),
      attn2(s.sub("attn2"), dim, context_dim, heads),
      ff_in(s.sub("ff.net.0.proj"), dim, 8 * dim, true),
      ff_out(s.sub("ff.net.2"), 4 * dim, dim, true) {}

Tensor BasicTransformerBlock::operator()(const Tensor& x, const Tensor& ctx) const {
  const int64_t dim = x.ne[0], n = x.ne[1], N = x.ne[2];
  const auto rows = [&](const Tensor& t) { return t.view({dim, n * N, 1, 1}); };
  const auto tokens = [&](const Tensor& t) { return t.view({dim, n, N, 1}); };
  Tensor h = ops::add(x, attn1(tokens(norm1(rows(x))), nullptr));
  h = ops::add(h, attn2(tokens(norm2(rows(h))), &ctx));
  const Tensor f = ff_out(ops::geglu_split(ff_in(norm3(rows(h)))));
  return ops::add(h, tokens(f));
}

Transformer2D::Transformer2D(const WeightScope& s, int64_t channels, int64_t heads, int64_t layers,
                             const UNet2DConditionConfig& c)
    : norm(s.sub("norm"), c.norm_num_groups, channels, 1e-6),
      proj_in(s.sub("proj_in"), channels, channels, true, !c.use_linear_projection),
      proj_out(s.sub("proj_out"), channels, channels, true, !c.use_linear_projection) {
  for (int64_t i = 0; i < layers; ++i)
    blocks.emplace_back(s.sub("transformer_blocks." + std::to_string(i)), channels, c.cross_attention_dim, heads);
}

Tensor Transformer2D::operator()(const Tensor& x, const Tensor& ctx) const {
  const int64_t C = x.ne[0], n = x.ne[1] * x.ne[2], N = x.ne[3];
  Tensor t = proj_in(norm(x).view({C, n * N, 1, 1})).view({C, n, N, 1});
  for (const BasicTransformerBlock& b : blocks) t = b(t, ctx);
  return ops::add(proj_out(t.view({C, n * N, 1, 1})).view(x.ne), x);
}

Tensor downsample(const Conv2d& conv, const Tensor& x, int64_t padding) {
  if (padding == 0) return conv(ops::pad(x, {0, 0, 0, 0}, {0, 1, 1, 0}));
  return conv(x);
}

Tensor upsample(const Conv2d& conv, const Tensor& x, int64_t w, int64_t h) {
  Tensor u = ops::upsample_nearest2d(x, 2);
  if (w < u.ne[1] || h < u.ne[2]) u = ops::cont(ops::view(u, {u.ne[0], w, h, u.ne[3]}, u.nb));
  return conv(u);
}

namespace {

// Down block i's resnets, transformers and down-sampler (CrossAttnDownBlock2D, DownBlock2D).
Block down_block(const WeightScope& s, const UNet2DConditionConfig& c, size_t i, int64_t temb) {
  const size_t n = c.block_out_channels.size();
  const int64_t out = c.block_out_channels[i], in = i == 0 ? c.block_out_channels[0] : c.block_out_channels[i - 1];
  Block b;
  for (int64_t j = 0; j < c.layers_per_block; ++j) {
    b.resnets.emplace_back(s.sub("resnets." + std::to_string(j)), j == 0 ? in : out, out, temb, c);
    if (has_attention(c.down_block_types[i]))
      b.attentions.emplace_back(s.sub("attentions." + std::to_string(j)), out, c.num_attention_heads[i],
                                c.transformer_layers_per_block[i], c);
  }
  if (i + 1 < n) b.sampler.emplace(s.sub("downsamplers.0.conv"), out, out, 3, 2, c.downsample_padding);
  b.downsample_padding = c.downsample_padding;
  return b;
}

// Up block i (counted from the bottom): channels, heads and depths of down
// block n-1-i; resnet j reads the previous output and one skip.
Block up_block(const WeightScope& s, const UNet2DConditionConfig& c, size_t i, int64_t temb) {
  const size_t n = c.block_out_channels.size(), r = n - 1 - i;
  const int64_t out = c.block_out_channels[r], prev = c.block_out_channels[i == 0 ? n - 1 : r + 1],
                in = c.block_out_channels[r == 0 ? 0 : r - 1];
  const int64_t L = c.layers_per_block + 1;
  Block b;
  for (int64_t j = 0; j < L; ++j) {
    const int64_t skip = j == L - 1 ? in : out, res_in = j == 0 ? prev : out;
    b.resnets.emplace_back(s.sub("resnets." + std::to_string(j)), res_in + skip, out, temb, c);
    if (has_attention(c.up_block_types[i]))
      b.attentions.emplace_back(s.sub("attentions." + std::to_string(j)), out, c.num_attention_heads[r],
                                c.transformer_layers_per_block[r], c);
  }
  if (i + 1 < n) b.sampler.emplace(s.sub("upsamplers.0.conv"), out, out, 3, 1, 1);
  return b;
}

}  // namespace

Blocks::Blocks(const WeightScope& s, const UNet2DConditionConfig& c)
    : conv_in(s.sub("conv_in"), c.in_channels, c.block_out_channels.at(0), 3, 1, 1),
      conv_out(s.sub("conv_out"), c.block_out_channels[0], c.out_channels, 3, 1, 1),
      conv_norm_out(s.sub("conv_norm_out"), c.norm_num_groups, c.block_out_channels[0], c.norm_eps) {
  const int64_t C0 = c.block_out_channels[0], temb = 4 * C0, Cn = c.block_out_channels.back();
  time_embedding.emplace(s.sub("time_embedding"), C0, temb);
  if (c.addition_embed_type == "text_time")
    add_embedding.emplace(s.sub("add_embedding"), c.projection_class_embeddings_input_dim, temb);
  const size_t n = c.block_out_channels.size();
  for (size_t i = 0; i < n; ++i) down.push_back(down_block(s.sub("down_blocks." + std::to_string(i)), c, i, temb));
  const WeightScope m = s.sub("mid_block");
  for (int j = 0; j < 2; ++j)
    mid.resnets.emplace_back(m.sub("resnets." + std::to_string(j)), Cn, Cn, temb, c, c.mid_block_scale_factor);
  mid.attentions.emplace_back(m.sub("attentions.0"), Cn, c.num_attention_heads.back(),
                              c.transformer_layers_per_block.back(), c);
  for (size_t i = 0; i < n; ++i) up.push_back(up_block(s.sub("up_blocks." + std::to_string(i)), c, i, temb));
}

}  // namespace kvad::image::unet
