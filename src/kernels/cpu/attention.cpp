#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "base/cpu_features.h"
#include "base/error.h"
#include "kernels/cpu/host_kernels.h"
#include "kernels/cpu/row_util.h"

namespace kvad::cpu {

using row::in;
using row::ids;
using row::out;
using row::pool;

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

// Every query of image n, head h sees all n_kv keys of (n, h): rows
// [0, n_kv - 1] of K/V seen from head h's offset with a row stride of
// k.nb[2] bytes (a key's heads side by side; any stride when views).
void sdpa(const Tensor& q, const Tensor& k, const Tensor& v, float scale, const Tensor& o) {
  const int64_t D = q.ne[0], H = q.ne[1], n_q = q.ne[2], N = q.ne[3], n_kv = k.ne[2];
  static const bool avx2 = cpu_features().has_avx2_fma();
  const bool fast = avx2 && D % 8 == 0 && D <= 256;
  const int64_t kTile = fast ? kSdpaMaxRows : AttentionRows::kMax;
  const int64_t n_tiles = (n_q + kTile - 1) / kTile;
  const auto* pq = static_cast<const uint8_t*>(q.raw());
  const auto* pk = static_cast<const uint8_t*>(k.raw());
  const auto* pv = static_cast<const uint8_t*>(v.raw());
  float* po = out(o);
  const int64_t kv_stride = n_kv > 1 ? static_cast<int64_t>(k.nb[2] / sizeof(float)) : 0;  // ops.cpp: k's = v's
  pool().parallel_for(N * H * n_tiles, 1, [&](int64_t i0, int64_t i1, int) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t tile = i % n_tiles, h = (i / n_tiles) % H, n = i / (n_tiles * H);
      const int n_rows = static_cast<int>(std::min(kTile, n_q - tile * kTile));
      const float* qr[kSdpaMaxRows];
      float* orow[kSdpaMaxRows];
      for (int r = 0; r < n_rows; ++r) {
        const int64_t t = tile * kTile + r;
        qr[r] = reinterpret_cast<const float*>(pq + n * q.nb[3] + t * q.nb[2] + h * q.nb[1]);
        orow[r] = po + ((n * n_q + t) * H + h) * D;
      }
      const uint8_t* kb = pk + n * k.nb[3] + h * k.nb[1];
      const uint8_t* vb = pv + n * v.nb[3] + h * v.nb[1];
      if (fast) {
        sdpa_tile_avx2(qr, orow, n_rows, reinterpret_cast<const float*>(kb), reinterpret_cast<const float*>(vb),
                       kv_stride, n_kv, D, scale);
        continue;
      }
      AttentionRows rows;
      rows.n = n_rows;
      for (int r = 0; r < n_rows; ++r) {
        rows.q[r] = qr[r];
        rows.out[r] = orow[r];
        rows.first[r] = 0;
        rows.last[r] = n_kv - 1;
      }
      attention_rows_ref(rows, KVRows{kb, true}, KVRows{vb, true}, kv_stride, D, scale);
    }
  });
}

}  // namespace kvad::cpu
