// The cross-backend op check (ggml's test-backend-ops is the model;
// DESIGN.md seam 2), shared by the op tests: random inputs on the CPU, the
// op run there and on copies of the inputs on every other device present,
// sim compared bit for bit, the others within a tolerance.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "tensor/ops.h"

namespace kvad::op_test {

using Shape = std::array<int64_t, 4>;

inline std::vector<Device> devices() {
  std::vector<Device> d = {Device::sim()};
  if (ops::unavailable(Device::cuda()).empty()) d.push_back(Device::cuda());
  return d;
}

inline Tensor rand_f32(std::mt19937& rng, Shape ne, float scale = 1.0f, float offset = 0.0f) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(ne[0] * ne[1] * ne[2] * ne[3]);
  for (float& x : v) x = offset + scale * nd(rng);
  return ops::from_host(v.data(), DType::F32, ne, Device::cpu());
}

inline Tensor ids_tensor(const std::vector<int32_t>& v) {
  return ops::from_host(v.data(), DType::I32, {static_cast<int64_t>(v.size()), 1, 1, 1}, Device::cpu());
}

inline std::vector<float> host_f32(const Tensor& t) {
  std::vector<float> v(t.n_elements());
  ops::to_host(t, v.data());
  return v;
}

// Max |a - b| / max(1, |a|).
inline double max_err(const std::vector<float>& ref, const std::vector<float>& got) {
  EXPECT_EQ(ref.size(), got.size());
  double m = 0;
  for (size_t i = 0; i < ref.size() && i < got.size(); ++i) {
    const double d = std::fabs(double(ref[i]) - got[i]) / std::max(1.0, std::fabs(double(ref[i])));
    m = std::isnan(d) ? INFINITY : std::max(m, d);
  }
  return m;
}

// Runs `op` on the CPU inputs and on copies of them on every device, and
// compares the f32 results: sim bit for bit with the CPU, others within
// `tol` of the CPU, or, when `exact` is given, within bound(i) of exact[i]
// (a definition computed in double, for ops whose CPU result is itself an
// approximation, such as matmul with activations quantized to q8). A device
// without the format a case needs (`needs`) skips it.
inline void check(const std::string& name, const std::vector<Tensor>& in, double tol,
           const std::function<Tensor(const std::vector<Tensor>&)>& op, DType needs = DType::F32,
           const std::vector<double>* exact = nullptr, const std::vector<double>* bound = nullptr) {
  ThreadPool pool(2);
  ops::PoolScope scope(pool);
  const std::vector<float> ref = host_f32(op(in));
  for (const Device d : devices()) {
    const bool sim = d.type == DeviceType::Sim;
    if (!ops::has_format(d, needs)) {
      std::printf("[op] %-40s %-5s skipped (no %s kernels)\n", name.c_str(), d.str().c_str(), dtype_name(needs));
      continue;
    }
    std::vector<Tensor> din;
    for (const Tensor& t : in) din.push_back(t ? ops::to(t, d) : Tensor{});
    const Tensor out = op(din);
    EXPECT_EQ(out.device(), d) << name;
    if (sim) {
      EXPECT_EQ(out.data, nullptr) << name << ": a sim tensor must not expose host memory";
    }
    const std::vector<float> got = host_f32(out);
    if (sim || !exact) {
      const double e = max_err(ref, got);
      std::printf("[op] %-40s %-5s max_err %.3g (tol %.3g)\n", name.c_str(), d.str().c_str(), e, sim ? 0.0 : tol);
      if (sim) {
        EXPECT_EQ(e, 0.0) << name << " on sim";
      } else {
        EXPECT_LE(e, tol) << name << " on " << d.str();
      }
      continue;
    }
    double worst = 0;  // max |got - exact| / bound
    for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(got[i] - (*exact)[i]) / (*bound)[i]);
    std::printf("[op] %-40s %-5s max |err| / bound %.3g (<= 1 passes)\n", name.c_str(), d.str().c_str(), worst);
    EXPECT_LE(worst, 1.0) << name << " on " << d.str();
  }
}

}  // namespace kvad::op_test
