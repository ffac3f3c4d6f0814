// bench_cuda_ops: CPU against GPU for matmul (the op that
// matters): per shape and weight format,
//   CPU µs            cpu::matmul on all cores (median of reps)
//   GPU sync µs       Offload::try_matmul + wait(): upload x, compute, download, copy into y
//   GPU async µs      submit until the completion event reports done (host-visible), polled
//   submit µs         the try_matmul call alone (host cost of submitting)
//   GFLOP/s 4q        2·m·n·k·4 / time of 4 calls queued back to back, then waited
//   max abs err       GPU vs CPU result (the CPU quantizes x to q8 for quantized weights;
//                     the GPU reads x in f32, or bf16 in the GEMM path)
// The weight is resident (uploaded before timing). Prints a markdown table.
// The n_tok 512 rows of quantized weights go through the default prefill
// path (KVAD_CUDA_GEMM, default mma).
//
// A second table compares the two prefill paths for quantized weights on
// device-resident operands (cuda::matmul with GemmPath Mma, then Cublas),
// 0.5B shapes at n_tok 512: 896 -> 4864 (q8_0, q4_0; K = 896 is not a whole
// number of K-quant super-blocks) and 4864 -> 896 (all four formats; 112
// tiles < 132 SMs, so the MMA path splits K):
//   slices       gemm_mma's K slices (cublas: -)
//   GPU us       matmul + wait for the compute stream, median
//   TFLOP/s      2·m·n·k / GPU us
//   vs CPU       max |GPU - cpu::matmul| (the CPU quantizes x to q8)
//   mma-cublas   max |mma - cublas| (same bf16 operands; summation order only)
// Exits 0 with "no CUDA device: ..." when there is no GPU.
// Status: UNVERIFIED ON A GPU in this build.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "base/thread_pool.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/host_kernels.h"
#include "kernels/cuda/context.h"
#include "kernels/cuda/offload.h"
#include "kernels/cuda/device_kernels.h"

