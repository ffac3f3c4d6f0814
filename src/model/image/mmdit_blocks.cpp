#include "model/image/mmdit_blocks.h"

#include <cmath>

#include "base/error.h"

namespace kvad::image::mmdit {

AdaLNModulation::AdaLNModulation(const WeightScope& s, int64_t cond_dim, int64_t dim_, int64_t n_)
    : linear(s, cond_dim, n_ * dim_, true), dim(dim_), n(n_) {}

std::vector<Tensor> AdaLNModulation::operator()(const Tensor& silu_cond) const {
  const Tensor e = linear(silu_cond);  // [N, n·dim]
  const int64_t N = e.n_elements() / (n * dim);
  std::vector<Tensor> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(ops::slice(e, i * dim, dim).view({dim, 1, N, 1}));
  return out;
}

namespace {
Tensor one_plus(const Tensor& x) {
  const float one = 1.0f;
  return ops::add(x, ops::from_host(&one, DType::F32, {1, 1, 1, 1}, x.device()));
}
}  // namespace

Tensor modulate(const Tensor& x, const Tensor& shift, const Tensor& scale, float eps) {
  // diffusers: norm(x) * (1 + scale[:, None]) + shift[:, None]
  return ops::add(ops::mul(ops::layer_norm(x, Tensor{}, Tensor{}, eps), one_plus(scale)), shift);
}

Tensor linear_tokens(const Linear& l, const Tensor& x) {
  const Tensor y = l(x);
  return y.view({y.ne[0], x.ne[1], x.ne[2], x.ne[3]});
}

Tensor gated_add(const Tensor& x, const Tensor& gate, const Tensor& y) { return ops::add(x, ops::mul(gate, y)); }

RopeTable rope_table(const std::vector<float>& ids, const std::vector<int64_t>& axes_dim, double theta, int64_t batch,
                     Device dev) {
  RopeTable t;
  const int64_t n_axes = static_cast<int64_t>(axes_dim.size());
  if (n_axes == 0 || ids.size() % static_cast<size_t>(n_axes) != 0)
    throw Error("rope: " + std::to_string(ids.size()) + " ids are not rows of " + std::to_string(n_axes) + " axes");
  t.n_tok = static_cast<int64_t>(ids.size()) / n_axes;
  t.batch = batch;
  for (int64_t d : axes_dim) {
    if (d <= 0 || d % 2) throw Error("rope: axes_dims_rope holds " + std::to_string(d) + ", not a positive even dim");
    t.head_dim += d;
  }
  const int64_t half = t.head_dim / 2;
  std::vector<float> c(static_cast<size_t>(half * t.n_tok * batch)), s(c.size()), ns(c.size());
  for (int64_t tok = 0; tok < t.n_tok; ++tok) {
    int64_t k = 0;
    for (int64_t a = 0; a < n_axes; ++a) {
      const double pos = ids[static_cast<size_t>(tok * n_axes + a)];
      const int64_t d = axes_dim[static_cast<size_t>(a)];
      for (int64_t j = 0; j < d / 2; ++j, ++k) {
        // 1 / theta ** (arange(0, d, 2, float64) / d), outer with pos, in float64
        const double f = 1.0 / std::pow(theta, static_cast<double>(2 * j) / static_cast<double>(d));
        const double ang = pos * f;
        for (int64_t b = 0; b < batch; ++b) {
          const size_t i = static_cast<size_t>((b * t.n_tok + tok) * half + k);
          c[i] = static_cast<float>(std::cos(ang));
          s[i] = static_cast<float>(std::sin(ang));
          ns[i] = -s[i];
        }
      }
    }
  }
  t.cos = ops::from_host(c.data(), DType::F32, {half, 1, t.n_tok * batch, 1}, dev);
  t.sin = ops::from_host(s.data(), DType::F32, {half, 1, t.n_tok * batch, 1}, dev);
  t.neg_sin = ops::from_host(ns.data(), DType::F32, {half, 1, t.n_tok * batch, 1}, dev);
  return t;
}

Tensor apply_rope(const Tensor& x, const RopeTable& t) {
  const int64_t D = x.ne[0], H = x.ne[1], TN = x.ne[2] * x.ne[3];
  if (D != t.head_dim || TN != t.n_tok * t.batch || !x.is_contiguous() || x.type != DType::F32)
    throw Error("rope: x " + shape_str(x) + " does not fit a table of head_dim " + std::to_string(t.head_dim) +
                " over " + std::to_string(t.n_tok) + " tokens × " + std::to_string(t.batch));
  const size_t f = sizeof(float);
  const std::array<size_t, 4> nb{2 * f, D * f, H * D * f, H * D * TN * f};
  const Tensor x0 = ops::view(x, {D / 2, H, TN, 1}, nb, 0);  // x[2k]
  const Tensor x1 = ops::view(x, {D / 2, H, TN, 1}, nb, f);  // x[2k + 1]
  // diffusers: x * cos + stack([-x_imag, x_real]) * sin, in this order of rounding
  const Tensor o0 = ops::add(ops::mul(x0, t.cos), ops::mul(x1, t.neg_sin));
  const Tensor o1 = ops::add(ops::mul(x1, t.cos), ops::mul(x0, t.sin));
  const Tensor y = ops::concat(o0.view({1, D / 2, H, TN}), o1.view({1, D / 2, H, TN}), 0);  // pairs interleaved
  return y.view(x.ne);
}

QKV::QKV(const WeightScope& s, const char* q_, const char* k_, const char* v_, const char* nq, const char* nk,
         int64_t dim, int64_t inner, int64_t head_dim)
    : q(s.sub(q_), dim, inner, true),
      k(s.sub(k_), dim, inner, true),
      v(s.sub(v_), dim, inner, true),
      norm_q(vector_f32(s.sub(nq), "weight", head_dim)),
      norm_k(vector_f32(s.sub(nk), "weight", head_dim)) {}

JointAttention::JointAttention(const WeightScope& s, int64_t dim, int64_t heads_, int64_t head_dim_, bool added_,
                               bool out, float eps_)
    : img(s, "to_q", "to_k", "to_v", "norm_q", "norm_k", dim, heads_ * head_dim_, head_dim_),
      added(added_),
      has_out(out),
      heads(heads_),
      head_dim(head_dim_),
      eps(eps_) {
  const int64_t inner = heads * head_dim;
  if (added) {
    txt = QKV(s, "add_q_proj", "add_k_proj", "add_v_proj", "norm_added_q", "norm_added_k", dim, inner, head_dim);
    to_add_out = Linear(s.sub("to_add_out"), inner, dim, true);
  }
  if (out) to_out = Linear(s.sub("to_out.0"), inner, dim, true);
}

JointAttention::Out JointAttention::operator()(const Tensor& img_x, const Tensor& txt_x, const RopeTable& rope) const {
  const int64_t N = img_x.ne[2], D = head_dim, H = heads;
  // q, k, v of one stream as {D, H, n, N}, q and k RMS-normed per head
  auto project = [&](const QKV& p, const Tensor& x, Tensor& q, Tensor& k, Tensor& v) {
    const int64_t n = x.ne[1];
    const std::vector<Tensor> y = ops::matmul_multi(x, {&p.q.w, &p.k.w, &p.v.w});
    auto heads_of = [&](const Tensor& t, const Tensor& b) { return ops::add(t, b).view({D, H, n, N}); };
    q = ops::rms_norm(heads_of(y[0], p.q.b).view({D, H * n * N, 1, 1}), p.norm_q, eps).view({D, H, n, N});
    k = ops::rms_norm(heads_of(y[1], p.k.b).view({D, H * n * N, 1, 1}), p.norm_k, eps).view({D, H, n, N});
    v = heads_of(y[2], p.v.b);
  };
  Tensor q, k, v;
  project(img, img_x, q, k, v);
  const int64_t n_img = img_x.ne[1];
  int64_t n_txt = 0;
  if (added) {
    Tensor tq, tk, tv;
    project(txt, txt_x, tq, tk, tv);
    n_txt = txt_x.ne[1];
    q = ops::concat(tq, q, 2);  // [text, image] along the tokens
    k = ops::concat(tk, k, 2);
    v = ops::concat(tv, v, 2);
  }
  q = apply_rope(q, rope);
  k = apply_rope(k, rope);
  const Tensor a = ops::sdpa(q, k, v, 1.0f / std::sqrt(static_cast<float>(D)));  // {D, H, n_txt + n_img, N}
  const int64_t inner = D * H, n_all = n_txt + n_img;
  const Tensor flat = a.view({inner, n_all, N, 1});
  Out o;
  if (!added) {
    o.img = has_out ? linear_tokens(to_out, flat) : flat;
    return o;
  }
  const size_t f = sizeof(float);
  const std::array<size_t, 4> nb{f, inner * f, inner * n_all * f, inner * n_all * N * f};
  o.txt = linear_tokens(to_add_out, ops::cont(ops::view(flat, {inner, n_txt, N, 1}, nb, 0)));
  o.img = linear_tokens(to_out, ops::cont(ops::view(flat, {inner, n_img, N, 1}, nb, static_cast<size_t>(n_txt) * inner * f)));
  return o;
}

GeluMLP::GeluMLP(const WeightScope& s, int64_t dim, int64_t hidden)
    : fc1(s.sub("net.0.proj"), dim, hidden, true), fc2(s.sub("net.2"), hidden, dim, true) {}

DoubleStreamNames flux_double_stream_names() { return {"norm1.linear", "norm1_context.linear", "ff", "ff_context"}; }
DoubleStreamNames qwen_image_double_stream_names() { return {"img_mod.1", "txt_mod.1", "img_mlp", "txt_mlp"}; }

DoubleStreamBlock::DoubleStreamBlock(const WeightScope& s, const DoubleStreamNames& names, int64_t dim, int64_t heads,
                                     int64_t head_dim, int64_t mlp_hidden, float eps_)
    : img_mod(s.sub(names.img_mod), dim, dim, 6),
      txt_mod(s.sub(names.txt_mod), dim, dim, 6),
      attn(s.sub("attn"), dim, heads, head_dim, true, true, eps_),
      img_mlp(s.sub(names.img_mlp), dim, mlp_hidden),
      txt_mlp(s.sub(names.txt_mlp), dim, mlp_hidden),
      eps(eps_) {}

void DoubleStreamBlock::operator()(Tensor& img, Tensor& txt, const Tensor& silu_temb, const RopeTable& rope) const {
  const std::vector<Tensor> mi = img_mod(silu_temb), mt = txt_mod(silu_temb);  // shift, scale, gate (msa, mlp)
  const JointAttention::Out a = attn(modulate(img, mi[0], mi[1], eps), modulate(txt, mt[0], mt[1], eps), rope);
  img = gated_add(img, mi[2], a.img);
  img = gated_add(img, mi[5], img_mlp(modulate(img, mi[3], mi[4], eps)));
  txt = gated_add(txt, mt[2], a.txt);
  txt = gated_add(txt, mt[5], txt_mlp(modulate(txt, mt[3], mt[4], eps)));
}

}  // namespace kvad::image::mmdit
