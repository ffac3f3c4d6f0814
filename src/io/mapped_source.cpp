#include "io/mapped_source.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <algorithm>
#include <cmath>
#include <deque>
#include <memory>
#include <set>

#include "base/error.h"
#include "tensor/half.h"

namespace kvad {
namespace {

class MappedSource final : public TensorSource, public std::enable_shared_from_this<MappedSource> {
 public:
  MappedSource(std::shared_ptr<const TensorSource> base, const std::vector<TensorRename>& rules, Metadata md,
               const std::vector<std::string>& ignored, std::vector<SyntheticTensor> synthetic, bool list_only,
               std::map<std::string, std::string, std::less<>> key_fields)
      : base_(std::move(base)), md_(std::move(md)), key_fields_(std::move(key_fields)), list_only_(list_only) {
    std::map<std::string, int, std::less<>> used;
    for (const std::string& n : ignored) used[n] = 1;
    owned_.reserve(rules.size() + synthetic.size());  // pointers into owned_ stay valid
    std::map<std::string, std::vector<std::pair<int64_t, const SourceTensor*>>> stacks;
    std::map<std::string, int64_t> chunked;  // base → its chunk count
    for (const TensorRename& r : rules) {
      const SourceTensor* b = base_->find(r.base);
      if (!b) throw Error(base_->path() + ": missing tensor " + r.base + " (for " + r.name + ")");
      // 2: named by a rule; 3: named by rules taking lanes (or chunks) of it, one each.
      const bool split = r.lanes > 1 || r.chunks > 1;
      const int64_t piece = r.lanes > 1 ? r.lane : r.chunk;
      const int seen = used.count(r.base) ? used[r.base] : 0;
      if (seen == 2 || (seen == 3 && (!split || !lanes_.insert({r.base, piece}).second)))
        throw Error(base_->path() + ": tensor " + r.base + " named twice");
      if (split) lanes_.insert({r.base, piece});
      if (r.chunks > 1) chunked[r.base] = r.chunks;
      used[r.base] = split ? 3 : 2;
      if (r.transform == TensorTransform::Fp8BlockScaled) {
        const SourceTensor* sc = base_->find(r.scale);
        if (!sc) throw Error(base_->path() + ": missing tensor " + r.scale + " (the block scales of " + r.base + ")");
        if (used.count(r.scale) && used[r.scale] == 2) throw Error(base_->path() + ": tensor " + r.scale + " named twice");
        used[r.scale] = 2;
        b = &dequantized_.emplace_back(fp8_block_scaled(*b, *sc, r));
      }
      if (r.part <= 0) bases_.emplace(r.name, r.part == 0 ? r.base + ", ..." : r.base);  // a stack: its part 0
      if (r.part >= 0) {
        if (r.transform != TensorTransform::None && r.transform != TensorTransform::Fp8BlockScaled)
          throw Error(base_->path() + ": " + r.base + ": stacked and transformed");
        stacks[r.name].emplace_back(r.part, b);
        continue;
      }
      SourceTensor t = *b;
      t.name = r.name;
      if (r.chunks > 1) {
        t = chunk(*b, r);
      } else if (r.transform == TensorTransform::Fp8BlockScaled) {
        // dequantized above
      } else if (r.transform == TensorTransform::Mxfp4) {
        const SourceTensor* sc = base_->find(r.scale);
        if (!sc) throw Error(base_->path() + ": missing tensor " + r.scale + " (the scales of " + r.base + ")");
        used[r.scale] = 3;
        t = mxfp4(*b, *sc, r);
      } else if (r.lanes > 1 || r.transform == TensorTransform::Transpose) {
        t = rearrange(*b, r);
        if (r.transform == TensorTransform::ToF32 || r.transform == TensorTransform::ToF32PlusOne) t = to_f32(t, r);
      } else if (r.transform != TensorTransform::None) {
        t = to_f32(*b, r);
      }
      if (r.head_groups > 0) t = tile_heads(t, r);
      if (r.view_dims > 0) {
        const auto& v = r.view_ne;
        if (r.view_dims > 4 || v[0] * v[1] * v[2] * v[3] != t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3])
          throw Error(base_->path() + ": tensor " + b->name + " cannot be viewed as " + std::to_string(v[0]) + "x" +
                      std::to_string(v[1]) + "x" + std::to_string(v[2]) + "x" + std::to_string(v[3]));
        t.ne = v;
        t.n_dims = r.view_dims;
        t.shape.clear();
        for (int d = t.n_dims - 1; d >= 0; --d) t.shape.push_back(t.ne[d]);
      }
      tensors_.push_back(std::move(t));
    }
    for (auto& [name, parts] : stacks) tensors_.push_back(stack(name, parts));
    // A tensor cut into chunks is read only when every chunk is (the unread-tensor guard).
    for (const auto& [base, n] : chunked)
      for (int64_t c = 0; c < n; ++c)
        if (!lanes_.count({base, c}))
          throw Error(base_->path() + ": chunk " + std::to_string(c) + " of " + std::to_string(n) + " of tensor " +
                      base + " is not used by architecture " + get_string("general.architecture", "?"));
    for (const SourceTensor& b : base_->tensors())
      if (!used.count(b.name))
        throw Error(base_->path() + ": tensor " + b.name + " is not used by architecture " +
                    get_string("general.architecture", "?"));
    for (SyntheticTensor& s : synthetic) {
      const int64_t n = s.ne[0] * s.ne[1] * s.ne[2] * s.ne[3];
      if (n != static_cast<int64_t>(s.data.size()))
        throw Error(base_->path() + ": synthetic tensor " + s.name + " has " + std::to_string(s.data.size()) +
                    " values for " + std::to_string(n) + " elements");
      std::vector<float>& v = owned_.emplace_back(std::move(s.data));
      SourceTensor t;
      t.name = s.name;
      t.type = DType::F32;
      t.ne = s.ne;
      t.n_dims = s.n_dims;
      t.data = v.data();
      t.n_bytes = v.size() * sizeof(float);
      t.origin = base_->path() + " (config.json)";
      t.stored_dtype = "F32";
      for (int d = t.n_dims - 1; d >= 0; --d) t.shape.push_back(t.ne[d]);
      tensors_.push_back(std::move(t));
    }
    for (size_t i = 0; i < tensors_.size(); ++i)
      if (!index_.emplace(tensors_[i].name, i).second)
        throw Error(base_->path() + ": tensor " + tensors_[i].name + " named twice");
  }

