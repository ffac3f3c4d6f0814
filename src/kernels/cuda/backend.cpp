// The CUDA row of the op table (tensor/backend.h; DESIGN.md seams 1 and 3).
//
// Every entry submits to the compute stream of the process-wide context
// (context.h) and returns without waiting: ops run in submission order on the
// device, so an op reads what the previous one wrote with no host round trip.
// The device kernels are kernels.cu's (device_kernels.h); this file only maps Tensors to
// their pointers and shapes. Plain C++ against the CUDA runtime.
//
//  - Memory: stream-ordered allocations from the device's default memory pool
//    (cudaMallocAsync / cudaFreeAsync on the compute stream). A tensor freed
//    while ops that read it are still queued is safe: the pool hands its bytes
//    out again only to work ordered after those ops. The pool keeps freed
//    memory for reuse (release threshold: unlimited), so the activations of a
//    forward pass, the same few sizes layer after layer, cost no driver call.
//  - Completion (seam 3): every output Storage gets the compute stream's one
//    completion token; waiting on it synchronizes the stream. No per-op event.
//  - write: host → device on the compute stream (small copies through the
//    context's pinned staging buffer; large ones, weights at load, straight
//    from pageable memory, which CUDA stages before returning). read: device →
//    host after everything queued (copy_to_host waits). copy: device → device.
//  - convert is not filled: the weight loader converts on the CPU (whose row
//    has every format's kernels) before it uploads.
//
// Status: compiles with nvcc 13 for sm_90; UNVERIFIED ON A GPU in this build.
// tests/tensor/test_ops.cpp runs every entry against the CPU row, and
// tests/kernels/cuda/test_cuda_model.cpp whole models, on a GPU machine
// (scripts/device-check).
#include "kernels/cuda/backend.h"
#include "kernels/cuda/strided.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <string>

#include "base/error.h"
#include "kernels/cuda/context.h"
#include "kernels/cuda/device_kernels.h"
#include "kernels/cuda/image_kernels.h"
#include "tensor/backend.h"

namespace kvad::cuda {

namespace {

// ---- prefill GEMM path -------------------------------------------------------

std::atomic<int> g_path_override{-1};  // -1: KVAD_CUDA_GEMM

}  // namespace

GemmPath gemm_path() {
  const int o = g_path_override.load();
  if (o >= 0) return static_cast<GemmPath>(o);
  static const GemmPath env = gemm_path_from_env();  // read once per process
  return env;
}

void set_gemm_path(GemmPath p) { g_path_override.store(p == GemmPath::Auto ? -1 : static_cast<int>(p)); }

namespace {

// ---- completion ----------------------------------------------------------------

// The compute stream's completion token: when wait() returns, every op
// submitted before it has finished (and a device fault has been thrown as
// kvad::Error naming the last op submitted).
class ComputeStreamDone final : public Completion {
 public:
  void wait() override { Context::get().sync("waiting for the GPU (compute stream)"); }
};

const std::shared_ptr<Completion>& compute_done() {
  static const std::shared_ptr<Completion> token = std::make_shared<ComputeStreamDone>();
  return token;
}

// Marks `t`'s bytes as written by work queued on the compute stream.
void written(const Tensor& t) {
  if (t.storage) t.storage->set_pending(compute_done());
}

// ---- memory ----------------------------------------------------------------------

constexpr size_t kStagedWriteMax = size_t{1} << 20;  // writes up to this go through pinned staging

std::string err_text(cudaError_t e) { return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e); }

// Whether the device has stream-ordered memory pools (every GPU kvad targets
// does; a driver without them gets plain cudaMalloc/cudaFree).
bool use_pools() {
  static const bool pools = [] {
    Context::get();  // throws "no CUDA device: ..." first
    int supported = 0;
    if (cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, 0) != cudaSuccess || !supported) {
      cudaGetLastError();
      return false;
    }
    cudaMemPool_t pool = nullptr;
    if (cudaDeviceGetDefaultMemPool(&pool, 0) == cudaSuccess) {
      uint64_t keep = UINT64_MAX;  // keep freed memory in the pool for reuse
      cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
    }
    cudaGetLastError();  // a refused attribute is not a fault
    return true;
  }();
  return pools;
}

