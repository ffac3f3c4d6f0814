// The CUDA provider's context (context.h). Status: compiles; UNVERIFIED ON A GPU.
#include "kernels/cuda/context.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "base/error.h"

namespace kvad::cuda {

namespace {

constexpr size_t kBlasWorkspace = 32u << 20;  // cuBLAS workspace on the compute stream (bytes)

std::string err_str(cudaError_t e) { return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e); }

}  // namespace

void check_status(int status, const char* what) {
  const auto e = static_cast<cudaError_t>(status);
  if (e != cudaSuccess) throw Error(std::string("CUDA: ") + what + ": " + err_str(e));
}

bool available(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    // cudaErrorInsufficientDriver is also what a machine with no NVIDIA
    // driver at all reports; say that first.
    const std::string hint = e == cudaErrorInsufficientDriver
                                 ? "no NVIDIA driver, or one older than this CUDA runtime; "
                                 : "";
    if (why) *why = "no CUDA device: " + hint + "cudaGetDeviceCount: " + err_str(e);
    return false;
  }
  if (n == 0) {
    if (why) *why = "no CUDA device: cudaGetDeviceCount found 0 devices";
    return false;
  }
  return true;
}

Context& Context::get() {
  static std::once_flag once;
  static Context* ctx = nullptr;
  std::call_once(once, [] {
    std::string why;
    if (!available(&why)) throw Error(why);
    ctx = new Context();  // lives for the process: destroying streams at exit races the driver's teardown
  });
  if (!ctx) throw Error("no CUDA device: the CUDA context failed to initialize earlier");
  return *ctx;
}

Context::Context() {
  check_status(cudaSetDevice(0), "cudaSetDevice(0)");
  cudaDeviceProp prop{};
  check_status(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  name_ = std::string(prop.name) + ", sm_" + std::to_string(prop.major) + std::to_string(prop.minor);
  sm_count_ = prop.multiProcessorCount;
  check_status(cudaStreamCreateWithFlags(&upload_, cudaStreamNonBlocking), "cudaStreamCreate(upload)");
  check_status(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking), "cudaStreamCreate(compute)");
  check_status(cudaStreamCreateWithFlags(&download_, cudaStreamNonBlocking), "cudaStreamCreate(download)");
  if (cublasCreate(&blas_) != CUBLAS_STATUS_SUCCESS) throw Error("CUDA: cublasCreate failed");
  if (cublasSetStream(blas_, compute_) != CUBLAS_STATUS_SUCCESS) throw Error("CUDA: cublasSetStream failed");
  check_status(cudaMalloc(&blas_workspace_, kBlasWorkspace), "cudaMalloc(cuBLAS workspace)");
  if (cublasSetWorkspace(blas_, blas_workspace_, kBlasWorkspace) != CUBLAS_STATUS_SUCCESS)
    throw Error("CUDA: cublasSetWorkspace failed");
  // 16-bit inputs may use tensor cores; accumulation stays f32 (CUBLAS_COMPUTE_32F).
  cublasSetMathMode(blas_, CUBLAS_DEFAULT_MATH);
}

Context::~Context() {
  for (void* p : scratch_)
    if (p) cudaFree(p);
  if (blas_) cublasDestroy(blas_);
  if (blas_workspace_) cudaFree(blas_workspace_);
  for (Stream s : {upload_, compute_, download_})
    if (s) cudaStreamDestroy(s);
}

void Context::check(const char* where) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    throw Error(std::string("CUDA error at ") + where + " (last op submitted: " + last_op_ + "): " + err_str(e));
}

void Context::sync(const char* where) {
  const cudaError_t e = cudaStreamSynchronize(compute_);
  if (e != cudaSuccess)
    throw Error(std::string("CUDA error at ") + where + " (last op submitted: " + last_op_ + "): " + err_str(e));
  check(where);
}

void* Context::scratch(int i, size_t bytes) {
  if (i < 0 || i >= 4) throw Error("cuda::Context::scratch: index " + std::to_string(i) + " outside [0, 4)");
  if (bytes <= scratch_bytes_[i]) return scratch_[i];
  const size_t want = bytes + bytes / 4;  // some headroom: fewer regrowths
  if (scratch_[i]) check_status(cudaFreeAsync(scratch_[i], compute_), "cudaFreeAsync(scratch)");
  scratch_[i] = nullptr;
  scratch_bytes_[i] = 0;
  check_status(cudaMallocAsync(&scratch_[i], want, compute_), "cudaMallocAsync(scratch)");
  scratch_bytes_[i] = want;
  return scratch_[i];
}

// ---- DeviceBuffer ----------------------------------------------------------

DeviceBuffer::DeviceBuffer(size_t bytes, const char* what) { reserve(bytes, what); }

DeviceBuffer::~DeviceBuffer() {
  if (p_) cudaFree(p_);
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (p_) cudaFree(p_);
    p_ = o.p_;
    n_ = o.n_;
    o.p_ = nullptr;
    o.n_ = 0;
  }
  return *this;
}