  const std::string& path() const override { return base_->path(); }
  const std::vector<SourceTensor>& tensors() const override { return tensors_; }
  const SourceTensor* find(std::string_view name) const override {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &tensors_[it->second];
  }
  // The view's tensors point into the base's mapping (which the view holds) and into the view itself.
  std::shared_ptr<const void> keepalive() const override { return shared_from_this(); }
  bool has(std::string_view key) const override { return md_.find(key) != md_.end(); }
  int64_t get_int(std::string_view key, int64_t def) const override {
    auto it = md_.find(key);
    if (it == md_.end()) return def;
    if (const int64_t* v = std::get_if<int64_t>(&it->second)) return *v;
    throw Error(path() + ": " + std::string(key) + " is not an integer");
  }
  int64_t require_int(std::string_view key) const override {
    if (!has(key)) throw Error(path() + ": missing " + std::string(key));
    return get_int(key, 0);
  }
  double get_float(std::string_view key, double def) const override {
    auto it = md_.find(key);
    if (it == md_.end()) return def;
    if (const double* v = std::get_if<double>(&it->second)) return *v;
    if (const int64_t* v = std::get_if<int64_t>(&it->second)) return static_cast<double>(*v);
    throw Error(path() + ": " + std::string(key) + " is not a number");
  }
  std::string get_string(std::string_view key, const std::string& def) const override {
    auto it = md_.find(key);
    if (it == md_.end()) return def;
    if (const std::string* v = std::get_if<std::string>(&it->second)) return *v;
    throw Error(path() + ": " + std::string(key) + " is not a string");
  }
  std::vector<bool> get_bool_array(std::string_view key) const override {
    auto it = md_.find(key);
    if (it == md_.end()) return {};
    if (const std::vector<bool>* v = std::get_if<std::vector<bool>>(&it->second)) return *v;
    throw Error(path() + ": " + std::string(key) + " is not an array of booleans");
  }
  bool is_array(std::string_view key) const override {
    auto it = md_.find(key);
    return it != md_.end() && (std::holds_alternative<std::vector<bool>>(it->second) ||
                               std::holds_alternative<std::vector<int64_t>>(it->second));
  }
  std::string key_name(std::string_view key) const override {
    auto it = key_fields_.find(key);
    return it == key_fields_.end() ? std::string(key) : std::string(key) + " (" + it->second + ")";
  }
  std::string tensor_name(std::string_view name) const override {
    auto it = bases_.find(name);
    return it == bases_.end() || it->second == name ? std::string(name) : std::string(name) + " (" + it->second + ")";
  }
  const Metadata& metadata() const { return md_; }