void* cuda_alloc(size_t n) {
  const bool pools = use_pools();
  Context& c = Context::get();
  void* p = nullptr;
  const cudaError_t e = pools ? cudaMallocAsync(&p, n, c.compute()) : cudaMalloc(&p, n);
  if (e == cudaSuccess) return p;
  cudaGetLastError();  // an allocation failure is not sticky: do not report it again at the next check
  std::string msg = "CUDA: ";
  if (e == cudaErrorMemoryAllocation) {
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) cudaGetLastError();
    msg += "out of device memory allocating " + std::to_string(n) + " bytes (" + std::to_string(free_b >> 20) +
           " MiB free of " + std::to_string(total_b >> 20) + " MiB)";
  } else {
    msg += std::string(pools ? "cudaMallocAsync" : "cudaMalloc") + " of " + std::to_string(n) + " bytes (last op " +
           c.last_op() + "): " + err_text(e);
  }
  throw Error(msg);
}

// Called from Storage's destructor: never throws. Stream-ordered, so queued
// readers of the bytes finish first. A failure (the runtime already torn down
// at exit, or an earlier fault) is cleared, not reported: the fault itself
// shows at the next wait.
void cuda_release(void* p, size_t) {
  if (!p) return;
  try {
    const cudaError_t e = use_pools() ? cudaFreeAsync(p, Context::get().compute()) : cudaFree(p);
    if (e != cudaSuccess) cudaGetLastError();
  } catch (...) {
  }
}

void cuda_write(void* dst, const void* src, size_t n) {
  if (n == 0) return;
  if (n <= kStagedWriteMax) {
    copy_to_device_async(dst, src, n, "write (host → device)");
    return;
  }
  // From pageable memory, cudaMemcpyAsync returns once CUDA has staged the
  // source: the caller may free it at once, and the copy stays in stream order.
  Context& c = Context::get();
  const cudaError_t e = cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, c.compute());
  if (e != cudaSuccess)
    throw Error("CUDA error at write of " + std::to_string(n) + " bytes (host → device; last op submitted: " +
                c.last_op() + "): " + err_text(e));
}

void cuda_read(void* dst, const void* src, size_t n) {
  if (n) copy_to_host(dst, src, n, "read (device → host)");
}

void cuda_copy(void* dst, const void* src, size_t n) { copy_on_device(dst, src, n, "copy (device → device)"); }

// ---- tensors → pointers -------------------------------------------------------------

const float* in(const Tensor& t) { return static_cast<const float*>(t.raw()); }
float* out(const Tensor& t) { return static_cast<float*>(t.raw()); }
const int32_t* ids(const Tensor& t) { return static_cast<const int32_t*>(t.raw()); }
DeviceMatrix matrix(const Tensor& w) { return {w.type, w.ne[0], w.n_rows(), w.raw()}; }

// ---- strided inputs -----------------------------------------------------------------

// The ops ops.h marks Strided reach this row with views; until its kernels
// take strides, each refuses one clearly (cont makes it contiguous).
void need_contiguous(const char* op, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    if (!t->is_contiguous())
      throw Error(std::string(op) + ": the CUDA row takes contiguous inputs only, not " + shape_str(*t) +
                  " (ops::cont first)");
}

StridedLayout layout_of(const Tensor& t);

void cont_op(const Tensor& x, const Tensor& o) {
  const DTypeInfo& ti = dtype_info(x.type);
  if (ti.block_elems != 1)
    throw Error(std::string("cont: the CUDA row copies element formats only, not ") + dtype_name(x.type) + " " +
                shape_str(x));
  cont(x.raw(), layout_of(x), o.raw());
  written(o);
}

// ---- ops ----------------------------------------------------------------------------

void matmul(const Tensor& x, const Tensor* const* w, const Tensor* o, int n) {
  const int64_t n_tok = x.n_rows(), n_in = x.ne[0];
  const GemmPath path = gemm_path();
  // Prefill through several quantized weights (q/k/v, gate/up): x is
  // converted to bf16 once for all of them, where cuda::matmul would convert
  // it once per weight. Same operands, same kernel: the same results.
  bool shared_x = n > 1 && n_tok > kGemvMaxTokens && path == GemmPath::Mma;
  for (int i = 0; i < n && shared_x; ++i) shared_x = gemm_mma_format(w[i]->type);
  if (shared_x) {
    auto* xh = static_cast<uint16_t*>(Context::get().scratch(3, static_cast<size_t>(n_in * n_tok) * 2));
    f32_to_half(in(x), xh, n_in * n_tok, true);
    for (int i = 0; i < n; ++i) gemm_mma(matrix(*w[i]), xh, n_tok, out(o[i]), 0);
  } else {
    for (int i = 0; i < n; ++i) cuda::matmul(matrix(*w[i]), in(x), n_tok, out(o[i]), path);
  }
  for (int i = 0; i < n; ++i) written(o[i]);
}

