// GGUF writer. Source: ggml/docs/gguf.md (layout as written by ggml's gguf_write_to_buf).
#include "io/gguf_writer.h"

#include <bit>
#include <cerrno>
#include <cstdio>
#include <algorithm>
#include <cstring>
#include <limits>

namespace kvad::gguf {

namespace {

bool is_unsigned(ValueType t) {
  return t == ValueType::UINT8 || t == ValueType::UINT16 || t == ValueType::UINT32 ||
         t == ValueType::UINT64;
}
bool is_signed(ValueType t) {
  return t == ValueType::INT8 || t == ValueType::INT16 || t == ValueType::INT32 ||
         t == ValueType::INT64;
}
bool is_float(ValueType t) { return t == ValueType::FLOAT32 || t == ValueType::FLOAT64; }

size_t elem_bytes(ValueType t) {
  switch (t) {
    case ValueType::UINT8: case ValueType::INT8: case ValueType::BOOL: return 1;
    case ValueType::UINT16: case ValueType::INT16: return 2;
    case ValueType::UINT32: case ValueType::INT32: case ValueType::FLOAT32: return 4;
    default: return 8;
  }
}

[[noreturn]] void fail(const std::string& key, const std::string& msg) {
  throw GGUFError("gguf writer: key '" + key + "': " + msg);
}

void check_uint_fits(const std::string& key, ValueType t, uint64_t v) {
  if (!is_unsigned(t) && t != ValueType::BOOL)
    fail(key, std::string(value_type_name(t)) + " is not an unsigned integer type");
  if (t == ValueType::BOOL && v > 1) fail(key, "BOOL element " + std::to_string(v) + " is not 0 or 1");
  size_t bits = 8 * elem_bytes(t);
  if (bits < 64 && v >> bits)
    fail(key, "value " + std::to_string(v) + " does not fit in " + value_type_name(t));
}

void check_int_fits(const std::string& key, ValueType t, int64_t v) {
  if (!is_signed(t)) fail(key, std::string(value_type_name(t)) + " is not a signed integer type");
  size_t bits = 8 * elem_bytes(t);
  if (bits < 64) {
    int64_t lo = -(int64_t{1} << (bits - 1)), hi = (int64_t{1} << (bits - 1)) - 1;
    if (v < lo || v > hi) fail(key, "value " + std::to_string(v) + " does not fit in " + value_type_name(t));
  }
}

struct Out {
  std::vector<uint8_t> b;
  void uint(uint64_t v, size_t n) {
    for (size_t k = 0; k < n; ++k) b.push_back(static_cast<uint8_t>(v >> (8 * k)));
  }
  void u32(uint32_t v) { uint(v, 4); }
  void u64(uint64_t v) { uint(v, 8); }
  void str(const std::string& s) {
    u64(s.size());
    b.insert(b.end(), s.begin(), s.end());
  }
  void scalar_uint(ValueType t, uint64_t v) { uint(v, elem_bytes(t)); }
  void scalar_int(ValueType t, int64_t v) { uint(static_cast<uint64_t>(v), elem_bytes(t)); }
  void scalar_float(ValueType t, double v) {
    if (t == ValueType::FLOAT32)
      u32(std::bit_cast<uint32_t>(static_cast<float>(v)));
    else
      u64(std::bit_cast<uint64_t>(v));
  }
};

// Writes the value as stored; raw values may have fewer stored elements than
// n_ (then only the stored ones are written after the count).
void put_value(Out& o, const Value& v) {
  o.str(v.key_);
  o.u32(static_cast<uint32_t>(v.type_));
  ValueType t = v.type_;
  if (is_unsigned(t) || t == ValueType::BOOL) return o.scalar_uint(t, v.u_);
  if (is_signed(t)) return o.scalar_int(t, v.i_);
  if (is_float(t)) return o.scalar_float(t, v.f_);
  if (t == ValueType::STRING) return o.str(v.s_);
  if (t != ValueType::ARRAY) return;  // unknown type id (raw): no payload
  ValueType e = v.array_type_;
  o.u32(static_cast<uint32_t>(e));
  o.u64(v.n_);
  if (is_unsigned(e) || e == ValueType::BOOL) {
    for (uint64_t x : v.uarr_) o.scalar_uint(e, x);
  } else if (is_signed(e)) {
    for (int64_t x : v.iarr_) o.scalar_int(e, x);
  } else if (is_float(e)) {
    for (double x : v.farr_) o.scalar_float(e, x);
  } else if (e == ValueType::STRING) {
    for (const std::string& s : v.strs_) o.str(s);
  } else if (e == ValueType::ARRAY) {
    // Arrays of arrays have no storage in Value; each element is written as
    // an empty array of UINT8.
    for (size_t k = 0; k < v.n_; ++k) {
      o.u32(static_cast<uint32_t>(ValueType::UINT8));
      o.u64(0);
    }
  }
}

size_t stored_elements(const Value& v) {
  ValueType e = v.array_type_;
  if (is_unsigned(e) || e == ValueType::BOOL) return v.uarr_.size();
  if (is_signed(e)) return v.iarr_.size();
  if (is_float(e)) return v.farr_.size();
  if (e == ValueType::STRING) return v.strs_.size();
  return v.n_;
}

size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

}  // namespace

// ---- Value builders ----

Value make_uint(std::string key, ValueType type, uint64_t v) {
  if (type == ValueType::BOOL) fail(key, "use make_bool for BOOL");
  check_uint_fits(key, type, v);
  Value out;
  out.key_ = std::move(key);
  out.type_ = type;
  out.u_ = v;
  return out;
}

Value make_int(std::string key, ValueType type, int64_t v) {
  check_int_fits(key, type, v);
  Value out;
  out.key_ = std::move(key);
  out.type_ = type;
  out.i_ = v;
  return out;
}

Value make_float(std::string key, ValueType type, double v) {
  if (!is_float(type)) fail(key, std::string(value_type_name(type)) + " is not a float type");
  Value out;
  out.key_ = std::move(key);
  out.type_ = type;
  out.f_ = type == ValueType::FLOAT32 ? static_cast<double>(static_cast<float>(v)) : v;
  return out;
}

Value make_bool(std::string key, bool v) {
  Value out;
  out.key_ = std::move(key);
  out.type_ = ValueType::BOOL;
  out.u_ = v ? 1 : 0;
  return out;
}

Value make_string(std::string key, std::string v) {
  Value out;
  out.key_ = std::move(key);
  out.type_ = ValueType::STRING;
  out.s_ = std::move(v);
  return out;
}

Value make_uint_array(std::string key, ValueType elem, std::vector<uint64_t> v) {
  for (uint64_t x : v) check_uint_fits(key, elem, x);
  if (!is_unsigned(elem) && elem != ValueType::BOOL) fail(key, "not an unsigned or BOOL element type");
  Value out;
  out.key_ = std::move(key);
  out.type_ = ValueType::ARRAY;
  out.array_type_ = elem;
  out.n_ = v.size();
  out.uarr_ = std::move(v);
  return out;
}

Value make_int_array(std::string key, ValueType elem, std::vector<int64_t> v) {
  if (!is_signed(elem)) fail(key, std::string(value_type_name(elem)) + " is not a signed integer type");
  for (int64_t x : v) check_int_fits(key, elem, x);
  Value out;
  out.key_ = std::move(key);
  out.type_ = ValueType::ARRAY;
  out.array_type_ = elem;
  out.n_ = v.size();
  out.iarr_ = std::move(v);
  return out;
}

Value make_float_array(std::string key, ValueType elem, std::vector<double> v) {
  if (!is_float(elem)) fail(key, std::string(value_type_name(elem)) + " is not a float type");
  if (elem == ValueType::FLOAT32)
    for (double& x : v) x = static_cast<double>(static_cast<float>(x));
  Value out;
  out.key_ = std::move(key);
  out.type_ = ValueType::ARRAY;
  out.array_type_ = elem;
  out.n_ = v.size();
  out.farr_ = std::move(v);
  return out;
}

Value make_string_array(std::string key, std::vector<std::string> v) {
  Value out;
  out.key_ = std::move(key);
  out.type_ = ValueType::ARRAY;
  out.array_type_ = ValueType::STRING;
  out.n_ = v.size();
  out.strs_ = std::move(v);
  return out;
}

// ---- Writer ----

Writer::Writer(uint32_t version) : version_(version) {
  if (version != 2 && version != 3)
    throw GGUFError("gguf writer: version " + std::to_string(version) + " is not 2 or 3");
}

void Writer::set_alignment(uint32_t alignment) {
  if (alignment == 0 || !std::has_single_bit(alignment))
    throw GGUFError("gguf writer: alignment " + std::to_string(alignment) + " is not a nonzero power of two");
  if (!tensors_.empty()) throw GGUFError("gguf writer: set_alignment after add_tensor");
  alignment_ = alignment;
  for (Value& v : kv_)
    if (v.key_ == "general.alignment") {
      v = make_uint("general.alignment", ValueType::UINT32, alignment);
      return;
    }
  kv_.push_back(make_uint("general.alignment", ValueType::UINT32, alignment));
}

void Writer::add(const Value& v) {
  if (v.key_.empty()) throw GGUFError("gguf writer: empty metadata key");
  if (static_cast<uint32_t>(v.type_) > static_cast<uint32_t>(ValueType::FLOAT64))
    fail(v.key_, "unknown value type " + std::to_string(static_cast<uint32_t>(v.type_)));
  if (v.type_ == ValueType::ARRAY) {
    if (static_cast<uint32_t>(v.array_type_) > static_cast<uint32_t>(ValueType::FLOAT64))
      fail(v.key_, "unknown array element type");
    if (v.array_type_ != ValueType::ARRAY && stored_elements(v) != v.n_)
      fail(v.key_, "array length " + std::to_string(v.n_) + " but " + std::to_string(stored_elements(v)) +
                       " elements stored");
  }
  for (const Value& w : kv_)
    if (w.key_ == v.key_) fail(v.key_, "duplicate metadata key");
  if (v.key_ == "general.alignment") {
    if (v.type_ != ValueType::UINT32 || v.u_ == 0 || !std::has_single_bit(v.u_))
      fail(v.key_, "must be a UINT32 nonzero power of two");
    if (!tensors_.empty()) fail(v.key_, "alignment set after add_tensor");
    alignment_ = static_cast<size_t>(v.u_);
  }
  add_raw(v);
}

void Writer::add_raw(const Value& v) {
  Value c = v;
  c.file_.clear();
  c.offset_ = 0;
  kv_.push_back(std::move(c));
}

size_t Writer::check_tensor(const std::string& name, DType type, const std::vector<int64_t>& ne) const {
  auto bad = [&](const std::string& msg) { throw GGUFError("gguf writer: tensor '" + name + "': " + msg); };
  for (const Tensor& t : tensors_)
    if (t.name == name) bad("duplicate tensor name");
  if (ne.empty() || ne.size() > 4) bad("needs 1..4 dimensions, has " + std::to_string(ne.size()));
  const DTypeInfo& info = dtype_info(type);
  size_t expect = 0;
  for (int64_t d : ne)
    if (d < 0) bad("negative dimension");
  if (ne[0] % info.block_elems != 0)
    bad("row length " + std::to_string(ne[0]) + " is not a multiple of the block size " +
        std::to_string(info.block_elems));
  bool ovf = __builtin_mul_overflow(static_cast<size_t>(ne[0] / info.block_elems), info.block_bytes, &expect);
  for (size_t d = 1; d < ne.size() && !ovf; ++d)
    ovf = __builtin_mul_overflow(expect, static_cast<size_t>(ne[d]), &expect);
  if (ovf) bad("size overflows");
  return expect;
}

void Writer::append_bytes(const void* data, size_t n) {
  if (n == 0) return;
  const uint8_t* p = static_cast<const uint8_t*>(data);
  if (!segments_.empty() && segments_.back().kind == Segment::kBytes &&
      segments_.back().pos + segments_.back().n == data_.size()) {
    segments_.back().n += n;
  } else {
    segments_.push_back(Segment{Segment::kBytes, data_.size(), n, 0});
  }
  data_.insert(data_.end(), p, p + n);
  data_size_ += n;
}

void Writer::pad_data() {
  const size_t n = align_up(data_size_, alignment_) - data_size_;
  if (n == 0) return;
  if (!segments_.empty() && segments_.back().kind == Segment::kZeros)
    segments_.back().n += n;
  else
    segments_.push_back(Segment{Segment::kZeros, 0, n, 0});
  data_size_ += n;
}

void Writer::push_tensor(const std::string& name, DType type, const std::vector<int64_t>& ne, size_t n_bytes) {
  pad_data();
  Tensor t;
  t.name = name;
  t.type_id = static_cast<uint32_t>(type);
  t.ne.assign(ne.begin(), ne.end());
  t.offset = data_size_;
  t.n_bytes = n_bytes;
  tensors_.push_back(std::move(t));
}

void Writer::add_tensor(const std::string& name, DType type, const std::vector<int64_t>& ne,
                        const void* data, size_t n_bytes) {
  const size_t expect = check_tensor(name, type, ne);
  if (n_bytes != expect)
    throw GGUFError("gguf writer: tensor '" + name + "': has " + std::to_string(n_bytes) +
                    " bytes, its shape and type need " + std::to_string(expect));
  push_tensor(name, type, ne, n_bytes);
  append_bytes(data, n_bytes);
  pad_data();
}

void Writer::add_tensor_deferred(const std::string& name, DType type, const std::vector<int64_t>& ne) {
  const size_t n_bytes = check_tensor(name, type, ne);
  push_tensor(name, type, ne, n_bytes);
  if (n_bytes) {
    segments_.push_back(Segment{Segment::kDeferred, 0, n_bytes, tensors_.size() - 1});
    data_size_ += n_bytes;
    ++n_deferred_;
  }
  pad_data();
}

void Writer::add_tensor_info_raw(const std::string& name, uint32_t type_id, const std::vector<uint64_t>& ne,
                                 uint64_t offset) {
  Tensor t;
  t.name = name;
  t.type_id = type_id;
  t.ne = ne;
  t.offset = offset;
  tensors_.push_back(std::move(t));
}

void Writer::append_data_raw(const void* data, size_t n) { append_bytes(data, n); }

namespace {
void put_tensor_info(Out& o, const std::string& name, const std::vector<uint64_t>& ne, uint32_t type_id,
                     uint64_t offset) {
  o.str(name);
  o.u32(static_cast<uint32_t>(ne.size()));
  for (uint64_t d : ne) o.u64(d);
  o.u32(type_id);
  o.u64(offset);
}
}  // namespace

Writer::Layout Writer::layout() const {
  Layout l;
  Out o;
  o.b.reserve(64);
  size_t pos = 4 + 4 + 8 + 8;
  for (const Value& v : kv_) {
    l.kv.push_back(pos);
    o.b.clear();
    put_value(o, v);
    pos += o.b.size();
  }
  for (const Tensor& t : tensors_) {
    l.tensor.push_back(pos);
    pos += 8 + t.name.size() + 4 + 8 * t.ne.size() + 4 + 8;
  }
  l.data = align_up(pos, alignment_);
  return l;
}

size_t Writer::size() const { return layout().data + data_size_; }

std::vector<uint8_t> Writer::head_bytes() const {
  Out o;
  o.b.insert(o.b.end(), {'G', 'G', 'U', 'F'});
  o.u32(version_);
  o.u64(tensors_.size());
  o.u64(kv_.size());
  for (const Value& v : kv_) put_value(o, v);
  for (const Tensor& t : tensors_) put_tensor_info(o, t.name, t.ne, t.type_id, t.offset);
  o.b.resize(align_up(o.b.size(), alignment_), 0);
  return std::move(o.b);
}

std::vector<uint8_t> Writer::to_bytes() const {
  if (n_deferred_) throw GGUFError("gguf writer: to_bytes with deferred tensors (use write_file with a source)");
  std::vector<uint8_t> b = head_bytes();
  b.reserve(b.size() + data_size_);
  for (const Segment& s : segments_) {
    if (s.kind == Segment::kBytes)
      b.insert(b.end(), data_.begin() + static_cast<ptrdiff_t>(s.pos),
               data_.begin() + static_cast<ptrdiff_t>(s.pos + s.n));
    else
      b.resize(b.size() + s.n, 0);
  }
  return b;
}

void Writer::write_file(const std::string& path) const {
  if (n_deferred_)
    throw GGUFError(path + ": gguf writer: write_file without a source for its deferred tensors");
  write_file(path, TensorSource{});
}

void Writer::write_file(const std::string& path, const TensorSource& source) const {
  if (n_deferred_ && !source) throw GGUFError(path + ": gguf writer: no source for the deferred tensors");
  const std::vector<uint8_t> head = head_bytes();
  std::FILE* fp = std::fopen(path.c_str(), "wb");
  if (!fp) throw GGUFError(path + ": cannot create: " + std::strerror(errno));
  // Closes the file when an error unwinds past it.
  struct Closer {
    std::FILE*& f;
    ~Closer() {
      if (f) std::fclose(f);
    }
  } closer{fp};
  auto put = [&](const void* p, size_t n) {
    if (n && std::fwrite(p, 1, n, fp) != n) throw GGUFError(path + ": write failed: " + std::strerror(errno));
  };
  put(head.data(), head.size());
  static const uint8_t zeros[4096] = {};
  for (const Segment& s : segments_) {
    if (s.kind == Segment::kBytes) {
      put(data_.data() + s.pos, s.n);
    } else if (s.kind == Segment::kZeros) {
      for (size_t left = s.n; left;) {
        const size_t k = std::min(left, sizeof zeros);
        put(zeros, k);
        left -= k;
      }
    } else {
      const Tensor& t = tensors_[s.tensor];
      size_t got = 0;
      source(s.tensor, s.n, [&](const void* p, size_t n) {
        if (n > s.n - got)
          throw GGUFError(path + ": tensor '" + t.name + "': source gave more than its " + std::to_string(s.n) +
                          " bytes");
        put(p, n);
        got += n;
      });
      if (got != s.n)
        throw GGUFError(path + ": tensor '" + t.name + "': source gave " + std::to_string(got) + " of its " +
                        std::to_string(s.n) + " bytes");
    }
  }
  std::FILE* f = fp;
  fp = nullptr;
  if (std::fclose(f) != 0) throw GGUFError(path + ": write failed: " + std::strerror(errno));
}

}  // namespace kvad::gguf