 private:
  // Small vectors (norms) converted once into memory the view owns.
  SourceTensor to_f32(const SourceTensor& b, const TensorRename& r) {
    const int64_t n = b.ne[0] * b.ne[1] * b.ne[2] * b.ne[3];
    if (!b.data && list_only_) return listed(b, r.name, DType::F32, static_cast<size_t>(n) * sizeof(float));
    std::vector<float>& v = owned_.emplace_back(static_cast<size_t>(n));
    const auto* p = static_cast<const uint16_t*>(b.data);
    switch (b.type) {
      case DType::F32: std::memcpy(v.data(), b.data, n * sizeof(float)); break;
      case DType::F16: for (int64_t i = 0; i < n; ++i) v[i] = f16_to_f32(p[i]); break;
      case DType::BF16: for (int64_t i = 0; i < n; ++i) v[i] = bf16_to_f32(p[i]); break;
      default:
        throw Error(base_->path() + ": tensor " + b.name + " is " + dtype_name(b.type) + ", expected f32, f16 or bf16");
    }
    if (r.transform == TensorTransform::ToF32PlusOne)
      for (float& x : v) x += 1.0f;
    if (r.transform == TensorTransform::ToF32NegExp)
      for (float& x : v) x = -std::exp(x);
    SourceTensor t = b;
    t.name = r.name;
    t.type = DType::F32;
    t.data = v.data();
    t.n_bytes = v.size() * sizeof(float);
    return t;
  }

  // Parts 0..n-1 of one name, each [ne0, ne1] of one format, as [n, ne1, ne0].
  // Chunk r.chunk of r.chunks along the outermost stored dim, in place.
  SourceTensor chunk(const SourceTensor& b, const TensorRename& r) {
    const int outer = b.n_dims - 1;
    if (r.transform != TensorTransform::None || r.lanes > 1 || r.chunk < 0 || r.chunk >= r.chunks ||
        b.ne[outer] % r.chunks != 0 || !b.supported)
      throw Error(base_->path() + ": tensor " + b.name + " (" + std::to_string(b.ne[outer]) + " rows) cannot be cut into " +
                  std::to_string(r.chunks) + " equal parts for " + r.name);
    SourceTensor t = b;
    t.name = r.name;
    t.ne[outer] /= r.chunks;
    t.n_bytes = b.n_bytes / r.chunks;
    if (b.data) t.data = static_cast<const uint8_t*>(b.data) + t.n_bytes * r.chunk;
    if (!t.shape.empty()) t.shape[0] = t.ne[outer];
    return t;
  }

