// Strided entries of the CPU row (strided.h): cont, the element-wise binary
// ops with broadcasting by stride 0, and concat of views. The unary ops,
// scale and the GLUs take views by gathering them into their (contiguous)
// output first and running their contiguous kernels there (backend.cpp).
#include "kernels/cpu/strided.h"

#include <algorithm>
#include <cstring>

#include "base/cpu_features.h"
#include "base/thread_pool.h"
#include "kernels/cpu/row_util.h"

namespace kvad::cpu {

using row::pool;

namespace {

// Elements per parallel work item (as backend.cpp's element-wise split).
constexpr int64_t kElemGrain = 1 << 15;

int64_t row_grain(int64_t n0) { return std::max<int64_t>(1, kElemGrain / std::max<int64_t>(1, n0)); }

// Byte offset of row r (dims 1..3 in order) of t.
size_t row_offset(const Tensor& t, int64_t r) {
  const int64_t i1 = r % t.ne[1], i2 = (r / t.ne[1]) % t.ne[2], i3 = r / (t.ne[1] * t.ne[2]);
  return static_cast<size_t>(i1) * t.nb[1] + static_cast<size_t>(i2) * t.nb[2] + static_cast<size_t>(i3) * t.nb[3];
}

template <class T>
void copy_strided(const uint8_t* src, size_t stride, int64_t n, void* dst) {
  T* d = static_cast<T*>(dst);
  for (int64_t i = 0; i < n; ++i) std::memcpy(&d[i], src + static_cast<size_t>(i) * stride, sizeof(T));
}

}  // namespace

void gather_row(const Tensor& x, int64_t r, void* dst) {
  const DTypeInfo& ti = dtype_info(x.type);
  const uint8_t* src = static_cast<const uint8_t*>(x.raw()) + row_offset(x, r);
  if (ti.block_elems > 1 || x.ne[0] == 1 || x.nb[0] == ti.block_bytes) {
    std::memcpy(dst, src, row_bytes(x.type, x.ne[0]));
    return;
  }
  switch (ti.block_bytes) {
    case 4: copy_strided<uint32_t>(src, x.nb[0], x.ne[0], dst); break;
    case 2: copy_strided<uint16_t>(src, x.nb[0], x.ne[0], dst); break;
    case 1: copy_strided<uint8_t>(src, x.nb[0], x.ne[0], dst); break;
    default: copy_strided<uint64_t>(src, x.nb[0], x.ne[0], dst); break;
  }
}

void cont_to(const Tensor& x, void* dst) {
  const size_t rb = x.row_size();
  uint8_t* d = static_cast<uint8_t*>(dst);
  pool().parallel_for(x.n_rows(), row_grain(x.ne[0]), [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) gather_row(x, r, d + static_cast<size_t>(r) * rb);
  });
}

void cont(const Tensor& x, const Tensor& o) { cont_to(x, o.raw()); }

void binary_row_ref(Binary op, int64_t n, const float* a, const float* b, float* o) {
  if (op == Binary::Add)
    for (int64_t i = 0; i < n; ++i) o[i] = a[i] + b[i];
  else
    for (int64_t i = 0; i < n; ++i) o[i] = a[i] * b[i];
}

void binary_strided(Binary op, const Tensor& a, const Tensor& b, const Tensor& o) {
  static const bool avx2 = cpu_features().has_avx2_fma();
  const int64_t n0 = o.ne[0];
  const auto* pa = static_cast<const uint8_t*>(a.raw());
  const auto* pb = static_cast<const uint8_t*>(b.raw());
  float* po = row::out(o);
  // Element strides of dim 0 (f32 views are element-aligned: ops::view).
  const int64_t sa = n0 == 1 ? 1 : static_cast<int64_t>(a.nb[0] / sizeof(float));
  const int64_t sb = n0 == 1 ? 1 : static_cast<int64_t>(b.nb[0] / sizeof(float));
  pool().parallel_for(o.n_rows(), row_grain(n0), [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* ar = reinterpret_cast<const float*>(pa + row_offset(a, r));
      const float* br = reinterpret_cast<const float*>(pb + row_offset(b, r));
      float* orow = po + r * n0;
      if (sa == 1 && sb == 1) {
        if (avx2) binary_row_avx2(op, n0, ar, br, orow);
        else binary_row_ref(op, n0, ar, br, orow);
      } else if (op == Binary::Add) {
        for (int64_t i = 0; i < n0; ++i) orow[i] = ar[i * sa] + br[i * sb];
      } else {
        for (int64_t i = 0; i < n0; ++i) orow[i] = ar[i * sa] * br[i * sb];
      }
    }
  });
}

void concat_strided(const Tensor& a, const Tensor& b, const Tensor& o) {
  const int64_t na = a.ne[0], nb = b.ne[0];
  float* po = row::out(o);
  pool().parallel_for(a.n_rows(), row_grain(na + nb), [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) {
      gather_row(a, r, po + r * (na + nb));
      gather_row(b, r, po + r * (na + nb) + na);
    }
  });
}

}  // namespace kvad::cpu
