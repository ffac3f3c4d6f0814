// Thread-local scratch buffers that do not keep their peak size.
#pragma once
#include <cstddef>

namespace kvad {

/// On scope exit, frees `v`'s memory when its capacity grew past
/// `max_keep` elements (a one-off huge input, e.g. a 16 MiB prompt on one
/// of the server's threads), and keeps it otherwise (the common case reuses
/// it without allocating). V: a std::vector or std::string.
template <class V>
class ScratchTrim {
 public:
  explicit ScratchTrim(V& v, size_t max_keep = size_t{1} << 16) : v_(v), max_(max_keep) {}
  ~ScratchTrim() {
    if (v_.capacity() > max_) V().swap(v_);
  }
  ScratchTrim(const ScratchTrim&) = delete;
  ScratchTrim& operator=(const ScratchTrim&) = delete;

 private:
  V& v_;
  size_t max_;
};

}  // namespace kvad
