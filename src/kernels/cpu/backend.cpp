// The CPU's and the sim device's rows of the op table (tensor/backend.h).
//
// Both run the CPU kernels (ops.h, matmul.cpp, the format kernels) on host
// memory. They differ only in memory: a CPU tensor's bytes are host memory
// anyone may read (Tensor::data is set), a sim tensor's are reached only
// through these entries (Tensor::data is null, and ops.cpp counts every host
// transfer), which lets tests prove on any machine that a model resident on
// a device does no host round trip between layers (DESIGN.md seam 3).
//
// Work is split over the pool ops::current_pool() names (Session sets it for
// a forward call); without one, the calling thread does it all.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include "base/error.h"
#include "base/thread_pool.h"
#include "kernels/cpu/row_util.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/mla.h"
#include "kernels/cpu/moe.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/recurrent.h"
#include "kernels/cpu/strided.h"
#include "tensor/backend.h"
#include "tensor/ops.h"

namespace kvad::cpu {
namespace {

// ---- memory --------------------------------------------------------------

constexpr size_t kAlign = 64;
constexpr size_t kMaxCachedBlock = 64u << 20;   // larger blocks go straight back to the system
constexpr size_t kMaxCachedTotal = 256u << 20;  // bound on the bytes kept for reuse

size_t round_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

void* system_alloc(size_t n) {
  void* p = std::aligned_alloc(kAlign, round_up(n));
  if (!p) throw Error("out of host memory allocating " + std::to_string(n) + " bytes");
  return p;
}

// Activations of one forward call have the same few sizes layer after layer:
// freed blocks are kept by exact size and handed out again, last freed
// first, so an op's output is usually a block that is still in cache and
// costs neither a system call nor fresh page faults (with blocks handed out
// in any order, a decode step cycled through ~1 MB of distinct buffers and
// evicted the KV rows attention reads: -6% decode at 512 positions).
// Bounded: at most kMaxCachedTotal bytes wait for reuse.
class BlockCache {
 public:
  void* alloc(size_t n) {
    n = round_up(n);
    {
      std::lock_guard<std::mutex> lk(mu_);
      auto it = free_.find(n);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        cached_ -= n;
        return p;
      }
    }
    return system_alloc(n);
  }
  void release(void* p, size_t n) {
    n = round_up(n);
    if (n <= kMaxCachedBlock) {
      std::lock_guard<std::mutex> lk(mu_);
      if (cached_ + n <= kMaxCachedTotal) {
        free_[n].push_back(p);
        cached_ += n;
        return;
      }
    }
    std::free(p);
  }

 private:
  std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_;  // by size, a stack each
  size_t cached_ = 0;
};

BlockCache& blocks() {
  static BlockCache* c = new BlockCache();  // never destroyed: storages may outlive static destruction order
  return *c;
}

void* cpu_alloc(size_t n) { return blocks().alloc(n); }
void cpu_release(void* p, size_t n) { blocks().release(p, n); }
void* sim_alloc(size_t n) { return system_alloc(n); }
void sim_release(void* p, size_t) { std::free(p); }
void host_copy(void* dst, const void* src, size_t n) { std::memcpy(dst, src, n); }
bool always(std::string*) { return true; }

// ---- helpers -------------------------------------------------------------

using row::in;
using row::ids;
using row::out;
using row::pool;

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

// Element-wise work: chunks of kElemGrain elements over the pool (a decode
// step's vectors run inline on the calling thread).
constexpr int64_t kElemGrain = 1 << 15;
template <class F>
void elementwise(int64_t n, F&& f) {
  pool().parallel_for(n, kElemGrain, [&](int64_t b, int64_t e, int) { f(b, e); });
}

// ---- ops -----------------------------------------------------------------

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

// A strided input has out's shape; as an input of a contiguous kernel it
// is gathered into the (contiguous) output first, and the kernel then runs
// in place there: the same values as on a contiguous input.
Tensor gathered(const Tensor& x, const Tensor& o) {
  cpu::cont(x, o);
  return o;
}

// b is one row repeated over the rows of contiguous a (stride 0 in dims 1..3).
bool row_broadcast(const Tensor& a, const Tensor& b) {
  if (!a.is_contiguous() || (b.ne[0] > 1 && b.nb[0] != sizeof(float))) return false;
  for (int i = 1; i < 4; ++i)
    if (b.ne[i] > 1 && b.nb[i] != 0) return false;
  return true;
}

void binary(Binary op, const Tensor& a, const Tensor& b, const Tensor& o) {
  const bool same = a.is_contiguous() && b.is_contiguous();
  if (!same && !row_broadcast(a, b)) return cpu::binary_strided(op, a, b, o);
  const float* pa = in(a);
  const float* pb = in(b);
  float* po = out(o);
  const int64_t n = a.n_elements(), nb = same ? n : b.ne[0];
  elementwise(n, [&](int64_t i0, int64_t i1) {
    if (nb == n) {
      if (op == Binary::Add)
        for (int64_t i = i0; i < i1; ++i) po[i] = pa[i] + pb[i];
      else
        for (int64_t i = i0; i < i1; ++i) po[i] = pa[i] * pb[i];
    } else {  // b is one row, broadcast: whole rows without a division per element
      for (int64_t i = i0; i < i1;) {
        const int64_t j0 = i % nb, m = std::min(nb - j0, i1 - i);
        const float* pr = pb + j0;
        if (op == Binary::Add)
          for (int64_t j = 0; j < m; ++j) po[i + j] = pa[i + j] + pr[j];
        else
          for (int64_t j = 0; j < m; ++j) po[i + j] = pa[i + j] * pr[j];
        i += m;
      }
    }
  });
}

void scale(const Tensor& x, float s, const Tensor& o) {
  if (!x.is_contiguous()) return scale(gathered(x, o), s, o);
  const float* px = in(x);
  float* po = out(o);
  elementwise(x.n_elements(), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) po[i] = px[i] * s;
  });
}

