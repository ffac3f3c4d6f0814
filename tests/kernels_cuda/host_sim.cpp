// A host simulation of the CUDA provider's and ops' API (kernels/cuda/
// context.h, ops.h) for test_cuda_decoder_hostsim: "device" memory is host
// memory and each op is a plain loop that follows its kernel's arithmetic
// (the same units.h format readers; f32 GEMV accumulation for n_tok <= 8,
// bf16-rounded operands for the GEMM path; an online softmax in attention).
// Linked instead of kvad_kernels_cuda, it lets the GPU model's orchestration
// (model/cuda_decoder.cpp: buffers, strides, ids, the order of ops, format
// conversion at load) run and be checked against the CPU model on a machine
// without a GPU. It says nothing about the kernels themselves (test_cuda_ops
// does, on a GPU).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/error.h"
#include "kernels/cuda/context.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/units.h"
#include "tensor/half.h"

namespace kvad::cuda {

bool available(std::string* why) { return true; }

Context& Context::get() {
  static Context* c = new Context();
  return *c;
}
Context::Context() { name_ = "host simulation"; }
Context::~Context() = default;
void Context::check(const char*) {}
void Context::sync(const char*) {}
void* Context::scratch(int i, size_t bytes) {
  if (bytes > scratch_bytes_[i]) {
    std::free(scratch_[i]);
    scratch_[i] = std::malloc(bytes);
    scratch_bytes_[i] = bytes;
  }
  return scratch_[i];
}
void check_status(int status, const char* what) {
  if (status != 0) throw Error(std::string("sim: ") + what);
}

DeviceBuffer::DeviceBuffer(size_t bytes, const char* what) { reserve(bytes, what); }
DeviceBuffer::~DeviceBuffer() { std::free(p_); }
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    std::free(p_);
    p_ = o.p_;
    n_ = o.n_;
    o.p_ = nullptr;
    o.n_ = 0;
  }
  return *this;
}
void DeviceBuffer::reserve(size_t bytes, const char*) {
  if (bytes <= n_ && p_) return;
  std::free(p_);
  p_ = nullptr;
  n_ = 0;
  if (bytes == 0) return;
  p_ = std::malloc(bytes);
  // Poison: a read of something never written shows as NaN in the results.
  std::memset(p_, 0xff, bytes);
  n_ = bytes;
}

void copy_to_device(void* dst, const void* src, size_t bytes, const char*) { std::memcpy(dst, src, bytes); }
void copy_to_host(void* dst, const void* src, size_t bytes, const char*) { std::memcpy(dst, src, bytes); }
void copy_to_device_async(void* dst, const void* src, size_t bytes, const char*) { std::memcpy(dst, src, bytes); }

bool has_kernels(DType t) {
  switch (t) {
    case DType::F32: case DType::F16: case DType::BF16: case DType::Q8_0: case DType::Q4_0:
    case DType::Q4_K: case DType::Q6_K:
      return true;
    default:
      return false;
  }
}

namespace {

void unit(const DeviceMatrix& w, int64_t r, int64_t u, float* out) {
  const uint8_t* row = static_cast<const uint8_t*>(w.data) + static_cast<size_t>(r) * row_bytes(w.type, w.n_in);
  switch (w.type) {
    case DType::F32: fmt::Fmt<DType::F32>::unit(row, u, out); return;
    case DType::F16: fmt::Fmt<DType::F16>::unit(row, u, out); return;
    case DType::BF16: fmt::Fmt<DType::BF16>::unit(row, u, out); return;
    case DType::Q8_0: fmt::Fmt<DType::Q8_0>::unit(row, u, out); return;
    case DType::Q4_0: fmt::Fmt<DType::Q4_0>::unit(row, u, out); return;
    case DType::Q4_K: fmt::Fmt<DType::Q4_K>::unit(row, u, out); return;
    case DType::Q6_K: fmt::Fmt<DType::Q6_K>::unit(row, u, out); return;
    default: throw Error(std::string("sim: no kernels for ") + dtype_name(w.type));
  }
}

float round16(float v, bool bf16) { return bf16 ? bf16_to_f32(f32_to_bf16(v)) : f16_to_f32(f32_to_f16(v)); }

}  // namespace

// Both prefill paths (GemmPath Mma and Cublas) use bf16-rounded W and x with
// f32 accumulation; only the summation order differs, so one loop stands for both.
void matmul(const DeviceMatrix& w, const float* x, int64_t n_tok, float* y, GemmPath) {
  const bool gemm = n_tok > 8, bf16 = w.type != DType::F16;
  const bool round = gemm && w.type != DType::F32;
  std::vector<float> row(w.n_in);
  for (int64_t o = 0; o < w.n_out; ++o) {
    for (int64_t u = 0; u < w.n_in / 32; ++u) unit(w, o, u, &row[u * 32]);
    if (round)
      for (float& v : row) v = round16(v, bf16);
    for (int64_t t = 0; t < n_tok; ++t) {
      float s = 0;
      for (int64_t i = 0; i < w.n_in; ++i) s += row[i] * (round ? round16(x[t * w.n_in + i], bf16) : x[t * w.n_in + i]);
      y[t * w.n_out + o] = s;
    }
  }
}