  SourceTensor stack(const std::string& name, std::vector<std::pair<int64_t, const SourceTensor*>>& parts) {
    std::sort(parts.begin(), parts.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    const SourceTensor& p0 = *parts[0].second;
    for (size_t i = 0; i < parts.size(); ++i) {
      const SourceTensor& p = *parts[i].second;
      if (parts[i].first != static_cast<int64_t>(i))
        throw Error(base_->path() + ": " + name + ": part " + std::to_string(i) + " is missing (have " +
                    std::to_string(parts[i].first) + ")");
      if (p.type != p0.type || p.ne != p0.ne || p.n_dims > 2)
        throw Error(base_->path() + ": " + p.name + " differs in shape or format from " + p0.name + " (stacked as " +
                    name + ")");
    }
    SourceTensor t = p0;
    t.name = name;
    t.ne = {p0.ne[0], p0.ne[1], static_cast<int64_t>(parts.size()), 1};
    t.n_dims = 3;
    t.shape = {t.ne[2], t.ne[1], t.ne[0]};
    t.n_bytes = p0.n_bytes * parts.size();
    t.data = nullptr;
    if (list_only_) return t;
    std::vector<uint8_t>& v = owned_bytes_.emplace_back(t.n_bytes);
    for (size_t i = 0; i < parts.size(); ++i) {
      const SourceTensor* p = parts[i].second;
      std::memcpy(&v[i * p0.n_bytes], p->data, p0.n_bytes);
      // The part now lives in the copy: its pages of the mapped checkpoint
      // need not stay resident (read-only file pages: dropping them loses
      // nothing, a later read faults them back in from the file). Only a
      // base tensor's: a dequantized FP8 part is memory of this view's.
      if (base_->find(p->name) == p) release_pages(p->data, p0.n_bytes);
    }
    t.data = v.data();
    return t;
  }

  // float8_e4m3fn (OCP FP8 E4M3, as torch.float8_e4m3fn): 1 sign, 4
  // exponent (bias 7), 3 mantissa bits; no infinities, S.1111.111 is NaN.
  static float e4m3_to_f32(uint8_t v) {
    const int s = v >> 7, e = (v >> 3) & 15, m = v & 7;
    float x = e == 0 ? std::ldexp(static_cast<float>(m), -9) : std::ldexp(static_cast<float>(8 + m), e - 10);
    if (e == 15 && m == 7) x = std::numeric_limits<float>::quiet_NaN();
    return s ? -x : x;
  }

  SourceTensor fp8_block_scaled(const SourceTensor& b, const SourceTensor& sc, const TensorRename& r) {
    const std::string what = base_->path() + ": tensor " + b.name;
    if (b.stored_dtype != "F8_E4M3" || b.n_dims != 2)
      throw Error(what + " (" + b.stored_dtype + ", " + std::to_string(b.n_dims) +
                  " dims) is not a 2-D F8_E4M3 matrix; kvad dequantizes block-scaled FP8 matrices only");
    const int64_t cols = b.ne[0], rows = b.ne[1];
    if (r.block_rows <= 0 || r.block_cols <= 0) throw Error(what + ": FP8 block size must be positive");
    const int64_t sr = (rows + r.block_rows - 1) / r.block_rows, scc = (cols + r.block_cols - 1) / r.block_cols;
    if ((sc.type != DType::F32 && sc.type != DType::BF16) || sc.ne[0] != scc || sc.ne[1] != sr || sc.ne[2] != 1 ||
        sc.ne[3] != 1)
      throw Error(base_->path() + ": tensor " + sc.name + " (" + sc.stored_dtype + " " + std::to_string(sc.ne[1]) + "x" +
                  std::to_string(sc.ne[0]) + ") is not the [" + std::to_string(sr) + ", " + std::to_string(scc) +
                  "] f32 or bf16 block scales of " + b.name + " (" + std::to_string(rows) + "x" + std::to_string(cols) +
                  ", blocks " + std::to_string(r.block_rows) + "x" + std::to_string(r.block_cols) + ")");
    if (list_only_) return listed(b, b.name, DType::F32, static_cast<size_t>(rows * cols) * sizeof(float));
    std::vector<float> scale(static_cast<size_t>(sr * scc));
    for (int64_t i = 0; i < sr * scc; ++i)
      scale[i] = sc.type == DType::F32 ? static_cast<const float*>(sc.data)[i]
                                       : bf16_to_f32(static_cast<const uint16_t*>(sc.data)[i]);
    float lut[256];
    for (int i = 0; i < 256; ++i) lut[i] = e4m3_to_f32(static_cast<uint8_t>(i));
    std::vector<float>& v = owned_.emplace_back(static_cast<size_t>(rows * cols));
    const auto* q = static_cast<const uint8_t*>(b.data);
    for (int64_t i = 0; i < rows; ++i) {
      const float* srow = &scale[(i / r.block_rows) * scc];
      for (int64_t j = 0; j < cols; ++j) v[i * cols + j] = lut[q[i * cols + j]] * srow[j / r.block_cols];
    }
    SourceTensor t = b;
    t.type = DType::F32;
    t.supported = true;
    t.data = v.data();
    t.n_bytes = v.size() * sizeof(float);
    return t;
  }

  // Lane `r.lane` of `r.lanes` interleaved columns and/or each matrix
  // transposed (GPT-2's 2-D Conv1D weights, gpt-oss's 3-D experts):
  // [outer, rows, cols] → [outer, cols / lanes, rows] (Transpose) or
  // [outer, rows, cols / lanes].
  SourceTensor rearrange(const SourceTensor& b, const TensorRename& r) {
    const size_t es = is_float(b.type) ? dtype_info(b.type).block_bytes : 0;
    const bool tr = r.transform == TensorTransform::Transpose;
    const int64_t L = std::max<int64_t>(r.lanes, 1), c = b.ne[0], rws = b.ne[1], outer = b.ne[2] * b.ne[3];
    if (!es || b.n_dims > 3 || (tr && b.n_dims < 2) || c % L != 0 || r.lane < 0 || r.lane >= L)
      throw Error(base_->path() + ": tensor " + b.name + " (" + dtype_name(b.type) + ", " + std::to_string(b.n_dims) +
                  " dims, " + std::to_string(c) + " columns) cannot be split into " + std::to_string(L) +
                  " lanes" + (tr ? " and transposed" : "") + "; kvad rearranges f32, f16 and bf16 of up to 3 dims");
    const int64_t cl = c / L;
    if (list_only_) {
      SourceTensor t = listed(b, r.name, b.type, static_cast<size_t>(cl * rws * outer) * es);
      t.ne = tr ? std::array<int64_t, 4>{rws, cl, b.ne[2], b.ne[3]} : std::array<int64_t, 4>{cl, rws, b.ne[2], b.ne[3]};
      t.shape.clear();
      for (int d = t.n_dims - 1; d >= 0; --d) t.shape.push_back(t.ne[d]);
      return t;
    }
    std::vector<uint8_t>& v = owned_bytes_.emplace_back(static_cast<size_t>(cl * rws * outer) * es);
    const auto* src = static_cast<const uint8_t*>(b.data);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < rws; ++i)
        for (int64_t j = 0; j < cl; ++j) {
          const int64_t from = (o * rws + i) * c + r.lane + j * L;
          const int64_t to = tr ? (o * cl + j) * rws + i : (o * rws + i) * cl + j;
          std::memcpy(&v[to * es], &src[from * es], es);
        }
    SourceTensor t = b;
    t.name = r.name;
    t.ne = tr ? std::array<int64_t, 4>{rws, cl, b.ne[2], b.ne[3]} : std::array<int64_t, 4>{cl, rws, b.ne[2], b.ne[3]};
    t.shape.clear();
    for (int d = t.n_dims - 1; d >= 0; --d) t.shape.push_back(t.ne[d]);
    t.data = v.data();
    t.n_bytes = v.size();
    return t;
  }