void rms_norm(const Tensor& x, const Tensor* w, float eps, bool one_plus, const Tensor& o) {
  const int64_t n = x.ne[0];
  const float* px = in(x);
  float* po = out(o);
  std::vector<float> w1;
  const float* pw = w ? in(*w) : nullptr;
  if (pw && one_plus) {
    w1.resize(n);
    for (int64_t i = 0; i < n; ++i) w1[i] = 1.0f + pw[i];
    pw = w1.data();
  }
  pool().parallel_for(x.n_rows(), 16, [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) cpu::rms_norm(px + r * n, pw, n, eps, po + r * n);
  });
}

void layer_norm(const Tensor& x, const Tensor* w, const Tensor* b, float eps, const Tensor& o) {
  const int64_t n = x.ne[0];
  const float* px = in(x);
  const float* pw = w ? in(*w) : nullptr;
  const float* pb = b ? in(*b) : nullptr;
  float* po = out(o);
  pool().parallel_for(x.n_rows(), 16, [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = px + r * n;
      float* yr = po + r * n;
      double mean = 0, var = 0;
      for (int64_t i = 0; i < n; ++i) mean += xr[i];
      mean /= n;
      for (int64_t i = 0; i < n; ++i) var += (xr[i] - mean) * (xr[i] - mean);
      const float inv = 1.0f / std::sqrt(static_cast<float>(var / n) + eps);
      for (int64_t i = 0; i < n; ++i) {
        float v = static_cast<float>(xr[i] - mean) * inv;
        if (pw) v *= pw[i];
        if (pb) v += pb[i];
        yr[i] = v;
      }
    }
  });
}

void rope(const Tensor& x, const Tensor& pos, const RopeParams& p, const Tensor& o) {
  const int64_t D = x.ne[0], H = x.ne[1], n_tok = x.ne[2];
  const float* px = in(x);
  float* po = out(o);
  const int32_t* ps = ids(pos);
  const float* ff = p.freq_factors ? in(p.freq_factors) : nullptr;
  pool().parallel_for(n_tok, 8, [&](int64_t t0, int64_t t1, int) {
    std::memcpy(po + t0 * H * D, px + t0 * H * D, static_cast<size_t>((t1 - t0) * H * D) * sizeof(float));
    for (int64_t t = t0; t < t1; ++t)
      cpu::rope(po + t * H * D, H, D, p.n_rot, ps[t], p.freq_base, p.freq_scale, p.neox, ff, p.attn_factor);
  });
}

void get_rows(const Tensor& table, const Tensor& id, const Tensor& o) {
  HostView ht(table);
  cpu::get_rows(*ht, ids(id), id.n_elements(), out(o));
}

