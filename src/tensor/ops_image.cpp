// The op layer's image ops (tensor/ops.h "images"): checks, output
// allocation, dispatch to the inputs' device row.
#include <cmath>
#include <string>

#include "tensor/ops.h"
#include "tensor/ops_detail.h"

namespace kvad::ops {

using namespace detail;

namespace {
std::string ne_str(const std::array<int64_t, 4>& v) {
  return "{" + std::to_string(v[0]) + ", " + std::to_string(v[1]) + ", " + std::to_string(v[2]) + ", " +
         std::to_string(v[3]) + "}";
}
}  // namespace

Tensor group_norm(const Tensor& x, int64_t n_groups, const Tensor& w, const Tensor& b, float eps) {
  const Device d = dense_inputs("group_norm", {&x, &w, &b});
  need_type("group_norm", x, DType::F32, "x");
  const int64_t C = x.ne[0];
  KVAD_NEED("group_norm", n_groups > 0 && C % n_groups == 0,
            std::to_string(n_groups) + " groups do not divide the " + std::to_string(C) + " channels of x " +
                shape_str(x) + " {C, W, H, N}");
  for (const Tensor* t : {&w, &b}) {
    if (!*t) continue;
    need_type("group_norm", *t, DType::F32, t == &w ? "weight" : "bias");
    KVAD_NEED("group_norm", t->n_elements() == C,
              std::string(t == &w ? "weight " : "bias ") + t->name + " " + shape_str(*t) + " is not [C = " +
                  std::to_string(C) + "] for x " + shape_str(x));
  }
  Tensor out = f32_like(x, x.ne);
  entry(row(d, "group_norm").group_norm, d, "group_norm")(x, n_groups, w ? &w : nullptr, b ? &b : nullptr, eps, out);
  return out;
}

Tensor upsample_nearest2d(const Tensor& x, int64_t factor) {
  const Device d = dense_inputs("upsample_nearest2d", {&x});
  need_type("upsample_nearest2d", x, DType::F32, "x");
  KVAD_NEED("upsample_nearest2d", factor >= 1 && factor <= 64,
            "factor " + std::to_string(factor) + " is not an integer in [1, 64] (x " + shape_str(x) + ")");
  Tensor out = f32_like(x, {x.ne[0], x.ne[1] * factor, x.ne[2] * factor, x.ne[3]});
  entry(row(d, "upsample_nearest2d").upsample_nearest2d, d, "upsample_nearest2d")(x, factor, out);
  return out;
}

Tensor pad(const Tensor& x, std::array<int64_t, 4> lo, std::array<int64_t, 4> hi) {
  const Device d = dense_inputs("pad", {&x});
  need_type("pad", x, DType::F32, "x");
  std::array<int64_t, 4> ne;
  for (int i = 0; i < 4; ++i) {
    KVAD_NEED("pad", lo[i] >= 0 && hi[i] >= 0,
              "padding lo " + ne_str(lo) + " hi " + ne_str(hi) + " of x " + shape_str(x) + " is negative");
    ne[i] = x.ne[i] + lo[i] + hi[i];
  }
  Tensor out = f32_like(x, ne);
  entry(row(d, "pad").pad, d, "pad")(x, lo.data(), out);
  return out;
}

Tensor concat(const Tensor& a, const Tensor& b, int dim) {
  const Device d = same_device("concat", {&a, &b});
  need_type("concat", a, DType::F32, "a");
  need_type("concat", b, DType::F32, "b");
  KVAD_NEED("concat", dim >= 0 && dim < 4, "dim " + std::to_string(dim) + " is not in 0..3");
  std::array<int64_t, 4> ne = a.ne;
  for (int i = 0; i < 4; ++i)
    KVAD_NEED("concat", i == dim || a.ne[i] == b.ne[i],
              "a " + shape_str(a) + " and b " + shape_str(b) + " differ outside dim " + std::to_string(dim));
  ne[dim] = a.ne[dim] + b.ne[dim];
  Tensor out = f32_like(a, ne);
  entry(row(d, "concat").concat_dim, d, "concat")(a, b, dim, out);
  return out;
}

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p) {
  const Device d = dense_inputs("conv2d", {&x, &w, &bias});
  need_type("conv2d", x, DType::F32, "x");
  const int64_t C = x.ne[0], W = x.ne[1], H = x.ne[2], N = x.ne[3];
  const int64_t KW = w.ne[1], KH = w.ne[2], OC = w.ne[3];
  const auto what = [&] {
    return "x " + shape_str(x) + " {C, W, H, N}, weight " + w.name + " " + shape_str(w) + " {C, KW, KH, OC}, stride {" +
           std::to_string(p.stride_w) + ", " + std::to_string(p.stride_h) + "}, padding {" + std::to_string(p.pad_w) +
           ", " + std::to_string(p.pad_h) + "}";
  };
  KVAD_NEED("conv2d", w.ne[0] == C, what() + ": the weight's input channels are not x's");
  KVAD_NEED("conv2d", p.stride_w >= 1 && p.stride_h >= 1 && p.pad_w >= 0 && p.pad_h >= 0,
            what() + ": strides must be >= 1 and padding >= 0");
  KVAD_NEED("conv2d", W + 2 * p.pad_w >= KW && H + 2 * p.pad_h >= KH, what() + ": the kernel is larger than the padded image");
  KVAD_NEED("conv2d", w.type == DType::F32 || has_format(d, w.type),
            std::string("weight ") + w.name + " is " + dtype_name(w.type) + ", a format " + d.str() +
                " cannot compute with");
  if (bias) {
    need_type("conv2d", bias, DType::F32, "bias");
    KVAD_NEED("conv2d", bias.n_elements() == OC, "bias " + shape_str(bias) + " is not [OC] for " + what());
  }
  const int64_t OW = (W + 2 * p.pad_w - KW) / p.stride_w + 1, OH = (H + 2 * p.pad_h - KH) / p.stride_h + 1;
  Tensor out = f32_like(x, {OC, OW, OH, N});
  entry(row(d, "conv2d").conv2d, d, "conv2d")(x, w, bias ? &bias : nullptr, p, out);
  return out;
}

