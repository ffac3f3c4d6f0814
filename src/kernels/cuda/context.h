// The CUDA provider (DESIGN.md seam 3): one context per process, the streams,
// the cuBLAS handle, device and page-locked host buffers, completion tokens,
// and the translation of device faults into kvad::Error.
//
// Status: compiles with nvcc 13.0 for sm_90; UNVERIFIED ON A GPU in this
// build (no device was available). scripts/device-check runs the tests that
// exercise it on a GPU machine.
//
// Model:
//  - Three persistent streams: `upload` (host → device copies), `compute`
//    (kernels and cuBLAS) and `download` (device → host copies). Work that
//    crosses streams is joined with events, never with a host wait.
//  - One cuBLAS handle, bound to the compute stream, with its workspace.
//  - A device fault (an illegal address, a failed launch) is sticky in CUDA:
//    it shows at the next call that touches the device. Each op records its
//    name (`note_op`) as it is submitted; check() turns an error into a
//    kvad::Error naming the last op submitted, at the host boundary where it
//    was found (a wait, a read, a copy).
//
// This header needs no CUDA headers: streams and events are the runtime's
// opaque pointer types, declared here as it declares them.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

struct CUstream_st;
struct CUevent_st;
struct cublasContext;

namespace kvad::cuda {

using Stream = CUstream_st*;
using Event = CUevent_st*;

/// True when the CUDA runtime finds at least one device. Never throws; when
/// false, `why` (if given) says why ("no CUDA device: cudaGetDeviceCount: ...").
bool available(std::string* why = nullptr);

/// The process-wide context on device 0.
class Context {
 public:
  /// Creates the context on first use. Throws kvad::Error("no CUDA device: ...")
  /// when available() is false, or naming the CUDA call that failed.
  static Context& get();

  Stream upload() const { return upload_; }
  Stream compute() const { return compute_; }
  Stream download() const { return download_; }
  /// cuBLAS handle bound to compute(); math mode allows tensor cores with f32 accumulation.
  cublasContext* blas() const { return blas_; }

  /// Device name and compute capability ("NVIDIA H200, sm_90").
  const std::string& device_name() const { return name_; }
  int sm_count() const { return sm_count_; }

  /// Records the name of the op being submitted, for error messages.
  void note_op(const char* op) { last_op_ = op; }
  const char* last_op() const { return last_op_; }

  /// Throws kvad::Error when CUDA reports an error (a launch error, or a
  /// sticky fault of earlier asynchronous work), naming `where` and the last
  /// op submitted. Cheap: cudaGetLastError only, no synchronization.
  void check(const char* where);
  /// Waits for the compute stream, then check(where).
  void sync(const char* where);

  /// A device-side scratch buffer on the compute stream: grows (stream
  /// ordered, cudaMallocAsync/cudaFreeAsync), never shrinks. `i` < 4 picks
  /// one of the independent buffers. Valid until the next call with the same i
  /// that grows it; work already queued on compute() keeps the old memory alive.
  void* scratch(int i, size_t bytes);

  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

 private:
  Context();
  Stream upload_ = nullptr, compute_ = nullptr, download_ = nullptr;
  cublasContext* blas_ = nullptr;
  void* blas_workspace_ = nullptr;
  std::string name_;
  int sm_count_ = 0;
  const char* last_op_ = "(none)";
  void* scratch_[4] = {};
  size_t scratch_bytes_[4] = {};
};

/// Throws kvad::Error naming `what` and the CUDA error when `status` (a
/// cudaError_t) is not cudaSuccess.
void check_status(int status, const char* what);

/// Device memory of a fixed size, freed with the object. Move-only.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  /// Allocates `bytes` (cudaMalloc). Throws kvad::Error naming `what` when
  /// the device is out of memory.
  explicit DeviceBuffer(size_t bytes, const char* what = "DeviceBuffer");
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(o.p_), n_(o.n_) { o.p_ = nullptr; o.n_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return p_; }
  template <class T> T* as() const { return static_cast<T*>(p_); }
  size_t bytes() const { return n_; }
  /// Grow-only: reallocates (contents lost) when `bytes` exceeds the size.
  void reserve(size_t bytes, const char* what = "DeviceBuffer");

 private:
  void* p_ = nullptr;
  size_t n_ = 0;
};

/// Page-locked host memory: an ordinary allocation registered with CUDA once
/// (cudaHostRegister) and unregistered when released, so async copies from
/// and to it overlap with compute. Grow-only. Where registering is refused
/// (some sandboxes), it is cudaMallocHost memory, or at worst pageable
/// memory (copies still correct, no longer overlapped); `pinned()` says.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer();
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  void reserve(size_t bytes);
  void* get() const { return p_; }
  size_t bytes() const { return n_; }
  bool pinned() const { return p_ && mode_ != Mode::Pageable; }

 private:
  enum class Mode { Registered, Allocated, Pageable };
  void release();
  void* p_ = nullptr;
  size_t n_ = 0;
  Mode mode_ = Mode::Pageable;
};

/// A reusable event (created once, with timing disabled).
class EventHandle {
 public:
  EventHandle();
  ~EventHandle();
  EventHandle(const EventHandle&) = delete;
  EventHandle& operator=(const EventHandle&) = delete;
  Event get() const { return e_; }
  void record(Stream s);
  /// Makes stream `s` wait for the last record (device side; the host does not wait).
  void wait_on(Stream s) const;
  /// True when the recorded work has finished (cudaEventQuery); throws on a fault.
  bool done() const;
  /// Blocks the host until the recorded work has finished; throws kvad::Error
  /// naming `op` on a device fault.
  void synchronize(const char* op) const;

 private:
  Event e_ = nullptr;
};

/// Copies host → device and waits until the bytes are on the device (for
/// weights at load time). Throws kvad::Error naming `what`.
void copy_to_device(void* dst, const void* src, size_t bytes, const char* what);
/// Copies device → host on the compute stream and waits. Throws kvad::Error
/// naming `what` (and the last op) on a fault.
void copy_to_host(void* dst, const void* src, size_t bytes, const char* what);
/// Copies host → device on the compute stream, ordered after the work queued
/// there, through a pinned staging buffer; returns without waiting for the copy.
void copy_to_device_async(void* dst, const void* src, size_t bytes, const char* what);
/// Copies device → device on the compute stream (cudaMemcpyAsync), ordered
/// after the work queued there; returns without waiting. Throws kvad::Error
/// naming `what` (and the last op) when CUDA refuses it.
void copy_on_device(void* dst, const void* src, size_t bytes, const char* what);

}  // namespace kvad::cuda
