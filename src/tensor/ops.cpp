// The op layer: checks, output allocation, dispatch to the inputs' device row.
#include "tensor/ops.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include "base/error.h"
#include "tensor/ops_detail.h"

namespace kvad {

namespace {
const BackendOps* g_rows[kDeviceTypes] = {};
std::atomic<MatmulOffloadFn> g_offload{nullptr};
}  // namespace

void register_backend(DeviceType t, const BackendOps* ops) { g_rows[static_cast<int>(t)] = ops; }
const BackendOps* find_backend(DeviceType t) { return g_rows[static_cast<int>(t)]; }
void set_matmul_offload(MatmulOffloadFn fn) { g_offload.store(fn); }
MatmulOffloadFn matmul_offload() { return g_offload.load(); }

}  // namespace kvad

namespace kvad::ops {

using namespace detail;

namespace {

thread_local ThreadPool* t_pool = nullptr;

struct Counters {
  std::atomic<int64_t> to_device{0}, to_device_bytes{0}, to_host{0}, to_host_bytes{0};
};
Counters g_counts[kDeviceTypes];

}  // namespace

ThreadPool* current_pool() { return t_pool; }
PoolScope::PoolScope(ThreadPool& pool) : prev_(t_pool) { t_pool = &pool; }
PoolScope::~PoolScope() { t_pool = prev_; }

std::string unavailable(Device d) {
  const BackendOps* r = find_backend(d.type);
  if (!r) {
    if (d.type == DeviceType::CUDA) return "kvad was built without CUDA (reconfigure with nvcc in PATH, or -DKVAD_CUDA=ON)";
    return "no kernels for device " + d.str() + " in this build";
  }
  std::string why;
  if (r->available && !r->available(&why)) return why.empty() ? d.str() + " is not available" : why;
  if (d.type == DeviceType::CUDA && d.index != 0) return "only cuda:0 is supported, not " + d.str();
  return "";
}

bool has_format(Device d, DType t) {
  const BackendOps* r = find_backend(d.type);
  return r && r->has_format && r->has_format(t);
}

TransferStats transfer_stats(DeviceType t) {
  const Counters& c = g_counts[static_cast<int>(t)];
  return {c.to_device.load(), c.to_device_bytes.load(), c.to_host.load(), c.to_host_bytes.load()};
}

void reset_transfer_stats() {
  for (Counters& c : g_counts) c.to_device = c.to_device_bytes = c.to_host = c.to_host_bytes = 0;
}

// ---- memory --------------------------------------------------------------

Tensor empty(DType t, std::array<int64_t, 4> ne, Device d) {
  const BackendOps& r = row(d, "empty");
  for (int64_t n : ne)
    if (n <= 0) fail("empty", "dimension " + std::to_string(n) + " is not positive");
  if (ne[0] % dtype_info(t).block_elems != 0)
    fail("empty", "row of " + std::to_string(ne[0]) + " is not a whole number of " + dtype_name(t) + " blocks");
  Tensor x;
  x.type = t;
  x.ne = ne;
  x.set_contiguous_strides();
  const size_t n = x.n_bytes();
  void* p = r.alloc(n ? n : 1);
  x.storage = std::make_shared<Storage>(d, p, n ? n : 1, r.release);
  if (d.is_cpu()) x.data = p;
  return x;
}

Tensor wrap_host(const void* src, DType t, std::array<int64_t, 4> ne) {
  Tensor x;
  x.type = t;
  x.ne = ne;
  x.set_contiguous_strides();
  x.data = src;
  return x;
}

Tensor from_host(const void* src, DType t, std::array<int64_t, 4> ne, Device d) {
  Tensor x = empty(t, ne, d);
  const size_t n = x.n_bytes();
  row(d, "from_host").write(x.raw(), src, n);
  if (!d.is_cpu()) {
    Counters& c = g_counts[static_cast<int>(d.type)];
    ++c.to_device;
    c.to_device_bytes += static_cast<int64_t>(n);
  }
  return x;
}

void to_host(const Tensor& t, void* dst) {
  const Device d = dense_inputs("to_host", {&t});
  if (t.storage) t.storage->wait();
  const size_t n = t.n_bytes();
  if (d.is_cpu()) {
    std::memcpy(dst, t.raw(), n);
    return;
  }
  row(d, "to_host").read(dst, t.raw(), n);
  Counters& c = g_counts[static_cast<int>(d.type)];
  ++c.to_host;
  c.to_host_bytes += static_cast<int64_t>(n);
}

Tensor to(const Tensor& t, Device d) {
  if (t.device() == d) return t;
  need_contiguous("to", {&t});
  Tensor out;
  if (t.device().is_cpu()) {
    out = from_host(t.data, t.type, t.ne, d);
  } else {
    out = empty(t.type, t.ne, d);
    if (d.is_cpu()) {
      to_host(t, out.f32_mut());
    } else {  // between two devices: through the host
      std::vector<uint8_t> tmp(t.n_bytes());
      to_host(t, tmp.data());
      out = from_host(tmp.data(), t.type, t.ne, d);
    }
  }
  out.name = t.name;
  return out;
}

Tensor copy(const Tensor& t) {
  const Device d = dense_inputs("copy", {&t});
  Tensor out = empty(t.type, t.ne, d);  // ordered after t's writer on the device: no host wait
  entry(row(d, "copy").copy, d, "copy")(out.raw(), t.raw(), t.n_bytes());
  out.name = t.name;
  return out;
}

void copy_into(const Tensor& dst, const Tensor& src) {
  const Device d = dense_inputs("copy_into", {&dst, &src});
  KVAD_NEED("copy_into", dst.type == src.type && dst.n_elements() == src.n_elements(),
            "dst " + shape_str(dst) + " " + dtype_name(dst.type) + " and src " + shape_str(src) + " " +
                dtype_name(src.type) + " differ");
  entry(row(d, "copy_into").copy, d, "copy_into")(dst.raw(), src.raw(), src.n_bytes());
}

// ---- views ---------------------------------------------------------------

namespace {
// Bytes from a tensor's first element to the end of its last one.
size_t span(const Tensor& t) {
  const DTypeInfo& ti = dtype_info(t.type);
  size_t last = (static_cast<size_t>(t.ne[0] / ti.block_elems) - 1) * t.nb[0];
  for (int i = 1; i < 4; ++i) last += static_cast<size_t>(t.ne[i] - 1) * t.nb[i];
  return last + ti.block_bytes;
}
}  // namespace

Tensor view(const Tensor& t, std::array<int64_t, 4> ne, std::array<size_t, 4> nb, size_t offset) {
  const DTypeInfo& ti = dtype_info(t.type);
  Tensor v = t;
  v.ne = ne;
  v.nb = nb;
  const auto what = [&] {  // the message, built only on failure
    return "view [" + std::to_string(ne[0]) + ", " + std::to_string(ne[1]) + ", " + std::to_string(ne[2]) + ", " +
           std::to_string(ne[3]) + "] nb [" + std::to_string(nb[0]) + ", " + std::to_string(nb[1]) + ", " +
           std::to_string(nb[2]) + ", " + std::to_string(nb[3]) + "] at +" + std::to_string(offset) + " of " +
           t.name + " " + shape_str(t);
  };
  for (int64_t n : ne) KVAD_NEED("view", n > 0, what() + ": a dimension is not positive");
  const bool blocks_whole = ti.block_elems == 1 || ne[0] == ti.block_elems || nb[0] == ti.block_bytes;
  KVAD_NEED("view", ne[0] % ti.block_elems == 0 && blocks_whole,
            what() + ": a " + dtype_name(t.type) + " row must be whole, contiguous blocks");
  if (ti.block_elems == 1) {  // element formats: every element aligned to its size
    bool aligned = offset % ti.block_bytes == 0;
    for (size_t b : nb) aligned = aligned && b % ti.block_bytes == 0;
    KVAD_NEED("view", aligned, what() + ": strides and offset must be multiples of the element's " +
                                   std::to_string(ti.block_bytes) + " bytes");
  }
  KVAD_NEED("view", offset + span(v) <= span(t), what() + ": reaches past the tensor's bytes");
  v.offset = t.offset + offset;
  if (t.data) v.data = static_cast<const uint8_t*>(t.data) + offset;
  return v;
}

Tensor permute(const Tensor& t, std::array<int, 4> axes) {
  bool seen[4] = {};
  for (int a : axes) {
    KVAD_NEED("permute", a >= 0 && a < 4 && !seen[a],
              "axes {" + std::to_string(axes[0]) + ", " + std::to_string(axes[1]) + ", " + std::to_string(axes[2]) +
                  ", " + std::to_string(axes[3]) + "} are not a permutation of 0..3");
    seen[a] = true;
  }
  KVAD_NEED("permute", dtype_info(t.type).block_elems == 1 || axes[0] == 0,
            t.name + " " + shape_str(t) + " is " + dtype_name(t.type) + ": its blocks stay in dimension 0");
  Tensor v = t;
  for (int i = 0; i < 4; ++i) {
    v.ne[axes[i]] = t.ne[i];
    v.nb[axes[i]] = t.nb[i];
  }
  return v;
}

Tensor transpose(const Tensor& t) { return permute(t, {1, 0, 2, 3}); }

Tensor cont(const Tensor& t) {
  if (t.is_contiguous()) return t;
  const Device d = same_device("cont", {&t});
  const DTypeInfo& ti = dtype_info(t.type);
  KVAD_NEED("cont", ti.block_elems == 1 || t.nb[0] == ti.block_bytes,
            t.name + " " + shape_str(t) + " is " + dtype_name(t.type) + " with strided blocks");
  Tensor out = empty(t.type, t.ne, d);
  entry(row(d, "cont").cont, d, "cont")(t, out);
  out.name = t.name;
  return out;
}

// ---- ops -----------------------------------------------------------------

namespace {

void check_matmul(const Tensor& x, const Tensor& w, Device d) {
  need_type("matmul", x, DType::F32, "x");
  KVAD_NEED("matmul", w.ne[2] == 1 && w.ne[3] == 1, "weight " + w.name + " " + shape_str(w) + " is not 2-D");
  KVAD_NEED("matmul", x.ne[0] == w.ne[0],
       "x " + shape_str(x) + " does not match weight " + w.name + " " + shape_str(w));
  KVAD_NEED("matmul", has_format(d, w.type),
       std::string("weight ") + w.name + " is " + dtype_name(w.type) + ", a format " + d.str() + " cannot compute with");
}

}  // namespace

std::vector<Tensor> matmul_multi(const Tensor& x, std::initializer_list<const Tensor*> ws) {
  const Device d = dense_inputs("matmul", {&x});
  const int64_t n_tok = x.n_rows();
  std::vector<Tensor> out;
  out.reserve(ws.size());
  for (const Tensor* w : ws) {
    KVAD_NEED("matmul", w && *w && w->device() == d, "weight on another device than x (" + d.str() + ")");
    need_contiguous("matmul", {w});
    check_matmul(x, *w, d);
    out.push_back(f32_like(x, {w->n_rows(), n_tok, 1, 1}));
  }
  if (out.empty()) return out;
  const Tensor* const* wp = ws.begin();
  int n = static_cast<int>(ws.size());
  if (d.is_cpu()) {
    if (MatmulOffloadFn off = matmul_offload()) {  // products the hook takes are done; the rest run below
      const Tensor* rest_w[8];
      Tensor rest_o[8];
      int k = 0;
      for (int i = 0; i < n; ++i) {
        if (off(*wp[i], x.f32(), n_tok, out[i].f32_mut())) continue;
        if (k == 8) {
          row(d, "matmul").matmul(x, &wp[i], &out[i], 1);
        } else {
          rest_w[k] = wp[i];
          rest_o[k++] = out[i];
        }
      }
      if (k) row(d, "matmul").matmul(x, rest_w, rest_o, k);
      return out;
    }
  }
  entry(row(d, "matmul").matmul, d, "matmul")(x, wp, out.data(), n);
  return out;
}

Tensor matmul_batched(const Tensor& x, const Tensor& w) {
  const Device d = same_device("matmul_batched", {&x, &w});
  need_contiguous("matmul_batched", {&w});
  need_type("matmul_batched", x, DType::F32, "x");
  KVAD_NEED("matmul_batched", x.ne[0] == 1 || x.nb[0] == sizeof(float),
            "x " + shape_str(x) + " has strided rows (nb[0] must be 4: ops::cont first)");
  KVAD_NEED("matmul_batched", x.ne[3] == 1 && w.ne[3] == 1 && x.ne[0] == w.ne[0] && x.ne[2] == w.ne[2],
            "x " + shape_str(x) + " is not [B, n_tok, n_in] for weights " + w.name + " " + shape_str(w) +
                " [B, n_out, n_in]");
  KVAD_NEED("matmul_batched", has_format(d, w.type),
            std::string("weights ") + w.name + " are " + dtype_name(w.type) + ", a format " + d.str() +
                " cannot compute with");
  Tensor out = f32_like(x, {w.ne[1], x.ne[1], x.ne[2], 1});
  entry(row(d, "matmul_batched").matmul_batched, d, "matmul_batched")(x, w, out);
  return out;
}

Tensor matmul(const Tensor& x, const Tensor& w, const Tensor* bias) {
  std::vector<Tensor> y = matmul_multi(x, {&w});
  if (bias && *bias) return add(y[0], *bias);
  return std::move(y[0]);
}

namespace {
// t seen with shape ne: each dimension of size 1 that ne widens repeats
// (stride 0), the others are t's.
Tensor expand(const Tensor& t, const std::array<int64_t, 4>& ne) {
  Tensor v = t;
  for (int i = 0; i < 4; ++i)
    if (t.ne[i] != ne[i]) {
      v.ne[i] = ne[i];
      v.nb[i] = 0;
    }
  return v;
}

Tensor binary(Binary op, const char* name, const Tensor& a, const Tensor& b) {
  const Device d = same_device(name, {&a, &b});
  need_type(name, a, DType::F32, "a");
  need_type(name, b, DType::F32, "b");
  std::array<int64_t, 4> ne;
  for (int i = 0; i < 4; ++i) {
    KVAD_NEED(name, a.ne[i] == b.ne[i] || a.ne[i] == 1 || b.ne[i] == 1,
              "shapes " + shape_str(a) + " and " + shape_str(b) + " do not broadcast");
    ne[i] = std::max(a.ne[i], b.ne[i]);
  }
  Tensor out = f32_like(a, ne);
  Tensor wa, wb;  // widened views, only where a size-1 dimension repeats
  const Tensor& ea = a.ne == ne ? a : (wa = expand(a, ne));
  const Tensor& eb = b.ne == ne ? b : (wb = expand(b, ne));
  entry(row(d, name).binary, d, name)(op, ea, eb, out);
  return out;
}
}  // namespace

Tensor add(const Tensor& a, const Tensor& b) { return binary(Binary::Add, "add", a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary(Binary::Mul, "mul", a, b); }

Tensor scale(const Tensor& x, float s) {
  const Device d = same_device("scale", {&x});
  need_type("scale", x, DType::F32, "x");
  Tensor out = f32_like(x, x.ne);
  entry(row(d, "scale").scale, d, "scale")(x, s, out);
  return out;
}

namespace {
void check_vec(const char* op, const Tensor& w, int64_t n, const char* what) {
  if (!w) return;
  need_type(op, w, DType::F32, what);
  KVAD_NEED(op, w.n_elements() == n, std::string(what) + " " + w.name + " " + shape_str(w) + " does not have " +
                                   std::to_string(n) + " elements");
}
}  // namespace

Tensor rms_norm(const Tensor& x, const Tensor& w, float eps, NormWeight mode) {
  const Device d = dense_inputs("rms_norm", {&x, &w});
  need_type("rms_norm", x, DType::F32, "x");
  check_vec("rms_norm", w, x.ne[0], "weight");
  Tensor out = f32_like(x, x.ne);
  entry(row(d, "rms_norm").rms_norm, d, "rms_norm")(x, w ? &w : nullptr, eps, mode == NormWeight::OnePlus, out);
  return out;
}

Tensor layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, float eps) {
  const Device d = dense_inputs("layer_norm", {&x, &w, &b});
  need_type("layer_norm", x, DType::F32, "x");
  check_vec("layer_norm", w, x.ne[0], "weight");
  check_vec("layer_norm", b, x.ne[0], "bias");
  Tensor out = f32_like(x, x.ne);
  entry(row(d, "layer_norm").layer_norm, d, "layer_norm")(x, w ? &w : nullptr, b ? &b : nullptr, eps, out);
  return out;
}

Tensor rope(const Tensor& x, const Tensor& pos, const RopeParams& p) {
  const Device d = dense_inputs("rope", {&x, &pos});
  need_type("rope", x, DType::F32, "x");
  need_type("rope", pos, DType::I32, "pos");
  KVAD_NEED("rope", x.ne[3] == 1 && pos.n_elements() == x.ne[2],
       "x " + shape_str(x) + " is not [n_tok, n_head, head_dim] for " + std::to_string(pos.n_elements()) + " positions");
  KVAD_NEED("rope", p.n_rot > 0 && p.n_rot % 2 == 0 && p.n_rot <= x.ne[0],
       "n_rot " + std::to_string(p.n_rot) + " does not fit head_dim " + std::to_string(x.ne[0]));
  if (p.freq_factors) {
    need_contiguous("rope", {&p.freq_factors});
    KVAD_NEED("rope", p.freq_factors.device() == d, "freq_factors are on " + p.freq_factors.device().str() + ", x on " + d.str());
    need_type("rope", p.freq_factors, DType::F32, "freq_factors");
    KVAD_NEED("rope", p.freq_factors.n_elements() == p.n_rot / 2,
              "freq_factors " + shape_str(p.freq_factors) + " is not [n_rot/2 = " + std::to_string(p.n_rot / 2) + "]");
  }
  Tensor out = f32_like(x, x.ne);
  entry(row(d, "rope").rope, d, "rope")(x, pos, p, out);
  return out;
}

Tensor get_rows(const Tensor& table, const Tensor& ids) {
  const Device d = dense_inputs("get_rows", {&table, &ids});
  need_type("get_rows", ids, DType::I32, "ids");
  KVAD_NEED("get_rows", table.type == DType::F32 || has_format(d, table.type),
       std::string("table ") + table.name + " is " + dtype_name(table.type) + ", a format " + d.str() + " cannot read");
  Tensor out = f32_like(table, {table.ne[0], ids.n_elements(), 1, 1});
  entry(row(d, "get_rows").get_rows, d, "get_rows")(table, ids, out);
  return out;
}

Tensor softmax(const Tensor& x) {
  const Device d = dense_inputs("softmax", {&x});
  need_type("softmax", x, DType::F32, "x");
  Tensor out = f32_like(x, x.ne);
  entry(row(d, "softmax").softmax, d, "softmax")(x, out);
  return out;
}

namespace {
Tensor unary(Unary op, Op v, const char* name, const Tensor& x) {
  const Device d = same_device(name, {&x});
  need_type(name, x, DType::F32, "x");
  need_variant(row(d, name), v, d, name);
  Tensor out = f32_like(x, x.ne);
  entry(row(d, name).unary, d, name)(op, x, out);
  return out;
}
Tensor glu(Unary op, Op v, const char* name, const Tensor& g, const Tensor& u) {
  const Device d = same_device(name, {&g, &u});
  need_variant(row(d, name), v, d, name);
  need_type(name, g, DType::F32, "gate");
  need_type(name, u, DType::F32, "up");
  KVAD_NEED(name, g.ne == u.ne, "gate " + shape_str(g) + " and up " + shape_str(u) + " differ");
  Tensor out = f32_like(g, g.ne);
  entry(row(d, name).glu, d, name)(op, g, u, out);
  return out;
}
}  // namespace

Tensor silu(const Tensor& x) { return unary(Unary::SiLU, Op::Silu, "silu", x); }
Tensor gelu(const Tensor& x) { return unary(Unary::GELU_tanh, Op::Gelu, "gelu", x); }
Tensor gelu_erf(const Tensor& x) { return unary(Unary::GELU_erf, Op::GeluErf, "gelu_erf", x); }
Tensor sigmoid(const Tensor& x) { return unary(Unary::Sigmoid, Op::Sigmoid, "sigmoid", x); }
Tensor softplus(const Tensor& x) { return unary(Unary::Softplus, Op::Softplus, "softplus", x); }
Tensor swiglu(const Tensor& g, const Tensor& u) { return glu(Unary::SiLU, Op::Swiglu, "swiglu", g, u); }
Tensor geglu(const Tensor& g, const Tensor& u) { return glu(Unary::GELU_tanh, Op::Geglu, "geglu", g, u); }
Tensor geglu_erf(const Tensor& g, const Tensor& u) { return glu(Unary::GELU_erf, Op::GegluErf, "geglu_erf", g, u); }
Tensor tanh(const Tensor& x) { return unary(Unary::Tanh, Op::Tanh, "tanh", x); }
Tensor sin(const Tensor& x) { return unary(Unary::Sin, Op::Sin, "sin", x); }
Tensor cos(const Tensor& x) { return unary(Unary::Cos, Op::Cos, "cos", x); }
Tensor quick_gelu(const Tensor& x) { return unary(Unary::QuickGELU, Op::QuickGelu, "quick_gelu", x); }

Tensor geglu_split(const Tensor& x) {
  need_contiguous("geglu_split", {&x});
  need_type("geglu_split", x, DType::F32, "x");
  KVAD_NEED("geglu_split", x.ne[0] % 2 == 0, "x " + shape_str(x) + " has an odd ne[0]: no two halves");
  const int64_t F = x.ne[0] / 2;
  const std::array<int64_t, 4> ne = {F, x.ne[1], x.ne[2], x.ne[3]};
  const Tensor hidden = view(x, ne, x.nb, 0);
  const Tensor gate = view(x, ne, x.nb, static_cast<size_t>(F) * sizeof(float));
  return glu(Unary::GELU_erf, Op::GegluErf, "geglu_split", gate, hidden);
}

Tensor swiglu_oai(const Tensor& g, const Tensor& u, float alpha, float limit) {
  const Device d = same_device("swiglu_oai", {&g, &u});
  need_type("swiglu_oai", g, DType::F32, "gate");
  need_type("swiglu_oai", u, DType::F32, "up");
  KVAD_NEED("swiglu_oai", g.ne == u.ne, "gate " + shape_str(g) + " and up " + shape_str(u) + " differ");
  Tensor out = f32_like(g, g.ne);
  entry(row(d, "swiglu_oai").swiglu_oai, d, "swiglu_oai")(g, u, alpha, limit, out);
  return out;
}

Tensor concat(const Tensor& a, const Tensor& b) {
  const Device d = same_device("concat", {&a, &b});
  need_type("concat", a, DType::F32, "a");
  need_type("concat", b, DType::F32, "b");
  KVAD_NEED("concat", a.n_rows() == b.n_rows(), "row counts of " + shape_str(a) + " and " + shape_str(b) + " differ");
  Tensor out = f32_like(a, {a.ne[0] + b.ne[0], a.n_rows(), 1, 1});
  entry(row(d, "concat").concat, d, "concat")(a, b, out);
  return out;
}

Tensor slice(const Tensor& x, int64_t off, int64_t n) {
  const Device d = dense_inputs("slice", {&x});
  need_type("slice", x, DType::F32, "x");
  KVAD_NEED("slice", off >= 0 && n > 0 && off + n <= x.ne[0],
            "columns [" + std::to_string(off) + ", " + std::to_string(off + n) + ") are outside " + shape_str(x));
  Tensor out = f32_like(x, {n, x.ne[1], x.ne[2], x.ne[3]});
  entry(row(d, "slice").slice, d, "slice")(x, off, out);
  return out;
}

namespace {
void check_ids(const char* op, const Tensor& seq, const Tensor& pos, int64_t n_tok) {
  need_type(op, seq, DType::I32, "seq");
  need_type(op, pos, DType::I32, "pos");
  KVAD_NEED(op, seq.n_elements() == n_tok && pos.n_elements() == n_tok,
       std::to_string(n_tok) + " tokens but " + std::to_string(seq.n_elements()) + " seq and " +
           std::to_string(pos.n_elements()) + " pos ids");
}
}  // namespace

void kv_store(const Tensor& cache, const Tensor& x, const Tensor& seq, const Tensor& pos, int64_t slots) {
  const Device d = dense_inputs("kv_store", {&cache, &x, &seq, &pos});
  need_kv_type("kv_store", cache, "cache");
  need_type("kv_store", x, DType::F32, "x");
  KVAD_NEED("kv_store", x.n_elements() == seq.n_elements() * cache.ne[0],
       "x " + shape_str(x) + " is not " + std::to_string(seq.n_elements()) + " rows of the cache's " +
           std::to_string(cache.ne[0]));
  check_ids("kv_store", seq, pos, seq.n_elements());
  KVAD_NEED("kv_store", slots > 0 && cache.n_rows() % slots == 0, "cache rows are not a whole number of rings");
  entry(row(d, "kv_store").kv_store, d, "kv_store")(cache, x, seq, pos, slots);
}

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& seq, const Tensor& pos,
                 const AttentionOpParams& p) {
  const Device d = dense_inputs("attention", {&q, &k, &v, &seq, &pos});
  need_type("attention", q, DType::F32, "q");
  need_kv_type("attention", k, "k cache");
  need_kv_type("attention", v, "v cache");
  const int64_t D = q.ne[0], H = q.ne[1], n_tok = q.ne[2];
  check_ids("attention", seq, pos, n_tok);
  KVAD_NEED("attention", q.ne[3] == 1 && k.ne == v.ne && k.ne[0] % D == 0 && H % (k.ne[0] / D) == 0,
       "q " + shape_str(q) + " does not fit caches " + shape_str(k) + " (GQA needs n_head % n_head_kv == 0)");
  KVAD_NEED("attention", p.slots > 0 && k.n_rows() % p.slots == 0, "cache rows are not a whole number of rings");
  KVAD_NEED("attention", p.causal || p.window == 0, "a sliding window needs causal attention");
  KVAD_NEED("attention", std::isfinite(p.softcap) && p.softcap >= 0,
            "softcap " + std::to_string(p.softcap) + " is not a finite value >= 0");
  if (p.sinks) {
    need_contiguous("attention", {&p.sinks});
    KVAD_NEED("attention", p.sinks.device() == d, "sinks live on another device than q");
    need_type("attention", p.sinks, DType::F32, "sinks");
    KVAD_NEED("attention", p.sinks.n_elements() == H,
              "sinks " + shape_str(p.sinks) + " are not one value per head of q " + shape_str(q));
  }
  const BackendOps& r = row(d, "attention");
  if (!p.causal) need_variant(r, Op::AttentionBidirectional, d, "attention");
  if (p.sinks) need_variant(r, Op::AttentionSinks, d, "attention");
  if (p.softcap > 0) need_variant(r, Op::AttentionSoftcap, d, "attention");
  Tensor out = f32_like(q, q.ne);
  entry(r.attention, d, "attention")(q, k, v, seq, pos, p, out);
  return out;
}

