// The device kernels on activations behind kernels/cuda/device_kernels.h:
// norms, RoPE, element-wise and gated activations, softmax, concat, the f32
// gather, the f32 → 16-bit conversion, the KV cache store and attention. The
// math of each is its CPU reference's (kernels/cpu/host_kernels.cpp and the
// CPU row's entries: row_ops.cpp, elementwise.cpp, attention.cpp).
//
// #included once, at the end of kernels.cu (nvcc's only translation unit in
// kvad): it uses that file's helpers (warp_sum, blocks_for, capped_blocks,
// stream_for), which are in the same anonymous namespace.
//
// Status: compiles for sm_90 (nvcc 13.0); UNVERIFIED ON A GPU in this build.
#pragma once

namespace kvad::cuda {

namespace {

// ---- block reductions -----------------------------------------------------

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// The sum (block_sum) or max (block_max) of every thread's v over the block,
// returned to every thread. blockDim.x is a multiple of 32 (at most 1024), and
// every thread of the block must call it (it has barriers). Callable several
// times in one kernel: the first barrier keeps the previous call's readers of
// `part` from seeing this call's partials.
__device__ float block_sum(float v) {
  __shared__ float part[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) part[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x / 32) ? part[lane] : 0.0f;
  return warp_sum(v);
}

__device__ float block_max(float v) {
  __shared__ float part[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) part[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x / 32) ? part[lane] : -INFINITY;
  return warp_max(v);
}

constexpr int kRowThreads = 256;  // threads of the one-block-per-row kernels

// ---- norms and softmax (one block per row; f32 sums where the CPU sums in double)

// y = x / sqrt(mean(x²) + eps) · w (or · (1 + w)). y may alias x: each
// thread writes only the elements it read, after the block's sum.
__global__ void rms_norm_kernel(const float* x, const float* w, int64_t n, float eps, bool one_plus, float* y) {
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * n;
  float* yr = y + static_cast<int64_t>(blockIdx.x) * n;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) ss += xr[i] * xr[i];
  ss = block_sum(ss);
  const float scale = 1.0f / sqrtf(ss / static_cast<float>(n) + eps);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    float v = xr[i] * scale;
    if (w) v *= one_plus ? 1.0f + w[i] : w[i];
    yr[i] = v;
  }
}

// y = (x - mean) / sqrt(var + eps) · w + b (two passes: mean, then variance).
__global__ void layer_norm_kernel(const float* x, const float* w, const float* b, int64_t n, float eps, float* y) {
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * n;
  float* yr = y + static_cast<int64_t>(blockIdx.x) * n;
  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += xr[i];
  const float mean = block_sum(s) / static_cast<float>(n);
  float sq = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float d = xr[i] - mean;
    sq += d * d;
  }
  const float inv = 1.0f / sqrtf(block_sum(sq) / static_cast<float>(n) + eps);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    float v = (xr[i] - mean) * inv;
    if (w) v *= w[i];
    if (b) v += b[i];
    yr[i] = v;
  }
}

// y = exp(x - max) / Σ exp(x - max) per row.
__global__ void softmax_kernel(const float* x, int64_t n, float* y) {
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * n;
  float* yr = y + static_cast<int64_t>(blockIdx.x) * n;
  float m = -INFINITY;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) m = fmaxf(m, xr[i]);
  m = block_max(m);
  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float e = expf(xr[i] - m);
    yr[i] = e;
    s += e;
  }
  const float inv = 1.0f / block_sum(s);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] *= inv;
}

// ---- RoPE ----------------------------------------------------------------

