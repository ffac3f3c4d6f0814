// Eager offload of CPU-side matmuls to the GPU (DESIGN.md seam 3): a bounded set of in-flight slots, each with grow-only
// device buffers and page-locked staging, joined across the upload, compute
// and download streams by reusable events.
//
//   submit:  x (host) → slot's pinned staging → upload stream → [event] →
//            compute stream: matmul on the resident weight → [event] →
//            download stream → slot's pinned output → [completion event]
//   wait:    the host blocks on the completion event only, copies the
//            result into the caller's y and frees the slot.
//
// x is copied into the slot's staging at submit, so the caller may change or
// free x as soon as try_matmul returns (the reader fence is the copy). y must
// stay valid until the ticket is waited on (or destroyed, which waits).
// When every slot is busy, or the weight's format has no CUDA kernels,
// try_matmul returns std::nullopt and the caller runs the op on the CPU:
// there is never an unbounded queue.
//
// Not thread-safe: one Offload per CPU session thread.
// Status: compiles; UNVERIFIED ON A GPU in this build.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "kernels/cuda/context.h"
#include "kernels/cuda/device_kernels.h"
#include "tensor/tensor.h"

namespace kvad::cuda {

class Offload {
 public:
  struct Slot;

  /// A submitted op. Move-only; destroying an unwaited ticket waits (errors
  /// are swallowed then: call wait() to see them).
  class Ticket {
   public:
    Ticket(Ticket&& o) noexcept : owner_(o.owner_), slot_(o.slot_) { o.owner_ = nullptr; }
    Ticket& operator=(Ticket&&) = delete;
    Ticket(const Ticket&) = delete;
    ~Ticket();
    /// True when the result is ready (no wait). Throws kvad::Error on a device fault.
    bool ready() const;
    /// Blocks until the result is in y, then frees the slot. Throws
    /// kvad::Error naming the op on a device fault. Idempotent.
    void wait();

   private:
    friend class Offload;
    Ticket(Offload* o, int slot) : owner_(o), slot_(slot) {}
    Offload* owner_;
    int slot_;
  };

  /// n_slots: ops in flight at most (>= 1). Throws kvad::Error("no CUDA device: ...").
  explicit Offload(int n_slots = 4);
  ~Offload();

  /// Submits y = x · Wᵀ (shapes as cpu::matmul: W [n_out, n_in] host tensor,
  /// x [n_tok, n_in] f32, y [n_tok, n_out] f32, all host memory). The weight
  /// is uploaded on first use and stays resident (keyed by W.data).
  /// Returns std::nullopt, having done nothing, when every slot is busy or W's
  /// format has no CUDA kernels. Throws kvad::Error on a CUDA failure.
  std::optional<Ticket> try_matmul(const Tensor& w, const float* x, int64_t n_tok, float* y);

  /// True when W is already resident on the device.
  bool resident(const Tensor& w) const { return weights_.count(w.data) != 0; }
  int n_slots() const { return static_cast<int>(slots_.size()); }
  int busy_slots() const;

 private:
  void finish(int slot);
  std::vector<std::unique_ptr<Slot>> slots_;
  struct Resident {
    DeviceBuffer buf;
    DeviceMatrix m;
  };
  std::map<const void*, Resident> weights_;
};

}  // namespace kvad::cuda