namespace {

using clk = std::chrono::steady_clock;
double us_since(clk::time_point t0) { return std::chrono::duration<double, std::micro>(clk::now() - t0).count(); }
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string why;
  if (!kvad::cuda::available(&why)) {
    std::printf("bench_cuda_ops: skipped: %s\n", why.c_str());
    return 0;
  }
  const int reps = argc > 1 ? std::atoi(argv[1]) : 10;
  kvad::ThreadPool pool(0);
  kvad::cuda::Offload off(4);
  std::printf("device: %s; CPU threads %d; %d reps (median)\n\n", kvad::cuda::Context::get().device_name().c_str(),
              pool.size(), reps);
  {
    // Device copy bandwidth (bytes read + written per second), the yardstick
    // for decode: a decode step reads every weight byte once.
    const size_t bytes = size_t{1} << 30;
    kvad::cuda::DeviceBuffer a(bytes, "bandwidth a"), b(bytes, "bandwidth b");
    kvad::cuda::Stream st = kvad::cuda::Context::get().compute();
    kvad::cuda::check_status(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice, st), "copy");
    kvad::cuda::Context::get().sync("bandwidth warm-up");
    std::vector<double> t;
    for (int r = 0; r < 5; ++r) {
      const auto t0 = clk::now();
      kvad::cuda::check_status(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice, st), "copy");
      kvad::cuda::Context::get().sync("bandwidth");
      t.push_back(us_since(t0));
    }
    std::printf("copy bandwidth: %.1f GB/s (1 GiB device-to-device, read + write, median of 5)\n\n",
                2.0 * bytes / (median(t) * 1e3));
  }
  std::printf("| shape (n_tok x n_in -> n_out) | format | CPU us | GPU sync us | GPU async us | submit us | GFLOP/s 4q | max abs err |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  struct Case { int64_t n_tok, n_in, n_out; };
  const Case cases[] = {{1, 896, 4864}, {1, 2048, 8192}, {1, 8192, 2048}, {16, 2048, 8192}, {512, 896, 4864}, {512, 2048, 8192}};
  const kvad::DType formats[] = {kvad::DType::BF16, kvad::DType::Q8_0, kvad::DType::Q4_0, kvad::DType::Q4_K, kvad::DType::Q6_K};
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const Case& c : cases) {
    std::vector<float> wf(c.n_in * c.n_out), x(c.n_tok * c.n_in);
    for (float& v : wf) v = 0.05f * nd(rng);
    for (float& v : x) v = nd(rng);
    for (kvad::DType t : formats) {
      const size_t rb = kvad::row_bytes(t, c.n_in);
      std::vector<uint8_t> wb(rb * c.n_out);
      const auto& k = kvad::cpu::cpu_kernels(t);
      for (int64_t r = 0; r < c.n_out; ++r) k.from_float(&wf[r * c.n_in], wb.data() + r * rb, c.n_in);
      kvad::Tensor w;
      w.name = "w";
      w.type = t;
      w.ne = {c.n_in, c.n_out, 1, 1};
    w.set_contiguous_strides();
      w.set_contiguous_strides();
      w.data = wb.data();
      std::vector<float> yc(c.n_tok * c.n_out), yg(c.n_tok * c.n_out);
      std::vector<std::vector<float>> yq(4, std::vector<float>(c.n_tok * c.n_out));
      std::vector<double> cpu_us, sync_us, async_us, submit_us, q4_us;
      const int cpu_reps = c.n_tok >= 512 ? 2 : reps;
      for (int r = 0; r < cpu_reps + 1; ++r) {
        const auto t0 = clk::now();
        kvad::cpu::matmul(pool, w, x.data(), c.n_tok, yc.data());
        if (r) cpu_us.push_back(us_since(t0));
      }
      off.try_matmul(w, x.data(), c.n_tok, yg.data())->wait();  // upload + warm-up
      for (int r = 0; r < reps; ++r) {
        auto t0 = clk::now();
        auto tk = off.try_matmul(w, x.data(), c.n_tok, yg.data());
        submit_us.push_back(us_since(t0));
        while (!tk->ready()) {
        }
        async_us.push_back(us_since(t0));
        tk->wait();
        t0 = clk::now();
        off.try_matmul(w, x.data(), c.n_tok, yg.data())->wait();
        sync_us.push_back(us_since(t0));
        t0 = clk::now();
        std::vector<kvad::cuda::Offload::Ticket> q;
        for (int i = 0; i < 4; ++i) {
          auto tq = off.try_matmul(w, x.data(), c.n_tok, yq[i].data());
          q.push_back(std::move(*tq));
        }
        for (auto& tk2 : q) tk2.wait();
        q4_us.push_back(us_since(t0));
      }
      double err = 0;
      for (size_t i = 0; i < yc.size(); ++i) err = std::max(err, static_cast<double>(std::fabs(yc[i] - yg[i])));
      const double flop = 2.0 * c.n_tok * c.n_in * c.n_out * 4;
      std::printf("| %lld x %lld -> %lld | %s | %.1f | %.1f | %.1f | %.1f | %.1f | %.3g |\n",
                  static_cast<long long>(c.n_tok), static_cast<long long>(c.n_in), static_cast<long long>(c.n_out),
                  kvad::dtype_name(t), median(cpu_us), median(sync_us), median(async_us), median(submit_us),
                  flop / (median(q4_us) * 1e3), err);
      std::fflush(stdout);
    }
  }

  // Prefill GEMM paths for quantized weights, operands resident on the device.
  std::printf("\n| prefill GEMM (n_tok x n_in -> n_out) | format | path | slices | GPU us | TFLOP/s | max abs err vs CPU | max abs mma-cublas |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  struct GemmCase { int64_t n_tok, n_in, n_out; kvad::DType type; };
  const GemmCase gcases[] = {{512, 896, 4864, kvad::DType::Q8_0}, {512, 896, 4864, kvad::DType::Q4_0},
                             {512, 4864, 896, kvad::DType::Q8_0}, {512, 4864, 896, kvad::DType::Q4_0},
                             {512, 4864, 896, kvad::DType::Q4_K}, {512, 4864, 896, kvad::DType::Q6_K}};
  kvad::cuda::Context& ctx = kvad::cuda::Context::get();
  for (const GemmCase& c : gcases) {
    std::vector<float> wf(c.n_in * c.n_out), x(c.n_tok * c.n_in), yc(c.n_tok * c.n_out);
    for (float& v : wf) v = 0.05f * nd(rng);
    for (float& v : x) v = nd(rng);
    const size_t rb = kvad::row_bytes(c.type, c.n_in);
    std::vector<uint8_t> wb(rb * c.n_out);
    const auto& k = kvad::cpu::cpu_kernels(c.type);
    for (int64_t r = 0; r < c.n_out; ++r) k.from_float(&wf[r * c.n_in], wb.data() + r * rb, c.n_in);
    kvad::Tensor w;
    w.name = "w";
    w.type = c.type;
    w.ne = {c.n_in, c.n_out, 1, 1};
    w.set_contiguous_strides();
    w.data = wb.data();
    kvad::cpu::matmul(pool, w, x.data(), c.n_tok, yc.data());
    kvad::cuda::DeviceBuffer wd(wb.size(), "bench w"), xd(x.size() * 4, "bench x"), yd(yc.size() * 4, "bench y");
    kvad::cuda::copy_to_device(wd.get(), wb.data(), wb.size(), "bench w");
    kvad::cuda::copy_to_device(xd.get(), x.data(), x.size() * 4, "bench x");
    const kvad::cuda::DeviceMatrix m{c.type, c.n_in, c.n_out, wd.get()};
    std::vector<float> ym;
    for (kvad::cuda::GemmPath path : {kvad::cuda::GemmPath::Mma, kvad::cuda::GemmPath::Cublas}) {
      const bool mma = path == kvad::cuda::GemmPath::Mma;
      kvad::cuda::matmul(m, xd.as<float>(), c.n_tok, yd.as<float>(), path);  // warm-up (scratch buffers)
      ctx.sync("bench gemm warm-up");
      std::vector<double> t;
      for (int r = 0; r < reps; ++r) {
        const auto t0 = clk::now();
        kvad::cuda::matmul(m, xd.as<float>(), c.n_tok, yd.as<float>(), path);
        ctx.sync("bench gemm");
        t.push_back(us_since(t0));
      }
      std::vector<float> yg(yc.size());
      kvad::cuda::copy_to_host(yg.data(), yd.get(), yg.size() * 4, "bench y");
      double err = 0, diff = 0;
      for (size_t i = 0; i < yc.size(); ++i) {
        err = std::max(err, static_cast<double>(std::fabs(yc[i] - yg[i])));
        if (!mma) diff = std::max(diff, static_cast<double>(std::fabs(ym[i] - yg[i])));
      }
      if (mma) ym = yg;
      const std::string slices =
          mma ? std::to_string(kvad::cuda::gemm_mma_splits(c.n_in, c.n_out, c.n_tok, ctx.sm_count())) : "-";
      char d[32] = "";
      if (!mma) std::snprintf(d, sizeof d, "%.3g", diff);
      std::printf("| %lld x %lld -> %lld | %s | %s | %s | %.1f | %.2f | %.3g | %s |\n",
                  static_cast<long long>(c.n_tok), static_cast<long long>(c.n_in), static_cast<long long>(c.n_out),
                  kvad::dtype_name(c.type), mma ? "mma" : "cublas", slices.c_str(), median(t),
                  2.0 * c.n_tok * c.n_in * c.n_out / (median(t) * 1e6), err, d);
      std::fflush(stdout);
    }
  }
  return 0;
}
