#include "model/image/flux.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "model/image/config_json.h"

namespace kvad::image {

using json = nlohmann::json;

namespace {

using config::kMaxDim;
constexpr float kEps = 1e-6f;  // every norm of FluxTransformer2DModel

using config::get_int;
using config::present;

std::string shape(const Tensor& t) { return shape_str(t); }

}  // namespace

FluxTransformerConfig parse_flux_config(const json& j, const std::string& name) {
  FluxTransformerConfig c;
  c.patch_size = get_int(j, "patch_size", 1, name);
  if (c.patch_size != 1) throw Error(name + ": patch_size " + std::to_string(c.patch_size) + " is not 1");
  c.in_channels = get_int(j, "in_channels", 64, name);
  c.out_channels = get_int(j, "out_channels", c.in_channels, name);
  c.num_layers = get_int(j, "num_layers", 19, name);
  c.num_single_layers = get_int(j, "num_single_layers", 38, name);
  c.attention_head_dim = get_int(j, "attention_head_dim", 128, name);
  c.num_attention_heads = get_int(j, "num_attention_heads", 24, name);
  c.joint_attention_dim = get_int(j, "joint_attention_dim", 4096, name);
  c.pooled_projection_dim = get_int(j, "pooled_projection_dim", 768, name);
  if (present(j, "guidance_embeds")) {
    if (!j["guidance_embeds"].is_boolean()) throw Error(name + ": guidance_embeds is not true or false");
    c.guidance_embeds = j["guidance_embeds"].get<bool>();
  }
  if (present(j, "axes_dims_rope")) {
    const json& a = j["axes_dims_rope"];
    if (!a.is_array() || a.empty() || a.size() > 8) throw Error(name + ": axes_dims_rope is not a list of 1 to 8 dims");
    c.axes_dims_rope.clear();
    for (const json& d : a) {
      if (!d.is_number_integer() || d.get<int64_t>() < 2 || d.get<int64_t>() > kMaxDim || d.get<int64_t>() % 2)
        throw Error(name + ": axes_dims_rope holds " + d.dump() + ", not a positive even dim");
      c.axes_dims_rope.push_back(d.get<int64_t>());
    }
  }
  int64_t sum = 0;
  for (int64_t d : c.axes_dims_rope) sum += d;
  if (sum != c.attention_head_dim)
    throw Error(name + ": axes_dims_rope sum to " + std::to_string(sum) + ", not attention_head_dim " +
                std::to_string(c.attention_head_dim));
  if (c.inner_dim() > kMaxDim) throw Error(name + ": num_attention_heads × attention_head_dim is out of range");
  return c;
}

FluxTransformer2D::FluxTransformer2D(const WeightScope& s, const FluxTransformerConfig& c) : c_(c), dev_(s.device()) {
  const int64_t dim = c.inner_dim(), H = c.num_attention_heads, D = c.attention_head_dim;
  const int64_t pp = c.patch_size * c.patch_size;
  x_embedder_ = Linear(s.sub("x_embedder"), c.in_channels, dim, true);
  context_embedder_ = Linear(s.sub("context_embedder"), c.joint_attention_dim, dim, true);
  const WeightScope te = s.sub("time_text_embed");
  timestep_embedder_ = std::make_unique<unet::TimestepEmbedding>(te.sub("timestep_embedder"), 256, dim);
  if (c.guidance_embeds)
    guidance_embedder_ = std::make_unique<unet::TimestepEmbedding>(te.sub("guidance_embedder"), 256, dim);
  text_embedder_ = std::make_unique<unet::TimestepEmbedding>(te.sub("text_embedder"), c.pooled_projection_dim, dim);
  const mmdit::DoubleStreamNames names = mmdit::flux_double_stream_names();
  for (int64_t i = 0; i < c.num_layers; ++i)
    double_.emplace_back(s.sub("transformer_blocks." + std::to_string(i)), names, dim, H, D, 4 * dim, kEps);
  for (int64_t i = 0; i < c.num_single_layers; ++i) {
    const WeightScope b = s.sub("single_transformer_blocks." + std::to_string(i));
    const int64_t mlp = 4 * dim;  // mlp_ratio 4.0
    single_.push_back({mmdit::AdaLNModulation(b.sub("norm.linear"), dim, dim, 3),
                       mmdit::JointAttention(b.sub("attn"), dim, H, D, false, false, kEps),
                       Linear(b.sub("proj_mlp"), dim, mlp, true), Linear(b.sub("proj_out"), dim + mlp, dim, true)});
  }
  norm_out_ = mmdit::AdaLNModulation(s.sub("norm_out.linear"), dim, dim, 2);
  proj_out_ = Linear(s.sub("proj_out"), dim, pp * c.out_channels, true);
}

Tensor FluxTransformer2D::forward(const Input& in) const {
  const int64_t dim = c_.inner_dim(), n_axes = static_cast<int64_t>(c_.axes_dims_rope.size());
  const Tensor& x = in.hidden_states;
  const Tensor& ctx = in.encoder_hidden_states;
  const int64_t N = x.ne[2], n_img = x.ne[1], n_txt = ctx.ne[1];
  auto need = [&](bool ok, const std::string& what) {
    if (!ok) throw Error("FluxTransformer2D: " + what);
  };
  need(x.type == DType::F32 && x.ne[0] == c_.in_channels && x.ne[3] == 1,
       "hidden_states " + shape(x) + " is not {in_channels " + std::to_string(c_.in_channels) + ", n_img, N}");
  need(ctx.type == DType::F32 && ctx.ne[0] == c_.joint_attention_dim && ctx.ne[2] == N && ctx.ne[3] == 1,
       "encoder_hidden_states " + shape(ctx) + " is not {joint_attention_dim " +
           std::to_string(c_.joint_attention_dim) + ", n_txt, " + std::to_string(N) + "}");
  const Tensor& pooled = in.pooled_projections;
  need(pooled.type == DType::F32 && pooled.ne[0] == c_.pooled_projection_dim && pooled.ne[1] == N &&
           pooled.n_elements() == c_.pooled_projection_dim * N,
       "pooled_projections " + shape(pooled) + " is not {pooled_projection_dim " +
           std::to_string(c_.pooled_projection_dim) + ", " + std::to_string(N) + "}");
  need(static_cast<int64_t>(in.txt_ids.size()) == n_txt * n_axes &&
           static_cast<int64_t>(in.img_ids.size()) == n_img * n_axes,
       "txt_ids / img_ids do not hold " + std::to_string(n_axes) + " positions per token");
  need(std::isfinite(in.timestep), "timestep " + std::to_string(in.timestep) + " is not finite");
  need(in.guidance.has_value() == c_.guidance_embeds,
       c_.guidance_embeds ? "this transformer (guidance_embeds) needs a guidance scale"
                          : "this transformer has no guidance embedding (guidance_embeds false)");

  // Conditioning: timestep (and guidance) · 1000 in f32, as the model scales them.
  auto embed_scalar = [&](float v, const unet::TimestepEmbedding& e) {
    const float t = v * 1000.0f;
    std::vector<float> ts(static_cast<size_t>(N), t);
    const Tensor tt = ops::from_host(ts.data(), DType::F32, {1, N, 1, 1}, dev_);
    return e(unet::timestep_proj(tt, 256, true, 0));  // [N, dim]
  };
  Tensor temb = embed_scalar(in.timestep, *timestep_embedder_);
  if (guidance_embedder_) temb = ops::add(temb, embed_scalar(*in.guidance, *guidance_embedder_));
  temb = ops::add(temb, (*text_embedder_)(pooled.view({c_.pooled_projection_dim, N, 1, 1})));
  const Tensor silu_temb = ops::silu(temb);  // every modulation's input

  std::vector<float> ids = in.txt_ids;
  ids.insert(ids.end(), in.img_ids.begin(), in.img_ids.end());
  const mmdit::RopeTable rope = mmdit::rope_table(ids, c_.axes_dims_rope, 10000.0, N, dev_);

  Tensor img = mmdit::linear_tokens(x_embedder_, x);          // {dim, n_img, N}
  Tensor txt = mmdit::linear_tokens(context_embedder_, ctx);  // {dim, n_txt, N}
  for (const mmdit::DoubleStreamBlock& b : double_) b(img, txt, silu_temb, rope);

  Tensor h = ops::concat(txt, img, 1);  // {dim, n_txt + n_img, N}
  for (const SingleBlock& b : single_) {
    const std::vector<Tensor> m = b.norm(silu_temb);  // shift, scale, gate
    const Tensor hn = mmdit::modulate(h, m[0], m[1], kEps);
    const Tensor mlp = ops::gelu(mmdit::linear_tokens(b.proj_mlp, hn));
    const Tensor attn = b.attn(hn, Tensor{}, rope).img;
    h = mmdit::gated_add(h, m[2], mmdit::linear_tokens(b.proj_out, ops::concat(attn, mlp, 0)));
  }
  const size_t f = sizeof(float);
  const int64_t n_all = n_txt + n_img;
  img = ops::cont(ops::view(h, {dim, n_img, N, 1}, {f, dim * f, dim * n_all * f, dim * n_all * N * f},
                            static_cast<size_t>(n_txt) * dim * f));
  const std::vector<Tensor> m = norm_out_(silu_temb);  // AdaLayerNormContinuous: scale, then shift
  return mmdit::linear_tokens(proj_out_, mmdit::modulate(img, m[1], m[0], kEps));
}

}  // namespace kvad::image
