#include "model/cache.h"

#include <algorithm>
#include <string>

#include "base/error.h"
#include "tensor/ops.h"

namespace kvad {

DType kv_cache_type(const std::string& name, const std::string& flag) {
  if (name == "f16") return DType::F16;
  if (name == "f32") return DType::F32;
  throw Error(flag + ": '" + name + "' is not a KV cache type kvad has; accepted: f16 (default), f32");
}

LayerCaches::LayerCaches(const std::vector<LayerSpec>& layers, int32_t n_ctx, int n_seq, int64_t n_batch, Device d,
                         KVTypes types, std::pair<int64_t, int64_t> held)
    : specs_(layers), kv_(layers.size()), latent_(layers.size()), n_ctx_(n_ctx), n_seq_(n_seq), n_batch_(n_batch),
      n_cached_(n_seq, 0), rec_(layers.size()), snaps_(n_seq), extra_(n_seq, -1) {
  for (const DType t : {types.k, types.v})
    if (t != DType::F16 && t != DType::F32)
      throw Error(std::string("cache: KV cache type ") + dtype_name(t) + " is not supported; accepted: f16, f32");
  if (n_ctx <= 0 || n_seq <= 0 || n_batch <= 0)
    throw Error("cache: n_ctx, n_seq and n_batch must be positive (" + std::to_string(n_ctx) + ", " +
                std::to_string(n_seq) + ", " + std::to_string(n_batch) + ")");
  const int64_t held_last = held.second < 0 ? static_cast<int64_t>(layers.size()) : held.second;
  for (size_t il = 0; il < layers.size(); ++il) {
    const bool here = static_cast<int64_t>(il) >= held.first && static_cast<int64_t>(il) < held_last;
    if (const auto* ls = std::get_if<LatentSpec>(&layers[il])) {
      const LatentSpec& s = *ls;
      if (s.kv_lora_rank <= 0 || s.rope_dim < 0)
        throw Error("cache: latent layer " + std::to_string(il) + " has no kv_lora_rank");
      LatentLayer& L = latent_[il];
      L.kv_lora_rank = s.kv_lora_rank;
      L.rope_dim = s.rope_dim;
      L.slots = n_ctx;
      if (!here) continue;
      L.c = ops::empty(DType::F32, {s.kv_lora_rank + s.rope_dim, L.slots * n_seq, 1, 1}, d);
      L.c.name = "cache.latent." + std::to_string(il);
      bytes_ += L.c.n_bytes();
      continue;
    }
    if (const auto* rs = std::get_if<RecurrentSpec>(&layers[il])) {
      const RecurrentSpec& s = *rs;
      if (s.conv_elems <= 0 || s.ssm_elems <= 0 || s.snapshot_every < 0)
        throw Error("cache: recurrent layer " + std::to_string(il) + " has no state size or a negative snapshot interval");
      if (!rec_layers_.empty() && s.snapshot_every != snapshot_every_)
        throw Error("cache: recurrent layers ask for different snapshot intervals");
      snapshot_every_ = s.snapshot_every;
      rec_layers_.push_back(il);
      if (!here) continue;
      RecurrentLayer& R = rec_[il];
      // Zeroed lazily: a sequence's first token (position 0) starts from a zero state.
      R.conv = ops::empty(DType::F32, {s.conv_elems, n_seq, 1, 1}, d);
      R.ssm = ops::empty(DType::F32, {s.ssm_elems, n_seq, 1, 1}, d);
      R.conv.name = "cache.conv." + std::to_string(il);
      R.ssm.name = "cache.ssm." + std::to_string(il);
      rec_bytes_ += R.conv.n_bytes() + R.ssm.n_bytes();
      state_bytes_per_seq_ += R.conv.row_size() + R.ssm.row_size();
      continue;
    }
    const KeyValueSpec& s = std::get<KeyValueSpec>(layers[il]);
    if (s.k_dim <= 0 || s.v_dim <= 0 || s.window < 0) throw Error("cache: layer " + std::to_string(il) + " has no K/V width");
    KVLayer& L = kv_[il];
    L.window = s.window;
    L.slots = s.window > 0 ? std::min<int64_t>(n_ctx, s.window + n_batch) : n_ctx;
    if (!here) continue;
    const int64_t rows = L.slots * n_seq;
    // Uninitialised: rows are written before they are read, and pages never
    // written cost address space, not resident memory.
    L.k = ops::empty(types.k, {s.k_dim, rows, 1, 1}, d);
    L.v = ops::empty(types.v, {s.v_dim, rows, 1, 1}, d);
    L.k.name = "cache.k." + std::to_string(il);
    L.v.name = "cache.v." + std::to_string(il);
    bytes_ += L.k.n_bytes() + L.v.n_bytes();
  }
}

KVLayer& LayerCaches::kv(int64_t il) {
  if (il < 0 || static_cast<size_t>(il) >= kv_.size() || !std::holds_alternative<KeyValueSpec>(specs_[il]))
    throw Error("cache: layer " + std::to_string(il) + " is not a key/value layer");
  if (!kv_[il].k) throw Error("cache: layer " + std::to_string(il) + " is held by another pipeline stage");
  return kv_[il];
}

LatentLayer& LayerCaches::latent(int64_t il) {
  if (il < 0 || static_cast<size_t>(il) >= latent_.size() || !std::holds_alternative<LatentSpec>(specs_[il]))
    throw Error("cache: layer " + std::to_string(il) + " is not a latent layer");
  if (!latent_[il].c) throw Error("cache: layer " + std::to_string(il) + " is held by another pipeline stage");
  return latent_[il];
}

RecurrentLayer& LayerCaches::recurrent(int64_t il) {
  if (il < 0 || static_cast<size_t>(il) >= rec_.size() || !std::holds_alternative<RecurrentSpec>(specs_[il]))
    throw Error("cache: layer " + std::to_string(il) + " is not a recurrent layer");
  if (!rec_[il].conv) throw Error("cache: layer " + std::to_string(il) + " is held by another pipeline stage");
  return rec_[il];
}

int64_t LayerCaches::n_snapshots() const {
  int64_t n = 0;
  for (const auto& m : snaps_) n += static_cast<int64_t>(m.size());
  return n;
}

std::vector<BatchPiece> LayerCaches::split(const BatchView& b) const {
  std::vector<BatchPiece> out;
  if (b.n <= 0) return out;
  const int32_t N = rec_layers_.empty() ? 0 : snapshot_every_;
  const int64_t n_chunks = (b.n + n_batch_ - 1) / n_batch_;
  const int64_t chunk = std::min(n_batch_, ((b.n + n_chunks - 1) / n_chunks + 7) / 8 * 8);
  int64_t start = 0, o = 0;
  for (int64_t t = 0; t < b.n; ++t) {
    if (t + 1 < b.n && (t + 1) % chunk != 0 && !(N > 0 && (b.pos[t] + 1) % N == 0)) continue;
    BatchPiece p;
    p.view = {b.token + start, b.pos + start, b.seq + start, t + 1 - start, nullptr, 0, b.lora,
              b.lora_rows ? b.lora_rows + start : nullptr};
    p.out_offset = o;
    while (o < b.n_out && b.out[o] <= t) p.out.push_back(static_cast<int32_t>(b.out[o++] - start));
    out.push_back(std::move(p));
    start = t + 1;
  }
  for (BatchPiece& p : out) {  // after the moves: the buffers stay where they are
    p.view.out = p.out.data();
    p.view.n_out = static_cast<int64_t>(p.out.size());
  }
  return out;
}

void LayerCaches::commit(const BatchView& b) {
  for (int64_t t = 0; t < b.n; ++t) n_cached_[b.seq[t]] = std::max(n_cached_[b.seq[t]], b.pos[t] + 1);
  if (snapshot_every_ <= 0 || rec_layers_.empty()) return;
  for (int64_t t = 0; t < b.n; ++t) {
    const int s = b.seq[t];
    const int32_t at = n_cached_[s];
    if (b.pos[t] + 1 != at || at % snapshot_every_ != 0 || snaps_[s].count(at)) continue;
    take_snapshot(s, at);
  }
}

void LayerCaches::take_snapshot(int s, int32_t at) {
  std::vector<Tensor>& snap = snaps_[s][at];
  for (size_t il : rec_layers_)
    for (const Tensor* st : {&rec_[il].conv, &rec_[il].ssm}) {
      if (!*st) {  // another stage's layer: a place holder keeps the indices
        snap.emplace_back();
        continue;
      }
      snap.push_back(ops::copy(st->rows(s, s + 1)));
      snapshot_bytes_ += snap.back().n_bytes();
    }
}

void LayerCaches::snapshot(int seq) {
  if (rec_layers_.empty()) return;
  const int32_t at = n_cached_.at(seq);
  auto& m = snaps_[seq];
  if (extra_[seq] >= 0 && extra_[seq] != at) {
    const auto e = m.find(extra_[seq]);
    if (e != m.end()) {
      for (const Tensor& t : e->second) snapshot_bytes_ -= t ? t.n_bytes() : 0;
      m.erase(e);
    }
    extra_[seq] = -1;
  }
  if (at == 0 || m.count(at)) return;  // position 0 is the zero state; a periodic copy is there already
  take_snapshot(seq, at);
  extra_[seq] = at;
}

// A full layer rewinds anywhere. A ring of S slots holds positions
// [cached - S, cached); the token at the landing position n reads
// (n - W, n], so the rows it needs, max(0, n - W + 1) .. n - 1, must still be
// there. When they are not, nothing short of a fresh prefill restores them:
// land on 0.
int32_t LayerCaches::kv_landing(int seq, int32_t n) const {
  const int32_t cur = n_cached_.at(seq);
  int32_t land = std::clamp(n, 0, cur);
  for (const KVLayer& L : kv_) {
    if (L.window <= 0 || land == cur || land == 0) continue;
    const int64_t oldest_kept = cur - L.slots;
    const int64_t needed = std::max<int64_t>(0, static_cast<int64_t>(land) - L.window + 1);
    if (needed < oldest_kept) land = 0;
  }
  return land;
}

// A recurrent state holds exactly cached(seq) tokens: short of that, the
// landing is the largest snapshot at or before what the K/V layers allow
// (0 without one), whose copies become the live states again.
int32_t LayerCaches::truncate(int seq, int32_t n) {
  const int32_t cur = n_cached_.at(seq);
  int32_t land = kv_landing(seq, n);
  if (!rec_layers_.empty() && land < cur) {
    auto& m = snaps_[seq];
    auto it = m.upper_bound(land);
    land = it == m.begin() ? 0 : std::prev(it)->first;
    if (land > 0) land = kv_landing(seq, land);  // a window that no longer reaches back lands on 0
    if (land > 0) {
      const std::vector<Tensor>& snap = m.at(land);
      size_t i = 0;
      for (size_t il : rec_layers_)
        for (const Tensor* st : {&rec_[il].conv, &rec_[il].ssm}) {
          if (*st) ops::copy_into(st->rows(seq, seq + 1), snap[i]);
          ++i;
        }
    }
    for (auto e = m.upper_bound(land); e != m.end();) {
      for (const Tensor& t : e->second) snapshot_bytes_ -= t ? t.n_bytes() : 0;
      e = m.erase(e);
    }
    if (extra_[seq] > land) extra_[seq] = -1;
  }
  n_cached_[seq] = land;
  return land;
}

bool LayerCaches::copy_prefix(int src, int dst, int32_t n) {
  if (src < 0 || dst < 0 || src >= n_seq_ || dst >= n_seq_ || src == dst || n < 0 || n > n_cached_[src]) return false;
  const int32_t cur = n_cached_[src];
  // Recurrent states exist at cur and at the snapshots only.
  if (!rec_layers_.empty() && n > 0 && n != cur && !snaps_[src].count(n)) return false;
  for (const KVLayer& L : kv_) {
    // A ring holds [cur - slots, cur); dst continues at n and reads back to n - W + 1.
    if (L.window > 0 && n > 0 && std::max<int64_t>(0, static_cast<int64_t>(n) - L.window + 1) < cur - L.slots)
      return false;
  }
  if (!rec_layers_.empty()) {
    auto& d = snaps_[dst];
    for (auto& [p, snap] : d)
      for (const Tensor& t : snap) snapshot_bytes_ -= t ? t.n_bytes() : 0;
    d.clear();
    extra_[dst] = -1;
    for (const auto& [p, snap] : snaps_[src]) {  // dst can rewind as src could
      if (p > n) break;
      if (p == extra_[src]) continue;
      std::vector<Tensor>& c = d[p];
      for (const Tensor& t : snap) {
        c.push_back(t ? ops::copy(t) : Tensor{});
        snapshot_bytes_ += t ? t.n_bytes() : 0;
      }
    }
    if (n > 0) {
      const std::vector<Tensor>* from = n == cur ? nullptr : &snaps_[src].at(n);
      size_t i = 0;
      for (size_t il : rec_layers_)
        for (const Tensor* st : {&rec_[il].conv, &rec_[il].ssm}) {
          if (*st) ops::copy_into(st->rows(dst, dst + 1), from ? (*from)[i] : st->rows(src, src + 1));
          ++i;
        }
    }
  }
  if (n == 0) {
    n_cached_[dst] = 0;
    return true;
  }
  // The row indices of a copy of m rows, uploaded once per distinct m (all
  // full layers share one; a ring its own).
  std::vector<int32_t> seq, pos;
  int64_t uploaded = -1;
  Tensor ts, tp;
  for (size_t il = 0; il < latent_.size(); ++il) {
    LatentLayer& L = latent_[il];
    if (!std::holds_alternative<LatentSpec>(specs_[il]) || !L.c) continue;
    if (n != uploaded) {
      seq.assign(static_cast<size_t>(n), dst);
      pos.resize(static_cast<size_t>(n));
      for (int32_t i = 0; i < n; ++i) pos[static_cast<size_t>(i)] = i;
      ts = ops::from_host(seq.data(), DType::I32, {n, 1, 1, 1}, L.c.device());
      tp = ops::from_host(pos.data(), DType::I32, {n, 1, 1, 1}, L.c.device());
      uploaded = n;
    }
    ops::kv_store(L.c, L.c.rows(src * L.slots, src * L.slots + n), ts, tp, L.slots);  // rows of src, not dst
  }
  for (size_t il = 0; il < kv_.size(); ++il) {
    KVLayer& L = kv_[il];
    if (!std::holds_alternative<KeyValueSpec>(specs_[il]) || !L.k) continue;
    // Full layer: rows 0..n-1 are positions 0..n-1. Ring: every slot (what
    // dst will read is a subset, at the same slot indices).
    const int64_t m = std::min<int64_t>(n, L.slots);
    if (m != uploaded) {
      seq.assign(static_cast<size_t>(m), dst);
      pos.resize(static_cast<size_t>(m));
      for (int64_t i = 0; i < m; ++i) pos[static_cast<size_t>(i)] = static_cast<int32_t>(i);
      ts = ops::from_host(seq.data(), DType::I32, {m, 1, 1, 1}, L.k.device());
      tp = ops::from_host(pos.data(), DType::I32, {m, 1, 1, 1}, L.k.device());
      uploaded = m;
    }
    for (Tensor* t : {&L.k, &L.v}) {
      const Tensor rows = ops::convert(t->rows(src * L.slots, src * L.slots + m), DType::F32);
      ops::kv_store(*t, rows, ts, tp, L.slots);
    }
  }
  n_cached_[dst] = n;
  return true;
}

size_t LayerCaches::bytes_per_token() const {
  return bytes_ / (static_cast<size_t>(n_ctx_) * static_cast<size_t>(n_seq_));
}

}  // namespace kvad