Tensor attention_seq(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pos, float scale) {
  const Device d = dense_inputs("attention_seq", {&q, &k, &v, &pos});
  need_type("attention_seq", q, DType::F32, "q");
  need_type("attention_seq", k, DType::F32, "k");
  need_type("attention_seq", v, DType::F32, "v");
  need_type("attention_seq", pos, DType::I32, "pos");
  const int64_t H = q.ne[1], n_tok = q.ne[2], n_kv = k.ne[2];
  KVAD_NEED("attention_seq", q.ne[3] == 1 && k.ne[3] == 1 && v.ne[3] == 1 && k.ne[0] == q.ne[0] && k.ne[1] == H &&
                                 v.ne[1] == H && v.ne[2] == n_kv && pos.n_elements() == n_tok,
            "q " + shape_str(q) + ", k " + shape_str(k) + ", v " + shape_str(v) + " and pos " + shape_str(pos) +
                " do not fit");
  Tensor out = f32_like(q, {v.ne[0], H, n_tok, 1});
  entry(row(d, "attention_seq").attention_seq, d, "attention_seq")(q, k, v, pos, scale, out);
  return out;
}

Tensor attention_latent(const Tensor& q, const Tensor& cache, const Tensor& seq, const Tensor& pos,
                        const AttentionOpParams& p, int64_t n_v) {
  const Device d = dense_inputs("attention_latent", {&q, &cache, &seq, &pos});
  need_type("attention_latent", q, DType::F32, "q");
  need_type("attention_latent", cache, DType::F32, "latent cache");
  const int64_t D = q.ne[0], H = q.ne[1], n_tok = q.ne[2];
  check_ids("attention_latent", seq, pos, n_tok);
  KVAD_NEED("attention_latent", q.ne[3] == 1 && cache.ne[0] == D && cache.ne[2] == 1 && cache.ne[3] == 1,
            "q " + shape_str(q) + " does not fit the latent cache " + shape_str(cache));
  KVAD_NEED("attention_latent", n_v > 0 && n_v <= D, "n_v " + std::to_string(n_v) + " is not in (0, " + std::to_string(D) + "]");
  KVAD_NEED("attention_latent", p.slots > 0 && cache.n_rows() % p.slots == 0, "cache rows are not a whole number of rings");
  KVAD_NEED("attention_latent", p.causal, "latent attention is causal");
  KVAD_NEED("attention_latent", p.softcap == 0, "latent attention has no logit soft-capping");
  Tensor out = f32_like(q, {n_v, H, n_tok, 1});
  entry(row(d, "attention_latent").attention_latent, d, "attention_latent")(q, cache, seq, pos, p, out);
  return out;
}