  // OpenAI's MXFP4 blocks b [outer, R, G, 16] and scales sc [outer, R, G]
  // (ne reversed) → GGUF MXFP4 [outer, R / lanes, G·32]: rows lane, lane +
  // lanes, ... with each block's 32 values reordered into ggml's nibbles.
  SourceTensor mxfp4(const SourceTensor& b, const SourceTensor& sc, const TensorRename& r) {
    const int64_t G = b.ne[1], R = b.ne[2], outer = b.ne[3], L = std::max<int64_t>(r.lanes, 1);
    const bool bytes = dtype_info(b.type).block_bytes == 1 && dtype_info(sc.type).block_bytes == 1;
    if (!bytes || b.n_dims < 3 || b.ne[0] != 16 || sc.ne[0] != G || sc.ne[1] != R || sc.ne[2] != outer ||
        sc.ne[3] != 1 || R % L != 0 || r.lane < 0 || r.lane >= L)
      throw Error(base_->path() + ": tensors " + b.name + " and " + sc.name +
                  " are not MXFP4 blocks [..., rows, n/32, 16] and scales [..., rows, n/32] of bytes");
    const int64_t rl = R / L;
    if (list_only_) {
      SourceTensor t = listed(b, r.name, DType::MXFP4, static_cast<size_t>(outer * rl * G) * 17);
      t.stored_dtype = "MXFP4";
      t.ne = {G * 32, rl, outer, 1};
      t.n_dims = b.n_dims - 1;
      t.shape.clear();
      for (int d = t.n_dims - 1; d >= 0; --d) t.shape.push_back(t.ne[d]);
      return t;
    }
    std::vector<uint8_t>& v = owned_bytes_.emplace_back(static_cast<size_t>(outer * rl * G) * 17);
    const auto* q = static_cast<const uint8_t*>(b.data);
    const auto* e = static_cast<const uint8_t*>(sc.data);
    size_t at = 0;
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < rl; ++i)
        for (int64_t g = 0; g < G; ++g) {
          const int64_t blk = (o * R + i * L + r.lane) * G + g;
          const uint8_t* in = q + blk * 16;
          auto val = [&](int k) { return k % 2 == 0 ? in[k / 2] & 15 : in[k / 2] >> 4; };
          v[at++] = e[blk];
          for (int j = 0; j < 16; ++j) v[at++] = static_cast<uint8_t>(val(j) | (val(j + 16) << 4));
        }
    SourceTensor t = b;
    t.name = r.name;
    t.type = DType::MXFP4;
    t.stored_dtype = "MXFP4";
    t.supported = true;
    t.ne = {G * 32, rl, outer, 1};
    t.n_dims = b.n_dims - 1;
    t.shape.clear();
    for (int d = t.n_dims - 1; d >= 0; --d) t.shape.push_back(t.ne[d]);
    t.data = v.data();
    t.n_bytes = v.size();
    return t;
  }

