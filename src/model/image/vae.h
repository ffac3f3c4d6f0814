// The KL autoencoder of latent diffusion (Rombach et al. 2022, "High-Resolution
// Image Synthesis with Latent Diffusion Models"), as diffusers runs it for SD
// 1.5 and SDXL: diffusers 0.42 models/autoencoders/autoencoder_kl.py
// (AutoencoderKL: decode, encode, tiled_decode, blend_v/blend_h), vae.py
// (Encoder, Decoder), resnet.py (ResnetBlock2D, Downsample2D, Upsample2D),
// unets/unet_2d_blocks.py (DownEncoderBlock2D, UpDecoderBlock2D,
// UNetMidBlock2D), attention_processor.py (Attention, AttnProcessor2_0).
//
// Images are channels-last, ne {C, W, H, N} (tensor/ops.h "images").
// With c = block_out_channels, L = len(c), f = 2^(L-1), G = norm_num_groups,
// every GroupNorm with eps 1e-6 and act = SiLU:
//
//   Resnet(x; in → out):  h = conv3(act(GN(x))); h = conv3(act(GN(h)));
//                         x' + h, x' = conv1x1(x) when in ≠ out (conv_shortcut), else x
//   Attention(x):         t = GN(x) as [N, W·H, C] tokens; one head of width C:
//                         x + W_o · softmax(q kᵀ / √C) v + b_o,  q/k/v = W t + b
//   Mid(x):               Resnet → Attention (mid_block_add_attention) → Resnet
//   Decoder(z):           conv_in 3×3 (latent → c[L-1]); Mid; per level i of
//                         reversed(c): layers_per_block + 1 Resnets, then (i < L-1)
//                         nearest 2× upsample + conv 3×3; act(GN); conv_out 3×3
//   Encoder(x):           conv_in 3×3 (in → c[0]); per level i: layers_per_block
//                         Resnets, then (i < L-1) pad right/bottom by 1 + conv 3×3
//                         stride 2; Mid; act(GN); conv_out 3×3 → 2·latent
//   decode(z) = Decoder(post_quant_conv(z)),  encode(x) = quant_conv(Encoder(x))[:latent]
//
// Precision: the activations are f32 on every device (weights as the loader
// places them). SDXL's VAE overflows f16 activations (its config's
// force_upcast makes diffusers run it in f32; madebyollin's sdxl-vae-fp16-fix
// is the same network fine-tuned so that its internal activations stay
// within f16's range while its outputs stay close). kvad never runs
// activations in f16 here, so either VAE gives its f32 result.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "model/image/configs.h"
#include "model/image/layers.h"
#include "model/weights.h"
#include "tensor/tensor.h"

namespace kvad::image {

/// Tiled decoding (diffusers' AutoencoderKL.enable_tiling / tiled_decode) in
/// latent units. The latent is cut into tiles of `tile` × `tile` starting
/// every tile - overlap latents in W and H (the last ones cut short at the
/// edge); each is decoded on its own; a tile's first overlap·f pixel rows
/// are blended linearly with the last rows of the tile above it, then its
/// first overlap·f columns with the tile to its left (both already blended),
/// weights y/e for the tile and 1 - y/e for its neighbour, e = min(overlap·f,
/// the two tiles' sizes), in diffusers' order; each tile keeps its first
/// (tile - overlap)·f rows and columns. With tile = sample_size / f and
/// overlap = tile / 4 this is diffusers' enable_tiling() decode (SD 1.5: {64,
/// 16}; SDXL: {128, 32}). Tiles see only themselves (GroupNorm statistics
/// and the mid-block attention), so the result differs from an untiled
/// decode near and away from the seams.
struct VaeTiling {
  int64_t tile = 0;     ///< latent tile side (0: no tiling); diffusers' tile_latent_min_size
  int64_t overlap = 0;  ///< latent overlap blended linearly (diffusers' tile_overlap_factor · tile)
};

/// The tiling of diffusers' enable_tiling() for config `c`: tile =
/// sample_size / f (tile_latent_min_size), overlap = tile / 4
/// (tile_overlap_factor 0.25); the same tiles and blending as diffusers when
/// tile is a multiple of 4 (SD 1.5: {64, 16}, SDXL: {128, 32}). For memory
/// bounded at any size, a smaller tile ({64, 16}) serves SDXL too.
VaeTiling diffusers_tiling(const AutoencoderKLConfig& c);

/// diffusers' AutoencoderKL: the Encoder and Decoder of the header comment.
class AutoencoderKL {
 public:
  /// Takes the weights under `scope` (diffusers names "decoder.conv_in.weight",
  /// ...), e.g. WeightLoader.root().sub("vae"): encoder, decoder, quant_conv
  /// and post_quant_conv as the config has them. Throws kvad::Error as
  /// WeightLoader::get does for a missing tensor or a shape other than the
  /// config's, and for a config kvad cannot run (levels outside 1..16, a
  /// channel count or layers_per_block below 1).
  AutoencoderKL(const WeightScope& scope, const AutoencoderKLConfig& c);