void DeviceBuffer::reserve(size_t bytes, const char* what) {
  if (bytes <= n_ && p_) return;
  if (p_) cudaFree(p_);  // cudaFree waits for the device: grow rarely
  p_ = nullptr;
  n_ = 0;
  if (bytes == 0) return;
  const cudaError_t e = cudaMalloc(&p_, bytes);
  if (e != cudaSuccess) {
    p_ = nullptr;
    throw Error(std::string("CUDA: cudaMalloc of ") + std::to_string(bytes) + " bytes for " + what + ": " +
                err_str(e));
  }
  n_ = bytes;
}

// ---- PinnedBuffer ----------------------------------------------------------

PinnedBuffer::~PinnedBuffer() { release(); }

void PinnedBuffer::release() {
  if (!p_) return;
  if (mode_ == Mode::Registered) {
    cudaHostUnregister(p_);
    std::free(p_);
  } else if (mode_ == Mode::Allocated) {
    cudaFreeHost(p_);
  } else {
    std::free(p_);
  }
  p_ = nullptr;
  n_ = 0;
}

void PinnedBuffer::reserve(size_t bytes) {
  if (bytes <= n_) return;
  release();
  const size_t want = (bytes + 4095) / 4096 * 4096;
  p_ = std::aligned_alloc(4096, want);
  if (!p_) throw Error("PinnedBuffer: out of host memory (" + std::to_string(want) + " bytes)");
  n_ = want;
  if (cudaHostRegister(p_, want, cudaHostRegisterDefault) == cudaSuccess) {
    mode_ = Mode::Registered;
    return;
  }
  // Some sandboxes (gVisor) refuse to register ordinary memory: ask the
  // driver for page-locked memory instead, and as a last resort keep the
  // pageable buffer (copies from it are correct, only not asynchronous).
  // Clear the error so check() does not report it as a fault later.
  cudaGetLastError();
  void* q = nullptr;
  if (cudaMallocHost(&q, want) == cudaSuccess) {
    std::free(p_);
    p_ = q;
    mode_ = Mode::Allocated;
    return;
  }
  cudaGetLastError();
  mode_ = Mode::Pageable;
}

// ---- EventHandle -----------------------------------------------------------

EventHandle::EventHandle() { check_status(cudaEventCreateWithFlags(&e_, cudaEventDisableTiming), "cudaEventCreate"); }
EventHandle::~EventHandle() {
  if (e_) cudaEventDestroy(e_);
}
void EventHandle::record(Stream s) { check_status(cudaEventRecord(e_, s), "cudaEventRecord"); }
void EventHandle::wait_on(Stream s) const { check_status(cudaStreamWaitEvent(s, e_, 0), "cudaStreamWaitEvent"); }
bool EventHandle::done() const {
  const cudaError_t e = cudaEventQuery(e_);
  if (e == cudaErrorNotReady) return false;
  check_status(e, "cudaEventQuery");
  return true;
}
void EventHandle::synchronize(const char* op) const {
  const cudaError_t e = cudaEventSynchronize(e_);
  if (e != cudaSuccess) throw Error(std::string("CUDA error while waiting for ") + op + ": " + err_str(e));
}

// ---- copies ----------------------------------------------------------------

void copy_to_device(void* dst, const void* src, size_t bytes, const char* what) {
  check_status(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), what);
  // From pageable memory cudaMemcpy may return once the bytes are staged,
  // before the DMA lands; the streams here are non-blocking (they do not
  // wait for the legacy stream), so wait for it before any kernel reads dst.
  check_status(cudaStreamSynchronize(nullptr), what);
}

void copy_to_host(void* dst, const void* src, size_t bytes, const char* what) {
  Context& c = Context::get();
  const cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c.compute());
  if (e != cudaSuccess)
    throw Error(std::string("CUDA error at ") + what + " (last op submitted: " + c.last_op() + "): " + err_str(e));
  c.sync(what);
}

void copy_to_device_async(void* dst, const void* src, size_t bytes, const char* what) {
  // One staging buffer; the previous copy out of it must have finished
  // before it is overwritten (usually long done: a host wait only then).
  static PinnedBuffer staging;
  static EventHandle staged;
  static bool pending = false;
  Context& c = Context::get();
  if (pending) staged.synchronize(what);
  staging.reserve(bytes);
  std::memcpy(staging.get(), src, bytes);
  check_status(cudaMemcpyAsync(dst, staging.get(), bytes, cudaMemcpyHostToDevice, c.compute()), what);
  staged.record(c.compute());
  pending = true;
}

void copy_on_device(void* dst, const void* src, size_t bytes, const char* what) {
  if (bytes == 0) return;
  Context& c = Context::get();
  const cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c.compute());
  if (e != cudaSuccess)
    throw Error(std::string("CUDA error at ") + what + " (last op submitted: " + c.last_op() + "): " + err_str(e));
}

}  // namespace kvad::cuda