// One thread per (token, head, j): j < n_rot/2 rotates pair j as cpu::rope
// does; j >= n_rot/2 copies dim n_rot + (j - n_rot/2), which partial rotary
// passes through. y may alias x (each thread reads the dims it writes).
__global__ void rope_kernel(const float* x, const int32_t* pos, int64_t n_tok, int64_t n_head, int64_t head_dim,
                            int64_t n_rot, float freq_base, float freq_scale, bool neox, const float* freq_factors,
                            float attn_factor, float* y) {
  const int64_t half = n_rot / 2, per_head = half + (head_dim - n_rot);
  const int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g >= n_tok * n_head * per_head) return;
  const int64_t j = g % per_head, h = (g / per_head) % n_head, t = g / (per_head * n_head);
  const int64_t base = (t * n_head + h) * head_dim;
  const float* v = x + base;
  float* o = y + base;
  if (j >= half) {
    const int64_t d = n_rot + (j - half);
    o[d] = v[d];
    return;
  }
  // The frequency the CPU's powf gives for the same float exponent: CUDA's
  // powf may be a few ulp off it, which at positions in the thousands moves
  // theta by ~1e-3 rad; pow in double, rounded once to float, is the
  // correctly rounded value (glibc's powf is within 0.82 ulp of it).
  const float e = -2.0f * static_cast<float>(j) / static_cast<float>(n_rot);
  const float freq = static_cast<float>(pow(static_cast<double>(freq_base), static_cast<double>(e)));
  const float p = static_cast<float>(pos[t]) * freq_scale;
  float theta = p * freq;
  if (freq_factors) theta /= freq_factors[j];
  const float c = cosf(theta) * attn_factor, s = sinf(theta) * attn_factor;
  const int64_t a = neox ? j : 2 * j, b = neox ? j + half : 2 * j + 1;
  const float x0 = v[a], x1 = v[b];
  o[a] = x0 * c - x1 * s;
  o[b] = x0 * s + x1 * c;
}

// ---- element-wise --------------------------------------------------------

__device__ __forceinline__ float gelu_tanh(float x) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  constexpr float kA = 0.044715f;
  return 0.5f * x * (1.0f + tanhf(kSqrt2OverPi * x * (1.0f + kA * x * x)));
}
__device__ __forceinline__ float silu_f(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float gelu_erf_f(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }

// f(x) of activation() (device_kernels.h Act), as the CPU row computes it.
__device__ __forceinline__ float act_f(Act f, float x) {
  switch (f) {
    case Act::SiLU: return silu_f(x);
    case Act::GELU_tanh: return gelu_tanh(x);
    case Act::GELU_erf: return gelu_erf_f(x);
    case Act::Sigmoid: return 1.0f / (1.0f + expf(-x));
    case Act::Softplus: return x > 20.0f ? x : log1pf(expf(x));
    case Act::Tanh: return tanhf(x);
    case Act::Sin: return sinf(x);
    case Act::Cos: return cosf(x);
    case Act::QuickGELU: return x / (1.0f + expf(-1.702f * x));
  }
  return x;
}

__global__ void activation_kernel(Act f, const float* x, int64_t n, float* out) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = act_f(f, x[i]);
}

// out[r·n + c] = f(gate[r·gs + c]) · up[r·us + c].
__global__ void glu_rows_kernel(Act f, const float* gate, int64_t gs, const float* up, int64_t us, int64_t n_rows,
                                int64_t n, float* out) {
  const int64_t total = n_rows * n;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / n, c = i % n;
    out[i] = act_f(f, gate[r * gs + c]) * up[r * us + c];
  }
}

enum class Ew { Add, Mul, Scale, SiLU, GELU, SwiGLU, GeGLU };

// out[i] = f(a[i], b[i] or b[i % nb], s) over n elements, grid-stride.
// kBcast: b is one row of nb values repeated over a's rows. out may alias a
// or b (each element is read, then written, by one thread).
template <Ew E, bool kBcast>
__global__ void elementwise_kernel(const float* a, const float* b, float s, int64_t n, int64_t nb, float* out) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float x = a[i];
    float r;
    if constexpr (E == Ew::Scale) {
      r = x * s;
    } else if constexpr (E == Ew::SiLU) {
      r = silu_f(x);
    } else if constexpr (E == Ew::GELU) {
      r = gelu_tanh(x);
    } else {
      const float y = kBcast ? b[i % nb] : b[i];
      if constexpr (E == Ew::Add) r = x + y;
      else if constexpr (E == Ew::Mul) r = x * y;
      else if constexpr (E == Ew::SwiGLU) r = silu_f(x) * y;
      else r = gelu_tanh(x) * y;
    }
    out[i] = r;
  }
}

template <Ew E, bool kBcast = false>
void launch_elementwise(const char* op, const float* a, const float* b, float s, int64_t n, int64_t nb, float* out) {
  if (n <= 0) return;
  Stream st = stream_for(op);
  elementwise_kernel<E, kBcast><<<capped_blocks(n, 256), 256, 0, st>>>(a, b, s, n, nb, out);
  Context::get().check(op);
}