void softmax(const Tensor& x, const Tensor& o) {
  const int64_t n = x.ne[0];
  std::memcpy(out(o), in(x), x.n_bytes());
  float* po = out(o);
  pool().parallel_for(x.n_rows(), 16, [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) cpu::softmax(po + r * n, n);
  });
}

void unary(Unary op, const Tensor& x, const Tensor& o) {
  if (!x.is_contiguous()) return unary(op, gathered(x, o), o);
  const float* px = in(x);
  float* po = out(o);
  elementwise(x.n_elements(), [&](int64_t b, int64_t e) {
    if (op == Unary::SiLU) {
      for (int64_t i = b; i < e; ++i) po[i] = px[i] / (1.0f + std::exp(-px[i]));
    } else if (op == Unary::GELU_erf) {
      for (int64_t i = b; i < e; ++i) po[i] = 0.5f * px[i] * (1.0f + std::erf(px[i] * 0.70710678118654752f));
    } else if (op == Unary::Sigmoid) {
      for (int64_t i = b; i < e; ++i) po[i] = 1.0f / (1.0f + std::exp(-px[i]));
    } else if (op == Unary::Softplus) {  // torch's threshold 20: above it log(1 + e^x) is x in f32
      for (int64_t i = b; i < e; ++i) po[i] = px[i] > 20.0f ? px[i] : std::log1p(std::exp(px[i]));
    } else {
      if (po != px) std::memcpy(po + b, px + b, static_cast<size_t>(e - b) * sizeof(float));
      cpu::gelu(po + b, e - b);
    }
  });
}

void glu(Unary op, const Tensor& g, const Tensor& u, const Tensor& o) {
  if (!u.is_contiguous()) {
    thread_local std::vector<float> up;
    up.resize(static_cast<size_t>(u.n_elements()));
    cpu::cont_to(u, up.data());
    Tensor uc = o;  // up's values, contiguous, on the host
    uc.storage.reset();
    uc.data = up.data();
    uc.offset = 0;
    return glu(op, g, uc, o);
  }
  if (!g.is_contiguous()) return glu(op, gathered(g, o), u, o);
  const int64_t F = g.ne[0];
  const float* pg = in(g);
  const float* pu = in(u);
  float* po = out(o);
  pool().parallel_for(g.n_rows(), 4, [&](int64_t t0, int64_t t1, int) {
    const int64_t n = (t1 - t0) * F;
    if (po != pg) std::memcpy(po + t0 * F, pg + t0 * F, static_cast<size_t>(n) * sizeof(float));
    if (op == Unary::SiLU) cpu::swiglu(po + t0 * F, pu + t0 * F, n);
    else cpu::geglu(po + t0 * F, pu + t0 * F, n);
  });
}

// gpt-oss's clamped SwiGLU, as transformers' GptOssExperts._apply_gate.
void swiglu_oai(const Tensor& g, const Tensor& u, float alpha, float limit, const Tensor& o) {
  if (!g.is_contiguous() || !u.is_contiguous()) {  // u read where it lies, g gathered into o
    const Tensor gc = g.is_contiguous() ? g : gathered(g, o);
    const float* pg = in(gc);
    float* po = out(o);
    const int64_t n0 = o.ne[0];
    pool().parallel_for(o.n_rows(), 64, [&](int64_t r0, int64_t r1, int) {
      std::vector<float> ur(static_cast<size_t>(n0));
      for (int64_t r = r0; r < r1; ++r) {
        cpu::gather_row(u, r, ur.data());
        for (int64_t i = 0; i < n0; ++i) {
          const float x = std::min(pg[r * n0 + i], limit);
          const float y = std::clamp(ur[i], -limit, limit);
          po[r * n0 + i] = (y + 1.0f) * (x / (1.0f + std::exp(-alpha * x)));
        }
      }
    });
    return;
  }
  const float* pg = in(g);
  const float* pu = in(u);
  float* po = out(o);
  elementwise(g.n_elements(), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const float x = std::min(pg[i], limit);
      const float y = std::clamp(pu[i], -limit, limit);
      po[i] = (y + 1.0f) * (x / (1.0f + std::exp(-alpha * x)));
    }
  });
}

void concat(const Tensor& a, const Tensor& b, const Tensor& o) {
  if (!a.is_contiguous() || !b.is_contiguous()) return cpu::concat_strided(a, b, o);
  const int64_t na = a.ne[0], nb = b.ne[0];
  const float* pa = in(a);
  const float* pb = in(b);
  float* po = out(o);
  for (int64_t r = 0; r < a.n_rows(); ++r) {
    std::memcpy(po + r * (na + nb), pa + r * na, static_cast<size_t>(na) * sizeof(float));
    std::memcpy(po + r * (na + nb) + na, pb + r * nb, static_cast<size_t>(nb) * sizeof(float));
  }
}

