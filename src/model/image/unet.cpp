#include "model/image/unet.h"

#include <cmath>
#include <string>

#include "base/error.h"
#include "model/image/unet_blocks.h"
#include "tensor/ops.h"

namespace kvad::image {

UNet2DCondition::UNet2DCondition(const WeightScope& scope, const UNet2DConditionConfig& c)
    : c_(c), dev_(scope.device()), b_(std::make_unique<unet::Blocks>(scope, c)) {}

UNet2DCondition::~UNet2DCondition() = default;
UNet2DCondition::UNet2DCondition(UNet2DCondition&&) noexcept = default;
UNet2DCondition& UNet2DCondition::operator=(UNet2DCondition&&) noexcept = default;

namespace {

// Throws unless t is an f32 tensor of shape `want` on `dev` (a 0 in want: any size >= 1).
void check_input(const Tensor& t, const char* what, std::array<int64_t, 4> want, const std::string& want_str,
                 Device dev) {
  if (!t) throw Error(std::string("UNet: ") + what + " is empty; expected ne " + want_str);
  bool ok = t.type == DType::F32;
  for (int i = 0; i < 4; ++i) ok = ok && (want[i] == 0 ? t.ne[i] >= 1 : t.ne[i] == want[i]);
  if (!ok)
    throw Error(std::string("UNet: ") + what + " is " + dtype_name(t.type) + " " + shape_str(t) + "; expected f32 ne " +
                want_str);
  if (t.device() != dev)
    throw Error(std::string("UNet: ") + what + " is on " + t.device().str() + ", the UNet's weights on " + dev.str());
}

}  // namespace

Tensor UNet2DCondition::forward(const Tensor& sample, float timestep, const Tensor& encoder_hidden_states,
                                const UNetAddedCond* added) const {
  const std::string C = std::to_string(c_.in_channels), X = std::to_string(c_.cross_attention_dim);
  check_input(sample, "sample", {c_.in_channels, 0, 0, 0}, "{" + C + " (in_channels), W, H, N}", dev_);
  const int64_t N = sample.ne[3];
  const std::string Ns = std::to_string(N);
  check_input(encoder_hidden_states, "encoder_hidden_states", {c_.cross_attention_dim, 0, N, 1},
              "{" + X + " (cross_attention_dim), n_ctx, " + Ns + " (the sample's N)}", dev_);
  if (!std::isfinite(timestep)) throw Error("UNet: timestep " + std::to_string(timestep) + " is not finite");
  const bool text_time = c_.addition_embed_type == "text_time";
  if (text_time && !added)
    throw Error("UNet: addition_embed_type text_time (SDXL) needs the added conditions text_embeds and time_ids");
  if (!text_time && added)
    throw Error("UNet: added conditions given, but the UNet has no addition_embed_type to read them");
  const unet::Blocks& b = *b_;
  const Tensor x = ops::cont(sample), ctx = ops::cont(encoder_hidden_states);

  // Time embedding; one timestep for every sample, so one row broadcast over N.
  const Tensor t = ops::from_host(&timestep, DType::F32, {1, 1, 1, 1}, dev_);
  const int64_t C0 = c_.block_out_channels[0];
  Tensor emb = (*b.time_embedding)(unet::timestep_proj(t, C0, c_.flip_sin_to_cos, c_.freq_shift));  // [1, temb]
  if (text_time) {
    const int64_t T = c_.addition_time_embed_dim, P = c_.projection_class_embeddings_input_dim - 6 * T;
    const std::string Ps = std::to_string(P) + " (projection_class_embeddings_input_dim - 6 addition_time_embed_dim)";
    check_input(added->text_embeds, "text_embeds", {P, N, 1, 1}, "{" + Ps + ", " + Ns + "}", dev_);
    check_input(added->time_ids, "time_ids", {6, N, 1, 1}, "{6, " + Ns + "}", dev_);
    const Tensor ids = ops::cont(added->time_ids);
    const Tensor time = unet::timestep_proj(ids.view({1, 6 * N, 1, 1}), T, c_.flip_sin_to_cos, c_.freq_shift);
    const Tensor cond = ops::concat(ops::cont(added->text_embeds), time.view({6 * T, N, 1, 1}), 0);
    emb = ops::add(emb, (*b.add_embedding)(cond));  // [N, temb]
  }
  const Tensor temb = ops::silu(emb);  // every resnet's time_emb_proj reads silu(emb)

  Tensor in = x;
  if (c_.center_input_sample) {  // 2 · sample - 1
    const float minus_one = -1;
    in = ops::add(ops::scale(x, 2), ops::from_host(&minus_one, DType::F32, {1, 1, 1, 1}, dev_));
  }
  Tensor h = b.conv_in(in);
  std::vector<Tensor> skips{h};
  for (const unet::Block& d : b.down) {
    for (size_t j = 0; j < d.resnets.size(); ++j) {
      h = d.resnets[j](h, temb);
      if (!d.attentions.empty()) h = d.attentions[j](h, ctx);
      skips.push_back(h);
    }
    if (d.sampler) {
      h = unet::downsample(*d.sampler, h, d.downsample_padding);
      skips.push_back(h);
    }
  }
  h = b.mid.resnets[0](h, temb);
  h = b.mid.attentions[0](h, ctx);
  h = b.mid.resnets[1](h, temb);
  for (const unet::Block& u : b.up) {
    for (size_t j = 0; j < u.resnets.size(); ++j) {
      h = u.resnets[j](ops::concat(h, skips.back(), 0), temb);
      skips.pop_back();
      if (!u.attentions.empty()) h = u.attentions[j](h, ctx);
    }
    if (u.sampler) h = unet::upsample(*u.sampler, h, skips.back().ne[1], skips.back().ne[2]);
  }
  return b.conv_out(ops::silu(b.conv_norm_out(h)));
}

}  // namespace kvad::image