template <Ew E>
void launch_binary(const char* op, const float* a, const float* b, int64_t n, int64_t nb, float* out) {
  if (n > 0 && (nb <= 0 || n % nb != 0))
    throw Error(std::string("cuda::") + op + ": " + std::to_string(n) + " elements are not whole rows of " +
                std::to_string(nb));
  if (nb == n) launch_elementwise<E, false>(op, a, b, 0.0f, n, nb, out);
  else launch_elementwise<E, true>(op, a, b, 0.0f, n, nb, out);
}

__global__ void f32_to_half_kernel(const float* x, uint16_t* y, int64_t n, bool bf16) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] = bf16 ? __bfloat16_as_ushort(__float2bfloat16_rn(x[i])) : __half_as_ushort(__float2half_rn(x[i]));
}

// ---- rows: concat, f32 gather ---------------------------------------------

// out row r = a row r (na values) followed by b row r (nb values).
__global__ void concat_kernel(const float* a, const float* b, int64_t n_rows, int64_t na, int64_t nb, float* out) {
  const int64_t w = na + nb, n = n_rows * w;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < n;
       g += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = g / w, c = g % w;
    out[g] = c < na ? a[r * na + c] : b[r * nb + (c - na)];
  }
}

// out row i = table row ids[i] (rows of n f32, any n); zeros for an id
// outside [0, n_rows).
__global__ void get_rows_f32_kernel(const float* table, int64_t n_rows, int64_t n, const int32_t* ids, int64_t n_ids,
                                    float* out) {
  const int64_t total = n_ids * n;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < total;
       g += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = g / n, c = g % n;
    const int64_t id = ids[i];
    out[g] = id >= 0 && id < n_rows ? table[id * n + c] : 0.0f;
  }
}

// ---- KV cache and attention -------------------------------------------------

// Row t of x goes to cache row seq[t]·slots + pos[t] % slots (f16, round to
// nearest even as cpu::f32_to_f16_row; or f32 as is). A token outside the
// cache (sequence not in [0, n_seq), negative position) is dropped: the host
// checks ids.
__device__ __forceinline__ void kv_put(uint16_t* c, float x) { *c = __half_as_ushort(__float2half_rn(x)); }
__device__ __forceinline__ void kv_put(float* c, float x) { *c = x; }
__device__ __forceinline__ float kv_get(const uint16_t* c) { return h2f(*c); }
__device__ __forceinline__ float kv_get(const float* c) { return *c; }

template <typename T>
__global__ void kv_write_kernel(const float* x, int64_t n_tok, int64_t kv_dim, const int32_t* seq,
                                const int32_t* pos, T* cache, int64_t slots, int64_t n_seq) {
  const int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g >= n_tok * kv_dim) return;
  const int64_t t = g / kv_dim, c = g % kv_dim;
  const int64_t s = seq[t], p = pos[t];
  if (s < 0 || s >= n_seq || p < 0) return;
  const size_t dst = static_cast<size_t>(s * slots + p % slots) * kv_dim + c;
  kv_put(cache + dst, x[g]);
}

constexpr int kAttnWarps = 4;

