// The CPU (and sim) row's multi-head latent attention (tensor/ops.h
// attention_latent; shapes as documented there).
#pragma once

#include "tensor/backend.h"
#include "tensor/tensor.h"

namespace kvad::cpu {

/// One work item of attention_latent: nh <= 8 query heads of one token over
/// the m latent rows first .. first + m - 1 (row j at base + (j % slots)·D).
struct LatentBlock {
  const float* q[8];
  float* out[8];
  int nh = 0;
  const float* base = nullptr;
  int64_t slots = 0, first = 0, m = 0, D = 0, n_v = 0;
  float scale = 0;
  float* w = nullptr;  ///< nh·m scratch
};
void latent_block_ref(const LatentBlock& b);
void latent_block_avx2(const LatentBlock& b);  // mla_avx2.cpp; D and n_v multiples of 8
float dot_f32_avx2(const float* a, const float* b, int64_t n);
void axpy_f32_avx2(float s, const float* x, float* y, int64_t n);

void attention_latent(const Tensor& q, const Tensor& cache, const Tensor& seq, const Tensor& pos,
                      const AttentionOpParams& p, const Tensor& out);

void attention_seq(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pos, float scale,
                   const Tensor& out);

}  // namespace kvad::cpu