  // list_only: `b` as named, formatted and sized, its bytes not made.
  // TensorRename::head_groups: grouped heads along ne[axis] into tiled order.
  SourceTensor tile_heads(const SourceTensor& b, const TensorRename& r) {
    const size_t es = is_float(b.type) ? dtype_info(b.type).block_bytes : 0;
    const int ax = r.head_axis;
    const int64_t G = r.head_groups, R = r.head_repeat, D = r.head_size;
    const bool fits = ax >= 0 && ax < 4 && R >= 1 && D >= 1 && r.head_offset >= 0 &&
                      r.head_offset + G * R * D <= b.ne[std::clamp(ax, 0, 3)];
    if (!es || !fits)
      throw Error(base_->path() + ": tensor " + b.name + " (" + dtype_name(b.type) + ", ne " + std::to_string(b.ne[0]) +
                  "x" + std::to_string(b.ne[1]) + "x" + std::to_string(b.ne[2]) + ") cannot have " +
                  std::to_string(G * R) + " heads of " + std::to_string(D) + " reordered along dim " +
                  std::to_string(ax) + " from " + std::to_string(r.head_offset) +
                  "; kvad reorders f32, f16 and bf16 heads that fit");
    if (list_only_ || !b.data) return b;
    int64_t inner = 1, outer = 1;
    for (int d = 0; d < ax; ++d) inner *= b.ne[d];
    for (int d = ax + 1; d < 4; ++d) outer *= b.ne[d];
    const int64_t n = b.ne[ax];
    const size_t row = static_cast<size_t>(inner) * es;
    std::vector<uint8_t>& v = owned_bytes_.emplace_back(static_cast<size_t>(outer * n) * row);
    const auto* src = static_cast<const uint8_t*>(b.data);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < n; ++i) {
        int64_t from = i;  // the source index whose slice lands at i
        if (i >= r.head_offset && i < r.head_offset + G * R * D) {
          const int64_t k = i - r.head_offset, head = k / D, e = k % D;
          const int64_t j = head / G, g = head % G;  // tiled head j·G + g comes from grouped g·R + j
          from = r.head_offset + (g * R + j) * D + e;
        }
        std::memcpy(&v[(o * n + i) * row], &src[(o * n + from) * row], row);
      }
    SourceTensor t = b;
    t.data = v.data();
    t.n_bytes = v.size();
    return t;
  }

  static SourceTensor listed(const SourceTensor& b, const std::string& name, DType type, size_t n_bytes) {
    SourceTensor t = b;
    t.name = name;
    t.type = type;
    t.supported = true;
    t.data = nullptr;
    t.n_bytes = n_bytes;
    return t;
  }

  // The whole pages inside [p, p + n) of a read-only mapping, dropped from
  // this process's resident set (madvise MADV_DONTNEED; the kernel reads
  // them again from the file if touched). Best effort: errors are ignored.
  static void release_pages(const void* p, size_t n) {
    const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    const uintptr_t a = (reinterpret_cast<uintptr_t>(p) + page - 1) & ~(page - 1);
    const uintptr_t b = (reinterpret_cast<uintptr_t>(p) + n) & ~(page - 1);
    if (b > a) madvise(reinterpret_cast<void*>(a), b - a, MADV_DONTNEED);
  }

  std::shared_ptr<const TensorSource> base_;
  Metadata md_;
  std::map<std::string, std::string, std::less<>> key_fields_;  // key -> the base's setting it came from
  bool list_only_ = false;
  std::set<std::pair<std::string, int64_t>> lanes_;  // (base, lane) pairs named
  std::deque<std::vector<uint8_t>> owned_bytes_;  // rearranged copies and stacks (a deque: pointers stay valid)
  std::vector<std::vector<float>> owned_;  // reserved up front: pointers into it stay valid
  std::deque<SourceTensor> dequantized_;    // FP8 matrices as f32, before renaming or stacking
  std::vector<SourceTensor> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, std::string, std::less<>> bases_;       // name -> the base's tensor name
};

}  // namespace

std::shared_ptr<const TensorSource> mapped_source(std::shared_ptr<const TensorSource> base,
                                                  const std::vector<TensorRename>& rules, Metadata metadata,
                                                  const std::vector<std::string>& ignored,
                                                  std::vector<SyntheticTensor> synthetic, bool list_only,
                                                  std::map<std::string, std::string, std::less<>> key_fields) {
  return std::make_shared<MappedSource>(std::move(base), rules, std::move(metadata), ignored, std::move(synthetic),
                                        list_only, std::move(key_fields));
}

const Metadata* mapped_metadata(const TensorSource& s) {
  const auto* m = dynamic_cast<const MappedSource*>(&s);
  return m ? &m->metadata() : nullptr;
}

}  // namespace kvad