void get_rows(const DeviceMatrix& w, const int32_t* ids, int64_t n_ids, float* out) {
  for (int64_t i = 0; i < n_ids; ++i)
    for (int64_t u = 0; u < w.n_in / 32; ++u) {
      if (ids[i] < 0 || ids[i] >= w.n_out) std::fill(out + i * w.n_in + u * 32, out + i * w.n_in + u * 32 + 32, 0.0f);
      else unit(w, ids[i], u, out + i * w.n_in + u * 32);
    }
}

void dequantize(const DeviceMatrix& w, uint16_t* dst, bool bf16) {
  float tmp[32];
  for (int64_t r = 0; r < w.n_out; ++r)
    for (int64_t u = 0; u < w.n_in / 32; ++u) {
      unit(w, r, u, tmp);
      for (int j = 0; j < 32; ++j) dst[r * w.n_in + u * 32 + j] = bf16 ? f32_to_bf16(tmp[j]) : f32_to_f16(tmp[j]);
    }
}

void rms_norm(const float* x, const float* w, int64_t n_rows, int64_t n, float eps, float* y) {
  for (int64_t r = 0; r < n_rows; ++r) {
    float ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += x[r * n + i] * x[r * n + i];
    const float scale = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
    for (int64_t i = 0; i < n; ++i) y[r * n + i] = w ? x[r * n + i] * scale * w[i] : x[r * n + i] * scale;
  }
}

void rope(float* x, const int32_t* pos, int64_t n_tok, int64_t n_head, int64_t head_dim, int64_t n_rot,
          float freq_base, float freq_scale, bool neox) {
  const int64_t half = n_rot / 2;
  for (int64_t t = 0; t < n_tok; ++t)
    for (int64_t h = 0; h < n_head; ++h)
      for (int64_t i = 0; i < half; ++i) {
        const float p = static_cast<float>(pos[t]) * freq_scale;
        const float theta = p * std::pow(freq_base, -2.0f * static_cast<float>(i) / static_cast<float>(n_rot));
        const float c = std::cos(theta), s = std::sin(theta);
        float* v = x + (t * n_head + h) * head_dim;
        const int64_t a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
        const float x0 = v[a], x1 = v[b];
        v[a] = x0 * c - x1 * s;
        v[b] = x0 * s + x1 * c;
      }
}

void swiglu(float* g, const float* u, int64_t n) {
  for (int64_t i = 0; i < n; ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}
void geglu(float* g, const float* u, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float x = g[i];
    g[i] = 0.5f * x * (1.0f + std::tanh(0.7978845608028654f * x * (1.0f + 0.044715f * x * x))) * u[i];
  }
}
void add(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}
void scale(float* x, float s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}
void f32_to_half(const float* x, uint16_t* y, int64_t n, bool bf16) {
  for (int64_t i = 0; i < n; ++i) y[i] = bf16 ? f32_to_bf16(x[i]) : f32_to_f16(x[i]);
}

void kv_write(const float* x, int64_t n_tok, int64_t kv_dim, const int32_t* seq, const int32_t* pos,
              uint16_t* cache, int64_t n_ctx) {
  for (int64_t t = 0; t < n_tok; ++t)
    for (int64_t c = 0; c < kv_dim; ++c)
      cache[(static_cast<size_t>(seq[t]) * n_ctx + pos[t]) * kv_dim + c] = f32_to_f16(x[t * kv_dim + c]);
}

void attention(const float* q, const uint16_t* k, const uint16_t* v, const int32_t* seq, const int32_t* pos,
               int64_t n_tok, int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t n_ctx, float scale,
               int32_t window, float* out) {
  const int64_t kv_dim = n_head_kv * head_dim;
  std::vector<float> acc(head_dim);
  for (int64_t t = 0; t < n_tok; ++t)
    for (int64_t h = 0; h < n_head; ++h) {
      const int64_t kvh = h / (n_head / n_head_kv);
      const float* qh = q + (t * n_head + h) * head_dim;
      const int64_t first = window > 0 ? std::max<int64_t>(0, pos[t] - window + 1) : 0;
      const size_t base = static_cast<size_t>(seq[t]) * n_ctx * kv_dim + kvh * head_dim;
      float m = -INFINITY, l = 0;
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t p = first; p <= pos[t]; ++p) {
        float s = 0;
        for (int64_t d = 0; d < head_dim; ++d) s += qh[d] * f16_to_f32(k[base + p * kv_dim + d]);
        s *= scale;
        const float m_new = std::max(m, s), corr = std::exp(m - m_new), e = std::exp(s - m_new);
        l = l * corr + e;
        for (int64_t d = 0; d < head_dim; ++d) acc[d] = acc[d] * corr + e * f16_to_f32(v[base + p * kv_dim + d]);
        m = m_new;
      }
      for (int64_t d = 0; d < head_dim; ++d) out[(t * n_head + h) * head_dim + d] = acc[d] / l;
    }
}

}  // namespace kvad::cuda