// b one row repeated over a's rows (stride 0 in dims 1..3, as ops.cpp expands it).
bool row_broadcast(const Tensor& b) {
  if (b.ne[0] > 1 && b.nb[0] != sizeof(float)) return false;
  for (int i = 1; i < 4; ++i)
    if (b.ne[i] > 1 && b.nb[i] != 0) return false;
  return true;
}

StridedLayout layout_of(const Tensor& t) {
  StridedLayout l{};
  for (int i = 0; i < 4; ++i) {
    l.ne[i] = t.ne[i];
    l.nb[i] = static_cast<int64_t>(t.nb[i]);
  }
  l.elem = static_cast<int>(dtype_info(t.type).block_bytes);
  return l;
}

// Contiguous a with b of its shape or one row: the flat kernels; any other
// strides (broadcast per channel, views): the strided kernel.
void binary(Binary op, const Tensor& a, const Tensor& b, const Tensor& o) {
  const int64_t nb = b.is_contiguous() ? b.n_elements() : row_broadcast(b) ? b.ne[0] : -1;
  if (!a.is_contiguous() || nb < 0) {
    binary_strided(op == Binary::Mul, a.raw(), layout_of(a), b.raw(), layout_of(b), out(o));
    written(o);
    return;
  }
  if (op == Binary::Add) add(in(a), in(b), a.n_elements(), nb, out(o));
  else mul(in(a), in(b), a.n_elements(), nb, out(o));
  written(o);
}

void scale_op(const Tensor& x, float s, const Tensor& o) {
  need_contiguous("scale", {&x});
  scale(in(x), s, x.n_elements(), out(o));
  written(o);
}

void rms_norm_op(const Tensor& x, const Tensor* w, float eps, bool one_plus, const Tensor& o) {
  rms_norm(in(x), w ? in(*w) : nullptr, x.n_rows(), x.ne[0], eps, out(o), one_plus);
  written(o);
}

void layer_norm_op(const Tensor& x, const Tensor* w, const Tensor* b, float eps, const Tensor& o) {
  layer_norm(in(x), w ? in(*w) : nullptr, b ? in(*b) : nullptr, x.n_rows(), x.ne[0], eps, out(o));
  written(o);
}

void rope_op(const Tensor& x, const Tensor& pos, const RopeParams& p, const Tensor& o) {
  rope(in(x), ids(pos), x.ne[2], x.ne[1], x.ne[0], p.n_rot, p.freq_base, p.freq_scale, p.neox, out(o),
       p.freq_factors ? in(p.freq_factors) : nullptr, p.attn_factor);
  written(o);
}

void get_rows_op(const Tensor& table, const Tensor& id, const Tensor& o) {
  if (table.type == DType::F32) get_rows_f32(in(table), table.n_rows(), table.ne[0], ids(id), id.n_elements(), out(o));
  else get_rows(matrix(table), ids(id), id.n_elements(), out(o));
  written(o);
}

void softmax_op(const Tensor& x, const Tensor& o) {
  softmax(in(x), x.n_rows(), x.ne[0], out(o));
  written(o);
}

Act act_of(Unary op) {
  switch (op) {
    case Unary::SiLU: return Act::SiLU;
    case Unary::GELU_tanh: return Act::GELU_tanh;
    case Unary::GELU_erf: return Act::GELU_erf;
    case Unary::Sigmoid: return Act::Sigmoid;
    case Unary::Softplus: return Act::Softplus;
    case Unary::Tanh: return Act::Tanh;
    case Unary::Sin: return Act::Sin;
    case Unary::Cos: return Act::Cos;
    case Unary::QuickGELU: return Act::QuickGELU;
  }
  throw Error("cuda: unknown activation");
}

void unary(Unary op, const Tensor& x, const Tensor& o) {
  static constexpr const char* kNames[] = {"silu", "gelu", "gelu_erf", "sigmoid", "softplus",
                                           "tanh", "sin",  "cos",      "quick_gelu"};
  need_contiguous(kNames[static_cast<int>(op)], {&x});
  activation(act_of(op), in(x), x.n_elements(), out(o));
  written(o);
}