Tensor convert(const Tensor& t, DType to) {
  if (t.type == to) return t;
  const Device d = dense_inputs("convert", {&t});
  KVAD_NEED("convert", t.ne[0] % dtype_info(to).block_elems == 0,
       t.name + ": rows of " + std::to_string(t.ne[0]) + " are not a whole number of " + dtype_name(to) + " blocks");
  Tensor out = empty(to, t.ne, d);
  entry(row(d, "convert").convert, d, "convert")(t, out);
  out.name = t.name;
  return out;
}

MoeRoute moe_route(const Tensor& logits, int64_t k, bool norm) {
  MoeRouteParams p;
  p.k = k;
  p.norm = norm;
  return moe_route(logits, p);
}

MoeRoute moe_route(const Tensor& logits, const MoeRouteParams& p) {
  const Device d = dense_inputs("moe_route", {&logits, &p.bias});
  need_type("moe_route", logits, DType::F32, "logits");
  const int64_t n_tok = logits.n_rows(), n_exp = logits.ne[0], k = p.k;
  KVAD_NEED("moe_route", k > 0 && k <= n_exp, "k " + std::to_string(k) + " does not fit " + std::to_string(n_exp) + " experts");
  KVAD_NEED("moe_route", p.n_group > 0 && n_exp % p.n_group == 0 && p.topk_group > 0 && p.topk_group <= p.n_group &&
                             k <= p.topk_group * (n_exp / p.n_group) && (!p.group_top2_sum || n_exp / p.n_group >= 2),
            "groups (n_group " + std::to_string(p.n_group) + ", topk_group " + std::to_string(p.topk_group) +
                ") do not fit " + std::to_string(n_exp) + " experts with k " + std::to_string(k));
  if (p.bias) {
    need_type("moe_route", p.bias, DType::F32, "bias");
    KVAD_NEED("moe_route", p.bias.n_elements() == n_exp, "bias " + shape_str(p.bias) + " is not one value per expert");
  }
  MoeRoute r;
  r.ids = empty(DType::I32, {k, n_tok, 1, 1}, d);
  r.weights = f32_like(logits, {k, n_tok, 1, 1});
  entry(row(d, "moe_route").moe_route, d, "moe_route")(logits, p, r.ids, r.weights);
  return r;
}