// One warp per (token, query head). Lane l holds dims l + 32j (j < NJ) of q
// and of the output accumulator; positions stream in order with an online
// softmax: m = running max, l = running sum of exp(s - m). Position p of the
// token's sequence is cache row seq·slots + p % slots (kv_write's ring; the
// same row as p itself when slots exceeds every position). A token outside
// the cache gets zeros. No barriers: a warp past n_head returns at once.
// TK, TV: the K and V caches' element types (uint16_t f16, float).
template <int NJ, typename TK, typename TV>
__global__ void attention_kernel(const float* __restrict__ q, const TK* __restrict__ k,
                                 const TV* __restrict__ v, const int32_t* __restrict__ seq,
                                 const int32_t* __restrict__ pos, int64_t n_head, int64_t n_head_kv,
                                 int64_t head_dim, int64_t slots, int64_t n_seq, float scale, int32_t window,
                                 float* __restrict__ out) {
  const int64_t t = blockIdx.x;
  const int64_t h = static_cast<int64_t>(blockIdx.y) * kAttnWarps + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (h >= n_head) return;
  const int64_t kvh = h / (n_head / n_head_kv);
  const int64_t kv_dim = n_head_kv * head_dim;
  const float* qh = q + (t * n_head + h) * head_dim;
  float* oh = out + (t * n_head + h) * head_dim;
  const int64_t s_id = seq[t], p_last = pos[t];
  if (s_id < 0 || s_id >= n_seq || p_last < 0) {
    for (int64_t d = lane; d < head_dim; d += 32) oh[d] = 0.0f;
    return;
  }
  float qr[NJ], acc[NJ];
#pragma unroll
  for (int j = 0; j < NJ; ++j) {
    const int64_t d = lane + 32 * j;
    qr[j] = d < head_dim ? qh[d] : 0.0f;
    acc[j] = 0.0f;
  }
  const int64_t first = window > 0 ? max(static_cast<int64_t>(0), p_last - window + 1) : 0;
  const size_t base = static_cast<size_t>(s_id) * slots * kv_dim + kvh * head_dim;
  int64_t slot = first % slots;
  float m = -INFINITY, l = 0.0f;
  for (int64_t p = first; p <= p_last; ++p) {
    const TK* kr = k + base + slot * kv_dim;
    const TV* vr = v + base + slot * kv_dim;
    if (++slot == slots) slot = 0;
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
      const int64_t d = lane + 32 * j;
      if (d < head_dim) s += qr[j] * kv_get(kr + d);
    }
    s = warp_sum(s) * scale;
    const float m_new = fmaxf(m, s);
    const float corr = expf(m - m_new);
    const float e = expf(s - m_new);
    l = l * corr + e;
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
      const int64_t d = lane + 32 * j;
      if (d < head_dim) acc[j] = acc[j] * corr + e * kv_get(vr + d);
    }
    m = m_new;
  }
  const float inv = 1.0f / l;
#pragma unroll
  for (int j = 0; j < NJ; ++j) {
    const int64_t d = lane + 32 * j;
    if (d < head_dim) oh[d] = acc[j] * inv;
  }
}

// A grid of one block per row, for the row kernels (gridDim.x < 2^31).
unsigned row_blocks(int64_t n_rows, const char* op) {
  if (n_rows >= (int64_t{1} << 31))
    throw Error(std::string("cuda::") + op + ": " + std::to_string(n_rows) + " rows is more than 2^31 - 1");
  return static_cast<unsigned>(n_rows);
}

}  // namespace

// ---- host side (device_kernels.h) ------------------------------------------

void rms_norm(const float* x, const float* w, int64_t n_rows, int64_t n, float eps, float* y, bool one_plus) {
  if (n_rows <= 0 || n <= 0) return;
  const unsigned grid = row_blocks(n_rows, "rms_norm");
  Stream st = stream_for("rms_norm");
  rms_norm_kernel<<<grid, kRowThreads, 0, st>>>(x, w, n, eps, one_plus, y);
  Context::get().check("rms_norm");
}

void layer_norm(const float* x, const float* w, const float* b, int64_t n_rows, int64_t n, float eps, float* y) {
  if (n_rows <= 0 || n <= 0) return;
  const unsigned grid = row_blocks(n_rows, "layer_norm");
  Stream st = stream_for("layer_norm");
  layer_norm_kernel<<<grid, kRowThreads, 0, st>>>(x, w, b, n, eps, y);
  Context::get().check("layer_norm");
}

void softmax(const float* x, int64_t n_rows, int64_t n, float* y) {
  if (n_rows <= 0 || n <= 0) return;
  const unsigned grid = row_blocks(n_rows, "softmax");
  Stream st = stream_for("softmax");
  softmax_kernel<<<grid, kRowThreads, 0, st>>>(x, n, y);
  Context::get().check("softmax");
}

void rope(const float* x, const int32_t* pos, int64_t n_tok, int64_t n_head, int64_t head_dim, int64_t n_rot,
          float freq_base, float freq_scale, bool neox, float* y, const float* freq_factors, float attn_factor) {
  if (n_rot <= 0 || n_rot % 2 != 0 || n_rot > head_dim)
    throw Error("cuda::rope: n_rot " + std::to_string(n_rot) + " does not fit head_dim " + std::to_string(head_dim));
  const int64_t n = n_tok * n_head * (n_rot / 2 + (head_dim - n_rot));
  if (n <= 0) return;
  Stream st = stream_for("rope");
  rope_kernel<<<blocks_for(n, 256), 256, 0, st>>>(x, pos, n_tok, n_head, head_dim, n_rot, freq_base, freq_scale,
                                                  neox, freq_factors, attn_factor, y);
  Context::get().check("rope");
}