  /// z: ne {latent_channels, w, h, N} f32 on device(), contiguous, already
  /// divided by scaling_factor (the pipelines' vae.decode(latents /
  /// scaling_factor)). Returns the image ne {out_channels, w·f, h·f, N} f32
  /// on device(), not clamped (about [-1, 1]). Images are decoded one at a
  /// time. Without tiling (or when the latent fits one tile, as diffusers
  /// decides) the whole image at once: the activations grow with its pixels
  /// (SD's and SDXL's VAE in f32, bench_vae's peak RSS less the weights:
  /// about 1.0 GiB at 512², 4.3 GiB at 1024²). With tiling they are one
  /// tile's, whatever the image size (a {64, 16} tiling: 1024² in 1.1 GiB,
  /// for 1.3× the compute), plus two rows of decoded tiles and the image
  /// itself in host memory (out_channels floats a pixel). Throws kvad::Error, naming the
  /// shapes, for a latent of another channel count, type or device, an
  /// empty one, or a tiling with tile < 0, overlap < 0 or overlap >= tile.
  Tensor decode(const Tensor& z, const VaeTiling& tiling = {}) const;

  /// x: ne {in_channels, W, H, N} f32 on device(), contiguous, in [-1, 1].
  /// Returns latent_dist.mean: quant_conv (use_quant_conv) of the encoder's
  /// moments, its first latent_channels channels, ne {latent_channels, W/f,
  /// H/f, N} (a side that is no multiple of f halves as diffusers' strided
  /// convolutions do: ⌊W/2⌋ per level, Downsample2D padding one column and
  /// row). Not multiplied by scaling_factor. One image at a time.
  /// With a tiling, and an image larger than tile·f pixels in W or H,
  /// diffusers' _tiled_encode (enable_tiling()): tiles of tile·f pixels
  /// every (tile - overlap)·f pixels, each encoded on its own, blended
  /// linearly over `overlap` latents with the tile above and the one to the
  /// left (blend_v, blend_h, in diffusers' order), each keeping its first
  /// tile - overlap latent rows and columns; the activations are then one
  /// tile's, whatever the image size. Throws kvad::Error as decode does for
  /// x and the tiling, and for a side below f.
  Tensor encode(const Tensor& x, const VaeTiling& tiling = {}) const;

  /// Bounds the mid-block attention's scores (a block of queries × all
  /// W·H keys of the image or tile) to `floats` floats, at least one query
  /// row a block; default 16 Mi (64 MiB). Throws kvad::Error below 1.
  void set_attention_scores(int64_t floats);

  int64_t downscale() const { return f_; }  ///< f = 2^(len(block_out_channels) - 1)
  const AutoencoderKLConfig& config() const { return c_; }
  Device device() const { return dev_; }

 private:
  struct Resnet {
    GroupNorm norm1, norm2;
    Conv2d conv1, conv2;
    std::optional<Conv2d> shortcut;  ///< 1×1 when in ≠ out
    Tensor operator()(const Tensor& x) const;
  };
  struct Attention {
    GroupNorm norm;
    Linear to_q, to_k, to_v, to_out;
  };
  struct Mid {
    std::vector<Resnet> resnets;  ///< two
    std::optional<Attention> attn;
  };
  struct Level {
    std::vector<Resnet> resnets;
    Conv2d resample;  ///< Downsample2D / Upsample2D conv; empty on the last level
  };
  struct Coder {
    Conv2d conv_in, conv_out;
    std::vector<Level> levels;
    Mid mid;
    GroupNorm norm_out;
  };

  Tensor attention(const Attention& a, const Tensor& x) const;
  Tensor mid(const Mid& m, const Tensor& x) const;
  Tensor decode_one(const Tensor& z) const;  // post_quant_conv + Decoder, one or more images
  Tensor decode_tiled(const Tensor& z, const VaeTiling& t) const;  // one image
  Tensor encode_one(const Tensor& x) const;                         // one image, untiled: the mean
  Tensor tiled(const Tensor& x, int64_t tile, int64_t step, int64_t extent, int64_t keep, int64_t C_out,
               const std::function<int64_t(int64_t)>& size, const std::function<Tensor(const Tensor&)>& run) const;
  void check_input(const Tensor& t, int64_t channels, const char* what) const;
  void check_tiling(const VaeTiling& t, const char* what) const;

  AutoencoderKLConfig c_;
  Device dev_;
  int64_t f_ = 1;
  int64_t score_floats_ = int64_t{16} << 20;
  Coder enc_, dec_;
  Conv2d quant_, post_quant_;  ///< empty without use_quant_conv / use_post_quant_conv
};

}  // namespace kvad::image