Tensor matmul_id(const Tensor& x, const Tensor& w, const Tensor& ids) {
  const Device d = dense_inputs("matmul_id", {&x, &w, &ids});
  need_type("matmul_id", x, DType::F32, "x");
  need_type("matmul_id", ids, DType::I32, "ids");
  const int64_t k = ids.ne[0], n_tok = ids.n_rows();
  KVAD_NEED("matmul_id", w.ne[3] == 1 && x.ne[0] == w.ne[0],
            "x " + shape_str(x) + " does not match experts " + w.name + " " + shape_str(w));
  KVAD_NEED("matmul_id", x.ne[3] == 1 && x.ne[2] == n_tok && (x.ne[1] == 1 || x.ne[1] == k),
            "x " + shape_str(x) + " is not [n_tok, 1 or k, n_in] for ids " + shape_str(ids));
  KVAD_NEED("matmul_id", has_format(d, w.type),
            std::string("experts ") + w.name + " are " + dtype_name(w.type) + ", a format " + d.str() + " cannot compute with");
  Tensor out = f32_like(x, {w.ne[1], k, n_tok, 1});
  entry(row(d, "matmul_id").matmul_id, d, "matmul_id")(x, w, ids, out);
  return out;
}

Tensor moe_sum(const Tensor& y, const Tensor& weights) {
  const Device d = dense_inputs("moe_sum", {&y, &weights});
  need_type("moe_sum", y, DType::F32, "y");
  need_type("moe_sum", weights, DType::F32, "weights");
  KVAD_NEED("moe_sum", y.ne[3] == 1 && weights.ne[0] == y.ne[1] && weights.n_rows() == y.ne[2],
            "y " + shape_str(y) + " is not [n_tok, k, n] for weights " + shape_str(weights));
  Tensor out = f32_like(y, {y.ne[0], y.ne[2], 1, 1});
  entry(row(d, "moe_sum").moe_sum, d, "moe_sum")(y, weights, out);
  return out;
}