void rope(float* x, const int32_t* pos, int64_t n_tok, int64_t n_head, int64_t head_dim, int64_t n_rot,
          float freq_base, float freq_scale, bool neox) {
  rope(x, pos, n_tok, n_head, head_dim, n_rot, freq_base, freq_scale, neox, x);
}

void add(const float* a, const float* b, int64_t n, int64_t nb, float* out) {
  launch_binary<Ew::Add>("add", a, b, n, nb, out);
}
void mul(const float* a, const float* b, int64_t n, int64_t nb, float* out) {
  launch_binary<Ew::Mul>("mul", a, b, n, nb, out);
}
void scale(const float* x, float s, int64_t n, float* out) {
  launch_elementwise<Ew::Scale>("scale", x, nullptr, s, n, n, out);
}
void silu(const float* x, int64_t n, float* out) { launch_elementwise<Ew::SiLU>("silu", x, nullptr, 0.0f, n, n, out); }
void gelu(const float* x, int64_t n, float* out) { launch_elementwise<Ew::GELU>("gelu", x, nullptr, 0.0f, n, n, out); }
void swiglu(const float* gate, const float* up, int64_t n, float* out) {
  launch_elementwise<Ew::SwiGLU>("swiglu", gate, up, 0.0f, n, n, out);
}
void geglu(const float* gate, const float* up, int64_t n, float* out) {
  launch_elementwise<Ew::GeGLU>("geglu", gate, up, 0.0f, n, n, out);
}
void activation(Act f, const float* x, int64_t n, float* out) {
  if (n <= 0) return;
  Stream st = stream_for("activation");
  activation_kernel<<<capped_blocks(n, 256), 256, 0, st>>>(f, x, n, out);
  Context::get().check("activation");
}

void glu_rows(Act f, const float* gate, int64_t gate_stride, const float* up, int64_t up_stride, int64_t n_rows,
              int64_t n, float* out) {
  if (f != Act::SiLU && f != Act::GELU_tanh && f != Act::GELU_erf)
    throw Error("cuda::glu_rows: no gated form of this activation");
  if (n_rows <= 0 || n <= 0) return;
  Stream st = stream_for("glu");
  glu_rows_kernel<<<capped_blocks(n_rows * n, 256), 256, 0, st>>>(f, gate, gate_stride, up, up_stride, n_rows, n, out);
  Context::get().check("glu");
}

void swiglu(float* gate, const float* up, int64_t n) { swiglu(gate, up, n, gate); }
void geglu(float* gate, const float* up, int64_t n) { geglu(gate, up, n, gate); }
void add(float* x, const float* y, int64_t n) { add(x, y, n, n, x); }
void scale(float* x, float s, int64_t n) { scale(x, s, n, x); }

void f32_to_half(const float* x, uint16_t* y, int64_t n, bool bf16) {
  if (n <= 0) return;
  Stream st = stream_for("f32_to_half");
  f32_to_half_kernel<<<capped_blocks(n, 256), 256, 0, st>>>(x, y, n, bf16);
  Context::get().check("f32_to_half");
}

void concat(const float* a, const float* b, int64_t n_rows, int64_t na, int64_t nb, float* out) {
  const int64_t n = n_rows * (na + nb);
  if (n <= 0) return;
  Stream st = stream_for("concat");
  concat_kernel<<<capped_blocks(n, 256), 256, 0, st>>>(a, b, n_rows, na, nb, out);
  Context::get().check("concat");
}

void get_rows_f32(const float* table, int64_t n_rows, int64_t n, const int32_t* ids, int64_t n_ids, float* out) {
  const int64_t total = n_ids * n;
  if (total <= 0) return;
  Stream st = stream_for("get_rows (f32)");
  get_rows_f32_kernel<<<capped_blocks(total, 256), 256, 0, st>>>(table, n_rows, n, ids, n_ids, out);
  Context::get().check("get_rows (f32)");
}