// The row stride (in elements) of t when its rows are contiguous and evenly
// spaced over dims 1..3 (a contiguous tensor, or a column range of one such
// as geglu_split's halves); -1 otherwise.
int64_t even_row_stride(const Tensor& t) {
  if (t.ne[0] > 1 && t.nb[0] != sizeof(float)) return -1;
  const int64_t s1 = static_cast<int64_t>(t.nb[1]);
  if ((t.ne[2] > 1 && static_cast<int64_t>(t.nb[2]) != s1 * t.ne[1]) ||
      (t.ne[3] > 1 && static_cast<int64_t>(t.nb[3]) != s1 * t.ne[1] * t.ne[2]))
    return -1;
  return t.ne[1] * t.ne[2] * t.ne[3] == 1 ? t.ne[0] : s1 / static_cast<int64_t>(sizeof(float));
}

void glu(Unary op, const Tensor& g, const Tensor& u, const Tensor& o) {
  const int64_t gs = even_row_stride(g), us = even_row_stride(u);
  if (gs < 0 || us < 0)
    throw Error(std::string(op == Unary::SiLU ? "swiglu" : "geglu") +
                ": the CUDA row takes contiguous inputs only, or evenly spaced contiguous rows, not " + shape_str(g) +
                " and " + shape_str(u) + " (ops::cont first)");
  glu_rows(act_of(op), in(g), gs, in(u), us, g.n_rows(), g.ne[0], out(o));
  written(o);
}

void concat_op(const Tensor& a, const Tensor& b, const Tensor& o) {
  need_contiguous("concat", {&a, &b});
  concat(in(a), in(b), a.n_rows(), a.ne[0], b.ne[0], out(o));
  written(o);
}

// Unlike the CPU row, ids are not checked here (that would be a host read of
// device memory per layer): a token outside the cache is dropped by
// kv_write and gets zeros from attention.
void kv_store(const Tensor& cache, const Tensor& x, const Tensor& seq, const Tensor& pos, int64_t slots) {
  if (cache.type == DType::F32)
    kv_write(in(x), seq.n_elements(), cache.ne[0], ids(seq), ids(pos), static_cast<float*>(cache.raw()), slots,
             cache.n_rows() / slots);
  else
    kv_write(in(x), seq.n_elements(), cache.ne[0], ids(seq), ids(pos), static_cast<uint16_t*>(cache.raw()), slots,
             cache.n_rows() / slots);
  written(cache);
}

// Causal, without sinks or soft-capping: the rest is refused (kCudaRow.refuses).
void attention_op(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& seq, const Tensor& pos,
                  const AttentionOpParams& p, const Tensor& o) {
  const int64_t D = q.ne[0], H = q.ne[1], n_tok = q.ne[2];
  attention(in(q), k.raw(), k.type == DType::F32, v.raw(), v.type == DType::F32, ids(seq), ids(pos), n_tok, H,
            k.ne[0] / D, D, p.slots, k.n_rows() / p.slots, p.scale, p.window, out(o));
  written(o);
}

// ---- images ({C, W, H, N}) ------------------------------------------------------------

void group_norm_op(const Tensor& x, int64_t n_groups, const Tensor* w, const Tensor* b, float eps, const Tensor& o) {
  group_norm(in(x), x.ne[0], x.ne[1] * x.ne[2], x.ne[3], n_groups, w ? in(*w) : nullptr, b ? in(*b) : nullptr, eps,
             out(o));
  written(o);
}

void upsample_op(const Tensor& x, int64_t f, const Tensor& o) {
  upsample_nearest2d(in(x), x.ne[0], x.ne[1], x.ne[2], x.ne[3], f, out(o));
  written(o);
}

void pad_op(const Tensor& x, const int64_t* lo, const Tensor& o) {
  pad(in(x), x.ne.data(), lo, o.ne.data(), out(o));
  written(o);
}

void concat_dim_op(const Tensor& a, const Tensor& b, int dim, const Tensor& o) {
  concat_dim(a.raw(), layout_of(a), b.raw(), layout_of(b), dim, o.ne.data(), out(o));
  written(o);
}

