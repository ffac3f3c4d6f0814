// Device kernels of the image ops (tensor/ops.h "images"; images are
// {C, W, H, N}, a pixel's C channels contiguous). Device pointers; each op is
// submitted to the compute stream and returns at once (device_kernels.h).
// The math is the CPU row's (kernels/cpu/image_ops.cpp, conv2d.cpp,
// attention.cpp sdpa). Status: compiles for sm_90; UNVERIFIED ON A GPU in
// this build.
#pragma once
#include <cstdint>

#include "kernels/cuda/strided.h"

namespace kvad::cuda {

/// GroupNorm of x [N, P pixels, C] into y (same shape): per image and group
/// of C/G consecutive channels, (x - mean) / sqrt(var + eps) · w[c] + b[c]
/// (w, b nullptr: 1, 0). Two passes (mean, then variance about it), f32.
void group_norm(const float* x, int64_t C, int64_t P, int64_t N, int64_t G, const float* w, const float* b, float eps,
                float* y);
/// y {C, W·f, H·f, N} = x {C, W, H, N} repeated f times in W and H.
void upsample_nearest2d(const float* x, int64_t C, int64_t W, int64_t H, int64_t N, int64_t f, float* y);
/// y (shape one) = x (shape ne) placed at offsets lo, zeros elsewhere.
void pad(const float* x, const int64_t* ne, const int64_t* lo, const int64_t* one, float* y);
/// out (contiguous f32, shape one) = a and b (f32, any strides) joined along dim.
void concat_dim(const void* a, const StridedLayout& la, const void* b, const StridedLayout& lb, int dim,
                const int64_t* one, float* out);

/// A conv2d's shapes (tensor/ops.h conv2d; x {C, W, H, N}, weight
/// {C, KW, KH, OC}, out {OC, OW, OH, N}).
struct ConvGeom {
  int64_t C, W, H, N, KW, KH, OC, OW, OH;
  int64_t stride_w, stride_h, pad_w, pad_h;
};
/// The im2col rows [np, C·KW·KH] of output pixels [p0, p0 + np) (pixel
/// index over N·OH·OW), (ky, kx, c) order, c fastest, zeros outside x.
void im2col(const float* x, const ConvGeom& g, int64_t p0, int64_t np, float* col);
/// conv2d by its definition, one thread per output value (any C; for shapes
/// the im2col + matmul path cannot take): weights f32 (w_f16 false) or f16;
/// bias nullptr or [OC].
void conv2d_direct(const float* x, const void* w, bool w_f16, const float* bias, const ConvGeom& g, float* y);

/// Attention without a mask (tensor/ops.h sdpa): q [N, n_q, H, D], k and v
/// [N, n_kv, H, D], addressed with element strides (head, token, image) per
/// tensor; out [N, n_q, H, D] contiguous. One warp per query row streams over
/// the keys with an online softmax. D <= 256, else kvad::Error.
struct AttnStrides {
  int64_t head, token, image;
};
void sdpa(const float* q, AttnStrides sq, const float* k, AttnStrides sk, const float* v, AttnStrides sv, int64_t N,
          int64_t n_q, int64_t n_kv, int64_t H, int64_t D, float scale, float* out);

}  // namespace kvad::cuda