void slice(const Tensor& x, int64_t off, const Tensor& o) {
  const int64_t m = x.ne[0], n = o.ne[0];
  const float* px = in(x);
  float* po = out(o);
  for (int64_t r = 0; r < x.n_rows(); ++r) std::memcpy(po + r * n, px + r * m + off, static_cast<size_t>(n) * sizeof(float));
}

void kv_store(const Tensor& cache, const Tensor& x, const Tensor& seq, const Tensor& pos, int64_t slots) {
  const int64_t n = cache.ne[0], n_tok = seq.n_elements();
  const float* px = in(x);
  const int32_t* ss = ids(seq);
  const int32_t* ps = ids(pos);
  const int64_t n_seq = cache.n_rows() / slots;
  for (int64_t t = 0; t < n_tok; ++t)
    if (ss[t] < 0 || ss[t] >= n_seq || ps[t] < 0)
      throw Error("kv_store: token " + std::to_string(t) + " at sequence " + std::to_string(ss[t]) + ", position " +
                  std::to_string(ps[t]) + " is outside the cache");
  if (cache.type == DType::F32) {
    float* pc = static_cast<float*>(cache.raw());
    for (int64_t t = 0; t < n_tok; ++t)
      std::memcpy(pc + (ss[t] * slots + ps[t] % slots) * n, px + t * n, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  uint16_t* pc = static_cast<uint16_t*>(cache.raw());
  pool().parallel_for(n_tok, 8, [&](int64_t t0, int64_t t1, int) {
    for (int64_t t = t0; t < t1; ++t) f32_to_f16_row(px + t * n, pc + (ss[t] * slots + ps[t] % slots) * n, n);
  });
}

// Causal attention: token t sees positions [first, pos[t]] of its sequence,
// first = 0, or pos[t] - window + 1 in a sliding-window layer; bidirectional
// (p.causal false): [0, the highest position of its sequence in this call]. Work is cut
// into tiles of query rows that share a KV head: a run of tokens of one
// sequence times the query heads of one group, so each K/V block is read
// once per tile (attention_rows).
void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& seq, const Tensor& pos,
               const AttentionOpParams& p, const Tensor& o) {
  const int64_t D = q.ne[0], H = q.ne[1], n = q.ne[2];
  const int64_t kv_dim = k.ne[0], Hkv = kv_dim / D, G = H / Hkv;
  const int32_t* ss = ids(seq);
  const int32_t* ps = ids(pos);
  const float* pq = in(q);
  float* po = out(o);
  const KVRows pk{k.raw(), k.type == DType::F32}, pv{v.raw(), v.type == DType::F32};
  const float* sinks = p.sinks ? static_cast<const float*>(p.sinks.raw()) : nullptr;
  const int64_t n_seq = k.n_rows() / p.slots;
  for (int64_t t = 0; t < n; ++t)
    if (ss[t] < 0 || ss[t] >= n_seq || ps[t] < 0)
      throw Error("attention: token " + std::to_string(t) + " at sequence " + std::to_string(ss[t]) +
                  ", position " + std::to_string(ps[t]) + " is outside the cache");
  // Bidirectional: each sequence's last position in this call.
  thread_local std::vector<int32_t> last_buf;
  std::vector<int32_t>& last_of = last_buf;
  if (!p.causal) {
    last_of.assign(static_cast<size_t>(n_seq), -1);
    for (int64_t t = 0; t < n; ++t) last_of[ss[t]] = std::max(last_of[ss[t]], ps[t]);
    for (int64_t t = 0; t < n; ++t)
      if (last_of[ss[t]] >= p.slots)
        throw Error("attention: bidirectional attention over position " + std::to_string(last_of[ss[t]]) +
                    " needs a cache of more than " + std::to_string(p.slots) + " slots");
  }
  struct Tile {
    int64_t t0, t1, h0, h1;  // batch tokens [t0, t1) x query heads [h0, h1)
  };
  const int64_t heads_per_tile = std::min<int64_t>(G, AttentionRows::kMax);
  const int64_t toks_per_tile = std::max<int64_t>(1, AttentionRows::kMax / heads_per_tile);
  thread_local std::vector<Tile> tiles_buf;  // the caller's; workers read it through `tiles`
  std::vector<Tile>& tiles = tiles_buf;
  tiles.clear();
  for (int64_t t0 = 0; t0 < n;) {
    int64_t t1 = t0 + 1;
    while (t1 < n && t1 - t0 < toks_per_tile && ss[t1] == ss[t0]) ++t1;
    for (int64_t kvh = 0; kvh < Hkv; ++kvh)
      for (int64_t h0 = kvh * G; h0 < (kvh + 1) * G; h0 += heads_per_tile)
        tiles.push_back({t0, t1, h0, std::min(h0 + heads_per_tile, (kvh + 1) * G)});
    t0 = t1;
  }
  // A full cache (slots > every position) needs no wrap.
  const int64_t ring = p.window > 0 ? p.slots : 0;
  // Later tokens see more keys: hand out the last tiles first.
  pool().parallel_for(static_cast<int64_t>(tiles.size()), 1, [&](int64_t i0, int64_t i1, int) {
    for (int64_t i = i0; i < i1; ++i) {
      const Tile& tile = tiles[tiles.size() - 1 - i];
      AttentionRows rows;
      rows.ring = ring;
      rows.sinks = static_cast<bool>(p.sinks);
      rows.softcap = p.softcap;
      for (int64_t t = tile.t0; t < tile.t1; ++t)
        for (int64_t h = tile.h0; h < tile.h1; ++h) {
          rows.q[rows.n] = pq + (t * H + h) * D;
          rows.out[rows.n] = po + (t * H + h) * D;
          rows.first[rows.n] = p.window > 0 ? std::max<int64_t>(0, ps[t] - p.window + 1) : 0;
          rows.last[rows.n] = p.causal ? ps[t] : last_of[ss[t]];
          if (sinks) rows.sink[rows.n] = sinks[h];
          ++rows.n;
        }
      const int64_t kvh = tile.h0 / G;
      const int64_t base = static_cast<int64_t>(ss[tile.t0]) * p.slots * kv_dim + kvh * D;
      attention_rows(rows, pk.offset(base), pv.offset(base), kv_dim, D, p.scale);
    }
  });
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

constexpr BackendOps kCpuRow = {
    .name = "cpu",
    .available = &always,
    .has_format = &has_cpu_kernels,
    .alloc = &cpu_alloc,
    .release = &cpu_release,
    .write = &host_copy,
    .read = &host_copy,
    .copy = &host_copy,
    .convert = &convert,
    .cont = &cpu::cont,
    .matmul = &matmul,
    .matmul_batched = &cpu::matmul_batched,
    .binary = &binary,
    .scale = &scale,
    .rms_norm = &rms_norm,
    .layer_norm = &layer_norm,
    .rope = &rope,
    .get_rows = &get_rows,
    .softmax = &softmax,
    .unary = &unary,
    .glu = &glu,
    .concat = &concat,
    .slice = &slice,
    .swiglu_oai = &swiglu_oai,
    .kv_store = &kv_store,
    .attention = &attention,
    .attention_latent = &cpu::attention_latent,
    .attention_seq = &cpu::attention_seq,
    .moe_route = &cpu::moe_route,
    .matmul_id = &cpu::matmul_id,
    .moe_sum = &cpu::moe_sum,
    .ssm_conv = &cpu::ssm_conv,
    .gated_delta_rule = &cpu::gated_delta_rule,
};

// The sim row: the CPU's kernels on memory of its own.
constexpr BackendOps make_sim_row() {
  BackendOps r = kCpuRow;
  r.name = "sim";
  r.alloc = &sim_alloc;
  r.release = &sim_release;
  return r;
}
constexpr BackendOps kSimRow = make_sim_row();

const bool kRegistered = [] {
  register_backend(DeviceType::CPU, &kCpuRow);
  register_backend(DeviceType::Sim, &kSimRow);
  return true;
}();

}  // namespace
}  // namespace kvad::cpu

// Referenced with the linker's --undefined by every program that links
// kvad_kernels_cpu (CMakeLists.txt), so this file, and its registration,
// is always linked in from the static library.
extern "C" {
extern const int kvad_cpu_backend_anchor;
const int kvad_cpu_backend_anchor = kvad::cpu::kRegistered ? 1 : 0;
}