Tensor conv2d_weight(const Tensor& w) {
  KVAD_NEED("conv2d_weight", w.type == DType::F32 || w.type == DType::F16 || w.type == DType::BF16,
            "weight " + w.name + " " + shape_str(w) + " is " + dtype_name(w.type) + ", not f32, f16 or bf16");
  // {KW, KH, C, OC} -> {C, KW, KH, OC}: dim 0 goes to 1, 1 to 2, 2 to 0.
  return cont(permute(w, {1, 2, 0, 3}));  // a view when C = 1 or KW = KH = 1: no bytes move
}

Tensor sdpa(const Tensor& q, const Tensor& k, const Tensor& v, float scale) {
  const Device d = same_device("sdpa", {&q, &k, &v});
  for (const Tensor* t : {&q, &k, &v}) {
    need_type("sdpa", *t, DType::F32, t == &q ? "q" : t == &k ? "k" : "v");
    KVAD_NEED("sdpa", t->ne[0] == 1 || t->nb[0] == sizeof(float),
              shape_str(*t) + " has strided head vectors (nb[0] must be 4: ops::cont first)");
  }
  const int64_t D = q.ne[0], H = q.ne[1], N = q.ne[3];
  KVAD_NEED("sdpa", k.ne[0] == D && v.ne[0] == D && k.ne[1] == H && v.ne[1] == H && k.ne[2] == v.ne[2] &&
                        k.ne[3] == N && v.ne[3] == N,
            "q " + shape_str(q) + ", k " + shape_str(k) + ", v " + shape_str(v) +
                " are not [N, n_q, H, D], [N, n_kv, H, D], [N, n_kv, H, D]");
  KVAD_NEED("sdpa", k.ne[2] == 1 || k.nb[2] == v.nb[2],
            "k " + shape_str(k) + " and v " + shape_str(v) + " have different token strides (ops::cont one)");
  KVAD_NEED("sdpa", std::isfinite(scale), "scale " + std::to_string(scale) + " is not finite");
  Tensor out = f32_like(q, q.ne);
  entry(row(d, "sdpa").sdpa, d, "sdpa")(q, k, v, scale, out);
  return out;
}

}  // namespace kvad::ops
