// cpu::matmul_batched (strided.h): y[b] = x[b] · W[b]ᵀ over a leading
// dimension, laid out as matmul_id lays out one expert's products (the
// activation rows of a batch converted once, then one parallel loop over
// (batch, block of weight rows) items, each the format's gemm of those rows
// against the batch's rows), so per-head products of MLA equal what they
// were through matmul_id with head ids, bit for bit.
#include <algorithm>
#include <vector>

#include "base/scratch.h"
#include "base/thread_pool.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/moe.h"
#include "kernels/cpu/row_util.h"
#include "kernels/cpu/strided.h"

namespace kvad::cpu {

void matmul_batched(const Tensor& x, const Tensor& w, const Tensor& o) {
  const int64_t n_in = w.ne[0], n_out = w.ne[1], B = w.ne[2], n_tok = x.ne[1];
  const CpuKernels& kw = cpu_kernels(w.type);
  const DType vt = dtype_info(w.type).vec_dot_type;
  const CpuKernels& kv = cpu_kernels(vt);
  const bool pack = vt != DType::F32 && kw.gemm && kw.gemm_pack;
  const size_t ldq = pack ? kw.gemm_packed_bytes(n_in) : row_bytes(vt, n_in);
  // x repeated over the batches (nb[2] = 0): its rows are converted once.
  const int64_t n_xb = B > 1 && x.nb[2] == 0 ? 1 : B;
  thread_local std::vector<uint8_t> xq_buf;
  const ScratchTrim trim(xq_buf, size_t{64} << 20);
  xq_buf.resize(ldq * static_cast<size_t>(n_xb * n_tok));
  uint8_t* xq = xq_buf.data();
  const auto* px = static_cast<const uint8_t*>(x.raw());
  ThreadPool& tp = row::pool();
  tp.parallel_for(n_xb * n_tok, 4, [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t b = r / n_tok, t = r % n_tok;
      const float* src = reinterpret_cast<const float*>(px + static_cast<size_t>(b) * x.nb[2] +
                                                        static_cast<size_t>(t) * x.nb[1]);
      convert_row(kw, kv, vt, pack, src, n_in, xq + static_cast<size_t>(r) * ldq);
    }
  });

  // Items as matmul_id's with every batch an active expert of n_tok rows.
  const int nth = tp.size();
  int64_t grain = std::max<int64_t>(1, B * n_out / (nth * 16));
  if (n_tok > 1) grain = std::max<int64_t>(grain, 16);
  grain = std::min<int64_t>(grain, n_tok > 1 ? 64 : n_out);
  const int64_t per_b = (n_out + grain - 1) / grain;
  const auto* wbase = static_cast<const uint8_t*>(w.raw());
  const size_t rs = w.row_size();
  float* po = row::out(o);
  tp.parallel_for(B * per_b, 1, [&](int64_t i0, int64_t i1, int) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t b = i / per_b, rb = (i % per_b) * grain, re = std::min(n_out, rb + grain);
      const uint8_t* wr = wbase + (static_cast<size_t>(b) * n_out + rb) * rs;
      const uint8_t* xe = xq + static_cast<size_t>(n_xb == 1 ? 0 : b * n_tok) * ldq;
      float* ye = po + b * n_tok * n_out;
      if (kw.gemm) {
        kw.gemm(n_in, wr, rs, re - rb, xe, ldq, n_tok, ye + rb, n_out);
        continue;
      }
      for (int64_t r = rb; r < re; ++r, wr += rs)
        for (int64_t c = 0; c < n_tok; ++c) ye[c * n_out + r] = kw.vec_dot(n_in, wr, xe + static_cast<size_t>(c) * ldq);
    }
  });
}

}  // namespace kvad::cpu
