// Storage: bytes on a device, owned by a backend's allocator or borrowed from
// something that outlives them (a mapped model file). DESIGN.md seam 3.
#pragma once
#include <cstddef>
#include <memory>
#include <mutex>

#include "tensor/device.h"

namespace kvad {

/// Work a device still has to finish before the host may read bytes it
/// writes (a GPU op in flight). The host waits only when it reads.
class Completion {
 public:
  virtual ~Completion() = default;
  /// Blocks until the work is done. Throws kvad::Error on a device fault.
  virtual void wait() = 0;
};

class Storage {
 public:
  /// Frees `p` (n bytes) back to the allocator that made it.
  using ReleaseFn = void (*)(void* p, size_t n);

  /// Bytes a backend allocated; `release` gives them back when the last
  /// tensor viewing them goes.
  Storage(Device d, void* p, size_t n, ReleaseFn release) : device_(d), p_(p), n_(n), release_(release) {}
  /// Bytes owned elsewhere (e.g. a mapped GGUF), kept alive by `keep`.
  Storage(Device d, void* p, size_t n, std::shared_ptr<const void> keep)
      : device_(d), p_(p), n_(n), keep_(std::move(keep)) {}
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  Device device() const { return device_; }
  /// The device address of the first byte (a host address on cpu and sim;
  /// only the op table may dereference it on sim and cuda).
  void* ptr() const { return p_; }
  size_t bytes() const { return n_; }

  /// The completion token of the last op that wrote these bytes (seam 3).
  void set_pending(std::shared_ptr<Completion> c);
  /// Waits for the pending writer, if any (then forgets it).
  void wait() const;

 private:
  Device device_;
  void* p_;
  size_t n_;
  ReleaseFn release_ = nullptr;
  std::shared_ptr<const void> keep_;
  mutable std::mutex mu_;
  mutable std::shared_ptr<Completion> pending_;
};

}  // namespace kvad