namespace {

template <typename T>
void kv_write_t(const float* x, int64_t n_tok, int64_t kv_dim, const int32_t* seq, const int32_t* pos, T* cache,
                int64_t slots, int64_t n_seq) {
  const int64_t n = n_tok * kv_dim;
  if (n <= 0) return;
  if (slots <= 0) throw Error("cuda::kv_write: slots " + std::to_string(slots) + " is not positive");
  Stream st = stream_for("kv_write");
  kv_write_kernel<T><<<blocks_for(n, 256), 256, 0, st>>>(x, n_tok, kv_dim, seq, pos, cache, slots, n_seq);
  Context::get().check("kv_write");
}

template <typename TK, typename TV>
void attention_t(const float* q, const TK* k, const TV* v, const int32_t* seq, const int32_t* pos, int64_t n_tok,
                 int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t slots, int64_t n_seq, float scale,
                 int32_t window, float* out) {
  Stream st = stream_for("attention");
  const dim3 grid(static_cast<unsigned>(n_tok), blocks_for(n_head, kAttnWarps));
  const int threads = 32 * kAttnWarps;
  if (head_dim <= 64)
    attention_kernel<2, TK, TV><<<grid, threads, 0, st>>>(q, k, v, seq, pos, n_head, n_head_kv, head_dim, slots,
                                                          n_seq, scale, window, out);
  else if (head_dim <= 128)
    attention_kernel<4, TK, TV><<<grid, threads, 0, st>>>(q, k, v, seq, pos, n_head, n_head_kv, head_dim, slots,
                                                          n_seq, scale, window, out);
  else
    attention_kernel<8, TK, TV><<<grid, threads, 0, st>>>(q, k, v, seq, pos, n_head, n_head_kv, head_dim, slots,
                                                          n_seq, scale, window, out);
  Context::get().check("attention");
}

}  // namespace

void kv_write(const float* x, int64_t n_tok, int64_t kv_dim, const int32_t* seq, const int32_t* pos,
              uint16_t* cache, int64_t slots, int64_t n_seq) {
  kv_write_t(x, n_tok, kv_dim, seq, pos, cache, slots, n_seq);
}

void kv_write(const float* x, int64_t n_tok, int64_t kv_dim, const int32_t* seq, const int32_t* pos,
              float* cache, int64_t slots, int64_t n_seq) {
  kv_write_t(x, n_tok, kv_dim, seq, pos, cache, slots, n_seq);
}

void attention(const float* q, const void* k, bool k_f32, const void* v, bool v_f32, const int32_t* seq,
               const int32_t* pos, int64_t n_tok, int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t slots,
               int64_t n_seq, float scale, int32_t window, float* out) {
  if (n_tok <= 0) return;
  if (head_dim > 256 || head_dim <= 0 || n_head_kv <= 0 || n_head % n_head_kv != 0 || slots <= 0)
    throw Error("cuda::attention: head_dim " + std::to_string(head_dim) + " (max 256), n_head " +
                std::to_string(n_head) + ", n_head_kv " + std::to_string(n_head_kv) + ", slots " +
                std::to_string(slots) + " not supported");
  if (n_tok >= (int64_t{1} << 31)) throw Error("cuda::attention: too many tokens in one call");
  const auto* kh = static_cast<const uint16_t*>(k);
  const auto* vh = static_cast<const uint16_t*>(v);
  const auto* kf = static_cast<const float*>(k);
  const auto* vf = static_cast<const float*>(v);
  if (!k_f32 && !v_f32)
    attention_t(q, kh, vh, seq, pos, n_tok, n_head, n_head_kv, head_dim, slots, n_seq, scale, window, out);
  else if (k_f32 && v_f32)
    attention_t(q, kf, vf, seq, pos, n_tok, n_head, n_head_kv, head_dim, slots, n_seq, scale, window, out);
  else if (k_f32)
    attention_t(q, kf, vh, seq, pos, n_tok, n_head, n_head_kv, head_dim, slots, n_seq, scale, window, out);
  else
    attention_t(q, kh, vf, seq, pos, n_tok, n_head, n_head_kv, head_dim, slots, n_seq, scale, window, out);
}

void attention(const float* q, const uint16_t* k, const uint16_t* v, const int32_t* seq, const int32_t* pos,
               int64_t n_tok, int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t slots, int64_t n_seq,
               float scale, int32_t window, float* out) {
  attention(q, k, false, v, false, seq, pos, n_tok, n_head, n_head_kv, head_dim, slots, n_seq, scale, window, out);
}

}  // namespace kvad::cuda
