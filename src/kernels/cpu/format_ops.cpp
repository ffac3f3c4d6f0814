#include "kernels/cpu/format_ops.h"

#include <string>
#include <vector>

#include "base/error.h"
#include "kernels/cpu/host_kernels.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/row_util.h"

namespace kvad::cpu {

using row::in;
using row::ids;
using row::out;
using row::pool;

namespace {

// A Tensor whose `data` is its bytes' host address (sim tensors have none),
// for the kernels that read weights through Tensor::row().
struct HostView {
  explicit HostView(const Tensor& t) {
    if (t.data) {
      p = &t;
    } else {
      tmp = t;
      tmp.data = t.raw();
      p = &tmp;
    }
  }
  const Tensor& operator*() const { return *p; }
  const Tensor* get() const { return p; }
  const Tensor* p;
  Tensor tmp;
};

}  // namespace

void matmul(const Tensor& x, const Tensor* const* w, const Tensor* o, int n) {
  const int64_t n_tok = x.n_rows();
  bool host = n <= 8;  // CPU weights: their Tensor::data is the address already
  for (int i = 0; i < n && host; ++i) host = w[i]->data != nullptr;
  if (host) {
    if (n == 1) {
      cpu::matmul(pool(), *w[0], in(x), n_tok, out(o[0]));
      return;
    }
    MatmulTarget t[8];
    for (int i = 0; i < n; ++i) t[i] = {w[i], out(o[i])};
    cpu::matmul_multi(pool(), t, n, in(x), n_tok);
    return;
  }
  std::vector<HostView> hw;
  hw.reserve(n);  // no reallocation: a HostView may point into itself
  std::vector<MatmulTarget> t(n);
  for (int i = 0; i < n; ++i) {
    hw.emplace_back(*w[i]);
    t[i] = {hw.back().get(), out(o[i])};
  }
  cpu::matmul_multi(pool(), t.data(), n, in(x), n_tok);
}

void get_rows(const Tensor& table, const Tensor& id, const Tensor& o) {
  HostView ht(table);
  cpu::get_rows(*ht, ids(id), id.n_elements(), out(o));
}

void convert(const Tensor& src, const Tensor& dst) {
  const CpuKernels& from = cpu_kernels(src.type);
  const CpuKernels& to = cpu_kernels(dst.type);
  if (!from.to_float) throw Error(std::string("convert: no dequantizer for ") + dtype_name(src.type));
  if (!to.from_float) throw Error(std::string("convert: no quantizer for ") + dtype_name(dst.type));
  const int64_t n = src.ne[0];
  const uint8_t* ps = static_cast<const uint8_t*>(src.raw());
  uint8_t* pd = static_cast<uint8_t*>(dst.raw());
  const size_t rs = src.row_size(), rd = dst.row_size();
  pool().parallel_for(src.n_rows(), 16, [&](int64_t r0, int64_t r1, int) {
    std::vector<float> row(n);
    for (int64_t r = r0; r < r1; ++r) {
      from.to_float(ps + r * rs, row.data(), n);
      to.from_float(row.data(), pd + r * rd, n);
    }
  });
}

}  // namespace kvad::cpu
