// Eager device ops (DESIGN.md seam 3). Every pointer here is a DEVICE
// pointer; every op is submitted to Context::get().compute() and returns at
// once (the host does not wait). Work on the compute stream runs in order,
// so an op may read what the previous one wrote with no host round trip.
// Launch errors throw kvad::Error naming the op; faults found later name the
// last op submitted (context.h).
//
// The math of each op is the CPU reference's (kernels/cpu/host_kernels.h, the format
// kernels in kernels/cpu/quants_ref.cpp and kquants_ref.cpp, which port
// ggml's); tests/kernels/cuda/test_cuda_ops.cpp compares them.
// Status: compiles for sm_90; UNVERIFIED ON A GPU in this build.
//
// Shapes in ggml order: [n_tok, n] is n_tok rows of n contiguous values.
// Alignment: activation pointers (x, y, out) must be 16-byte aligned and
// weight matrices 128-byte aligned (the kernels use vector loads); buffers
// from cudaMalloc / DeviceBuffer are (256 bytes), and so is every row of a
// matrix with n_in % 32 == 0.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "base/error.h"
#include "tensor/dtype.h"

namespace kvad::cuda {

/// True for the weight formats the device kernels read directly:
/// f32, f16, bf16, q8_0, q4_0, q4_K, q6_K.
bool has_kernels(DType t);

/// The quantized formats gemm_mma reads (q8_0, q4_0, q4_K, q6_K).
inline bool gemm_mma_format(DType t) {
  return t == DType::Q8_0 || t == DType::Q4_0 || t == DType::Q4_K || t == DType::Q6_K;
}

/// matmul uses the GEMV kernel up to this many tokens, a GEMM above.
inline constexpr int kGemvMaxTokens = 8;

/// A weight matrix resident in device memory: n_out rows of n_in elements in
/// `type`'s block layout (byte-identical to the GGUF/ggml layout).
/// n_in % block_elems(type) == 0 and n_in % 32 == 0.
struct DeviceMatrix {
  DType type = DType::F32;
  int64_t n_in = 0, n_out = 0;
  const void* data = nullptr;
};

/// The prefill (n_tok > 8) path for quantized weights (q8_0, q4_0, q4_K, q6_K).
///  - Mma: gemm_mma below (tiles dequantized into shared memory, tensor-core
///    MMA, split-K). The default. UNVERIFIED ON A GPU in this build.
///  - Cublas: the whole matrix dequantized to bf16 in a scratch buffer, then
///    cublasGemmEx.
///  - Auto: what KVAD_CUDA_GEMM says (gemm_path_from_env).
/// Dense weights (f32, f16, bf16) always go through cuBLAS.
enum class GemmPath { Auto, Mma, Cublas };

/// Parses KVAD_CUDA_GEMM: unset or empty → Mma; "mma" → Mma; "cublas" → Cublas;
/// anything else throws kvad::Error naming the variable and the choices.
inline GemmPath parse_gemm_path(const char* v) {
  if (!v || !*v || std::strcmp(v, "mma") == 0) return GemmPath::Mma;
  if (std::strcmp(v, "cublas") == 0) return GemmPath::Cublas;
  std::string msg = "KVAD_CUDA_GEMM='";
  msg += v;
  msg += "' is not one of mma, cublas";
  throw Error(msg);
}
inline GemmPath gemm_path_from_env() { return parse_gemm_path(std::getenv("KVAD_CUDA_GEMM")); }

/// y = x · Wᵀ. x: [n_tok, n_in] f32; y: [n_tok, n_out] f32 (must not alias x).
/// n_tok <= 8: a GEMV kernel reads W's blocks directly (one warp per output
/// row, f32 accumulation). Larger n_tok, quantized W with path Mma (the
/// default): x is converted to bf16 and gemm_mma multiplies. Otherwise W is
/// dequantized to bf16 (f16 and bf16 weights are used as stored, f32 as f32),
/// x converted to the same 16-bit type, and cuBLAS cublasGemmEx multiplies
/// with f32 accumulation (CUBLAS_COMPUTE_32F). Throws kvad::Error for a
/// format without kernels.
void matmul(const DeviceMatrix& w, const float* x, int64_t n_tok, float* y, GemmPath path = GemmPath::Auto);

/// y = x · Wᵀ for a quantized W (q8_0, q4_0, q4_K, q6_K; throws for another
/// format) and bf16 activations x: [n_tok, n_in] (16-byte aligned); y:
/// [n_tok, n_out] f32. Blocks of 128 threads compute 64 tokens × 64 output
/// rows: each step dequantizes a 64-row × 64-column tile of W (units.h) to
/// bf16 in shared memory, loads the matching x tile, and four warps multiply
/// with tensor-core MMA (nvcuda::wmma, bf16 × bf16 → f32 accumulators).
/// split_k: 0 picks it: when the grid of tiles is smaller than the number of
/// multiprocessors, K is split over ceil(SMs / tiles) slices (at least two
/// 64-column steps each); 1 never splits; n > 1 splits n ways (at most one
/// slice per 64-column step). Split slices write f32 partial sums to a
/// scratch buffer and a second kernel adds them in slice order (deterministic).
/// n_in % 32 == 0 (and a whole number of the format's blocks); n_out, n_tok any.
/// UNVERIFIED ON A GPU in this build.
void gemm_mma(const DeviceMatrix& w, const uint16_t* x, int64_t n_tok, float* y, int split_k = 0);

/// gemm_mma's block tile: output rows (of W) × tokens × K step.
inline constexpr int kMmaTileN = 64, kMmaTileM = 64, kMmaTileK = 64;

/// The number of K slices gemm_mma uses for this shape (split_k as above) on a
/// device with `n_sm` multiprocessors. Host logic, shared with the tests.
inline int gemm_mma_splits(int64_t n_in, int64_t n_out, int64_t n_tok, int n_sm, int split_k = 0) {
  const int64_t k_steps = (n_in + kMmaTileK - 1) / kMmaTileK;
  int64_t s = split_k;
  if (s <= 0) {
    const int64_t tiles = ((n_out + kMmaTileN - 1) / kMmaTileN) * ((n_tok + kMmaTileM - 1) / kMmaTileM);
    s = tiles <= 0 || tiles >= n_sm ? 1 : std::min<int64_t>((n_sm + tiles - 1) / tiles, k_steps / 2);
  }
  return static_cast<int>(std::clamp<int64_t>(s, 1, std::max<int64_t>(k_steps, 1)));
}

/// out[i] = row ids[i] of table W converted to f32. ids: [n_ids] int32
/// (device); out: [n_ids, n_in]. Ids outside [0, n_out) give rows of zeros
/// (the host checks ids before upload: cuda::check_ids).
void get_rows(const DeviceMatrix& w, const int32_t* ids, int64_t n_ids, float* out);

/// Dequantizes all of W into dst: [n_out, n_in] 16-bit (bf16 when `bf16`, else f16).
void dequantize(const DeviceMatrix& w, uint16_t* dst, bool bf16);

/// y = x / sqrt(mean(x²) + eps) ⊙ w per row (RMSNorm, Zhang & Sennrich 2019;
/// cpu::rms_norm), or ⊙ (1 + w) when one_plus (HF Gemma). x, y: [n_rows, n]
/// f32 (y may alias x); w: [n] f32 or nullptr. f32 sum of squares (the CPU
/// sums in double). Throws kvad::Error for more than 2^31 - 1 rows.
void rms_norm(const float* x, const float* w, int64_t n_rows, int64_t n, float eps, float* y, bool one_plus = false);

/// LayerNorm per row (Ba et al. 2016; the CPU row's layer_norm):
/// y = (x - mean) / sqrt(var + eps) ⊙ w + b, biased variance, two passes.
/// x, y: [n_rows, n] f32; w, b: [n] f32 or nullptr.
void layer_norm(const float* x, const float* w, const float* b, int64_t n_rows, int64_t n, float eps, float* y);

/// Softmax of each row, max-subtracted (cpu::softmax). x, y: [n_rows, n] f32
/// (y may alias x).
void softmax(const float* x, int64_t n_rows, int64_t n, float* y);

/// RoPE (Su et al. 2021) as cpu::rope, for n_tok tokens: x, y:
/// [n_tok, n_head, head_dim] f32 (y may alias x), pos: [n_tok] int32
/// positions. Pair i < n_rot/2 rotates by pos·freq_scale·freq_base^(-2i/n_rot);
/// neox pairs (i, i + n_rot/2), else (2i, 2i+1); dims from n_rot on are copied
/// (partial rotary); freq_factors (nullptr or [n_rot/2] on the device)
/// divides pair i's angle and attn_factor multiplies cos and sin (RopeParams).
/// Throws kvad::Error unless 0 < n_rot <= head_dim, n_rot even.
void rope(const float* x, const int32_t* pos, int64_t n_tok, int64_t n_head, int64_t head_dim, int64_t n_rot,
          float freq_base, float freq_scale, bool neox, float* y, const float* freq_factors = nullptr,
          float attn_factor = 1.0f);
/// The same in place.
void rope(float* x, const int32_t* pos, int64_t n_tok, int64_t n_head, int64_t head_dim, int64_t n_rot,
          float freq_base, float freq_scale, bool neox);

/// out = a + b and out = a ⊙ b over n elements: b has a's n elements (nb == n)
/// or is one row of nb values repeated over a's rows (n % nb == 0, else
/// kvad::Error). out may alias a.
void add(const float* a, const float* b, int64_t n, int64_t nb, float* out);
void mul(const float* a, const float* b, int64_t n, int64_t nb, float* out);
/// out = x · s, n elements (out may alias x).
void scale(const float* x, float s, int64_t n, float* out);
/// out = x·σ(x) (SiLU) and out = tanh-GELU(x) (as cpu::gelu), n elements.
void silu(const float* x, int64_t n, float* out);
void gelu(const float* x, int64_t n, float* out);
/// out = silu(gate) ⊙ up (SwiGLU) and gelu_tanh(gate) ⊙ up (GeGLU), Shazeer
/// 2020, n elements (out may alias gate).
void swiglu(const float* gate, const float* up, int64_t n, float* out);
void geglu(const float* gate, const float* up, int64_t n, float* out);
/// The element-wise functions of `activation` and `glu_rows` (tensor/backend.h
/// Unary, whose CPU definitions are kernels/cpu/elementwise.cpp and vec.cpp).
enum class Act : uint8_t { SiLU, GELU_tanh, GELU_erf, Sigmoid, Softplus, Tanh, Sin, Cos, QuickGELU };
/// out = f(x) over n elements (out may alias x).
void activation(Act f, const float* x, int64_t n, float* out);
/// out row r = f(gate row r) ⊙ up row r, n_rows rows of n values: gate row r
/// at gate + r·gate_stride, up row r at up + r·up_stride (strides in
/// elements: the halves of one [n_rows, 2n] tensor have stride 2n), out
/// contiguous [n_rows, n]. f: SiLU, GELU_tanh or GELU_erf (else kvad::Error).
void glu_rows(Act f, const float* gate, int64_t gate_stride, const float* up, int64_t up_stride, int64_t n_rows,
              int64_t n, float* out);
/// In-place forms: gate = swiglu(gate, up), gate = geglu(gate, up), x += y, x *= s.
void swiglu(float* gate, const float* up, int64_t n);
void geglu(float* gate, const float* up, int64_t n);
void add(float* x, const float* y, int64_t n);
void scale(float* x, float s, int64_t n);
/// f32 → f16 (bf16 when `bf16`), round to nearest even, n elements.
void f32_to_half(const float* x, uint16_t* y, int64_t n, bool bf16);

/// Rows joined: a: [n_rows, na], b: [n_rows, nb] → out: [n_rows, na + nb], f32.
void concat(const float* a, const float* b, int64_t n_rows, int64_t na, int64_t nb, float* out);

/// out[i] = row ids[i] of an f32 table [n_rows, n] (any n, unlike get_rows'
/// 32-element units): ids: [n_ids] int32 (device); out: [n_ids, n]. Ids
/// outside [0, n_rows) give rows of zeros.
void get_rows_f32(const float* table, int64_t n_rows, int64_t n, const int32_t* ids, int64_t n_ids, float* out);

/// Writes n_tok rows of x: [n_tok, kv_dim] f32 into an f16 (rounded to
/// nearest even) or f32 (as is) cache of n_seq
/// rings of `slots` rows (cache: [n_seq·slots, kv_dim]): row t goes to cache
/// row seq[t]·slots + pos[t] % slots, as the CPU row's kv_store. seq, pos:
/// [n_tok] int32 (device). A token whose sequence is outside [0, n_seq) or
/// whose position is negative is dropped (the op layer's caller checks ids).
void kv_write(const float* x, int64_t n_tok, int64_t kv_dim, const int32_t* seq, const int32_t* pos,
              uint16_t* cache, int64_t slots, int64_t n_seq);
void kv_write(const float* x, int64_t n_tok, int64_t kv_dim, const int32_t* seq, const int32_t* pos,
              float* cache, int64_t slots, int64_t n_seq);

/// Causal attention of n_tok query tokens over f16 or f32 caches laid out as
/// kv_write's: token t (sequence seq[t], position pos[t]) attends to positions
/// [first, pos[t]] of its sequence, first = 0, or pos[t] - window + 1 when
/// window > 0 (sliding window); position p is read from ring row p % slots
/// (the CPU row's mapping; the caller keeps slots >= window + tokens per call).
/// q: [n_tok, n_head, head_dim] f32; out: same shape. Query head h reads kv
/// head h / (n_head / n_head_kv) (GQA). out = softmax(scale · q·Kᵀ) · V,
/// streamed over the positions with an online softmax (Milakov & Gimelshein
/// 2018) in f32. head_dim <= 256. A token outside the cache gets zeros.
/// Throws kvad::Error for an unsupported head_dim or head split.
/// k_f32, v_f32: the cache is float (else uint16_t f16); the second form is
/// f16 for both.
void attention(const float* q, const void* k, bool k_f32, const void* v, bool v_f32, const int32_t* seq,
               const int32_t* pos, int64_t n_tok, int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t slots,
               int64_t n_seq, float scale, int32_t window, float* out);
void attention(const float* q, const uint16_t* k, const uint16_t* v, const int32_t* seq, const int32_t* pos,
               int64_t n_tok, int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t slots, int64_t n_seq,
               float scale, int32_t window, float* out);

}  // namespace kvad::cuda
