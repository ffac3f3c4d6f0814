#include "model/image/vae.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>

#include "base/error.h"
#include "tensor/ops.h"

namespace kvad::image {

namespace {

constexpr float kEps = 1e-6f;  // every GroupNorm of diffusers' Encoder and Decoder (resnet_eps)

// One image (sample n) of a batch: a view, no copy.
Tensor sample(const Tensor& x, int64_t n) {
  const int64_t px = x.ne[1] * x.ne[2];
  return x.rows(n * px, (n + 1) * px).view({x.ne[0], x.ne[1], x.ne[2], 1});
}

// A decoded tile in host memory: {C, w, h} floats, w and h in pixels.
struct Tile {
  int64_t w = 0, h = 0;
  std::vector<float> v;
  float* at(int64_t C, int64_t x, int64_t y) { return v.data() + (y * w + x) * C; }
};

// diffusers' blend_v / blend_h: b's first e rows (columns) become a's last e
// rows (columns) · (1 - y/e) + b's · y/e, e = min(a's, b's, extent). The
// weights are rounded to f32 as torch does a Python float times an f32 tensor.
void blend(Tile& a, Tile& b, int64_t extent, int64_t C, bool vertical) {
  const int64_t e = std::min({vertical ? a.h : a.w, vertical ? b.h : b.w, extent});
  for (int64_t y = 0; y < e; ++y) {
    const float wa = static_cast<float>(1.0 - static_cast<double>(y) / static_cast<double>(e));
    const float wb = static_cast<float>(static_cast<double>(y) / static_cast<double>(e));
    const int64_t n = vertical ? b.w : b.h;  // the same for a: a tile's neighbour in its column (row)
    for (int64_t i = 0; i < n; ++i) {
      float* pb = vertical ? b.at(C, i, y) : b.at(C, y, i);
      const float* pa = vertical ? a.at(C, i, a.h - e + y) : a.at(C, a.w - e + y, i);
      for (int64_t c = 0; c < C; ++c) pb[c] = pa[c] * wa + pb[c] * wb;
    }
  }
}

}  // namespace

VaeTiling diffusers_tiling(const AutoencoderKLConfig& c) {
  const int64_t L = static_cast<int64_t>(c.block_out_channels.size());
  const int64_t tile = L >= 1 && L <= 16 ? c.sample_size / (int64_t{1} << (L - 1)) : 0;
  return {tile, tile / 4};
}

AutoencoderKL::AutoencoderKL(const WeightScope& scope, const AutoencoderKLConfig& c) : c_(c), dev_(scope.device()) {
  const std::vector<int64_t>& ch = c.block_out_channels;
  const int64_t L = static_cast<int64_t>(ch.size());
  if (L < 1 || L > 16 || c.latent_channels < 1 || c.in_channels < 1 || c.out_channels < 1 || c.layers_per_block < 1)
    throw Error(scope.path() + ": AutoencoderKL config needs 1..16 block_out_channels and latent_channels, "
                "in_channels, out_channels and layers_per_block of at least 1");
  f_ = int64_t{1} << (L - 1);
  const int64_t G = c.norm_num_groups;
  const auto conv = [](const WeightScope& m, const std::string& name, int64_t in, int64_t out, int64_t k) {
    return Conv2d(m.sub(name), in, out, k, 1, k / 2);
  };
  const auto norm = [&](const WeightScope& m, const std::string& name, int64_t n) {
    return GroupNorm(m.sub(name), G, n, kEps);
  };
  const auto resnet = [&](const WeightScope& m, int64_t in, int64_t out) {
    Resnet r{norm(m, "norm1", in), norm(m, "norm2", out), conv(m, "conv1", in, out, 3), conv(m, "conv2", out, out, 3),
             std::nullopt};
    if (in != out) r.shortcut = conv(m, "conv_shortcut", in, out, 1);
    return r;
  };
  const auto mid = [&](const WeightScope& m, int64_t C) {
    Mid md;
    md.resnets.push_back(resnet(m.sub("resnets.0"), C, C));
    if (c.mid_block_add_attention) {
      const WeightScope a = m.sub("attentions.0");
      md.attn = Attention{norm(a, "group_norm", C), Linear(a.sub("to_q"), C, C, true), Linear(a.sub("to_k"), C, C, true),
                          Linear(a.sub("to_v"), C, C, true), Linear(a.sub("to_out.0"), C, C, true)};
    }
    md.resnets.push_back(resnet(m.sub("resnets.1"), C, C));
    return md;
  };
  const int64_t z = c.latent_channels, top = ch.back();

  // Encoder (vae.py Encoder, double_z): down_blocks.i.resnets.j, .downsamplers.0.conv.
  const WeightScope e = scope.sub("encoder");
  enc_.conv_in = conv(e, "conv_in", c.in_channels, ch[0], 3);
  for (int64_t i = 0; i < L; ++i) {
    const WeightScope b = e.sub("down_blocks." + std::to_string(i));
    Level lv;
    for (int64_t j = 0; j < c.layers_per_block; ++j)
      lv.resnets.push_back(resnet(b.sub("resnets." + std::to_string(j)), j == 0 && i > 0 ? ch[i - 1] : ch[i], ch[i]));
    if (i < L - 1) lv.resample = Conv2d(b.sub("downsamplers.0.conv"), ch[i], ch[i], 3, 2, 0);  // after its own pad
    enc_.levels.push_back(std::move(lv));
  }
  enc_.mid = mid(e.sub("mid_block"), top);
  enc_.norm_out = norm(e, "conv_norm_out", top);
  enc_.conv_out = conv(e, "conv_out", top, 2 * z, 3);

  // Decoder (vae.py Decoder): up_blocks.i over reversed(block_out_channels).
  const WeightScope d = scope.sub("decoder");
  dec_.conv_in = conv(d, "conv_in", z, top, 3);
  dec_.mid = mid(d.sub("mid_block"), top);
  for (int64_t i = 0; i < L; ++i) {
    const WeightScope b = d.sub("up_blocks." + std::to_string(i));
    const int64_t out = ch[L - 1 - i], prev = ch[i == 0 ? L - 1 : L - i];
    Level lv;
    for (int64_t j = 0; j <= c.layers_per_block; ++j)
      lv.resnets.push_back(resnet(b.sub("resnets." + std::to_string(j)), j == 0 ? prev : out, out));
    if (i < L - 1) lv.resample = conv(b, "upsamplers.0.conv", out, out, 3);
    dec_.levels.push_back(std::move(lv));
  }
  dec_.norm_out = norm(d, "conv_norm_out", ch[0]);
  dec_.conv_out = conv(d, "conv_out", ch[0], c.out_channels, 3);

  if (c.use_quant_conv) quant_ = conv(scope, "quant_conv", 2 * z, 2 * z, 1);
  if (c.use_post_quant_conv) post_quant_ = conv(scope, "post_quant_conv", z, z, 1);
}

// ResnetBlock2D with temb None and output_scale_factor 1 (resnet.py).
Tensor AutoencoderKL::Resnet::operator()(const Tensor& x) const {
  const Tensor h = conv1(ops::silu(norm1(x)));
  return ops::add(shortcut ? (*shortcut)(x) : x, conv2(ops::silu(norm2(h))));
}

// Attention with one head of width C, group_norm first and the residual added
// (AttnProcessor2_0 with residual_connection, rescale_output_factor 1):
// softmax(q kᵀ / √C) v by matmuls, a block of queries at a time, so that the
// scores of a block take at most score_floats_ floats. (One head of 512 is past
// the widths sdpa's tiled kernel takes; as two GEMMs it runs at their speed.)
Tensor AutoencoderKL::attention(const Attention& a, const Tensor& x) const {
  const int64_t C = x.ne[0], P = x.ne[1] * x.ne[2], N = x.ne[3];
  const Tensor t = a.norm(x).view({C, P * N, 1, 1});
  const Tensor q = ops::scale(a.to_q(t), 1.0f / std::sqrt(static_cast<float>(C)));
  const Tensor k = a.to_k(t), v = a.to_v(t);
  const Tensor o = ops::empty(DType::F32, {C, P * N, 1, 1}, dev_);
  const int64_t block = std::clamp(score_floats_ / P, int64_t{1}, P);
  for (int64_t n = 0; n < N; ++n) {
    const Tensor kn = k.rows(n * P, (n + 1) * P);                         // [P, C]
    const Tensor vt = ops::cont(ops::transpose(v.rows(n * P, (n + 1) * P)));  // [C, P]
    for (int64_t r0 = 0; r0 < P; r0 += block) {
      const int64_t r1 = std::min(P, r0 + block);
      const Tensor p = ops::softmax(ops::matmul(q.rows(n * P + r0, n * P + r1), kn));  // [r1 - r0, P]
      ops::copy_into(o.rows(n * P + r0, n * P + r1), ops::matmul(p, vt));
    }
  }
  return ops::add(x, a.to_out(o).view(x.ne));
}

// UNetMidBlock2D: resnet, (attention), resnet.
Tensor AutoencoderKL::mid(const Mid& m, const Tensor& x) const {
  Tensor h = m.resnets[0](x);
  if (m.attn) h = attention(*m.attn, h);
  return m.resnets[1](h);
}

void AutoencoderKL::check_input(const Tensor& t, int64_t channels, const char* what) const {
  const std::string head = std::string("AutoencoderKL.") + what + ": ";
  if (!t || t.n_elements() == 0) throw Error(head + "empty input " + shape_str(t));
  if (t.type != DType::F32) throw Error(head + "input " + shape_str(t) + " is " + dtype_name(t.type) + ", not f32");
  if (t.device() != dev_)
    throw Error(head + "input is on " + t.device().str() + ", the VAE's weights on " + dev_.str());
  if (!t.is_contiguous()) throw Error(head + "input " + shape_str(t) + " is strided (ops::cont first)");
  if (t.ne[0] != channels)
    throw Error(head + "input " + shape_str(t) + " has " + std::to_string(t.ne[0]) + " channels, the config's " +
                (std::string(what) == "decode" ? "latent_channels " : "in_channels ") + std::to_string(channels) +
                " (ne {C, W, H, N})");
}

void AutoencoderKL::check_tiling(const VaeTiling& t, const char* what) const {
  if (t.tile < 0 || t.overlap < 0 || (t.tile > 0 && t.overlap >= t.tile))
    throw Error(std::string("AutoencoderKL.") + what + ": tiling {tile " + std::to_string(t.tile) + ", overlap " +
                std::to_string(t.overlap) + "} needs tile >= 0 and 0 <= overlap < tile");
}

void AutoencoderKL::set_attention_scores(int64_t floats) {
  if (floats < 1) throw Error("AutoencoderKL: attention score bound " + std::to_string(floats) + " is below 1");
  score_floats_ = floats;
}

Tensor AutoencoderKL::decode_one(const Tensor& z) const {
  Tensor h = mid(dec_.mid, dec_.conv_in(post_quant_.w ? post_quant_(z) : z));
  for (const Level& lv : dec_.levels) {
    for (const Resnet& r : lv.resnets) h = r(h);
    if (lv.resample.w) h = lv.resample(ops::upsample_nearest2d(h, 2));  // Upsample2D: nearest 2×, then conv 3×3
  }
  return dec_.conv_out(ops::silu(dec_.norm_out(h)));
}

Tensor AutoencoderKL::decode(const Tensor& z, const VaeTiling& tiling) const {
  check_input(z, c_.latent_channels, "decode");
  check_tiling(tiling, "decode");
  const int64_t w = z.ne[1], h = z.ne[2], N = z.ne[3];
  const bool tiled = tiling.tile > 0 && (w > tiling.tile || h > tiling.tile);  // as diffusers' _decode decides
  const Tensor out = ops::empty(DType::F32, {c_.out_channels, w * f_, h * f_, N}, dev_);
  const int64_t px = w * f_ * h * f_;
  for (int64_t n = 0; n < N; ++n) {
    const Tensor zn = sample(z, n);
    const Tensor img = tiled ? decode_tiled(zn, tiling) : decode_one(zn);
    ops::copy_into(out.rows(n * px, (n + 1) * px), img.view({c_.out_channels, px, 1, 1}));
  }
  return out;
}

// diffusers' tiled_decode / _tiled_encode for one image x ({C, W, H, 1}), a
// row of tiles at a time: tiles of `tile` × `tile` input pixels every `step`
// pixels (the last ones cut short at the edge), each run on the device to a
// tile of size(side) output pixels a side and C_out channels, blended with
// the tile above it (kept from the last row) and the one to its left over
// `extent` output pixels, and its first `keep` rows and columns copied into
// the result.
Tensor AutoencoderKL::tiled(const Tensor& x, int64_t tile, int64_t step, int64_t extent, int64_t keep, int64_t C_out,
                            const std::function<int64_t(int64_t)>& size,
                            const std::function<Tensor(const Tensor&)>& run) const {
  const int64_t C = C_out, xc = x.ne[0], w = x.ne[1], h = x.ne[2];
  int64_t W = 0, H = 0;  // the result's size: the kept parts of the first row and column
  for (int64_t j0 = 0; j0 < w; j0 += step) W += std::min(keep, size(std::min(tile, w - j0)));
  for (int64_t i0 = 0; i0 < h; i0 += step) H += std::min(keep, size(std::min(tile, h - i0)));
  std::vector<float> img(static_cast<size_t>(C * W * H));
  std::vector<Tile> above, row;
  for (int64_t i0 = 0, y0 = 0; i0 < h; i0 += step) {
    row.clear();
    int64_t x0 = 0, kh = 0;
    for (int64_t j0 = 0, b = 0; j0 < w; j0 += step, ++b) {
      const int64_t lw = std::min(tile, w - j0), lh = std::min(tile, h - i0);
      const Tensor xt = ops::cont(ops::view(x, {xc, lw, lh, 1}, x.nb, static_cast<size_t>(i0 * w + j0) * x.nb[1]));
      const Tensor dt = run(xt);
      Tile t{dt.ne[1], dt.ne[2], std::vector<float>(static_cast<size_t>(dt.n_elements()))};
      ops::to_host(dt, t.v.data());
      if (i0 > 0) blend(above[b], t, extent, C, true);
      if (b > 0) blend(row[b - 1], t, extent, C, false);
      const int64_t kw = std::min(keep, t.w);
      kh = std::min(keep, t.h);
      for (int64_t y = 0; y < kh; ++y) std::copy_n(t.at(C, 0, y), kw * C, img.data() + ((y0 + y) * W + x0) * C);
      x0 += kw;
      row.push_back(std::move(t));
    }
    y0 += kh;
    std::swap(above, row);
  }
  return ops::from_host(img.data(), DType::F32, {C, W, H, 1}, dev_);
}

Tensor AutoencoderKL::decode_tiled(const Tensor& z, const VaeTiling& t) const {
  return tiled(z, t.tile, t.tile - t.overlap, t.overlap * f_, (t.tile - t.overlap) * f_, c_.out_channels,
               [&](int64_t s) { return s * f_; }, [&](const Tensor& zt) { return decode_one(zt); });
}

// Encoder + quant_conv of one image, its latent_dist.mean.
Tensor AutoencoderKL::encode_one(const Tensor& x) const {
  Tensor h = enc_.conv_in(x);
  for (const Level& lv : enc_.levels) {
    for (const Resnet& r : lv.resnets) h = r(h);
    if (lv.resample.w)  // Downsample2D(padding=0): F.pad (0, 1, 0, 1), conv 3×3 stride 2
      h = lv.resample(ops::pad(h, {0, 0, 0, 0}, {0, 1, 1, 0}));
  }
  h = mid(enc_.mid, h);
  h = enc_.conv_out(ops::silu(enc_.norm_out(h)));
  if (quant_.w) h = quant_(h);
  // DiagonalGaussianDistribution: mean, logvar = moments.chunk(2, dim=1).
  const int64_t z = c_.latent_channels;
  return ops::cont(ops::slice(h.view({2 * z, h.ne[1] * h.ne[2], 1, 1}), 0, z)).view({z, h.ne[1], h.ne[2], 1});
}

Tensor AutoencoderKL::encode(const Tensor& x, const VaeTiling& tiling) const {
  check_input(x, c_.in_channels, "encode");
  check_tiling(tiling, "encode");
  if (x.ne[1] < f_ || x.ne[2] < f_)
    throw Error("AutoencoderKL.encode: input " + shape_str(x) + " is smaller than " + std::to_string(f_) +
                " pixels (the VAE's downscale) in W or H");
  const int64_t z = c_.latent_channels, T = tiling.tile * f_;
  // As diffusers' _encode decides: tiles when the image is larger than one.
  const bool tiled_ = tiling.tile > 0 && (x.ne[1] > T || x.ne[2] > T);
  // Each level's stride-2 convolution after its one-pixel pad: ⌊s / 2⌋.
  const auto size = [&](int64_t s) {
    for (int64_t l = 1; l < f_; l *= 2) s /= 2;
    return s;
  };
  Tensor out;
  for (int64_t n = 0; n < x.ne[3]; ++n) {
    const Tensor xn = sample(x, n);
    const Tensor m = tiled_ ? tiled(xn, T, (tiling.tile - tiling.overlap) * f_, tiling.overlap,
                                    tiling.tile - tiling.overlap, z, size,
                                    [&](const Tensor& xt) { return encode_one(xt); })
                            : encode_one(xn);
    const int64_t px = m.ne[1] * m.ne[2];
    if (!out) out = ops::empty(DType::F32, {z, m.ne[1], m.ne[2], x.ne[3]}, dev_);
    ops::copy_into(out.rows(n * px, (n + 1) * px), m.view({z, px, 1, 1}));
  }
  return out;
}

}  // namespace kvad::image
