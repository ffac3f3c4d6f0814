// How the CUDA kernels read weight formats: in "units" of 32 consecutive
// elements of a row, a whole block of Q8_0/Q4_0, a 32-element sub-block of a
// Q4_K/Q6_K super-block, or 32 plain values (unit u covers elements
// [32u, 32u + 32) of the row). Fmt<T>::unit(row, u, w) writes them to w[32]
// as f32.
//
// This is the port of each format's to_float reference
// (kernels/cpu/quants_ref.cpp, kquants_ref.cpp; ggml's dequantize_row_*),
// with the same roundings: products rounded separately (mul_rn/sub_rn), so
// nvcc cannot contract `d·q - m` into one FMA. The header compiles for the
// device (nvcc, kernels.cu) and for the host (g++):
// tests/kernels/cuda/test_cuda_units.cpp checks every unit bit for bit
// against the CPU references on this machine, GPU or not.
// Block layouts: kernels/cpu/quant_blocks.h (ggml's, byte for byte).
#pragma once
#include <cstdint>

#include "kernels/cpu/quant_blocks.h"
#include "tensor/dtype.h"

#include "tensor/half.h"

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#define KVAD_HD __host__ __device__ __forceinline__
#else
#define KVAD_HD inline
#endif
#if defined(__CUDA_ARCH__)
#define KVAD_UNROLL _Pragma("unroll")
#else
#define KVAD_UNROLL
#endif

namespace kvad::cuda::fmt {

/// IEEE binary16 bit pattern → f32 (exact).
KVAD_HD float h2f(uint16_t h) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(h));
#else
  return kvad::f16_to_f32(h);
#endif
}

/// a·b and a - b, each rounded once (never fused).
KVAD_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
KVAD_HD float sub_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

template <DType T> struct Fmt;

template <> struct Fmt<DType::F32> {
  static KVAD_HD void unit(const uint8_t* row, int64_t u, float* w) {
#if defined(__CUDA_ARCH__)
    const float4* p = reinterpret_cast<const float4*>(row) + u * 8;  // rows are 128-byte multiples
KVAD_UNROLL
    for (int k = 0; k < 8; ++k) {
      const float4 v = p[k];
      w[4 * k] = v.x; w[4 * k + 1] = v.y; w[4 * k + 2] = v.z; w[4 * k + 3] = v.w;
    }
#else
    const float* p = reinterpret_cast<const float*>(row) + u * 32;
    for (int j = 0; j < 32; ++j) w[j] = p[j];
#endif
  }
};

template <> struct Fmt<DType::F16> {
  static KVAD_HD void unit(const uint8_t* row, int64_t u, float* w) {
#if defined(__CUDA_ARCH__)
    const __half2* p = reinterpret_cast<const __half2*>(row) + u * 16;
KVAD_UNROLL
    for (int k = 0; k < 16; ++k) {
      const float2 v = __half22float2(p[k]);
      w[2 * k] = v.x; w[2 * k + 1] = v.y;
    }
#else
    const uint16_t* p = reinterpret_cast<const uint16_t*>(row) + u * 32;
    for (int j = 0; j < 32; ++j) w[j] = kvad::f16_to_f32(p[j]);
#endif
  }
};

template <> struct Fmt<DType::BF16> {
  static KVAD_HD void unit(const uint8_t* row, int64_t u, float* w) {
#if defined(__CUDA_ARCH__)
    const __nv_bfloat162* p = reinterpret_cast<const __nv_bfloat162*>(row) + u * 16;
KVAD_UNROLL
    for (int k = 0; k < 16; ++k) {
      const float2 v = __bfloat1622float2(p[k]);
      w[2 * k] = v.x; w[2 * k + 1] = v.y;
    }
#else
    const uint16_t* p = reinterpret_cast<const uint16_t*>(row) + u * 32;
    for (int j = 0; j < 32; ++j) w[j] = kvad::bf16_to_f32(p[j]);
#endif
  }
};