// im2col over tiles of pixels + the matmul kernels when a weight row is
// whole 32-element units of a format they read (every UNet/VAE convolution
// but the 4-channel ones); the direct kernel (f32, f16 weights) otherwise.
void conv2d_op(const Tensor& x, const Tensor& w, const Tensor* bias, const Conv2dParams& p, const Tensor& o) {
  const ConvGeom g{x.ne[0], x.ne[1], x.ne[2], x.ne[3], w.ne[1], w.ne[2], w.ne[3], o.ne[1], o.ne[2],
                   p.stride_w, p.stride_h, p.pad_w, p.pad_h};
  const int64_t K = g.C * g.KW * g.KH, n_pix = g.N * g.OH * g.OW;
  if (K % 32 == 0 && has_kernels(w.type)) {
    const DeviceMatrix m{w.type, K, g.OC, w.raw()};
    const bool pointwise = g.KW == 1 && g.KH == 1 && p.stride_w == 1 && p.stride_h == 1 && p.pad_w == 0 && p.pad_h == 0;
    if (pointwise) {
      cuda::matmul(m, in(x), n_pix, out(o));
    } else {
      constexpr size_t kColBytes = size_t{256} << 20;  // im2col scratch per tile (device memory)
      const int64_t tile = std::max<int64_t>(64, static_cast<int64_t>(kColBytes / (static_cast<size_t>(K) * 4)) / 64 * 64);
      auto* col = static_cast<float*>(Context::get().scratch(3, static_cast<size_t>(std::min(tile, n_pix) * K) * 4));
      for (int64_t p0 = 0; p0 < n_pix; p0 += tile) {
        const int64_t np = std::min(tile, n_pix - p0);
        im2col(in(x), g, p0, np, col);
        cuda::matmul(m, col, np, out(o) + p0 * g.OC);
      }
    }
    if (bias) add(out(o), in(*bias), n_pix * g.OC, g.OC, out(o));
  } else if (w.type == DType::F32 || w.type == DType::F16) {
    conv2d_direct(in(x), w.raw(), w.type == DType::F16, bias ? in(*bias) : nullptr, g, out(o));
  } else {
    throw Error(std::string("conv2d: the CUDA row reads ") + dtype_name(w.type) + " weights only when C·KW·KH (" +
                std::to_string(K) + ") is a multiple of 32 (weight " + shape_str(w) + ")");
  }
  written(o);
}

AttnStrides strides_of(const Tensor& t) {
  return {static_cast<int64_t>(t.nb[1] / 4), static_cast<int64_t>(t.nb[2] / 4), static_cast<int64_t>(t.nb[3] / 4)};
}

void sdpa_op(const Tensor& q, const Tensor& k, const Tensor& v, float scale, const Tensor& o) {
  sdpa(in(q), strides_of(q), in(k), strides_of(k), in(v), strides_of(v), q.ne[3], q.ne[2], k.ne[2], q.ne[1], q.ne[0],
       scale, out(o));
  written(o);
}

constexpr BackendOps kCudaRow = {
    .name = "cuda",
    .available = &available,
    .has_format = &has_kernels,
    // Entries it fills without these variants: attention only causal,
    // without sinks or soft-capping.
    .refuses = {Op::AttentionBidirectional, Op::AttentionSinks, Op::AttentionSoftcap},
    .alloc = &cuda_alloc,
    .release = &cuda_release,
    .write = &cuda_write,
    .read = &cuda_read,
    .copy = &cuda_copy,
    .convert = nullptr,
    .cont = &cont_op,
    .matmul = &matmul,
    .binary = &binary,
    .scale = &scale_op,
    .rms_norm = &rms_norm_op,
    .layer_norm = &layer_norm_op,
    .rope = &rope_op,
    .get_rows = &get_rows_op,
    .softmax = &softmax_op,
    .unary = &unary,
    .glu = &glu,
    .concat = &concat_op,
    .kv_store = &kv_store,
    .attention = &attention_op,
    .group_norm = &group_norm_op,
    .upsample_nearest2d = &upsample_op,
    .pad = &pad_op,
    .concat_dim = &concat_dim_op,
    .conv2d = &conv2d_op,
    .sdpa = &sdpa_op,
};

// Registration touches no CUDA API: a program that never asks for the GPU
// never initializes the runtime (nor loads cuBLAS).
const bool kRegistered = [] {
  register_backend(DeviceType::CUDA, &kCudaRow);
  return true;
}();

}  // namespace
}  // namespace kvad::cuda

// Referenced with the linker's --undefined by every program that links
// kvad_kernels_cuda (CMakeLists.txt), so this file, and its registration, is
// always linked in from the static library.
extern "C" {
extern const int kvad_cuda_backend_anchor;
const int kvad_cuda_backend_anchor = kvad::cuda::kRegistered ? 1 : 0;
}
