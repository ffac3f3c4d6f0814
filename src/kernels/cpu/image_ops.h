// The CPU (and sim) row's image entries (tensor/ops.h "images"; images are
// {C, W, H, N}, channels contiguous): group_norm, upsample_nearest2d, pad,
// concat along a dimension, conv2d and attention without a cache (sdpa), and
// the per-pixel channel kernels group_norm runs, as a scalar reference and an
// AVX2 version (image_ops_avx2.cpp).
#pragma once
#include <cstdint>

#include "tensor/backend.h"
#include "tensor/tensor.h"

namespace kvad::cpu {

void group_norm(const Tensor& x, int64_t n_groups, const Tensor* w, const Tensor* b, float eps, const Tensor& o);
void upsample_nearest2d(const Tensor& x, int64_t factor, const Tensor& o);
void pad(const Tensor& x, const int64_t* lo, const Tensor& o);
void concat_dim(const Tensor& a, const Tensor& b, int dim, const Tensor& o);
void conv2d(const Tensor& x, const Tensor& w, const Tensor* bias, const Conv2dParams& p, const Tensor& o);  // conv2d.cpp

/// The channel kernels of group_norm over n_pix pixels of C channels
/// (x [n_pix, C]): channel_sums adds Σ_p (x[p, c] - shift[c]) to sum[c]
/// (squared when `square`; shift nullptr: 0), channel_affine writes
/// y[p, c] = x[p, c] · a[c] + b[c]. Each pixel's partial sums are added in
/// f32 in pixel order (the AVX2 version: the same order, 8 channels a lane).
struct ChannelKernels {
  void (*sums)(const float* x, int64_t n_pix, int64_t C, const float* shift, bool square, float* sum);
  void (*affine)(const float* x, int64_t n_pix, int64_t C, const float* a, const float* b, float* y);
};
const ChannelKernels& channel_kernels_ref();
const ChannelKernels& channel_kernels_avx2();  // image_ops_avx2.cpp
/// The AVX2 kernels when the CPU has them, else the references.
const ChannelKernels& channel_kernels();

}  // namespace kvad::cpu