// x[j] = d * q[j]
template <> struct Fmt<DType::Q8_0> {
  static KVAD_HD void unit(const uint8_t* row, int64_t u, float* w) {
    const cpu::block_q8_0& b = reinterpret_cast<const cpu::block_q8_0*>(row)[u];
    const float d = h2f(b.d);
KVAD_UNROLL
    for (int j = 0; j < 32; ++j) w[j] = mul_rn(static_cast<float>(b.qs[j]), d);
  }
};

// x[j] = d * (q[j] - 8); qs[j] & 0xF is element j, qs[j] >> 4 element j + 16.
template <> struct Fmt<DType::Q4_0> {
  static KVAD_HD void unit(const uint8_t* row, int64_t u, float* w) {
    const cpu::block_q4_0& b = reinterpret_cast<const cpu::block_q4_0*>(row)[u];
    const float d = h2f(b.d);
KVAD_UNROLL
    for (int j = 0; j < 16; ++j) {
      const uint8_t q = b.qs[j];
      w[j] = mul_rn(static_cast<float>((q & 0xF) - 8), d);
      w[j + 16] = mul_rn(static_cast<float>((q >> 4) - 8), d);
    }
  }
};

// Sub-block j (< 8) of a super-block: x = (d·sc)·q - dmin·m, q the nibble of
// qs[32·(j/2) + l] (low for even j, high for odd j); 6-bit sc, m as
// kquants_ref.cpp's scale_min_k4.
template <> struct Fmt<DType::Q4_K> {
  static KVAD_HD void unit(const uint8_t* row, int64_t u, float* w) {
    const cpu::block_q4_K& b = reinterpret_cast<const cpu::block_q4_K*>(row)[u >> 3];
    const int j = static_cast<int>(u & 7);
    int sc, m;
    if (j < 4) {
      sc = b.scales[j] & 63;
      m = b.scales[j + 4] & 63;
    } else {
      sc = (b.scales[j + 4] & 0xF) | ((b.scales[j - 4] >> 6) << 4);
      m = (b.scales[j + 4] >> 4) | ((b.scales[j] >> 6) << 4);
    }
    const float d1 = mul_rn(h2f(b.d), static_cast<float>(sc));
    const float m1 = mul_rn(h2f(b.dmin), static_cast<float>(m));
    const uint8_t* qs = b.qs + 32 * (j >> 1);
    const int shift = (j & 1) * 4;
KVAD_UNROLL
    for (int l = 0; l < 32; ++l) w[l] = sub_rn(mul_rn(d1, static_cast<float>((qs[l] >> shift) & 0xF)), m1);
  }
};

// Unit s32 (< 8) of a super-block covers e = 32·s32 + l = 128h + 32s + l:
// low 4 bits in nibble s>>1 of ql[64h + 32(s&1) + l], high 2 bits at bits
// 2s..2s+1 of qh[32h + l]; x = (d·scales[e/16])·(q - 32).
template <> struct Fmt<DType::Q6_K> {
  static KVAD_HD void unit(const uint8_t* row, int64_t u, float* w) {
    const cpu::block_q6_K& b = reinterpret_cast<const cpu::block_q6_K*>(row)[u >> 3];
    const int s32 = static_cast<int>(u & 7), h = s32 >> 2, s = s32 & 3;
    const float d = h2f(b.d);
    const float ds0 = mul_rn(d, static_cast<float>(b.scales[2 * s32]));
    const float ds1 = mul_rn(d, static_cast<float>(b.scales[2 * s32 + 1]));
    const uint8_t* ql = b.ql + 64 * h + 32 * (s & 1);
    const uint8_t* qh = b.qh + 32 * h;
    const int lshift = (s >> 1) * 4;
KVAD_UNROLL
    for (int l = 0; l < 32; ++l) {
      const int q = ((ql[l] >> lshift) & 0xF) | (((qh[l] >> (2 * s)) & 3) << 4);
      w[l] = mul_rn(l < 16 ? ds0 : ds1, static_cast<float>(q - 32));
    }
  }
};

}  // namespace kvad::cuda::fmt