Tensor ssm_conv(const Tensor& x, const Tensor& w, const Tensor& state, const Tensor& seq, const Tensor& pos) {
  const Device d = dense_inputs("ssm_conv", {&x, &w, &state, &seq, &pos});
  need_type("ssm_conv", x, DType::F32, "x");
  need_type("ssm_conv", w, DType::F32, "w");
  need_type("ssm_conv", state, DType::F32, "state");
  const int64_t C = x.ne[0], K = w.ne[0];
  KVAD_NEED("ssm_conv", w.n_rows() == C && K >= 2, "w " + shape_str(w) + " is not [C = " + std::to_string(C) + ", K >= 2]");
  KVAD_NEED("ssm_conv", state.ne[0] == (K - 1) * C,
            "state " + shape_str(state) + " rows are not (K - 1) · C = " + std::to_string((K - 1) * C));
  check_ids("ssm_conv", seq, pos, x.n_rows());
  Tensor out = f32_like(x, x.ne);
  entry(row(d, "ssm_conv").ssm_conv, d, "ssm_conv")(x, w, state, seq, pos, out);
  return out;
}

Tensor gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                        const Tensor& state, const Tensor& seq, const Tensor& pos, const DeltaRuleParams& p) {
  const Device d = dense_inputs("gated_delta_rule", {&q, &k, &v, &g, &beta, &state, &seq, &pos});
  for (const Tensor* t : {&q, &k, &v, &g, &beta, &state}) need_type("gated_delta_rule", *t, DType::F32, "input");
  const int64_t Dk = q.ne[0], Hk = q.ne[1], n = q.ne[2], Dv = v.ne[0], Hv = v.ne[1];
  KVAD_NEED("gated_delta_rule", k.ne == q.ne && v.ne[2] == n && q.ne[3] == 1 && v.ne[3] == 1 && Hv % Hk == 0,
            "q " + shape_str(q) + ", k " + shape_str(k) + ", v " + shape_str(v) +
                " are not [n_tok, Hk, Dk], [n_tok, Hk, Dk], [n_tok, Hv, Dv] with Hv a multiple of Hk");
  KVAD_NEED("gated_delta_rule", g.n_elements() == n * Hv && beta.n_elements() == n * Hv,
            "g " + shape_str(g) + " and beta " + shape_str(beta) + " are not [n_tok, Hv]");
  KVAD_NEED("gated_delta_rule", state.ne[0] == Hv * Dk * Dv,
            "state " + shape_str(state) + " rows are not Hv · Dk · Dv = " + std::to_string(Hv * Dk * Dv));
  KVAD_NEED("gated_delta_rule", p.chunk >= 0, "chunk " + std::to_string(p.chunk) + " is negative");
  check_ids("gated_delta_rule", seq, pos, n);
  Tensor out = f32_like(v, v.ne);
  entry(row(d, "gated_delta_rule").gated_delta_rule, d, "gated_delta_rule")(q, k, v, g, beta, state, seq, pos, p, out);
  return out;
}

}  // namespace kvad::ops
